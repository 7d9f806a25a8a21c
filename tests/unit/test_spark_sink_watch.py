"""The exactly-once sink's watch over committed spans (spark/write/watch.py), without a broker:
the listings are stood in for by the fragments the test hands ``_look_for``'s stand-in."""

from __future__ import annotations

import pytest

from pyspark_gazette.client.list_apply import ListedFragment
from pyspark_gazette.protocol import pb
from pyspark_gazette.spark.write import watch


def frag(begin: int, end: int, mod_time: int = 0) -> ListedFragment:
    return ListedFragment(pb.Fragment(journal="j", begin=begin, end=end, mod_time=mod_time))


def span(begin: int, end: int) -> watch.Span:
    return watch.Span(begin, end, batch=1, partition=0, at=0.0)


def test_covered_needs_every_offset_of_the_span():
    frags = [frag(0, 10, 1), frag(5, 20), frag(20, 30, 2)]
    assert watch._covered(span(3, 30), frags)
    assert not watch._covered(span(3, 31), frags)
    assert not watch._covered(span(3, 30), frags, persisted=True)  # [10, 20) is a spool
    assert watch._covered(span(20, 30), frags, persisted=True)
    assert not watch._covered(span(10, 25), [frag(0, 10), frag(12, 30)])  # a hole at [10, 12)
    assert watch._covered(span(7, 7), [])  # nothing to hold


@pytest.fixture
def listed(monkeypatch):
    """The fragments ``_look_for`` finds, per journal (a stand-in for the broker listings)."""
    found: dict[str, list[ListedFragment]] = {}
    watch._watched.clear()

    def look_for(client, journal, spans):
        frags = found.get(journal, [])
        missing = [s for s in spans if not watch._covered(s, frags)]
        keep = [s for s in spans if s not in missing and not watch._covered(s, frags, persisted=True)]
        return keep, missing

    monkeypatch.setattr(watch, "_look_for", look_for)
    monkeypatch.setattr(watch, "_client", lambda connection: None)
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
    assert [(s.begin, s.batch) for s in watch._watched["conn", "q", "j"].spans] == [(150, 1), (200, 2)]


def test_persisted_spans_are_forgotten_and_spooled_ones_kept(listed):
    watch.commit("conn", "q", 0, [(0, "j", 0, 100)])
    listed["j"] = [frag(0, 100)]
    watch.commit("conn", "q", 1, [(0, "j", 100, 150)])
    assert [s.begin for s in watch._watched["conn", "q", "j"].spans] == [0, 100]
    listed["j"] = [frag(0, 150, 7)]
    watch.commit("conn", "q", 2, [])
    assert watch._watched["conn", "q", "j"].spans == []


def test_a_write_head_that_went_back_is_reported(listed):
    watch.commit("conn", "q", 0, [(0, "j", 0, 100)])
    listed["j"] = [frag(0, 60, 5)]  # the journal started again at 60
    with pytest.raises(watch.CommittedDataLost) as e:
        watch.commit("conn", "q", 1, [(0, "j", 60, 90)])
    assert "micro-batch 1 appended at offset 60, below offset 100" in str(e.value)
    listed["j"] = [frag(0, 60, 5), frag(60, 120)]
    watch.commit("conn", "q", 2, [(0, "j", 90, 120)])  # reported once


def test_queries_and_journals_are_watched_apart(listed):
    watch.commit("conn", "q1", 0, [(0, "j", 100, 200)])
    listed["j"] = [frag(0, 200)]
    watch.commit("conn", "q2", 0, [(0, "j", 0, 100)])  # another query's earlier append: no alarm
    watch.commit("conn", "q1", 1, [(0, "k", 0, 10)])
    assert set(watch._watched) == {("conn", "q1", "j"), ("conn", "q2", "j"), ("conn", "q1", "k")}
