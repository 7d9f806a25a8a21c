"""A rolling upgrade of a real Gazette cluster, survived.

Brokers are upgraded one at a time: SIGTERM (as Kubernetes sends), the exit awaited, a new
process with the same id, port and etcd, ready before the next one goes
(:meth:`realgazette.GazetteCluster.upgrade`). A broker that gets SIGTERM marks itself exiting,
Gazette's allocator hands its journals to the others, and it exits once it holds none; each
hand-off rolls the journal's spools, and the fragments rolled out of the exiting broker are
persisted by it as it leaves, while the new members list them only at their next store refresh:
the moment a hand-off leaves a fragment in flight.

While every broker in turn is upgraded, ``GAZETTE_ROLLING_ROUNDS`` times over (2 by default):

* writers (our client's append, one thread per journal) append records with unique ids to
  three journals and note each record once its append is acknowledged;
* a stream copies ``rolling/one`` (replication 1) through the exactly-once sink with
  ``failOnDataLoss=false``;
* a second stream copies ``rolling/three`` (replication 3, a one-minute ``flush_interval``,
  Gazette's shortest) through the sink with ``failOnDataLoss=true``;
* a batch read of ``rolling/batch`` (replication 1) runs every few seconds and is compared with
  what was acknowledged before it began.

Expected: every acknowledged record in each output exactly once, no ``DataLossError``, no read
that returns less than was acknowledged before it began. The cluster has 4 brokers: with 3, a
broker that gets SIGTERM never exits while a journal of replication 3 exists (the allocator
cannot take its replica away without leaving the journal short of replicas, so it keeps it, and
the exiting broker waits to hold none), as a real cluster needs one broker more than its largest
replication to be upgraded this way.

``GAZETTE_ROLLING_ROUNDS=10`` makes the long run of docs/reliability.md; its figures (upgrades,
records, the time reads waited at a hole) are printed at the end (``-s``).
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from collections import Counter

import pytest
import test_failover_gazette as failover
from spark_helpers import events, ndjson

import realgazette
from journalspecs import make_spec
from pyspark_gazette import testing

#: Rounds of the upgrade: every broker restarted once per round.
ROUNDS = int(os.environ.get("GAZETTE_ROLLING_ROUNDS", "2"))
BROKERS = 4
ONE, THREE, BATCH = "rolling/one", "rolling/three", "rolling/batch"
ONE_OUT, THREE_OUT = "rolling/one-out", "rolling/three-out"
#: Records per append, and the pause of each writer between appends: a modest rate.
PER_APPEND, PAUSE = 10, 0.25
#: The pause between two batch reads of BATCH.
READ_PAUSE = 2.0


def spec(name: str, replication: int, **kwargs):
    # 2 KiB fragments, so spools roll often; a store refresh every 5 s (Gazette's default is 5 m):
    # a hole a hand-off leaves is filled within a read's wait for it.
    s = make_spec(name, **{"length": 2048, "refresh_seconds": 5, **kwargs})
    s.replication = replication
    return s


SPECS = [
    spec(ONE, 1),
    spec(THREE, 3, flush_seconds=60),
    spec(BATCH, 1),
    spec(ONE_OUT, 3),
    spec(THREE_OUT, 1),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    realgazette.require()
    with realgazette.GazetteCluster(tmp_path_factory.mktemp("gazette-rolling"), BROKERS) as c:
        yield c


class Writer(threading.Thread):
    """Appends PER_APPEND records with fresh ids to ``journal`` through our client (bootstrapped at
    every broker, so whichever is down) until stopped; ``acked`` lists the ids of the appends
    that returned, in order; an append that fails for good ends the writer (``error``)."""

    def __init__(self, cluster, journal: str, first_id: int):
        super().__init__(daemon=True, name=f"writer {journal}")
        self.cluster, self.journal, self.next_id = cluster, journal, first_id
        self.acked: list[int] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        #: The longest an append took to be acknowledged (retries included), in seconds.
        self.longest = 0.0

    def snapshot(self) -> set[int]:
        with self.lock:
            return set(self.acked)

    def run(self) -> None:
        try:
            with self.cluster.client(",".join(self.cluster.addresses), broker_timeout=120) as c:
                while not self.stop.is_set():
                    batch = events(PER_APPEND, self.next_id)
                    began = time.monotonic()
                    c.append(self.journal, ndjson(batch))
                    self.longest = max(self.longest, time.monotonic() - began)
                    with self.lock:
                        self.acked.extend(e["id"] for e in batch)
                    self.next_id += PER_APPEND
                    self.stop.wait(PAUSE)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            self.error = e


class BatchReads(threading.Thread):
    """A batch read of ``journal`` every READ_PAUSE seconds until stopped, each compared with
    the ids ``writer`` had acknowledged before it began. ``reads`` holds, per read: the count
    acknowledged before, the ids missing from it, the offsets read twice, the error (or None),
    and how long it waited at a hole (testing.arm_settle_wait's marker: from the start of the
    wait to the read's end; None when it did not wait)."""

    def __init__(self, spark, cluster, journal: str, writer: Writer):
        super().__init__(daemon=True, name=f"batch reads {journal}")
        self.spark, self.cluster, self.journal, self.writer = spark, cluster, journal, writer
        self.reads: list[dict] = []
        self.stop = threading.Event()
        #: What the upgrade is doing (set by the test), noted at each read's start and end.
        self.phase = "before the upgrade"

    def read_once(self) -> dict:
        before = self.writer.snapshot()
        marker = testing.arm_settle_wait(self.journal)
        out: dict = {"acked": len(before), "missing": [], "twice": [], "error": None, "waited": None}
        out["phase"], began = self.phase, time.monotonic()
        try:
            r = self.spark.read.format("gazette").option("broker.address", ",".join(self.cluster.addresses))
            r = r.option("store.fileRoot", self.cluster.file_root).option("journals", self.journal)
            rows = r.load().collect()
            got = Counter(r.offset for r in rows)
            out["end"] = max((r.offset + len(r.value) + 1 for r in rows), default=0)
            out["twice"] = sorted(o for o, n in got.items() if n > 1)
            out["missing"] = sorted(before - {json.loads(r.value)["id"] for r in rows})
        except Exception as e:  # noqa: BLE001 - recorded, asserted by the test
            out["error"] = f"{type(e).__name__}: {str(e)[:2000]}"
        if os.path.exists(marker):
            out["waited"] = time.time() - os.stat(marker).st_mtime
        out["took"], out["phase at end"] = time.monotonic() - began, self.phase
        if out["missing"]:
            with self.cluster.client() as c:
                out["head now"] = len(c.read_all(self.journal))
                out["route now"] = str(c.get_journal(self.journal).route).replace("\n", " ")
        return out

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.reads.append(self.read_once())
                self.stop.wait(READ_PAUSE)
        finally:
            testing.disarm_settle_wait(self.journal)


def wait_for(what: str, done, alive=lambda: True, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert alive(), f"stopped before {what}"
        assert time.monotonic() < deadline, f"not {what} within {timeout}s"
        time.sleep(0.1)


@pytest.mark.timeout(600 + ROUNDS * BROKERS * 120)
def test_streams_and_reads_through_a_rolling_upgrade(spark, cluster, tmp_path):
    journals = [s.name for s in SPECS]
    cluster.apply_specs(SPECS)
    writers = {j: Writer(cluster, j, i * 10_000_000) for i, j in enumerate((ONE, THREE, BATCH))}
    for w in writers.values():
        w.start()
    address = ",".join(cluster.addresses)
    queries = []
    reads = BatchReads(spark, cluster, BATCH, writers[BATCH])
    exits: list[float] = []
    began = time.monotonic()
    try:
        wait_for("a record acknowledged in each journal", lambda: all(w.snapshot() for w in writers.values()))
        for src, dst, fail in ((ONE, ONE_OUT, "false"), (THREE, THREE_OUT, "true")):
            checkpoint = tmp_path / f"ckpt-{dst.split('/')[1]}"
            w = failover.sink_writer(
                spark, cluster, address, src, dst, checkpoint, maxBytesPerTrigger="1m", failOnDataLoss=fail
            )
            queries.append(w.start())
        for q in queries:
            wait_for(
                "a micro-batch with rows",
                lambda q=q: any(p["numInputRows"] for p in q.recentProgress),
                lambda q=q: q.isActive,
            )
        reads.start()
        wait_for("a batch read", lambda: reads.reads, reads.is_alive)
        for _ in range(ROUNDS):
            for b in cluster.brokers:
                reads.phase = f"upgrading {b.id} (upgrade {len(exits) + 1})"
                exits.append(cluster.upgrade(b, journals))
                reads.phase = f"{b.id} upgraded (upgrade {len(exits)})"
                print(f"{time.monotonic() - began:.0f}s: {reads.phase}, exit took {exits[-1]:.1f}s", flush=True)
                assert all(q.isActive for q in queries), [q.exception() for q in queries]
                assert not any(w.error for w in writers.values()), {j: w.error for j, w in writers.items()}
    finally:
        for w in writers.values():
            w.stop.set()
        reads.stop.set()
        for w in writers.values():
            w.join(180)
        if reads.ident is not None:
            reads.join(300)
        try:
            for q in queries:
                if q.isActive:
                    q.processAllAvailable()
        finally:
            for q in queries:
                q.stop()
    elapsed = time.monotonic() - began
    assert {j: w.error for j, w in writers.items() if w.error} == {}
    assert len(exits) == ROUNDS * BROKERS
    assert [q.exception() for q in queries] == [None, None]

    # Each output: every message of its input exactly once, and every acknowledged record there.
    for src, dst in ((ONE, ONE_OUT), (THREE, THREE_OUT)):
        want, got = failover.source_messages(cluster, src), failover.sink_output(cluster, dst)
        missing, extra = sorted((want - got).elements()), sorted((got - want).elements())
        assert not missing and not extra, (
            f"{dst} (copied from {src}): {len(missing)} input messages (id, offset) missing, e.g. {missing[:5]} "
            f"(offsets {missing[0][1] if missing else '-'}..{missing[-1][1] if missing else '-'}); "
            f"{len(extra)} not input once, e.g. {extra[:5]}"
        )
        assert writers[src].snapshot() <= {i for i, _ in want}, src
    # Every batch read: no error, nothing acknowledged before it began missing, no offset twice.
    bad = [r for r in reads.reads if r["error"] or r["missing"] or r["twice"]]
    assert not bad, [{k: v if k != "missing" else f"{len(v)}: {v[:3]}..{v[-1:]}" for k, v in r.items()} for r in bad]
    try:
        final = reads.read_once()
    finally:
        testing.disarm_settle_wait(BATCH)
    assert not final["error"] and not final["missing"] and not final["twice"], final
    assert final["acked"] == len(writers[BATCH].snapshot())

    waits = [r["waited"] for r in reads.reads if r["waited"] is not None]
    records = {j: len(w.snapshot()) for j, w in writers.items()}
    print(
        f"\nrolling upgrade: {ROUNDS} rounds x {BROKERS} brokers = {len(exits)} upgrades survived in {elapsed:.0f} s; "
        f"exit after SIGTERM: max {max(exits):.1f} s, median {statistics.median(exits):.1f} s; "
        f"records acknowledged: {records}; longest append: "
        f"{ {j: round(w.longest, 1) for j, w in writers.items()} }; batch reads: {len(reads.reads)}, "
        f"{len(waits)} waited at a hole"
        + (f" (max {max(waits):.1f} s, median {statistics.median(waits):.1f} s)" if waits else "")
    )
