"""How maxBytesPerTrigger is shared across journals (spark/read/stream.py: share_bytes)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pyspark_gazette.message import NDJSON, PROTOBUF_FIXED
from pyspark_gazette.spark.read.stream import share_bytes


def test_everything_fits():
    assert share_bytes({"a": 10, "b": 0, "c": 5}, 100) == {"a": 10, "c": 5}


def test_small_journals_are_not_starved_and_the_rest_follows_backlog():
    alloc = share_bytes({"big": 1_000_000, "small": 300, "mid": 100_000}, 10_000)
    assert alloc["small"] == 300  # its whole backlog fits in the per-journal floor
    assert alloc["big"] > alloc["mid"] > alloc["small"]
    assert sum(alloc.values()) <= 10_000


@given(
    st.dictionaries(st.text(min_size=1, max_size=3), st.integers(min_value=0, max_value=10**9), max_size=8),
    st.integers(min_value=1, max_value=10**8),
)
def test_limits_are_honoured_and_every_waiting_journal_progresses(backlogs, limit):
    alloc = share_bytes(backlogs, limit)
    waiting = {j for j, b in backlogs.items() if b > 0}
    assert set(alloc) == waiting
    assert all(0 <= alloc[j] <= backlogs[j] for j in alloc)
    if sum(backlogs.values()) > limit and limit >= 2 * len(waiting):
        assert sum(alloc.values()) <= limit
        assert all(alloc[j] > 0 for j in waiting)


def test_stream_partitions_depend_only_on_offsets_not_fragment_layout():
    from pyspark_gazette.fragments import FragmentRef
    from pyspark_gazette.protocol import pb
    from pyspark_gazette.spark.read.plan import Segment
    from pyspark_gazette.spark.read.stream import aligned_partitions

    def ref(b, e):
        return FragmentRef("j/x/y", b, e, "0" * 40, pb.NONE, "file:///s/", 1)

    # The same range [100, 1000) as one local tail, then as persisted fragments plus a tail.
    before = [Segment("j/x/y", 100, 1000, None)]
    after = [
        Segment("j/x/y", 100, 450, ref(0, 450), boundary=False),
        Segment("j/x/y", 450, 800, ref(450, 800)),
        Segment("j/x/y", 800, 1000, None),
    ]
    a = aligned_partitions("j/x/y", NDJSON, 100, 1000, before, 256, 3)
    b = aligned_partitions("j/x/y", NDJSON, 100, 1000, after, 256, 3)
    assert [p.index for p in a] == [p.index for p in b] == [3, 4, 5, 6]

    def span(p):
        return (p.segments[0].begin, p.segments[-1].end)

    assert [span(p) for p in a] == [span(p) for p in b] == [(100, 256), (256, 512), (512, 768), (768, 1000)]
    # protobuf-fixed is never split inside a journal's range.
    assert len(aligned_partitions("j/x/y", PROTOBUF_FIXED, 100, 1000, after, 256, 0)) == 1
