"""Failover on a real Gazette cluster (4 brokers, journals replicated 3 times).

The broker that is primary for the journals is SIGKILLed, as a crashed host; its etcd lease
expires and Gazette reassigns the journals to the survivors (4 brokers, so that 3 replicas
remain: with only 2 live brokers Gazette refuses appends to a journal of replication 3 with
INSUFFICIENT_JOURNAL_BROKERS until the third comes back). Batch queries started after the
kill, and streams (source, exactly-once sink) whose primary is killed while a micro-batch
runs, with plans and routes that still name the dead broker, must finish with exactly the right data: nothing
lost, nothing duplicated, every line a whole message. Streams also run through a SIGKILL and
restart of every broker, and of etcd. One cluster serves the module; each test restarts what it
killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import time
from collections import Counter

import pytest
from spark_helpers import events, ndjson

from journalspecs import make_spec
from pyspark_gazette import testing

JOURNALS = [f"failover/read-{i}" for i in range(3)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    import realgazette

    realgazette.require()
    with realgazette.GazetteCluster(tmp_path_factory.mktemp("gazette-failover"), 4) as c:
        yield c


def replicated(name: str, **kwargs):
    spec = make_spec(name, **{"length": 2048, **kwargs})
    spec.replication = 3
    return spec


def primary_of(cluster, journal: str):
    with cluster.client() as c:
        (j,) = [j for j in c.list_journals() if j.name == journal]
    member = j.route.members[j.route.primary]
    (broker,) = [b for b in cluster.brokers if b.id == member.suffix]
    return broker


def other_than(cluster, dead):
    """A live broker that is not ``dead``: the address a query keeps through the kill."""
    return next(b for b in cluster.brokers if b is not dead and b.alive())


def kill_primary(cluster, journal: str):
    """SIGKILL the primary of ``journal``; returns a live broker's address for the query."""
    dead = primary_of(cluster, journal)
    dead.kill()
    return next(b for b in cluster.brokers if b.alive()).address, dead


def ids(rows) -> list[int]:
    return sorted(json.loads(r.value)["id"] for r in rows)


