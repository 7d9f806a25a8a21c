"""Reads and writes from the cluster's executors against real Gazette (v0.103.0) brokers.

Etcd and two ``gazette serve`` brokers (tests/realgazette.py) bind and advertise the test
network's driver-side address and require tokens (``--broker.auth-keys``); fragments persist to
moto's S3 on the same network. Executors on the worker hosts read the persisted fragments
straight from S3 and append through the brokers; a worker dies while its task reads through a
Gazette broker.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from pyspark_gazette.fragments.names import FragmentRef
from pyspark_gazette.message import NDJSON
from pyspark_gazette.protocol.auth import APPEND, LIST, READ, mint_token

from .helpers import BIG_READ, KEY, S3_KEYS, events, fill, journal_spec, ndjson, read_through_a_worker_kill
from .test_cluster_kills import revive  # noqa: F401 - a fixture

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gazette(network, s3, tmp_path_factory):
    import realgazette

    realgazette.require()
    env = {
        "AWS_ACCESS_KEY_ID": S3_KEYS["store.s3.accessKeyId"],
        "AWS_SECRET_ACCESS_KEY": S3_KEYS["store.s3.secretAccessKey"],
        "AWS_REGION": "us-east-1",
    }
    cluster = realgazette.GazetteCluster(
        tmp_path_factory.mktemp("real-gazette"), 2, auth_keys=KEY, extra_env=env, host=network.gateway
    )
    with cluster:
        yield cluster


def store(s3, prefix: str) -> str:
    return f"s3://{s3.bucket}/{prefix}/?endpoint={s3.endpoint}&region=us-east-1"


def test_read_and_write_against_real_gazette(spark, gazette, s3, network):
    gazette.apply_specs(
        [
            journal_spec("real/clicks", store(s3, "real-clicks"), length=1024),
            journal_spec("real/out", store(s3, "real-out")),
        ]
    )
    with gazette.client(direct_reads=False) as client:
        rows = fill(client, "real/clicks", batches=12, per_batch=30)
        persisted = [f for f in client.list_fragments("real/clicks") if f.spec.backing_store]
    assert len(persisted) >= 10

    before = len(s3.requests)
    token = mint_token(KEY, LIST | READ, "name:prefix=real/")
    df = (
        spark.read.format("gazette")
        .option("broker.address", gazette.address)
        .option("broker.authToken", token)
        .option("maxPartitionBytes", "2048")
        .options(**S3_KEYS)
        .load("real/clicks")
    )
    got = df.collect()
    assert sorted(json.loads(r.value)["id"] for r in got) == [r["id"] for r in rows]
    prefix = f"/{s3.bucket}/real-clicks/"
    gets = [(addr, path) for addr, method, path in s3.requests[before:] if method == "GET" and path.startswith(prefix)]
    # Every fragment persisted before the read is read from S3; a fragment the brokers persist
    # while Spark reads (the open spool closes on its own) may be read from S3 or a broker.
    with gazette.client(direct_reads=False) as client:
        persisted_after = [f for f in client.list_fragments("real/clicks") if f.spec.backing_store]
    workers = set(network.addresses.values())
    by_workers = {path for addr, path in gets if addr in workers}
    by_brokers = {path for addr, path in gets if addr not in workers}  # the brokers' side (network.gateway)

    def paths(listed):
        return {prefix + FragmentRef.from_proto(f.spec).content_path for f in listed}

    # Every fragment persisted before the read is read from S3 by the executors themselves ...
    assert paths(persisted) <= by_workers <= paths(persisted_after)
    assert {addr for addr, _ in gets if addr in workers} == workers  # ... on both worker hosts;
    # a broker reads from S3 (to proxy it) only a fragment it persisted after the read was planned.
    assert by_brokers <= paths(persisted_after) - paths(persisted)

    typed = (
        spark.read.format("gazette")
        .option("broker.address", gazette.address)
        .option("broker.authToken", token)
        .options(**S3_KEYS)
        .schema("id LONG, country STRING")
        .load("real/clicks")
    )
    counts = {r.country: r["count"] for r in typed.groupBy("country").count().collect()}
    assert counts == dict(Counter(r["country"] for r in rows))

    write_token = mint_token(KEY, LIST | APPEND, "name=real/out")
    (
        typed.selectExpr("id", "upper(country) AS country")
        .repartition(4)
        .write.format("gazette")
        .mode("append")
        .option("broker.address", gazette.address)
        .option("broker.authToken", write_token)
        .option("journal", "real/out")
        .save()
    )
    with gazette.client(direct_reads=False) as client:
        out = [json.loads(p) for _, p in NDJSON.decode_all(client.read_all("real/out"))]
    assert sorted((d["id"], d["country"]) for d in out) == sorted((r["id"], r["country"].upper()) for r in rows)


def test_batch_read_when_a_worker_dies_mid_read_from_real_gazette(spark, cluster, gazette, s3, revive):  # noqa: F811
    journal = "real/killread"
    gazette.apply_specs([journal_spec(journal, store(s3, "real-killread"))])
    with gazette.client(direct_reads=False) as client:
        client.append(journal, ndjson(events(BIG_READ)))
    token = mint_token(KEY, LIST | READ, "name=" + journal)
    df = (
        spark.read.format("gazette")
        .option("broker.address", gazette.address)
        .option("broker.authToken", token)
        .options(**S3_KEYS)
        .option("directReads", "false")
        .load(journal)
    )
    rows = read_through_a_worker_kill(cluster, journal, df)
    assert sorted(json.loads(r.value)["id"] for r in rows) == list(range(BIG_READ))  # each row once
