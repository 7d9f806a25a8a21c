"""Many small journals: packed partitions, batch and stream, against the embedded broker."""

from __future__ import annotations

import json
import os
import time

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable
from spark_helpers import events, fill, ndjson, reader

from pyspark_gazette.client import Change
from pyspark_gazette.fragments import FragmentRef
from pyspark_gazette.spark.options import ReadOptions
from pyspark_gazette.spark.read.committed import offset_of
from pyspark_gazette.spark.read.pack import PackedPartition


def create_many(client, prefix: str, n: int, *, length: int = 1 << 20, broker=None) -> list[str]:
    """``n`` journals labelled ``set=prefix``; on a real Gazette ``broker``, their store directories
    first and their primaries awaited (a Gazette journal serves nothing before its store is listed)."""
    from journalspecs import make_spec

    names = [f"{prefix}/j{i:04d}" for i in range(n)]
    specs = [make_spec(n, length=length, labels={"set": prefix}) for n in names]
    if getattr(broker, "create", None):  # a Backend (both_brokers)
        broker.create(client, specs)
    else:
        client.apply_in_batches([Change(expect_mod_revision=0, upsert=s) for s in specs])
    return names


def byte_offsets(offsets: dict) -> dict[str, int]:
    """A stream offset's byte offsets (its entries also carry the journals' creation revisions)."""
    return {j: offset_of(e) for j, e in offsets.items()}


def line(journal: str, i: int) -> bytes:
    return json.dumps({"journal": journal, "i": i}, separators=(",", ":")).encode() + b"\n"


def persisted_then_tail(client, name: str) -> None:
    """40 lines (past the 1 KiB fragment length, so the next append persists them), then one."""
    client.append(name, line(name, 0) * 40)
    client.append(name, line(name, 1))


def read_opts(broker, **options) -> ReadOptions:
    base = {"broker.address": broker.address, "store.fileRoot": broker.store_root}
    return ReadOptions.parse({**base, **options}, env={})


def planned(broker, schema, **options):
    from pyspark_gazette.spark.read.batch_scan import GazetteBatchReader

    return GazetteBatchReader(read_opts(broker, **options), schema).partitions()


def test_many_one_message_journals_read_in_few_partitions(spark, broker, client):
    names = create_many(client, "many", 120)
    for name in names:
        client.append(name, line(name, 0))
    df = reader(spark, broker, selector="set=many", minPartitions="1").load()
    rows = df.collect()
    assert sorted((r.journal, r.offset, r.value) for r in rows) == sorted(
        (n, 0, line(n, 0).decode().strip()) for n in names
    )
    # 120 pieces of (~35 bytes + the 256 KiB default open cost) in 128 MiB partitions: one.
    assert df.rdd.getNumPartitions() == 1
    # With Spark's 4 MiB open cost: 31 a partition.
    four = reader(spark, broker, selector="set=many", openCostInBytes="4m", minPartitions="1").load()
    assert four.rdd.getNumPartitions() == 4
    # Without minPartitions a batch read plans for the driver machine's cores, as Spark's file
    # sources plan for the default parallelism.
    from pyspark_gazette.spark.read.pack import default_parallelism

    cores = default_parallelism()
    spread = reader(spark, broker, selector="set=many").load()
    assert min(cores, 120) <= spread.rdd.getNumPartitions() <= cores + 1
    assert spread.count() == 120
    # minPartitions spreads them out again.
    assert reader(spark, broker, selector="set=many", minPartitions="10").load().rdd.getNumPartitions() >= 10


