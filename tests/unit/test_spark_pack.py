"""Packing of small journal pieces into partitions (spark/read/pack.py), without a broker."""

from __future__ import annotations

import pickle

import pytest

from pyspark_gazette.errors import OptionError
from pyspark_gazette.message import NDJSON
from pyspark_gazette.spark.options import ReadOptions
from pyspark_gazette.spark.read.pack import PackedPartition, pack
from pyspark_gazette.spark.read.plan import GazettePartition, Segment

KIB = 1 << 10


def opts(**options: str) -> ReadOptions:
    return ReadOptions.parse({"broker.address": "http://127.0.0.1:1", "journals": "a/b/c", **options}, env={})


def piece(journal: str, begin: int, end: int) -> GazettePartition:
    return GazettePartition(0, journal, NDJSON, (Segment(journal, begin, end),))


def members(part) -> list[GazettePartition]:
    return list(part.members) if isinstance(part, PackedPartition) else [part]


def test_options_parse_and_default():
    assert opts().open_cost_bytes == 256 << 10 and opts().min_partitions is None
    o = opts(openCostInBytes="1k", minPartitions="3")
    assert (o.open_cost_bytes, o.min_partitions) == (1024, 3)
    for key, value in (("openCostInBytes", "0"), ("minPartitions", "0"), ("minPartitions", "many")):
        with pytest.raises(OptionError, match=key):
            opts(**{key: value})


def test_a_thousand_tiny_journals_pack_like_spark_packs_small_files():
    pieces = [piece(f"many/j{i:04d}", 0, 60) for i in range(1000)]
    parts = pack(pieces, opts(openCostInBytes="4m"))
    # 128 MiB partitions of (60 bytes + 4 MiB open cost) pieces: 31 a partition, as Spark packs files.
    assert [len(members(p)) for p in parts] == [31] * 32 + [8]
    # The default open cost, 256 KiB: 511 a partition.
    assert [len(members(p)) for p in pack(pieces, opts())] == [511, 489]
    assert [p.index for p in parts] == list(range(len(parts)))
    assert [m for p in parts for m in members(p)] == pieces  # order kept, nothing lost or repeated
    assert all(isinstance(p, PackedPartition) for p in parts)
    assert parts[0].journals == tuple(f"many/j{i:04d}" for i in range(31))


def test_packing_is_deterministic_and_pickles():
    pieces = [piece(f"d/j{i:03d}", 0, (i * 37) % 500 + 1) for i in range(300)]
    o = opts(maxPartitionBytes="8k", openCostInBytes="1k")
    first, second = pack(pieces, o), pack(list(pieces), o)
    assert first == second
    assert pickle.loads(pickle.dumps(first)) == first


def test_partitions_stay_within_the_byte_limit():
    o = opts(maxPartitionBytes="10k", openCostInBytes="1k")
    pieces = [piece(f"lim/j{i:03d}", 0, (i * 131) % 3000 + 1) for i in range(200)]
    for p in pack(pieces, o):
        ms = members(p)
        weight = sum(m.length + 1024 for m in ms)
        assert len(ms) == 1 or weight <= 10 * KIB


def test_tiny_and_huge_journals_together():
    o = opts(maxPartitionBytes="64k", openCostInBytes="4k")
    tiny = [piece(f"mix/a{i:02d}", 0, 100) for i in range(20)]
    huge = [piece("mix/huge", b, b + 64 * KIB) for b in range(0, 256 * KIB, 64 * KIB)]
    more = [piece(f"mix/z{i:02d}", 0, 100) for i in range(20)]
    parts = pack(tiny + huge + more, o)
    alone = [p for p in parts if not isinstance(p, PackedPartition)]
    # Each piece of the huge journal is a partition of its own; the tiny ones share.
    assert [(p.journal, p.segments[0].begin) for p in alone] == [("mix/huge", b) for b in range(0, 256 * KIB, 64 * KIB)]
    packed = [p for p in parts if isinstance(p, PackedPartition)]
    assert sum(len(p.members) for p in packed) == 40 and len(packed) <= 4
    assert [p.index for p in parts] == list(range(len(parts)))


def test_min_partitions_spreads_a_small_read():
    pieces = [piece(f"min/j{i:02d}", 0, 100) for i in range(20)]
    assert len(pack(pieces, opts())) == 1
    spread = pack(pieces, opts(minPartitions="4"))
    assert len(spread) >= 4 and sum(len(members(p)) for p in spread) == 20


def test_weights_not_content_decide_the_packing():
    o = opts(maxPartitionBytes="8k", openCostInBytes="1k")
    full = [piece(f"w/j{i}", 0, 3000) for i in range(6)]
    # The same offset spans with some content missing (skipped data loss): same grouping.
    holey = [GazettePartition(0, p.journal, p.framing, () if i % 2 else p.segments) for i, p in enumerate(full)]
    weights = [3000] * 6
    shape = [[m.journal for m in members(p)] for p in pack(full, o, weights)]
    assert shape == [[m.journal for m in members(p)] for p in pack(holey, o, weights)]
    assert shape == [["w/j0", "w/j1"], ["w/j2", "w/j3"], ["w/j4", "w/j5"]]


