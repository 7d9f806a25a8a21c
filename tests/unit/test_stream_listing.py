"""A steady stream trigger lists a journal from where the last one ended (spark/read/stream.py:
GazetteStreamReader._hold_at_holes, take_snapshot's ``since``). Unit test of the one module:
write heads and listings are stubbed, the listing a cover set served from a page token."""

from __future__ import annotations

from pyspark.sql.streaming.datasource import ReadAllAvailable

from pyspark_gazette.client import ListedFragment
from pyspark_gazette.client.settle import Settled
from pyspark_gazette.protocol import pb
from pyspark_gazette.spark.options import ReadOptions
from pyspark_gazette.spark.read import stream
from pyspark_gazette.spark.read.committed import offset_of
from pyspark_gazette.spark.read.plan import Snapshot

J = "acme/one"


class _Info:
    name = J


class _Client:
    conns = None


def reader(monkeypatch, spans: list[tuple[int, int]]):
    """A stream reader of journal J whose fragments are ``spans`` (a list the test may extend),
    and the ``since`` of each listing it takes."""
    r = stream.GazetteStreamReader(ReadOptions.parse({"broker.address": "http://127.0.0.1:1", "journals": J}), None)
    sinces: list[int] = []

    def fake_heads(client, fresh=False):
        r._infos = {J: _Info()}
        return {J: spans[-1][1]}

    def take_snapshot(client, info, opts, need=0, ask_primary=True, since=0):
        sinces.append(since)
        listed = tuple(ListedFragment(pb.Fragment(journal=J, begin=b, end=e)) for b, e in spans if b >= since)
        return Snapshot(info, None, listed, need, settled=Settled(listed, need))

    monkeypatch.setattr(r, "_client", lambda: _Client())
    monkeypatch.setattr(r, "_heads", fake_heads)
    monkeypatch.setattr(stream, "take_snapshot", take_snapshot)
    return r, sinces


def latest(r, start: int) -> int:
    return offset_of(r.latestOffset({J: start}, ReadAllAvailable())[J])


def test_a_steady_trigger_lists_from_the_fragment_the_last_range_ended_in(monkeypatch):
    spans = [(0, 400), (400, 900), (900, 1000)]
    r, sinces = reader(monkeypatch, spans)
    assert latest(r, 0) == 1000 and sinces == [0]  # the first trigger: the whole journal
    spans.append((1000, 1200))
    assert latest(r, 1000) == 1200 and sinces == [0, 900]  # from the fragment [900, 1000)
    spans.append((1200, 1300))
    assert latest(r, 1200) == 1300 and sinces[-1] == 1000  # the range ended at the end of [1000, 1200)


def test_a_listing_that_does_not_reach_back_to_the_start_is_followed_by_a_whole_one(monkeypatch):
    spans = [(0, 400), (400, 900), (900, 1000)]
    r, sinces = reader(monkeypatch, spans)
    assert latest(r, 0) == 1000
    spans.append((1000, 1200))
    r._listed_from[J] = 950  # no fragment begins in [950, 960]: the listing from 950 starts at 1000
    assert latest(r, 960) == 1200 and sinces[1:] == [950, 0]
    r._listed_from[J] = 1100  # after the start: not used
    sinces.clear()
    assert latest(r, 1000) == 1200 and sinces == [0]


def test_a_read_committed_stream_lists_the_whole_journal(monkeypatch):
    spans = [(0, 400), (400, 900)]
    r, sinces = reader(monkeypatch, spans)
    r.opts = ReadOptions.parse({"broker.address": "http://127.0.0.1:1", "journals": J, "readCommitted": "true"})
    monkeypatch.setattr(r, "_with_state", lambda client, origin, end: end)
    latest(r, 0)
    spans.append((900, 1000))
    latest(r, 900)
    assert sinces == [0, 0]