def test_the_same_offsets_plan_the_same_partitions(spark, broker, client):
    names = create_many(client, "det", 40, length=1024)
    for name in names:
        persisted_then_tail(client, name)
    assert broker.wait_persisted(30)
    ends = {n: client.list_fragments(n)[-1].spec.end for n in names}
    schema = reader(spark, broker, selector="set=det").load().schema
    opts = {
        "selector": "set=det",
        "endingOffsets": json.dumps(ends),
        "openCostInBytes": "1k",
        "maxPartitionBytes": "8k",
    }
    first = planned(broker, schema, **opts)
    for name in names[:5]:
        client.append(name, line(name, 2))  # more data after the planned ends
    assert first == planned(broker, schema, **opts)
    # Each journal is two pieces (its persisted fragment, 1,200 bytes, and its 30-byte tail), each
    # weighing 1 KiB more: two journals fit in 8 KiB.
    assert all(isinstance(p, PackedPartition) and len(p.journals) == 2 for p in first) and len(first) == 20
    # Each packed partition mixes direct fragment reads and broker-read tails.
    for p in first:
        kinds = {s.fragment is None for m in p.members for s in m.segments}
        assert kinds == {True, False}


@pytest.mark.both_brokers
def test_planning_takes_each_primarys_write_head_from_its_own_listing(broker, client, monkeypatch):
    """A read of many journals lists each one's fragments from its primary, whose write head is
    the end of that listing (a Gazette broker's write head is the end of its fragment index):
    no metadata Read is sent for it. Where another member answered the listing (here: the check
    forced to say so) the primary is asked, and the plan is the same."""
    from pyspark_gazette.client import list_apply
    from pyspark_gazette.spark.read import plan as plan_module
    from pyspark_gazette.spark.source import untyped_schema

    names = create_many(client, "prim", 6, broker=broker)
    for name in names:
        client.append(name, line(name, 0) + line(name, 1))  # live: the end is the write head
    asked: list[list[str]] = []
    route_heads = plan_module.route_heads

    def recorded(conns, journals, mode, *args, **kwargs):
        if mode is plan_module.HeadMode.PRIMARY:
            asked.append(list(journals))
        return route_heads(conns, journals, mode, *args, **kwargs)

    monkeypatch.setattr(plan_module, "route_heads", recorded)
    schema = untyped_schema(True, False)
    by_listing = planned(broker, schema, selector="set=prim")
    assert asked == [[]], "a journal its primary listed was asked for its write head again"
    monkeypatch.setattr(list_apply, "primary_answered", lambda header: False)
    asked.clear()
    by_read = planned(broker, schema, selector="set=prim")
    assert asked == [names]
    assert by_read == by_listing
    ends = {m.journal: max(s.end for s in m.segments) for p in by_listing for m in p.members}
    assert ends == {n: len(line(n, 0) + line(n, 1)) for n in names}


def test_tiny_and_huge_journals_tails_and_fragments_mixed(spark, broker, client, create_journal):
    names = create_many(client, "mixed", 30, length=1024)
    expected = []
    for name in names:
        persisted_then_tail(client, name)
        first, second = line(name, 0), line(name, 1)
        expected += [(name, k * len(first), first.decode().strip()) for k in range(40)]
        expected.append((name, 40 * len(first), second.decode().strip()))
    for big in ("mixed/big-a", "mixed/big-b"):
        create_journal(big, length=1024, labels={"set": "mixed"})
        expected += [(big, o, v.decode()) for o, v in fill(client, broker, big, batches=12, per_batch=40)]
    assert broker.wait_persisted(30)
    options = {"selector": "set=mixed", "maxPartitionBytes": "8k", "openCostInBytes": "256"}
    df = reader(spark, broker, **options).load()
    got = df.collect()
    assert sorted((r.journal, r.offset, r.value) for r in got) == sorted(expected)
    # Big journals are split as before; the small ones share partitions.
    parts = planned(broker, df.schema, **options)
    alone = [p for p in parts if not isinstance(p, PackedPartition)]
    assert {p.journal for p in alone} == {"mixed/big-a", "mixed/big-b"} and len(alone) >= 4
    packed = [p for p in parts if isinstance(p, PackedPartition)]
    in_packs = [j for p in packed for j in p.journals]
    assert sorted(j for j in in_packs if not j.startswith("mixed/big")) == names  # the big ones' short tails may join
    # Rows of one journal come out in offset order inside a partition.
    per_part = df.rdd.mapPartitions(lambda it: [[(r.journal, r.offset) for r in it]]).collect()
    for rows in per_part:
        for journal in {j for j, _ in rows}:
            offsets = [o for j, o in rows if j == journal]
            assert offsets == sorted(offsets)