# -- bytes per core (issue 24) ---------------------------------------------------------------

MIB = 1 << 20


def fragments_journal(n: int, size: int, tail: int = 0) -> GazettePartition:
    """One journal's partition as plan() makes it: ``n`` persisted fragments (+ a broker tail)."""
    from pyspark_gazette.fragments import FragmentRef

    segs = [
        Segment("big/j", i * size, (i + 1) * size, FragmentRef("big/j", i * size, (i + 1) * size, "0" * 40, 1))
        for i in range(n)
    ]
    if tail:
        segs.append(Segment("big/j", n * size, n * size + tail))
    return GazettePartition(0, "big/j", NDJSON, tuple(segs))


def test_a_large_journal_is_split_over_the_cores_along_fragments():
    from pyspark_gazette.spark.read.pack import split

    part = fragments_journal(13, 8 * MIB)  # 104 MiB: one 128 MiB partition as planned
    parts = pack(split([part], opts(minPartitions="2")), opts(minPartitions="2"))
    assert [len(p.segments) for p in parts] == [6, 7]  # two about equal halves, for two cores
    assert [s for p in parts for s in p.segments] == list(part.segments)  # every fragment once, in order
    three = split([part], opts(minPartitions="3"))
    assert [len(p.segments) for p in three] == [4, 5, 4]
    assert [p.index for p in parts] == list(range(len(parts)))
    # Without a parallelism nothing is split (streams plan this way).
    assert len(pack(split([part], opts()), opts())) == 1


def test_a_journal_planned_in_several_partitions_is_split_as_one_range():
    """plan() cuts a journal at maxPartitionBytes; split() then cuts the journal, not each of
    those partitions: 200 MiB on 2 cores is two tasks of 100 MiB, not 64 + 64 + 72 MiB."""
    from pyspark_gazette.spark.read.pack import split

    whole = fragments_journal(25, 8 * MIB)  # 200 MiB
    planned = [
        GazettePartition(0, whole.journal, whole.framing, whole.segments[:16]),  # 128 MiB
        GazettePartition(1, whole.journal, whole.framing, whole.segments[16:]),
    ]
    parts = split(planned, opts(minPartitions="2"))
    assert [len(p.segments) for p in parts] == [12, 13]
    assert [s for p in parts for s in p.segments] == list(whole.segments)
    assert [p.index for p in parts] == [0, 1]
    # A target at maxPartitionBytes leaves the planned partitions as they are.
    assert split(planned, opts(minPartitions="1")) == planned
    # Another journal's partitions are cut on their own.
    other = GazettePartition(2, "big/k", whole.framing, (Segment("big/k", 0, 8 * MIB),))
    mixed = split([*planned, other], opts(minPartitions="2"))
    assert [(p.journal, len(p.segments)) for p in mixed] == [("big/j", 12), ("big/j", 13), ("big/k", 1)]


def test_a_broker_tail_is_cut_at_the_target_and_committed_reads_stay_whole():
    from pyspark_gazette.spark.read.pack import split

    part = fragments_journal(1, 4 * MIB, tail=60 * MIB)
    parts = split([part], opts(minPartitions="4"))
    assert len(parts) >= 4
    assert sum(p.length for p in parts) == part.length
    starts = [s.begin for p in parts for s in p.segments]
    assert starts == sorted(starts) and starts[0] == 0
    assert all(s.boundary is False for p in parts[2:] for s in p.segments[:1])  # cut inside the tail
    assert split([part], opts(minPartitions="4", readCommitted="true")) == [part]


def test_batch_reads_plan_for_the_cores_without_min_partitions(monkeypatch):
    import dataclasses

    from pyspark_gazette.spark.read import batch_scan
    from pyspark_gazette.spark.read import pack as pack_module

    class NoClient:  # planning without a broker: plan() is replaced below
        def __init__(self, config):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    part = fragments_journal(13, 8 * MIB)
    monkeypatch.setattr(pack_module, "default_parallelism", lambda: 4)
    monkeypatch.setattr(batch_scan, "plan", lambda client, infos, o: ([part], {}))
    monkeypatch.setattr(batch_scan, "resolve_journals", lambda *a, **k: [])
    monkeypatch.setattr(batch_scan, "JournalClient", NoClient)
    four = batch_scan.GazetteBatchReader(opts(), None).partitions()
    assert len(four) >= 4
    one = batch_scan.GazetteBatchReader(dataclasses.replace(opts(), min_partitions=1), None).partitions()
    assert len(one) == 1
