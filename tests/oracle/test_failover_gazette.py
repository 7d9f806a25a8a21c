"""Failover on a real Gazette cluster (4 brokers, journals replicated 3 times).

The broker that is primary for the journals is SIGKILLed, as a crashed host; its etcd lease
expires and Gazette reassigns the journals to the survivors (4 brokers, so that 3 replicas
remain: with only 2 live brokers Gazette refuses appends to a journal of replication 3 with
INSUFFICIENT_JOURNAL_BROKERS until the third comes back). Queries started after the kill,
whose plans and routes still name the dead broker, must finish with exactly the right data:
nothing lost, nothing duplicated, every line a whole message.
"""

from __future__ import annotations

import json

import pytest
from spark_helpers import events, ndjson

from journalspecs import make_spec

JOURNALS = [f"failover/read-{i}" for i in range(3)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    import realgazette

    realgazette.require()
    with realgazette.GazetteCluster(tmp_path_factory.mktemp("gazette-failover"), 4) as c:
        yield c


def replicated(name: str, **kwargs):
    spec = make_spec(name, length=2048, **kwargs)
    spec.replication = 3
    return spec


def primary_of(cluster, journal: str):
    with cluster.client() as c:
        (j,) = [j for j in c.list_journals() if j.name == journal]
    member = j.route.members[j.route.primary]
    (broker,) = [b for b in cluster.brokers if b.id == member.suffix]
    return broker


def kill_primary(cluster, journal: str):
    """SIGKILL the primary of ``journal``; returns a live broker's address for the query."""
    dead = primary_of(cluster, journal)
    dead.kill()
    return next(b for b in cluster.brokers if b.alive()).address, dead


def ids(rows) -> list[int]:
    return sorted(json.loads(r.value)["id"] for r in rows)


@pytest.mark.parametrize("direct", ["true", "false"], ids=["direct", "broker-tail"])
def test_batch_read_survives_a_killed_primary(spark, cluster, direct):
    journals = [f"{j}-{direct}" for j in JOURNALS]
    cluster.apply_specs([replicated(j) for j in journals])
    with cluster.client() as c:
        for j in journals:
            for b in range(6):  # several 2 KiB fragments, some persisted, and an open tail
                c.append(j, ndjson(events(40, b * 40)))
    address, dead = kill_primary(cluster, journals[0])
    try:
        r = spark.read.format("gazette").option("broker.address", address).option("store.fileRoot", cluster.file_root)
        rows = r.option("journals", ",".join(journals)).option("directReads", direct).load().collect()
        by_journal: dict[str, list] = {j: [] for j in journals}
        for row in rows:
            by_journal[row.journal].append(row)
        for j in journals:
            assert ids(by_journal[j]) == list(range(240)), j
    finally:
        dead.start()
        cluster.wait_primaries(journals)


def test_batch_write_survives_a_killed_primary(spark, cluster):
    journal = "failover/write"
    cluster.apply_specs([replicated(journal)])
    address, dead = kill_primary(cluster, journal)
    try:
        df = spark.range(0, 2000, 1, 4).selectExpr("id", "cast(id as string) as s")
        w = df.write.format("gazette").mode("append").option("broker.address", address).option("journal", journal)
        w.option("broker.timeout", "2m").save()
        r = spark.read.format("gazette").option("broker.address", address).option("store.fileRoot", cluster.file_root)
        rows = r.option("journals", journal).load().collect()
        assert ids(rows) == list(range(2000))  # every line a whole document, each row once
    finally:
        dead.start()
        cluster.wait_primaries([journal])