def wait_marker(journal: str, held: str, alive=lambda: True, timeout: float = 240) -> tuple[list[int], str]:
    """Wait for the marker of an RPC hold of ``journal`` (testing.rpc_hold), written by the
    held process (a Spark Python worker: a file is the event); returns (its numbers: the PID
    first, then the hold's details; the endpoint the RPC is on)."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(held):
        assert alive(), f"the query ended before an RPC of {journal} reached its hold"
        assert time.monotonic() < deadline, f"no held RPC of {journal} within {timeout}s"
        time.sleep(0.05)
    *numbers, endpoint = open(held).read().split()
    return [int(n) for n in numbers], endpoint


def wait_held(journal: str, held: str, alive=lambda: True, timeout: float = 240) -> tuple[int, int, int, str]:
    """Wait for the read hold's marker (testing.read_hold): (pid, offset, segment end, endpoint)
    of a broker Read of ``journal`` paused after its first content with its RPC open."""
    (pid, offset, end), endpoint = wait_marker(journal, held, alive, timeout)
    return pid, offset, end, endpoint


#: Events appended as one piece to make a broker Read of many 128 KiB chunks (about 4 MB): held
#: after its first chunk, its RPC is still streaming when the fault lands.
BIG = 100_000


@contextlib.contextmanager
def read_held(cluster, q, journal: str, count: int, first_id: int):
    """Append ``count`` events (ids from ``first_id``) to ``journal`` as one piece and wait until
    the running query ``q`` reads them through a broker, its Read held mid-segment with its RPC
    open (testing.read_hold, whose marker proves it); the body lands the fault, and the read is
    released when it ends (disarmed, so released too, if it raises)."""
    held, _ = testing.arm_read_hold(journal)
    try:
        with cluster.client() as c:
            c.append(journal, ndjson(events(count, first_id)))
        _, offset, end, endpoint = wait_held(journal, held, lambda: q.isActive)
        assert offset < end, (offset, end)  # the micro-batch's Read is mid-segment
        yield endpoint
        testing.release_read_hold(journal)
    finally:
        testing.disarm_read_hold(journal)


@pytest.mark.timeout(400)
@pytest.mark.parametrize("direct", ["true", "false"], ids=["direct", "broker-tail"])
def test_batch_read_survives_a_killed_primary(spark, cluster, direct):
    """The broker serving a task's broker Read of the journal is SIGKILLed while the Read is
    open: the read is held after its first chunk (testing.read_hold, whose marker names the
    broker the RPC is on and its offset), that broker is killed, the read released; it resumes
    from its offset on another member.

    The plan hands each broker segment the primary it learned (Segment.endpoint), which the
    executor dials first, so the killed broker is the primary as planned. The query's bootstrap
    address is another route member: a Read that reaches it (no planned endpoint) is served
    there, not proxied (Gazette serves a Read on any route member: broker/read_api.go), so the
    marker always names the broker whose death ends the RPC (the other member stays as a second
    bootstrap address). Gazette's allocator may move the primary between the test's look-up and
    the plan (it rebalances after a broker restarts), so the broker to kill is the one the
    marker names, and it must be a route member."""
    import threading

    journals = [f"{j}-{direct}" for j in JOURNALS]
    cluster.apply_specs([replicated(j) for j in journals])
    with cluster.client() as c:
        for j in journals:
            for b in range(6):  # several 2 KiB fragments, some persisted, and an open tail
                c.append(j, ndjson(events(40, b * 40)))
        c.append(journals[0], ndjson(events(BIG, 240)))  # a long open tail, read through a broker
    cluster.wait_primaries(journals)
    route = route_of(cluster, journals[0])
    primary = route.members[route.primary].suffix
    # The bootstrap addresses: the route's other members (each serves a Read itself), two, so a
    # Spark worker started after the kill has one alive whichever member the hold was on.
    address = ",".join(b.address for b in cluster.brokers if b.id in {m.suffix for m in route.members} - {primary})
    dead = None
    held, _ = testing.arm_read_hold(journals[0])
    out: dict = {}

    def read():
        r = spark.read.format("gazette").option("broker.address", address).option("store.fileRoot", cluster.file_root)
        try:
            out["rows"] = r.option("journals", ",".join(journals)).option("directReads", direct).load().collect()
        except Exception as e:  # noqa: BLE001 - handed to the test
            out["error"] = e

    t = threading.Thread(target=read, daemon=True)
    t.start()
    try:
        _, offset, end, endpoint = wait_held(journals[0], held, t.is_alive)
        assert offset < end, (offset, end)  # mid-RPC
        (dead,) = [b for b in cluster.brokers if b.address == endpoint]  # the broker the RPC is on
        members = {m.suffix for r in (route, route_of(cluster, journals[0])) for m in r.members}
        assert dead.id in members, (dead.id, members)  # a member serving it (then or now), not a proxy
        dead.kill()
        testing.release_read_hold(journals[0])
        t.join(300)
        assert not t.is_alive() and "error" not in out, out.get("error")
        by_journal: dict[str, list] = {j: [] for j in journals}
        for row in out["rows"]:
            by_journal[row.journal].append(row)
        assert ids(by_journal[journals[0]]) == list(range(240 + BIG))
        for j in journals[1:]:
            assert ids(by_journal[j]) == list(range(240)), j
    finally:
        testing.disarm_read_hold(journals[0])
        if dead is not None and not dead.alive():
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


def stream_reader(spark, cluster, address: str, journals: list[str], **options):
    r = spark.readStream.format("gazette").option("broker.address", address).option("store.fileRoot", cluster.file_root)
    r = r.option("journals", ",".join(journals)).option("startingOffsets", "earliest")
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


@pytest.mark.timeout(300)
def test_stream_read_survives_a_primary_killed_mid_batch(spark, cluster, tmp_path):
    """The primary of a journal is SIGKILLed while the stream plans micro-batch 1: the planning
    sweep's write-head Read of that journal, addressed to the primary, is held
    (testing.rpc_hold ``heads``, armed by batch 0's sink; its marker names the broker) until
    the kill, so it is sent to a dead broker and planning must go on through the others; the
    batch's reads go through the brokers too (``directReads=false``). More is appended after the
    kill, and again after the killed broker is back. The batches' rows together are every
    message once."""
    journals = [f"failover/stream-{i}" for i in range(3)]
    cluster.apply_specs([replicated(j) for j in journals])
    with cluster.client() as c:
        for j in journals:
            for b in range(4):
                c.append(j, ndjson(events(40, b * 40)))
    dead = primary_of(cluster, journals[0])
    address = other_than(cluster, dead).address
    out = tmp_path / "out"
    out.mkdir()
    held: list[str] = []

    def sink(batch, batch_id):
        rows = [[r.journal, r.offset, json.loads(r.value)["id"]] for r in batch.collect()]
        (out / f"{batch_id}.json").write_text(json.dumps(rows))
        if batch_id == 0:
            held.append(testing.arm_hold("heads", journals[0])[0])  # the next planning sweep

    df = stream_reader(spark, cluster, address, journals, maxBytesPerTrigger="4000", directReads="false")
    q = df.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ckpt")).start()
    try:
        deadline = time.monotonic() + 120
        while not held:
            assert q.isActive and time.monotonic() < deadline, q.exception()
            time.sleep(0.05)
        _, endpoint = wait_marker(journals[0], held[0], lambda: q.isActive)
        assert endpoint == dead.address, endpoint  # planning's Read is addressed to the primary
        dead.kill()
        testing.release_hold("heads", journals[0])
        q.processAllAvailable()
        with cluster.client() as c:  # after the kill: appended through the new primaries
            for j in journals:
                c.append(j, ndjson(events(40, 160)))
        q.processAllAvailable()
        dead.start()
        cluster.wait_primaries(journals)
        with cluster.client() as c:
            for j in journals:
                c.append(j, ndjson(events(40, 200)))
        q.processAllAvailable()
    finally:
        testing.disarm_hold("heads", journals[0])
        q.stop()
        if not dead.alive():
            dead.start()
    batches = sorted(int(f.stem) for f in out.glob("*.json"))
    assert batches == list(range(len(batches))) and len(batches) > 3, batches  # batches after the kill too
    assert journals[0] in {j for j, _, _ in json.loads((out / "1.json").read_text())}  # planned through the kill
    rows = [tuple(r) for b in batches for r in json.loads((out / f"{b}.json").read_text())]
    assert len(set((j, o) for j, o, _ in rows)) == len(rows)  # no message twice
    for j in journals:
        assert sorted(i for jj, _, i in rows if jj == j) == list(range(240)), j


def sink_writer(spark, cluster, address, src, dst, checkpoint, **read_options):
    """``src`` (earliest, small batches unless ``read_options`` say otherwise) ->
    the exactly-once sink into ``dst``: rows ``{id, source_offset}``; the writer, to be started."""
    df = stream_reader(spark, cluster, address, [src], **{"maxBytesPerTrigger": "4000", **read_options})
    df = df.selectExpr("cast(get_json_object(value, '$.id') as long) as id", "offset as source_offset")
    w = df.writeStream.format("gazette").option("broker.address", address).option("journal", dst)
    return w.option("checkpointLocation", str(checkpoint))


def sink_query(spark, cluster, address, src, dst, checkpoint, **options):
    """:func:`sink_writer` started with Trigger.AvailableNow and ``broker.timeout`` 2m."""
    w = sink_writer(spark, cluster, address, src, dst, checkpoint).option("broker.timeout", "2m")
    for k, v in options.items():
        w = w.option(k, v)
    return w.trigger(availableNow=True).start()


def source_messages(cluster, journal: str) -> Counter:
    """(id, offset) of every message of ``journal``: what the sink must write, once each."""
    out: Counter = Counter()
    with cluster.client() as c:
        pos = 0
        for line in c.read_all(journal).splitlines(keepends=True):
            out[(json.loads(line)["id"], pos)] += 1
            pos += len(line)
    return out


def sink_output(cluster, journal: str) -> Counter:
    """(id, source_offset) of every line of ``journal``; each line must be a whole document."""
    with cluster.client() as c:
        data = c.read_all(journal)
    assert data.endswith(b"\n")
    return Counter((d["id"], d["source_offset"]) for d in map(json.loads, data.splitlines()))


def await_query(q, timeout: float = 240) -> None:
    assert q.awaitTermination(timeout), f"the query did not finish within {timeout}s"
    assert q.exception() is None, q.exception()


@pytest.mark.timeout(400)
def test_exactly_once_sink_survives_a_primary_killed_mid_batch(spark, cluster, tmp_path):
    """Gazette -> Gazette through the exactly-once sink. The sink journal's primary is SIGKILLed
    while a task's Append is open: all its content handed to gRPC, its commit not yet sent (held
    by testing.rpc_hold ``append``, whose marker names the broker and the bytes written). The
    append fails and is retried through the journal's new primary, as is every later one. Then
    the last batch is re-run from the checkpoint (its commit-log entry removed, as when the
    driver dies before writing it): the registers, written through the new primary, refuse it.
    The output holds every input message exactly once."""
    src, dst = "failover/sink-in", "failover/sink-out"
    cluster.apply_specs([replicated(src), replicated(dst)])
    with cluster.client() as c:
        for b in range(6):
            c.append(src, ndjson(events(40, b * 40)))
    want = source_messages(cluster, src)
    dead = primary_of(cluster, dst)
    address = other_than(cluster, dead).address
    checkpoint = tmp_path / "ckpt"
    held, _ = testing.arm_hold("append", dst)
    try:
        q = sink_query(spark, cluster, address, src, dst, checkpoint)
        (_, written), endpoint = wait_marker(dst, held, lambda: q.isActive)
        # Open on the primary, or on the broker that proxies it there: either way through it.
        assert written > 0 and endpoint in (dead.address, address), (written, endpoint)
        dead.kill()
        testing.release_hold("append", dst)
        await_query(q)
        batches = [p["batchId"] for p in q.recentProgress if p["numInputRows"]]
        assert len(batches) >= 3, batches
        assert sink_output(cluster, dst) == want
        with cluster.client() as c:
            size = len(c.read_all(dst))
        last = max(batches)
        for name in (str(last), f".{last}.crc"):
            (checkpoint / "commits" / name).unlink()
        q = sink_query(spark, cluster, address, src, dst, checkpoint)
        await_query(q)
        assert [p["batchId"] for p in q.recentProgress if p["numInputRows"]] == [last]  # it did run again
        with cluster.client() as c:
            assert len(c.read_all(dst)) == size
        assert sink_output(cluster, dst) == want
    finally:
        testing.disarm_hold("append", dst)
        if not dead.alive():
            dead.start()
            cluster.wait_primaries([src, dst])


def persist_everything(cluster, journals: list[str], timeout: float = 60) -> None:
    """Make every acknowledged byte of ``journals`` durable in the fragment store: a zero-byte
    append rolls a spool longer than the fragment length (Gazette's primary then persists it at
    once), then wait until the listing shows every fragment persisted up to the write head."""
    deadline = time.monotonic() + timeout
    with cluster.client() as c:
        for j in journals:
            c.appender(j).close()
            head = len(c.read_all(j))
            while True:
                frags = [f.spec for f in c.list_fragments(j)]
                if all(f.mod_time for f in frags) and (frags[-1].end if frags else 0) == head:
                    break
                assert time.monotonic() < deadline, (j, head, frags)
                time.sleep(0.1)


def crash_and_restart_brokers(cluster, journals: list[str]) -> None:
    """SIGKILL every broker, start them again (same ids and ports), wait for the journals'
    routes, and reset their heads as Gazette's operator must after losing every replica: the
    new primaries start at offset 0 and refuse appends with INDEX_HAS_GREATER_OFFSET until an
    append at the fragment index's end (``gazctl journals reset-head``)."""
    for b in cluster.brokers:
        b.kill()
    for b in cluster.brokers:
        b.start()
    cluster.wait_primaries(journals, timeout=60)
    for j in journals:
        cluster.gazctl("journals", "reset-head", "-l", f"name={j}")


