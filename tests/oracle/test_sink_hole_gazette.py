"""Gazette's durability boundary under the exactly-once sink, on a real cluster (4 brokers,
journals replicated 3 times).

Gazette acknowledges an append once every replica of the journal's pipeline holds it in its
spool; a spool reaches the fragment store only when it is rolled and persisted (its primary at
once, the other replicas from a persist queue, a minute or more later). When the route changes,
the new primary rolls the spools forward to the largest offset any member has (taking that
member's registers) and the write head goes on from there: content held only in the spools
being rolled lives on in the persist queues of the brokers that held it. If each of them is
killed before it persists, the content is gone, the write head is past it and the registers
say it was written. The test kills, one after another, every broker that holds an
acknowledged, unpersisted micro-batch of the sink (their persists held back, as a slow store or
a persist queue would), and shows what Gazette, a reader and the sink then see.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import time

import pytest
import test_failover_gazette as failover
from spark_helpers import events, ndjson

import realgazette


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    realgazette.require()
    with realgazette.GazetteCluster(tmp_path_factory.mktemp("gazette-hole"), 4) as c:
        yield c


def hold_persists_to(cluster, spec) -> pathlib.Path:
    """Point ``spec``'s persists at a store whose journal directory is a regular file (see
    test_failover_gazette.hold_persists): each persist fails and is queued for a retry, while
    the store that holds the journal's persisted fragments stays listed after it."""
    blocker = pathlib.Path(cluster.file_root, "held", spec.name)
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_bytes(b"")
    spec.fragment.stores[:] = ["file:///held/", *spec.fragment.stores]
    cluster.apply_specs([spec])
    return blocker


def wait_route_without(cluster, journal: str, gone) -> None:
    """Wait until ``journal``'s route has a primary and three members, none of them ``gone``."""
    deadline = time.monotonic() + 60
    while True:
        route = failover.route_of(cluster, journal)
        suffixes = {m.suffix for m in route.members}
        if gone.id not in suffixes and route.primary >= 0 and len(suffixes) == 3:
            return
        assert time.monotonic() < deadline, route
        time.sleep(0.1)


def covered(frags, begin: int, end: int) -> bool:
    return any(f.spec.begin <= begin and end <= f.spec.end for f in frags)


