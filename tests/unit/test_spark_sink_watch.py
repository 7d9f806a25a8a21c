"""The exactly-once sink's watch over what it committed (spark/write/watch.py), without a broker:
the listings are stood in for by the fragments each test hands ``_look_for``'s stand-in."""

from __future__ import annotations

import pytest

from pyspark_gazette.client.list_apply import ListedFragment
from pyspark_gazette.protocol import pb
from pyspark_gazette.spark.write import watch


def frag(begin: int, end: int, mod_time: int = 0) -> ListedFragment:
    return ListedFragment(pb.Fragment(journal="j", begin=begin, end=end, mod_time=mod_time))


def test_holes_and_the_persisted_start():
    frags = [frag(0, 10, 1), frag(10, 20), frag(25, 30, 2)]
    assert watch.holes(frags, 3, 30) == [(20, 25)]
    assert watch.holes(frags, 3, 22) == [(20, 22)]
    assert watch.holes(frags, 25, 40) == [(30, 40)]
    assert watch.holes([], 5, 5) == []
    assert watch.persisted_to(frags, 3) == (10, 10)  # [10, 20) is a spool: the start stops there
    assert watch.persisted_to([frag(0, 10, 1), frag(10, 20, 1), frag(20, 40)], 3) == (20, 20)
    assert watch.persisted_to([frag(0, 10)], 3) == (3, 0)  # the listing goes on from the spool's begin


@pytest.fixture
def listed(monkeypatch):
    """The fragments ``_look_for`` finds, per journal (a stand-in for the broker listings)."""
    found: dict[str, list[ListedFragment]] = {}
    asked: list[tuple[str, int, int, int]] = []
    watch._watched.clear()

    def look_for(client, journal, low, high, token):
        asked.append((journal, low, high, token))
        frags = found.get(journal, [])
        return (*watch.persisted_to(frags, low), watch.holes(frags, low, high))

    monkeypatch.setattr(watch, "_look_for", look_for)
    monkeypatch.setattr(watch, "client", lambda connection: None)
    found["asked"] = asked  # type: ignore[assignment]
    yield found
    watch._watched.clear()


def test_a_lost_span_is_reported_once_naming_journal_offsets_and_batch(listed):
    watch.commit("conn", "q", 0, [(0, "j", 0, 100), (1, "j", 100, 150)])
    listed["j"] = [frag(0, 100, 5), frag(150, 150)]  # [100, 150) is in no fragment
    with pytest.raises(watch.CommittedDataLost) as e:
        watch.commit("conn", "q", 1, [(0, "j", 150, 200)])
    assert "journal 'j' lost offsets 100-150 that micro-batch 0 (partition 1) committed" in str(e.value)
    listed["j"] = [frag(0, 100, 5), frag(150, 250)]
    watch.commit("conn", "q", 2, [(0, "j", 200, 250)])  # reported once: the query can go on
    assert listed["asked"][-1] == ("j", 150, 200, 0)


def test_a_hole_between_micro_batches_is_reported(listed):
    """A retried append refused as already written names no span: its content lies between."""
    watch.commit("conn", "q", 0, [(0, "j", 0, 100)])
    listed["j"] = [frag(0, 100), frag(100, 150)]
    watch.commit("conn", "q", 1, [])  # the journal was found already written: [100, 150) is its
    listed["j"] = [frag(0, 100, 5), frag(150, 200)]  # and then gone
    watch.commit("conn", "q", 2, [(0, "j", 150, 200)])
    with pytest.raises(watch.CommittedDataLost) as e:
        watch.commit("conn", "q", 3, [(0, "j", 200, 220)])
    assert "journal 'j' lost offsets 100-150 between micro-batches 0 and 2" in str(e.value)


def test_the_start_moves_up_over_persisted_fragments(listed):
    watch.commit("conn", "q", 0, [(0, "j", 0, 100)])
    listed["j"] = [frag(0, 100)]
    watch.commit("conn", "q", 1, [(0, "j", 100, 150)])
    assert watch._watched["conn", "q", "j"].low == 0
    listed["j"] = [frag(0, 120, 7), frag(120, 150)]
    watch.commit("conn", "q", 2, [])
    state = watch._watched["conn", "q", "j"]
    assert (state.low, state.token, [s.batch for s in state.spans]) == (120, 120, [1])
    watch.commit("conn", "q", 3, [])
    assert listed["asked"][-1] == ("j", 120, 150, 120)


def test_a_write_head_that_went_back_is_reported_once(listed):
    watch.commit("conn", "q", 0, [(0, "j", 0, 100)])
    listed["j"] = [frag(0, 60, 5)]  # the journal started again at 60
    with pytest.raises(watch.CommittedDataLost) as e:
        watch.commit("conn", "q", 1, [(0, "j", 60, 90)])
    assert "micro-batch 1 appended at offset 60, below offset 100" in str(e.value)
    listed["j"] = [frag(0, 60, 5), frag(60, 120)]
    watch.commit("conn", "q", 2, [(0, "j", 90, 120)])


def test_queries_and_journals_are_watched_apart(listed):
    watch.commit("conn", "q1", 0, [(0, "j", 100, 200)])
    listed["j"] = [frag(0, 200)]
    watch.commit("conn", "q2", 0, [(0, "j", 0, 100)])  # another query's earlier append: no alarm
    watch.commit("conn", "q1", 1, [(0, "k", 0, 10)])
    assert set(watch._watched) == {("conn", "q1", "j"), ("conn", "q2", "j"), ("conn", "q1", "k")}