@pytest.mark.timeout(600)
def test_stream_through_a_crash_and_restart_of_every_broker(spark, cluster, tmp_path):
    """Gazette -> exactly-once sink -> Gazette, with every broker SIGKILLed and started again
    while a micro-batch's broker Read is open (held after its first chunk by testing.read_hold,
    whose marker proves it). Gazette keeps acknowledged content that was persisted (unpersisted
    spools die with their last replica), so the test persists both journals before the crash.
    The held read resumes on the restarted brokers (within ``broker.timeout``) and the query
    writes what is appended afterwards: the output holds every input message exactly once."""
    src, dst = "failover/crash-in", "failover/crash-out"
    cluster.apply_specs([replicated(src, length=1024), replicated(dst, length=1024)])
    with cluster.client() as c:
        for b in range(4):
            c.append(src, ndjson(events(40, b * 40)))
    w = sink_writer(
        spark,
        cluster,
        cluster.brokers[0].address,
        src,
        dst,
        tmp_path / "ckpt",
        directReads="false",
        maxBytesPerTrigger="64m",
    )
    q = w.option("broker.timeout", "3m").start()
    try:
        q.processAllAvailable()
        assert sink_output(cluster, dst) == source_messages(cluster, src)
        with read_held(cluster, q, src, BIG, 160):
            persist_everything(cluster, [src, dst])
            crash_and_restart_brokers(cluster, [src, dst])
        assert q.isActive, q.exception()
        with cluster.client() as c:
            for b in range(3):
                c.append(src, ndjson(events(40, 160 + BIG + b * 40)))
        q.processAllAvailable()
    finally:
        q.stop()
    want = source_messages(cluster, src)
    assert sum(want.values()) == 280 + BIG
    assert sink_output(cluster, dst) == want


