"""Packed partitions prefetch the small live tails of many journals (spark/read/pack.py
``_Prefetch``): the same rows as the threaded reads, and the usual read wherever the answer is not
plain. Both brokers (the ``backend`` fixture), the executor read path in this process."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StructField, StructType

import pyspark_gazette.spark.read.pack as pack_module
from journalspecs import make_spec
from pyspark_gazette.client import Change
from pyspark_gazette.errors import JournalNotFoundError
from pyspark_gazette.message import LINES
from pyspark_gazette.spark.options import ReadOptions
from pyspark_gazette.spark.read.batch_scan import GazetteBatchReader, read_partition
from pyspark_gazette.spark.read.pack import PackedPartition
from pyspark_gazette.spark.read.plan import GazettePartition, Segment
from pyspark_gazette.spark.source import untyped_schema

SCHEMA = untyped_schema(True, False)


@pytest.fixture
def client(backend):
    with backend.client() as c:
        yield c


@pytest.fixture
def prefetches(monkeypatch):
    """Counts the prefetches whose answer was used, and those that fell back."""
    counts = {"used": 0, "fell back": 0}
    content = pack_module._Prefetch._content

    def counted(self):
        got = content(self)
        counts["used" if got is not None else "fell back"] += 1
        return got

    monkeypatch.setattr(pack_module._Prefetch, "_content", counted)
    return counts


def create(backend, client, names, labels=None):
    backend.create(client, [make_spec(n, store="", labels=labels or {}) for n in names])


def opts(backend, **options) -> ReadOptions:
    return ReadOptions.parse(
        {"broker.address": backend.address, "store.fileRoot": backend.file_root, **options}, env={}
    )


def rows(parts, o) -> list[tuple[str, int, str]]:
    out = []
    for p in parts:
        for b in read_partition(p, o, SCHEMA):
            cols = (b.column(c).to_pylist() for c in ("journal", "offset", "value"))
            out += zip(*cols, strict=True)
    return out


def test_packed_live_tails_are_prefetched_and_read_the_same(backend, client, prefetches, monkeypatch):
    names = [f"prefetch/j{i:02d}" for i in range(40)]
    create(backend, client, names, labels={"set": "prefetch"})
    expected = []
    for i, n in enumerate(names):
        for k in range(1 + i % 3):
            body = b'{"j":%d,"k":%d}\n' % (i, k)
            expected.append((n, client.append(n, body).begin, body.decode().strip()))
    o = opts(backend, selector="set=prefetch", minPartitions="1")
    parts = GazetteBatchReader(o, SCHEMA).partitions()
    assert len(parts) == 1 and isinstance(parts[0], PackedPartition)
    got = rows(parts, o)
    assert sorted(got) == sorted(expected)
    assert [r for r in got if r[0] == names[2]] == [r for r in expected if r[0] == names[2]]  # in order
    assert prefetches == {"used": len(names), "fell back": 0}
    # Typed: one decoder serves the partition's prefetched pieces.
    typed_schema = StructType([StructField("j", LongType()), StructField("k", LongType())])
    typed = [b for p in parts for b in read_partition(p, o, typed_schema)]
    assert sorted(
        zip(*(pa.concat_arrays([b.column(c) for b in typed]).to_pylist() for c in "jk"), strict=True)
    ) == sorted((i, k) for i in range(len(names)) for k in range(1 + i % 3))
    # The same reads without prefetching (every piece through the thread pool).
    monkeypatch.setattr(pack_module, "PREFETCH_BYTES", 0)
    assert rows(parts, o) == got
    assert [b.to_pylist() for p in parts for b in read_partition(p, o, typed_schema)] == [b.to_pylist() for b in typed]
    assert prefetches["used"] == 2 * len(names)


def test_a_prefetch_without_a_plain_answer_reads_the_usual_way(backend, client, prefetches):
    names = ["prefetch/cut", "prefetch/whole", "prefetch/gone"]
    create(backend, client, names)
    client.append(names[0], b"aaaa\nbbbb\n")
    client.append(names[1], b"cccc\n")
    client.append(names[2], b"dddd\n")
    o = opts(backend, journals=",".join(names))

    def piece(journal: str, begin: int, end: int) -> GazettePartition:
        return GazettePartition(0, journal, LINES, (Segment(journal, begin, end),))

    # [0, 7) ends inside "bbbb\n": messages beginning before 7 are read whole, past the cut.
    part = PackedPartition(0, (piece(names[0], 0, 7), piece(names[1], 0, 5)))
    assert rows([part], o) == [(names[0], 0, "aaaa"), (names[0], 5, "bbbb"), (names[1], 0, "cccc")]
    assert prefetches == {"used": 1, "fell back": 1}
    # A journal deleted after planning: the usual read's error, naming the journal.
    gone = next(j for j in client.list_journals("") if j.name == names[2])
    client.apply([Change(expect_mod_revision=gone.mod_revision, delete=names[2])])
    part = PackedPartition(0, (piece(names[1], 0, 5), piece(names[2], 0, 5)))
    with pytest.raises(JournalNotFoundError) as ei:
        rows([part], o)
    assert names[2] in str(ei.value)