@pytest.mark.parametrize("fail", [True, False])
def test_lost_fragment_in_a_packed_partition_names_its_journal(spark, broker, client, fail):
    names = create_many(client, f"loss{int(fail)}", 12, length=1024)
    for name in names:
        persisted_then_tail(client, name)
    assert broker.wait_persisted(30)
    victim = names[7]
    frag = FragmentRef.from_proto(client.list_fragments(victim)[0].spec)
    path = os.path.join(broker.store_root, "store", frag.content_path)
    assert os.path.exists(path), path
    r = reader(spark, broker, selector=f"set=loss{int(fail)}", failOnDataLoss=str(fail).lower(), minPartitions="1")
    df = r.load()  # planned before the file goes: the plan still has the fragment
    assert df.rdd.getNumPartitions() == 1
    os.remove(path)
    if fail:
        with pytest.raises(Exception, match=repr(victim)):
            df.collect()
        return
    rows = df.collect()
    assert sorted(r.journal for r in rows) == sorted([n for n in names for _ in range(41) if n != victim] + [victim])


def test_stream_over_many_journals_packs_deterministic_partitions(spark, broker, client, tmp_path):
    from pyspark_gazette.spark.read.stream import GazetteStreamReader

    names = create_many(client, "stm", 60)
    for name in names:
        client.append(name, ndjson(events(2)))
    df = (
        spark.readStream.format("gazette")
        .option("broker.address", broker.address)
        .option("store.fileRoot", broker.store_root)
        .option("selector", "set=stm")
        .option("startingOffsets", "earliest")
        .load()
    )
    q = (
        df.writeStream.format("memory")
        .queryName("many_stm")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    assert q.exception() is None, q.exception()
    got = spark.sql("SELECT journal, offset FROM many_stm").collect()
    second = len(ndjson(events(1)))
    assert sorted((r.journal, r.offset) for r in got) == sorted((n, o) for n in names for o in (0, second))

    sr = GazetteStreamReader(read_opts(broker, selector="set=stm", openCostInBytes="4m"), df.schema)
    start = {n: 0 for n in names}
    end = sr.latestOffset(start, sr.getDefaultReadLimit())
    first = sr.partitions(start, end)
    assert len(first) == 2 and all(isinstance(p, PackedPartition) for p in first)
    assert sr.latestOffset(end, sr.getDefaultReadLimit()) == end  # idle: Spark runs no batch
    for name in names[:10]:
        client.append(name, ndjson(events(1)))  # new data and a new layout after the batch's end
    assert sr.partitions(start, end) == first
    assert sr.partitions(end, end) == []


@pytest.mark.both_brokers
def test_stream_latest_offset_from_watched_write_heads(broker, client, create_journal, monkeypatch):
    """``watchWriteHeads``: ``latestOffset`` follows appends, new and deleted journals through the
    watcher; ``stop`` ends the watches."""
    import time

    import pyspark_gazette.spark.read.stream as stream_module
    from pyspark_gazette.spark.read.stream import GazetteStreamReader
    from pyspark_gazette.spark.source import untyped_schema

    names = [f"wh/j{i:02d}" for i in range(12)]
    for n in names:
        create_journal(n, labels={"set": "wh"})
        client.append(n, line(n, 0))
    base = {"broker.address": broker.address, "store.fileRoot": broker.store_root, "selector": "set=wh"}
    opts = ReadOptions.parse({**base, "watchWriteHeads": "true"}, streaming=True, env={})
    sr = GazetteStreamReader(opts, untyped_schema(True, False))
    limit = sr.getDefaultReadLimit()

    def eventually(expected: dict) -> None:
        deadline = time.monotonic() + 30
        while (got := byte_offsets(sr.latestOffset(start, limit))) != expected:
            assert time.monotonic() < deadline, f"latestOffset {got} != {expected}"
            time.sleep(0.05)

    listed: list[str] = []
    resolve = stream_module.resolve_journals

    def counted(*args, **kwargs):
        listed.append("List")
        return resolve(*args, **kwargs)

    monkeypatch.setattr(stream_module, "resolve_journals", counted)
    try:
        start = sr.initialOffset()  # latest: each journal's one line
        assert byte_offsets(start) == {n: len(line(n, 0)) for n in names}
        # The journals' listing is watched too: once it has a snapshot, triggers do not List.
        assert stream_module._list_watches[sr._token].wait(lambda got: len(got) == len(names), 30)
        listed.clear()
        assert sr.latestOffset(start, limit) == start  # idle
        watcher = stream_module._watchers[sr._token]
        assert watcher.watched() == set(names)
        head = client.append(names[3], line(names[3], 1)).end
        eventually({**byte_offsets(start), names[3]: head})
        create_journal("wh/late", labels={"set": "wh"})
        late = client.append("wh/late", line("wh/late", 0)).end
        eventually({**byte_offsets(start), names[3]: head, "wh/late": late})  # read from its start
        assert "wh/late" in watcher.watched()
        gone = next(j for j in client.list_journals("set=wh") if j.name == names[0])
        client.apply([Change(expect_mod_revision=gone.mod_revision, delete=names[0])])
        deadline = time.monotonic() + 30
        while names[0] in watcher.watched():
            sr.latestOffset(start, limit)
            assert time.monotonic() < deadline, "the deleted journal is still watched"
            time.sleep(0.05)
        assert listed == [], "a trigger listed the journals although their listing is watched"
    finally:
        sr.stop()
    assert sr._token not in stream_module._watchers and sr._token not in stream_module._list_watches


@pytest.mark.both_brokers
def test_a_stream_of_named_journals_watches_their_listing_by_name(broker, client, create_journal):
    """``watchWriteHeads`` with named journals: their listing is watched through a selector of
    their names (no other journal is listed), and a named journal deleted while the stream runs
    fails the trigger naming it, as an unwatched stream's List does."""
    import pyspark_gazette.spark.read.stream as stream_module
    from pyspark_gazette.errors import OptionError
    from pyspark_gazette.spark.read.stream import GazetteStreamReader
    from pyspark_gazette.spark.source import untyped_schema

    names = [f"wn/j{i}" for i in range(4)]
    for n in [*names, "wn/other"]:
        create_journal(n, labels={"set": "wn"})
        client.append(n, line(n, 0))
    base = {"broker.address": broker.address, "store.fileRoot": broker.store_root}
    opts = ReadOptions.parse({**base, "journals": ",".join(names), "watchWriteHeads": "true"}, streaming=True, env={})
    sr = GazetteStreamReader(opts, untyped_schema(True, False))
    limit = sr.getDefaultReadLimit()
    try:
        start = sr.initialOffset()
        watch = stream_module._list_watches[sr._token]
        assert {j.name for j in watch.wait(lambda got: len(got) == len(names), 30)} == set(names)
        head = client.append(names[1], line(names[1], 1)).end
        deadline = time.monotonic() + 30
        while byte_offsets(sr.latestOffset(start, limit)) != {**byte_offsets(start), names[1]: head}:
            assert time.monotonic() < deadline, "latestOffset never saw the append"
            time.sleep(0.05)
        gone = next(j for j in client.list_journals("set=wn") if j.name == names[2])
        client.apply([Change(expect_mod_revision=gone.mod_revision, delete=names[2])])
        assert watch.wait(lambda got: names[2] not in {j.name for j in got}, 30) is not None
        with pytest.raises(OptionError, match="wn/j2") as err:
            sr.latestOffset(start, limit)
        assert err.value.option == "journals"
    finally:
        sr.stop()
    assert sr._token not in stream_module._list_watches


@pytest.mark.both_brokers
def test_stream_watches_write_heads_by_default_from_128_journals(broker, client):
    """``watchWriteHeads=auto`` (the default): a stream over 128 journals watches their heads and
    follows appends through the watches; one over fewer, or with ``false``, sweeps every trigger."""
    import pyspark_gazette.spark.read.stream as stream_module
    from pyspark_gazette.spark.read.stream import WATCH_AUTO_JOURNALS, GazetteStreamReader
    from pyspark_gazette.spark.source import untyped_schema

    names = create_many(client, "auto", WATCH_AUTO_JOURNALS, broker=broker)
    base = {"broker.address": broker.address, "store.fileRoot": broker.store_root}
    schema = untyped_schema(True, False)

    def stream_reader(**options) -> GazetteStreamReader:
        return GazetteStreamReader(ReadOptions.parse({**base, **options}, streaming=True, env={}), schema)

    readers = {
        "auto": stream_reader(selector="set=auto"),
        "false": stream_reader(selector="set=auto", watchWriteHeads="false"),
        "few": stream_reader(journals=",".join(names[: WATCH_AUTO_JOURNALS - 1])),
    }
    try:
        starts = {k: sr.initialOffset() for k, sr in readers.items()}
        assert byte_offsets(starts["auto"]) == {n: 0 for n in names}
        for k, sr in readers.items():
            assert sr.latestOffset(starts[k], sr.getDefaultReadLimit()) == starts[k]
        assert stream_module._watchers[readers["auto"]._token].watched() == set(names)
        assert readers["false"]._token not in stream_module._watchers
        assert readers["few"]._token not in stream_module._watchers
        head = client.append(names[7], line(names[7], 0)).end
        sr = readers["auto"]
        deadline = time.monotonic() + 30
        want = {**byte_offsets(starts["auto"]), names[7]: head}
        while (got := byte_offsets(sr.latestOffset(starts["auto"], sr.getDefaultReadLimit()))) != want:
            assert time.monotonic() < deadline, f"latestOffset {got} never saw the append"
            time.sleep(0.02)
        # The sweeping readers see it at their next trigger.
        for k in ("false", "few"):
            end = readers[k].latestOffset(starts[k], readers[k].getDefaultReadLimit())
            assert byte_offsets(end) == {**byte_offsets(starts[k]), names[7]: head}
    finally:
        for sr in readers.values():
            sr.stop()
    assert not any(sr._token in stream_module._watchers for sr in readers.values())


@pytest.mark.both_brokers
def test_a_steady_stream_trigger_lists_the_journal_from_where_the_last_one_ended(broker, client, monkeypatch):
    """A trigger that starts where the last one ended lists the journal from the fragment that
    range ended in (ListFragments' page token), not from its first fragment; its partitions are
    those of a whole listing (tests/unit/test_stream_listing.py: one that does not reach back)."""
    from pyspark_gazette.spark.read import stream
    from pyspark_gazette.spark.read.arrow_output import untyped_schema
    from pyspark_gazette.spark.read.stream import GazetteStreamReader

    (name,) = create_many(client, "steady", 1, length=1024, broker=broker)
    for i in range(8):  # 8 appends of 40 lines: each rolls a fragment of its own
        client.append(name, line(name, i) * 40)
    client.append(name, line(name, 99))
    assert broker.wait_persisted(30)
    assert len(client.list_fragments(name)) >= 8
    sinces: list[int] = []
    real = stream.take_snapshot

    def recorded(*args, **kwargs):
        sinces.append(kwargs.get("since", 0))
        return real(*args, **kwargs)

    monkeypatch.setattr(stream, "take_snapshot", recorded)
    schema = untyped_schema(True, False)
    base = {"broker.address": broker.address, "store.fileRoot": broker.store_root, "journals": name}
    sr = GazetteStreamReader(ReadOptions.parse({**base, "startingOffsets": "earliest"}, streaming=True, env={}), schema)
    try:
        start = sr.initialOffset()
        end = sr.latestOffset(start, ReadAllAvailable())
        sr.partitions(start, end)
        assert sinces == [0]  # the first trigger lists the whole journal
        for i in range(3):
            client.append(name, line(name, 100 + i))
        tail = sr.latestOffset(end, ReadAllAvailable())
        got = sr.partitions(end, tail)
        assert sinces[1] > 0 and len(sinces) == 2, sinces
        fresh = GazetteStreamReader(sr.opts, schema)  # no earlier trigger: plans from a whole listing
        assert got == fresh.partitions(end, tail)
        assert sum(p.length for p in got) == offset_of(tail[name]) - offset_of(end[name])

    finally:
        sr.stop()