@pytest.mark.timeout(500)
def test_stream_through_an_etcd_restart(spark, cluster, tmp_path):
    """etcd SIGKILLed and started again (same data, same port) while a Gazette -> exactly-once
    sink stream runs, with appends while it is down. Brokers keep their assignments and serve
    reads and appends from the state they hold; their lease keep-alives resume when etcd is back
    within the lease TTL (etcd renews every lease when it starts), so no broker exits and no
    journal moves. (Down longer than the lease, every broker exits: "unable to keep member
    lease alive".) etcd is killed while a micro-batch's broker Read is open (held after its first
    chunk by testing.read_hold, whose marker proves it) and the sink appends after it is back.
    The output holds every input message exactly once."""
    src, dst = "failover/etcd-in", "failover/etcd-out"
    cluster.apply_specs([replicated(src), replicated(dst)])
    with cluster.client() as c:
        c.append(src, ndjson(events(40)))
    pids, down = [b.pid for b in cluster.brokers], 0.0
    w = sink_writer(
        spark,
        cluster,
        cluster.brokers[0].address,
        src,
        dst,
        tmp_path / "ckpt",
        directReads="false",
        maxBytesPerTrigger="64m",
    )
    q = w.start()
    try:
        q.processAllAvailable()
        with read_held(cluster, q, src, BIG, 40):
            cluster.etcd.kill()
            down = time.monotonic()
            with cluster.client() as c:  # the data plane needs no etcd
                c.append(src, ndjson(events(40, 40 + BIG)))
            cluster.etcd.start()
            down = time.monotonic() - down  # brokers exit if it exceeds their lease (5 s)
        with cluster.client() as c:
            c.append(src, ndjson(events(40, 80 + BIG)))
        q.processAllAvailable()
    finally:
        q.stop()
        if cluster.etcd.proc is None or cluster.etcd.proc.poll() is not None:
            cluster.etcd.start()
    alive = [b.alive() for b in cluster.brokers]
    assert [b.pid for b in cluster.brokers] == pids and all(alive), f"etcd was down {down:.1f}s; alive: {alive}"
    want = source_messages(cluster, src)
    assert sum(want.values()) == 120 + BIG
    assert sink_output(cluster, dst) == want


