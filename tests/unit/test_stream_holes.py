"""A stream at a hole not yet decidable (spark/read/stream.py: GazetteStreamReader._hold_at_holes).
Unit test of the one module: write heads and snapshots are stubbed.

``latestOffset`` caps a journal's end at the start of the first pending hole of its range (the
stream reads up to it), logs a WARNING once per hole, lists the journal again at most every
HOLD_RECHECK seconds while it waits, and moves on once the hole is decided. A
``Trigger.AvailableNow`` query held at holes only waits for them (as a batch read) and plans
again, instead of ending short of its target."""

from __future__ import annotations

import logging

from pyspark.sql.streaming.datasource import ReadAllAvailable

from pyspark_gazette.client.settle import Settled
from pyspark_gazette.spark.options import ReadOptions
from pyspark_gazette.spark.read import stream
from pyspark_gazette.spark.read.plan import Snapshot

ADDR = {"broker.address": "http://127.0.0.1:1"}


class _Info:
    def __init__(self, name: str):
        self.name = name


class _Client:
    conns = None


def reader(monkeypatch, heads: dict[str, int], pending: dict[str, list[tuple[int, int]]]):
    """A stream reader of ``heads``' journals whose snapshots have the ``pending`` holes (a dict
    the test may change), and the ranges it planned."""
    r = stream.GazetteStreamReader(ReadOptions.parse({**ADDR, "journals": ",".join(heads)}, env={}), None)
    planned: list[tuple[str, int]] = []

    def fake_heads(client, fresh=False):
        r._infos = {j: _Info(j) for j in heads}
        return dict(heads)

    def take_snapshot(client, info, opts, need=0, ask_primary=True):
        planned.append((info.name, need))
        holes = tuple(pending.get(info.name, ()))
        settled = Settled((), need, "", holes, holes, "the fragment after them was persisted recently")
        return Snapshot(info, None, (), need, settled=settled)

    monkeypatch.setattr(r, "_client", lambda: _Client())
    monkeypatch.setattr(r, "_heads", fake_heads)
    monkeypatch.setattr(stream, "take_snapshot", take_snapshot)
    return r, planned


def test_a_stream_reads_up_to_a_pending_hole_and_waits_there(monkeypatch, caplog):
    pending = {"acme/one": [(300, 400)]}
    r, planned = reader(monkeypatch, {"acme/one": 1000, "acme/two": 800}, pending)
    caplog.set_level(logging.WARNING, logger="pyspark_gazette")
    end = r.latestOffset({"acme/one": 100, "acme/two": 0}, ReadAllAvailable())
    assert end == {"acme/one": 300, "acme/two": 800}  # up to the hole; the other journal reads on
    assert sorted(planned) == [("acme/one", 1000), ("acme/two", 800)]
    # The next trigger, within HOLD_RECHECK: held without a listing.
    assert r.latestOffset(end, ReadAllAvailable()) == end
    assert [p for p in planned if p[0] == "acme/one"] == [("acme/one", 1000)]
    monkeypatch.setattr(stream, "HOLD_RECHECK", 0.0)
    r._holds = {j: (b, 0.0) for j, (b, _) in r._holds.items()}  # the recheck is due
    assert r.latestOffset(end, ReadAllAvailable()) == end  # listed again, still pending: held
    warnings = [m.getMessage() for m in caplog.records if "waits there" in m.getMessage()]
    assert len(warnings) == 1 and "offsets [300, 400)" in warnings[0] and "reads up to offset 300" in warnings[0]
    pending["acme/one"] = []  # the fragment landed (or the hole was judged lost)
    assert r.latestOffset(end, ReadAllAvailable()) == {"acme/one": 1000, "acme/two": 800}


def test_a_hole_before_the_range_or_after_it_holds_nothing(monkeypatch):
    r, _ = reader(monkeypatch, {"acme/one": 1000}, {"acme/one": [(50, 90), (1000, 1200)]})
    assert r.latestOffset({"acme/one": 100}, ReadAllAvailable()) == {"acme/one": 1000}


def test_an_available_now_query_at_a_hole_waits_for_it_and_plans_again(monkeypatch):
    pending = {"acme/one": [(100, 400)]}
    r, _ = reader(monkeypatch, {"acme/one": 1000}, pending)
    r._target = {"acme/one": 1000}
    waited: list = []

    def settle_range(client, snap, begin, end, opts):
        waited.append((snap.name, begin, end))
        pending["acme/one"] = []  # decided while waiting
        return snap

    monkeypatch.setattr(stream, "settle_range", settle_range)
    assert r.latestOffset({"acme/one": 100}, ReadAllAvailable()) == {"acme/one": 1000}
    assert waited == [("acme/one", 100, 1000)]
