"""A member's stale write head is not a re-created journal (spark/read/stream.py:
GazetteStreamReader._confirmed_below). Unit test of the one module: the head sources are stubbed.

Gazette answers a write-head Read from any route member, with the end of that member's fragment
index: a broker that restarted and rejoined the route reports only what was persisted until the
primary's next append reaches it. Only when every member (heads.route_heads with HeadMode.CONFIRMED) reports a head
below the stream's offset was the journal deleted and re-created."""

from __future__ import annotations

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from pyspark_gazette.spark.options import ReadOptions
from pyspark_gazette.spark.read import stream
from pyspark_gazette.spark.read.plan import DataLoss

ADDR = {"broker.address": "http://127.0.0.1:1"}


class _Conns:
    pass


class _Client:
    conns = _Conns()


def reader(monkeypatch, member_heads: dict[str, int], confirmed: dict[str, int | None], **options):
    r = stream.GazetteStreamReader(
        ReadOptions.parse({**ADDR, "journals": ",".join(member_heads), **options}, env={}), None
    )
    asked: list[str] = []

    def route_heads(conns, names, mode=stream.HeadMode.MEMBER, window=0):
        assert conns is _Client.conns and mode is stream.HeadMode.CONFIRMED
        asked.extend(names)
        return {n: h for n in names if (h := confirmed[n]) is not None}

    monkeypatch.setattr(r, "_client", lambda: _Client())
    monkeypatch.setattr(r, "_heads", lambda client, fresh=False: dict(member_heads))
    monkeypatch.setattr(stream, "route_heads", route_heads)
    return r, asked


def test_a_stale_member_head_waits_and_reads_on_where_the_members_vouch(monkeypatch):
    # acme/one is reported below the stream's offset by one member; the route's largest head is past it.
    r, asked = reader(monkeypatch, {"acme/one": 6270, "acme/two": 900}, {"acme/one": 9000, "acme/two": None})
    end = r.latestOffset({"acme/one": 7870, "acme/two": 500}, ReadAllAvailable())
    assert asked == ["acme/one"]  # only the journal whose head is below its offset is asked again
    assert end == {"acme/one": 9000, "acme/two": 900}


def test_no_member_answering_keeps_the_offset(monkeypatch):
    r, _ = reader(monkeypatch, {"acme/one": 6270}, {"acme/one": None})
    assert r.latestOffset({"acme/one": 7870}, ReadAllAvailable()) == {"acme/one": 7870}


def test_every_member_below_is_a_recreated_journal(monkeypatch):
    r, asked = reader(monkeypatch, {"acme/one": 100}, {"acme/one": 120})
    with pytest.raises(DataLoss, match="journal 'acme/one': its write head 120 is below the stream's offset 7870"):
        r.latestOffset({"acme/one": 7870}, ReadAllAvailable())
    assert asked == ["acme/one"]


def test_a_recreated_journal_without_fail_on_data_loss_moves_to_its_start(monkeypatch):
    r, _ = reader(monkeypatch, {"acme/one": 100}, {"acme/one": 120}, failOnDataLoss="false")
    monkeypatch.setattr(stream.GazetteStreamReader, "_earliest", staticmethod(lambda client, journal: 0))
    assert r.latestOffset({"acme/one": 7870}, ReadAllAvailable()) == {"acme/one": 0}


def test_available_now_asks_every_member_and_a_stale_head_stays_within_its_end(monkeypatch):
    r, _ = reader(monkeypatch, {"acme/one": 6270}, {"acme/one": 9000})
    swept: list = []

    def route_heads(conns, names, mode=stream.HeadMode.MEMBER, window=0):
        swept.append(mode)
        return {n: 8000 for n in names}

    monkeypatch.setattr(stream, "route_heads", route_heads)
    monkeypatch.setattr(r, "_heads", lambda client, fresh=False: r._live_heads(client, ["acme/one"], fresh))
    r.prepareForTriggerAvailableNow()
    assert swept == [stream.HeadMode.EVERY_MEMBER] and r._target == {"acme/one": 8000}
    monkeypatch.setattr(r, "_heads", lambda client, fresh=False: {"acme/one": 6270})
    assert r.latestOffset({"acme/one": 7870}, ReadAllAvailable()) == {"acme/one": 8000}