def route_of(cluster, journal: str):
    with cluster.client() as c:
        (j,) = [j for j in c.list_journals() if j.name == journal]
    return j.route


def hold_persists(cluster, journal: str) -> pathlib.Path:
    """Hold back every persist of ``journal``'s spools (as a slow store or a long flush interval
    would): a regular file where its fragment directory in the file store (``file:///store/``)
    would go. Gazette's file store creates that directory before each Put, so each persist fails
    and its spool is queued for a retry a minute later ("failed to persist Spool (will retry)"),
    while a store walk skips the file as a name it cannot parse. Remove the file to release."""
    blocker = pathlib.Path(cluster.file_root, "store", journal)
    blocker.parent.mkdir(parents=True, exist_ok=True)
    assert not blocker.exists(), f"{journal} has persisted fragments already"
    blocker.write_bytes(b"")
    return blocker


def wait_log(broker, needle: str, since: int, timeout: float = 30) -> None:
    """Wait until ``broker``'s log has a line containing ``needle`` past byte ``since``."""
    deadline = time.monotonic() + timeout
    while True:
        with open(broker.log, "rb") as f:
            f.seek(since)
            if needle.encode() in f.read():
                return
        assert time.monotonic() < deadline, f"{broker.id} logged no {needle!r} within {timeout}s"
        time.sleep(0.1)