@pytest.mark.timeout(300)
def test_a_committed_batch_whose_every_replica_died_unpersisted_is_reported(spark, cluster, tmp_path):
    from pyspark_gazette.client import JournalClient
    from pyspark_gazette.client.settle import member_listing

    src, dst = "hole/in", "hole/out"
    dst_spec = failover.replicated(dst, length=1024)
    cluster.apply_specs([failover.replicated(src, length=1024), dst_spec])
    with cluster.client() as c:
        c.append(src, ndjson(events(40, 0)))
    w = failover.sink_writer(spark, cluster, cluster.brokers[0].address, src, dst, tmp_path / "ckpt")
    q = w.option("broker.timeout", "4s").start()  # how long a missing span is looked for
    blocker = None
    try:
        q.processAllAvailable()  # micro-batch 0, then persisted: the fragment before the hole
        failover.persist_everything(cluster, [src, dst])
        with cluster.client() as c:
            before = c.read_all(dst)
        e0 = len(before)
        blocker = hold_persists_to(cluster, dst_spec)
        with cluster.client() as c:
            c.append(src, ndjson(events(40, 40)))
        q.processAllAvailable()  # micro-batch 1: acknowledged, in its replicas' spools only
        failover.persist_everything(cluster, [src])  # the source keeps every record
        with cluster.client() as c:
            e1 = len(c.read_all(dst))
        assert e1 > e0
        holders = [b for b in cluster.brokers if b.id in {m.suffix for m in failover.route_of(cluster, dst).members}]
        for b in holders:  # each killed once the route has left it, and started again (empty)
            b.kill()
            wait_route_without(cluster, dst, b)
            with cluster.client() as c:  # the journal's next append syncs the new route's spools
                assert c.appender(dst).close().end == e1  # the write head stays past the batch
            b.start()
        cluster.wait_primaries([src, dst])
        # Gazette: the write head is past the batch; no broker lists it, the store has none of it.
        with JournalClient(cluster.address) as c:
            for m in failover.route_of(cluster, dst).members:
                (b,) = [b for b in cluster.brokers if b.id == m.suffix]
                own = member_listing(c.conns, dst, b.address)
                assert not any(f.spec.begin < e1 and f.spec.end > e0 for f in own), (b.id, own)
        blocker.unlink()
        blocker = None
        dst_spec.fragment.stores[:] = ["file:///store/"]
        cluster.apply_specs([dst_spec])
        stored = sorted(p.name for p in pathlib.Path(cluster.file_root, "store", dst).iterdir())
        spans = [(int(n.split("-")[0], 16), int(n.split("-")[1], 16)) for n in stored]
        assert spans and all(end <= e0 or begin >= e1 for begin, end in spans), (e0, e1, stored)
        # The sink appends the next batch after the hole, then finds its batch 1 missing: at that
        # micro-batch's commit, or (when that commit's listing failed: a WARNING, checked again at
        # the next commit) at one of the next two.
        with pytest.raises(Exception) as failed:
            for more in range(3):
                with cluster.client() as c:
                    c.append(src, ndjson(events(40, 80 + 40 * more)))
                q.processAllAvailable()
        text = str(failed.value)
        after = 80 + 40 * (more + 1)  # the rows the sink appended after the hole
        assert f"journal '{dst}'" in text and f"{e0}" in text and f"{e1}" in text and "micro-batch 1" in text, text
    finally:
        q.stop()
        if blocker is not None:
            blocker.unlink()
        for b in cluster.brokers:
            if not b.alive():
                b.start()
    # What readers see: batches 0 and 2 around the hole. Gazette's reader (gazctl) stops at it (a
    # fragment after a hole is skipped to only once it was persisted hours ago): it ends there as
    # at the write head, or with --block waits there.
    with cluster.client() as c:
        listed = c.list_fragments(dst)
    assert covered(listed, 0, e0) and not any(f.spec.begin < e1 and f.spec.end > e0 for f in listed)
    out = tmp_path / "gazctl.out"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}, "BROKER_ADDRESS": cluster.address}
    with open(out, "wb") as f:
        argv = [str(realgazette.BIN / "gazctl"), "journals", "read", "--block", "-l", f"name={dst}"]
        gazctl = subprocess.Popen(argv, stdout=f, env=env)
    try:
        assert cluster.gazctl("journals", "read", "-l", f"name={dst}").stdout == before
        # This connector's reader judges the hole as Gazette does: the fragment after it is young,
        # so it may be an upload in flight: the read waits for it (broker.timeout), then fails
        # with HoleInFlightError, never skipping it, whatever failOnDataLoss says.
        r = spark.read.format("gazette").option("broker.address", cluster.address).option("broker.timeout", "3s")
        r = r.option("store.fileRoot", cluster.file_root).option("journals", dst)
        with pytest.raises(Exception) as waited:
            r.option("failOnDataLoss", "false").load().collect()
        assert "HoleInFlightError" in str(waited.value) and f"{e0}" in str(waited.value), str(waited.value)
        # Judged lost (no member lists it, no store file holds it, and holeAgeThreshold=0s):
        # reported as data loss, or skipped.
        r = r.option("holeAgeThreshold", "0s")
        with pytest.raises(Exception) as lost:
            r.option("failOnDataLoss", "true").load().collect()
        assert "DataLossError" in str(lost.value) and f"{e0}" in str(lost.value), str(lost.value)
        rows = r.option("failOnDataLoss", "false").load().collect()
        assert sorted(json.loads(x.value)["id"] for x in rows) == [*range(40), *range(80, after)]
        assert gazctl.poll() is None  # still waiting at the hole, having written what is before it
        assert out.read_bytes() == before
    finally:
        gazctl.kill()
        gazctl.wait(10)


# -- commitWhen=persisted: the same loss, before the commit -------------------------------------


def lose_unpersisted(cluster, journal: str) -> int:
    """Kill, one after another, every broker of ``journal``'s route (each once the route has left
    it, then started again, empty): what they held unpersisted is gone. Returns the write head,
    which stays past it."""
    head = None
    holders = [b for b in cluster.brokers if b.id in {m.suffix for m in failover.route_of(cluster, journal).members}]
    for b in holders:
        b.kill()
        wait_route_without(cluster, journal, b)
        with cluster.client() as c:  # the journal's next append syncs the new route's spools
            end = c.appender(journal).close().end
        assert head is None or end == head
        head = end
        b.start()
    cluster.wait_primaries([journal])
    assert head is not None
    return head


def wait_for(path: str, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.05)


