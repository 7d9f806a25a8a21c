"""A member's stale write head is not a re-created journal (spark/read/stream.py:
GazetteStreamReader._confirmed_below). Unit test of the one module: the head sources are stubbed.

Gazette answers a write-head Read from any route member, with the end of that member's fragment
index: a broker that restarted and rejoined the route reports only what was persisted until the
primary's next append reaches it. Only when every member (heads.route_heads with
HeadMode.CONFIRMED) reports a head below the stream's offset was the journal deleted and re-created.

Where the broker reports each journal's Etcd creation revision (List's ``create_revision``), the
stream's offsets carry it, and a journal listed with another one was deleted and re-created
whatever its write head; a head below the offset of a journal with the same creation revision is
content lost before it was persisted, not a re-created journal."""

from __future__ import annotations

import types

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from journalspecs import make_spec
from pyspark_gazette.spark.options import ReadOptions
from pyspark_gazette.spark.read import stream
from pyspark_gazette.spark.read.plan import DataLoss

ADDR = {"broker.address": "http://127.0.0.1:1"}


class _Conns:
    pass


class _Client:
    conns = _Conns()


def reader(
    monkeypatch,
    member_heads: dict[str, int],
    confirmed: dict[str, int | None],
    created: dict[str, int] | None = None,
    **options,
):
    """A stream reader whose write heads are ``member_heads`` (one member's), ``confirmed`` those of
    every member, and ``created`` the journals' creation revisions as listed (none: an older broker)."""
    r = stream.GazetteStreamReader(
        ReadOptions.parse({**ADDR, "journals": ",".join(member_heads), **options}, env={}), None
    )
    asked: list[str] = []

    def route_heads(conns, names, mode=stream.HeadMode.MEMBER, window=0):
        assert conns is _Client.conns and mode is stream.HeadMode.CONFIRMED
        asked.extend(names)
        return {n: h for n in names if (h := confirmed[n]) is not None}

    def heads(client, fresh=False):
        r._created = dict(created or {})
        return dict(member_heads)

    monkeypatch.setattr(r, "_client", lambda: _Client())
    monkeypatch.setattr(r, "_heads", heads)
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


def test_another_creation_revision_is_a_recreated_journal_whatever_its_head(monkeypatch):
    # The new journal's head (9000) passed the stream's offset: offsets alone cannot tell.
    r, asked = reader(monkeypatch, {"acme/one": 9000}, {"acme/one": 9000}, created={"acme/one": 41})
    with pytest.raises(DataLoss, match="created at Etcd revision 41, not 7 .* deleted and re-created"):
        r.latestOffset({"acme/one": {"offset": 7870, "created": 7}}, ReadAllAvailable())
    assert asked == []  # Gazette's own record decides: no member is asked


def test_a_recreated_journal_moves_to_its_start_tied_to_its_new_creation_revision(monkeypatch):
    r, _ = reader(monkeypatch, {"acme/one": 9000}, {}, created={"acme/one": 41}, failOnDataLoss="false")
    monkeypatch.setattr(stream.GazetteStreamReader, "_earliest", staticmethod(lambda client, journal: 0))
    end = r.latestOffset({"acme/one": {"offset": 7870, "created": 7}}, ReadAllAvailable())
    assert end == {"acme/one": {"offset": 0, "created": 41}}
    # The next trigger reads the new journal from its start.
    assert r.latestOffset(end, ReadAllAvailable()) == {"acme/one": {"offset": 9000, "created": 41}}


def test_offsets_carry_the_creation_revision_and_an_unchanged_one_reads_on(monkeypatch):
    r, asked = reader(monkeypatch, {"acme/one": 9000, "acme/two": 900}, {}, created={"acme/one": 7, "acme/two": 8})
    # An offset of an older checkpoint (no revision) is tied to the journal's on the next batch.
    end = r.latestOffset({"acme/one": {"offset": 7870, "created": 7}, "acme/two": 500}, ReadAllAvailable())
    assert end == {"acme/one": {"offset": 9000, "created": 7}, "acme/two": {"offset": 900, "created": 8}}
    assert asked == []


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def lost_content_reader(monkeypatch, clock, held=False, **options):
    """acme/one: every member reports 6000, below the stream's offset 7870, its creation revision
    unchanged; a store refresh every 5 s; the store holds [6000, 7870) when ``held``."""
    r, asked = reader(monkeypatch, {"acme/one": 100}, {"acme/one": 6000}, created={"acme/one": 7}, **options)
    info = types.SimpleNamespace(name="acme/one", spec=make_spec("acme/one", refresh_seconds=5))
    monkeypatch.setattr(r, "_journals", lambda client: [info])
    monkeypatch.setattr(stream, "store_holds", lambda journal, stores, begin, end, opts: held)
    monkeypatch.setattr(stream.time, "monotonic", clock)
    return r, asked


AT = {"acme/one": {"offset": 7870, "created": 7}}


def test_a_head_below_the_offset_with_the_same_creation_revision_is_lost_content_after_a_refresh(monkeypatch):
    clock = Clock()
    r, asked = lost_content_reader(monkeypatch, clock)
    # A broker that took the journal in a hand-off lists the leaving broker's last fragments at its
    # next store refresh: the stream waits at its offset for a refresh interval and some slack.
    assert r.latestOffset(AT, ReadAllAvailable()) == AT
    assert asked == ["acme/one"]  # every member was asked first, as for a stale member
    clock.now += 9
    assert r.latestOffset(AT, ReadAllAvailable()) == AT
    clock.now += 2  # past 5 s + REFRESH_SLACK: lost
    with pytest.raises(DataLoss, match="write head 6000 went back below the stream's offset 7870 .* not re-created"):
        r.latestOffset(AT, ReadAllAvailable())
    r, _ = lost_content_reader(monkeypatch, clock, failOnDataLoss="false")
    assert r.latestOffset(AT, ReadAllAvailable()) == AT
    clock.now += 11
    # The stream goes on from the head, where the journal's next appends go.
    assert r.latestOffset(AT, ReadAllAvailable()) == {"acme/one": {"offset": 6000, "created": 7}}


def test_a_head_below_the_offset_whose_content_the_store_holds_is_waited_for(monkeypatch):
    clock = Clock()
    r, _ = lost_content_reader(monkeypatch, clock, held=True, failOnDataLoss="false")
    for _ in range(3):  # stale, not lost: never moved back, however long
        assert r.latestOffset(AT, ReadAllAvailable()) == AT
        clock.now += 60
    # The members list it: the head is past the offset again and the stream reads on from there.
    monkeypatch.setattr(r, "_heads", lambda client, fresh=False: {"acme/one": 9000})
    assert r.latestOffset(AT, ReadAllAvailable()) == {"acme/one": {"offset": 9000, "created": 7}}
    assert r._behind == {}