@pytest.mark.timeout(400)
def test_a_read_answered_by_a_rejoined_replica_sees_every_acknowledged_record(spark, cluster):
    """The stale read of issue 28. 240 records are acknowledged and held in the spools of the
    journal's 3 replicas (1 MiB fragments: nothing rolls), and their persists are held back
    (:func:`hold_persists`: the state of a cluster whose replicas have not flushed yet). The
    journal's primary is SIGKILLed (and started again after the read): the spare broker joins
    the route, the new primary rolls its spool to the write head to let it in (and fails to
    persist the rolled spool: the log line is awaited), and the joined replica's index holds the
    persisted fragments only, so its own ListFragments lists nothing below the write head, with no error.
    A read whose listing it answers (the only member of the reader's zone) planned to the end of
    that listing and returned nothing. It now ends at the primary's write head and finds the
    content in the other members' listings: every acknowledged record, and never fewer than the
    read before the kill."""
    from pyspark_gazette.client import JournalClient
    from pyspark_gazette.client.list_apply import list_fragments

    # Reads prefer route members of their zone (broker.zone). Brokers alternate between two
    # zones, so once the primary is gone its zone holds one member: the spare that took its
    # place, when the spare is the primary's zone-mate (1 journal in 3). Pick a journal where it is.
    names = [f"failover/rejoined-{i}" for i in range(16)]
    cluster.apply_specs([replicated(j, length=1 << 20, refresh_seconds=3600) for j in names])
    cluster.wait_primaries(names)
    chosen = None
    for j in names:
        members = {m.suffix for m in route_of(cluster, j).members}
        (spare,) = [b for b in cluster.brokers if b.id not in members]
        dead = primary_of(cluster, j)
        if spare.zone == dead.zone:
            chosen = j
            break
    assert chosen is not None, "no journal whose spare broker is its primary's zone-mate"
    journal = chosen
    blocker = hold_persists(cluster, journal)
    with cluster.client() as c:
        for b in range(6):
            c.append(journal, ndjson(events(40, b * 40)))  # acknowledged by all 3 replicas
        head = len(c.read_all(journal))

    def read_through(broker, *more):
        r = spark.read.format("gazette").option("broker.address", broker.address).option("broker.zone", broker.zone)
        r = r.option("store.fileRoot", cluster.file_root).option("journals", ",".join([journal, *more]))
        return ids(r.option("directReads", "false").load().collect())

    before = read_through(spare)
    assert before == list(range(240))
    logged = {b.id: b.log.stat().st_size for b in cluster.brokers}
    dead.kill()
    try:
        deadline = time.monotonic() + 60
        while True:  # the dead primary's lease expires; the spare takes its place
            route = route_of(cluster, journal)
            suffixes = {m.suffix for m in route.members}
            if dead.id not in suffixes and spare.id in suffixes and route.primary >= 0:
                break
            assert time.monotonic() < deadline, route
            time.sleep(0.1)
        (primary,) = [b for b in cluster.brokers if b.id == route.members[route.primary].suffix]
        # The new primary rolled its spool to let the spare in, and could not persist it.
        wait_log(primary, "failed to persist Spool (will retry)", logged[primary.id])
        # The stale state: the joined replica's own listing ends short of the acknowledged head.
        with JournalClient(spare.address) as c:
            own = list_fragments(c.conns, journal, do_not_proxy=True)
        assert max((f.spec.end for f in own), default=0) < head, own
        zone = [m.suffix for m in route_of(cluster, journal).members if m.zone == spare.zone]
        assert zone == [spare.id], zone  # reads of the spare's zone go to it
        after = read_through(spare)
        assert after == list(range(240))  # every acknowledged record: nothing below the earlier read
        # Several journals are planned together (their write heads swept in one window, every
        # route member asked): the same records, the other journal being empty.
        assert read_through(spare, *[n for n in names if n != journal][:1]) == list(range(240))
        # Planning from that listing, bootstrapped at the joined replica: the primary's head.
        from pyspark_gazette.client.settle import holes, settle

        with JournalClient(spare.address) as c:
            done = settle(c.conns, journal, own)
        assert done.head == head and not done.holes and holes(done.fragments, head) == []
    finally:
        blocker.unlink()  # the held spools persist at the persister's next retry
        # Started again only now: a broker back in the cluster makes Gazette's allocator move
        # assignments, and it may take the journal from the members whose spools hold its content
        # (they persist it later), leaving a route whose every index is stale.
        if not dead.alive():
            dead.start()
        cluster.wait_primaries([journal])
