"""How maxBytesPerTrigger is shared across journals (spark/stream.share_bytes)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pyspark_gazette.spark.stream import share_bytes


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