@pytest.mark.timeout(420)
def test_persisted_commits_append_a_lost_micro_batch_again(spark, cluster, tmp_path):
    """With ``commitWhen=persisted`` the micro-batch whose every replica dies unpersisted is not
    committed: the query fails naming it, and started again from its checkpoint it appends the
    lost rows again; the output holds every input row exactly once."""
    from pyspark_gazette import testing

    src, dst = "lost/in", "lost/out"
    dst_spec = failover.replicated(dst, length=1024, flush_seconds=60)
    cluster.apply_specs([failover.replicated(src, length=1024), dst_spec])
    with cluster.client() as c:
        c.append(src, ndjson(events(100, 0)))

    def start():
        w = failover.sink_writer(
            spark, cluster, cluster.brokers[0].address, src, dst, tmp_path / "ckpt", maxBytesPerTrigger="1m"
        )
        return w.option("commitWhen", "persisted").option("broker.timeout", "30s")

    q = start().start()
    blocker = None
    try:
        q.processAllAvailable()  # micro-batch 0: persisted when committed
        with cluster.client() as c:
            e0 = c.appender(dst).close().end
            assert covered(c.list_fragments(dst), 0, e0)
            assert all(f.spec.mod_time for f in c.list_fragments(dst))
        blocker = hold_persists_to(cluster, dst_spec)
        held, _ = testing.arm_hold("commit", dst)
        with cluster.client() as c:
            c.append(src, ndjson(events(100, 100)))
        wait_for(held)  # micro-batch 1 is appended and acknowledged; its commit is held
        e1 = lose_unpersisted(cluster, dst)
        assert e1 > e0
        blocker.unlink()
        blocker = None
        dst_spec.fragment.stores[:] = ["file:///store/"]
        cluster.apply_specs([dst_spec])
        testing.release_hold("commit", dst)
        with pytest.raises(Exception) as failed:
            q.processAllAvailable()
        text = str(failed.value)
        assert f"journal '{dst}' lost offsets {e0}-{e1}" in text and "micro-batch 1 is not committed" in text, text
    finally:
        testing.disarm_hold("commit", dst)
        q.stop()
        if blocker is not None:
            blocker.unlink()
        for b in cluster.brokers:
            if not b.alive():
                b.start()
    cluster.wait_primaries([src, dst])
    with cluster.client() as c:
        c.append(src, ndjson(events(100, 200)))
    q = start().trigger(availableNow=True).start()
    failover.await_query(q)
    assert q.exception() is None
    with cluster.client() as c:
        listed = c.list_fragments(dst)
        head = c.appender(dst).close().end
    assert all(f.spec.mod_time for f in listed) and listed[-1].spec.end == head  # all persisted
    r = spark.read.format("gazette").option("broker.address", cluster.address).option("broker.timeout", "10s")
    r = r.option("store.fileRoot", cluster.file_root).option("journals", dst).option("failOnDataLoss", "false")
    r = r.option("holeAgeThreshold", "0s")  # the hole of the lost append, judged lost at once, is skipped
    ids = [json.loads(x.value)["id"] for x in r.load().collect()]
    assert sorted(ids) == list(range(300))  # none lost, none twice


@pytest.mark.timeout(420)
def test_persisted_batch_write_fails_naming_what_was_lost(spark, cluster):
    """A ``commitWhen=persisted`` batch write whose appends every replica loses unpersisted
    fails naming the journal and offsets instead of reporting success."""
    import threading

    from pyspark_gazette import testing

    journal = "lost/batch"
    spec = failover.replicated(journal, length=1024, flush_seconds=60)
    cluster.apply_specs([spec])
    blocker = hold_persists_to(cluster, spec)
    held, _ = testing.arm_hold("commit", journal)
    lost: dict[str, int] = {}

    def kill_when_held() -> None:
        wait_for(held)  # the tasks appended; the driver's commit is held
        lost["end"] = lose_unpersisted(cluster, journal)
        blocker.unlink()
        spec.fragment.stores[:] = ["file:///store/"]
        cluster.apply_specs([spec])
        testing.release_hold("commit", journal)

    killer = threading.Thread(target=kill_when_held, daemon=True)
    killer.start()
    df = spark.createDataFrame([(i, "x" * 20) for i in range(300)], "id long, pad string").coalesce(1)
    w = df.write.format("gazette").mode("append").option("broker.address", cluster.brokers[0].address)
    w = w.option("journal", journal).option("commitWhen", "persisted").option("broker.timeout", "30s")
    try:
        with pytest.raises(Exception) as failed:
            w.save()
        killer.join(240)
        assert not killer.is_alive()
    finally:
        testing.disarm_hold("commit", journal)
        if blocker.exists():
            blocker.unlink()
        for b in cluster.brokers:
            if not b.alive():
                b.start()
    text = str(failed.value)
    assert f"journal '{journal}' lost offsets 0-{lost['end']}" in text and "the write failed" in text, text
