"""Read-committed stream partitions (spark/read/committed.py) without Spark or a broker.

The property: cutting a journal into micro-batches anywhere, each sequenced either from a window
that reaches back to the journal's start (offsets without state) or from the producer states the
driver's scan of the previous batch left in its end offset (re-reading only replays), emits
exactly what one read-committed pass over the whole journal emits, each message once, in the
batch holding its committing message.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading

import pyarrow as pa
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pyspark_gazette.message import NDJSON, Flags, TransactionalPublisher, build_uuid, set_uuid_at
from pyspark_gazette.spark.options import ReadOptions
from pyspark_gazette.spark.read import scan_ahead
from pyspark_gazette.spark.read.committed import (
    CommittedFilter,
    CommittedStreamPartition,
    WindowFilter,
    advance,
    entry,
    offset_of,
    pruned_states,
    restored_states,
    state_of,
)
from pyspark_gazette.spark.read.committed_task import FastWindow
from pyspark_gazette.spark.read.plan import Segment
from pyspark_gazette.spark.read.scan_ahead import ScanAhead
from pyspark_gazette.spark.read.segments import Messages
from pyspark_gazette.spark.read.uuid_columns import uuid_columns

J = "unit/rc"
OPTS = ReadOptions.parse({"broker.address": "http://127.0.0.1:1", "journals": J}, streaming=True, env={})

# Operations: (producer index, kind) with kind in continue / ack / outside / resend / plain.
OPS = st.lists(st.tuples(st.integers(0, 2), st.sampled_from(["c", "c", "ack", "out", "resend", "plain"])), max_size=40)


def journal(ops) -> list[tuple[int, bytes]]:
    """(offset, ndjson line without newline) of messages built from ``ops``."""
    pubs = [TransactionalPublisher() for _ in range(3)]
    last: dict[int, object] = {}
    out, pos = [], 0
    for i, (p, kind) in enumerate(ops):
        pub = pubs[p]
        if kind == "c":
            u = pub.uncommitted()
        elif kind == "ack":
            u = pub.ack()
        elif kind == "out":
            u = pub.committed()
        elif kind == "resend":
            u = last.get(p) or build_uuid(pub.producer, pub.clock, Flags.OUTSIDE_TXN)
        else:
            u = None
        if u is not None and kind != "resend":
            last[p] = u
        doc: dict = {"n": i}
        if u is not None:
            set_uuid_at(doc, u)
        line = json.dumps(doc).encode()
        out.append((pos, line))
        pos += len(line) + 1
    return out


def messages(lines) -> Messages:
    return Messages(pa.array([o for o, _ in lines], pa.int64()), pa.array([v for _, v in lines], pa.binary()), 0)


def window(lines, start: int, end: int, *, cut: bool = False, begin: int = 0, opts=OPTS) -> WindowFilter:
    seg = Segment(J, begin, end)
    return WindowFilter(CommittedStreamPartition(0, J, NDJSON, (seg,), start, cut), opts)


def emitted(f, lines) -> list[int]:
    kept = f.filter(messages(lines)) if lines else None
    return [json.loads(v)["n"] for v in kept.values.to_pylist()] if kept is not None else []


@settings(max_examples=100, deadline=None)
@given(ops=OPS, cuts=st.lists(st.integers(0, 4000), max_size=6))
def test_batches_cut_anywhere_emit_what_one_pass_emits_each_once(ops, cuts):
    lines = journal(ops)
    head = lines[-1][0] + len(lines[-1][1]) + 1 if lines else 0
    whole = CommittedFilter(J, NDJSON, OPTS).filter(messages(lines)) if lines else None
    expected = [json.loads(v)["n"] for v in whole.values.to_pylist()] if whole is not None else []
    bounds = sorted({0, head, *(min(c, head) for c in cuts)})
    got: list[int] = []
    for start, end in zip(bounds, bounds[1:], strict=False):
        # A batch reads the messages that begin before its end (a window from the start).
        got += emitted(window(lines, start, end), [m for m in lines if m[0] < end])
    assert sorted(got) == sorted(expected)
    assert len(got) == len(set(got))


def test_a_transaction_is_emitted_by_the_batch_of_its_ack_only():
    ops = [(0, "c"), (1, "out"), (0, "c"), (1, "out"), (0, "ack"), (1, "out")]
    lines = journal(ops)
    ack = lines[4][0]
    before = emitted(window(lines, lines[2][0], ack), lines[:4])
    at_ack = emitted(window(lines, ack, lines[5][0]), lines[:5])
    assert before == [3] and at_ack == [0, 2]  # message 1 belongs to an earlier batch


def test_a_cut_window_warns_once_naming_journal_producer_and_offsets(caplog):
    ops = [(0, "c"), (1, "out"), (1, "out"), (0, "c"), (0, "ack"), (2, "c"), (2, "ack")]
    lines = journal(ops)
    begin = lines[1][0]  # the window misses producer 0's first message
    f = window(lines, lines[4][0], lines[-1][0] + 100, cut=True, begin=begin)
    with caplog.at_level(logging.WARNING):
        assert emitted(f, lines[1:]) == [3, 5]  # message 0 is lost with the window cut
        f.finish()
    (record,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    text = record.getMessage()
    assert f"'{J}'" in text and "2 transaction(s)" in text and f"starts at offset {begin}" in text
    assert f"ACK at offset {lines[4][0]}" in text and "readCommittedLookbackBytes" in text


def test_no_warning_when_the_window_reaches_the_journal_start(caplog):
    lines = journal([(0, "c"), (1, "out"), (0, "ack")])
    f = window(lines, lines[2][0], lines[2][0] + 100, cut=False)
    with caplog.at_level(logging.WARNING):
        assert emitted(f, lines) == [0]
        f.finish()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_sequencer_reports_come_from_the_batch_holding_the_message_only(caplog):
    # Producer 0's OUTSIDE message discards its pending span: the sequencer logs an error.
    lines = journal([(0, "c"), (0, "out"), (1, "out"), (1, "out")])
    odd = lines[1][0]
    with caplog.at_level(logging.ERROR, logger="pyspark_gazette.message.sequencer"):
        assert emitted(window(lines, lines[2][0], lines[3][0] + 100), lines) == [2, 3]  # a later batch
        assert not caplog.records
        assert emitted(window(lines, odd, lines[2][0]), lines[:2]) == [1]  # the batch holding it
    (record,) = caplog.records
    assert "discards a pending" in record.getMessage() and f"[{odd}, " in record.getMessage()


class Restored(WindowFilter):
    """A partition's filter whose replays come from ``lines`` (the executor reads the broker)."""

    def __init__(self, lines, part, *, emit: bool = True):
        super().__init__(part, OPTS, emit=emit)
        self.lines, self.replayed = lines, []

    def _replay(self, journal, begin, end):
        self.replayed.append((begin, end))
        yield from self._envelopes(messages([m for m in self.lines if begin <= m[0] < end]))


def chained(lines, bounds, first=None):
    """Run batches ``bounds[i], bounds[i+1]`` as the stream does: each restored from the offset
    entry the driver's scan of the previous batch computed. The emitted messages per batch, the
    offset entries, and the replayed ranges."""
    got, entries, replays = [], [first if first is not None else bounds[0]], []
    for start, end in zip(bounds, bounds[1:], strict=False):
        state = state_of(entries[-1])
        begin = offset_of(entries[-1]) if state is not None else 0  # no state: a window from the start
        batch = [m for m in lines if begin <= m[0] < end]
        part = CommittedStreamPartition(0, J, NDJSON, (Segment(J, begin, end),), start, False, state)
        f = Restored(lines, part)
        got.append(emitted(f, batch))
        replays += f.replayed
        scan = Restored(lines, part, emit=False)  # the driver's scan_state, same messages
        assert scan.filter(messages(batch)) is None if batch else True
        entries.append(entry(end, scan.producer_states()))
    return got, entries, replays


@settings(max_examples=100, deadline=None)
@given(ops=OPS, cuts=st.lists(st.integers(0, 4000), max_size=6))
def test_batches_restored_from_offset_state_emit_what_one_pass_emits_each_once(ops, cuts):
    lines = journal(ops)
    head = lines[-1][0] + len(lines[-1][1]) + 1 if lines else 0
    whole = CommittedFilter(J, NDJSON, OPTS).filter(messages(lines)) if lines else None
    expected = [json.loads(v)["n"] for v in whole.values.to_pylist()] if whole is not None else []
    # Batch ends fall on message boundaries here (a read limit inside a message is tested with Spark).
    starts = [o for o, _ in lines] + [head]
    bounds = sorted({0, head, *(min((o for o in starts if o >= c), default=head) for c in cuts)})
    got, entries, _ = chained(lines, bounds)
    flat = [n for batch in got for n in batch]
    assert sorted(flat) == sorted(expected)
    assert len(flat) == len(set(flat))
    for e in entries[1:]:
        assert json.loads(json.dumps(e)) == e  # plain JSON, as Spark logs it


def test_a_transaction_longer_than_any_lookback_commits_whole_through_one_exact_replay():
    # Producer 0 opens a transaction, producer 1 writes many messages over several batches, then
    # producer 0 acknowledges: the ACK's batch replays from the transaction's first message only.
    ops = [(1, "out"), (0, "c"), *[(1, "out")] * 12, (0, "c"), (1, "out"), (0, "ack")]
    lines = journal(ops)
    head = lines[-1][0] + len(lines[-1][1]) + 1
    bounds = [0, lines[3][0], lines[8][0], lines[14][0], head]
    got, entries, replays = chained(lines, bounds)
    assert got[-1] == [15, 1, 14]  # producer 1's message 15, then the whole transaction at its ACK
    assert [n for batch in got for n in batch].count(1) == 1
    # Every offset after the transaction began records it open at its first message.
    for e in entries[1:-1]:
        (open_begin,) = [p["begin"] for p in e["producers"].values() if p["begin"] != -1]
        assert open_begin == lines[1][0]
    assert all(p["begin"] == -1 for p in entries[-1]["producers"].values())
    # The one replay: from the transaction's begin to its first message the last batch still holds.
    assert replays == [(lines[1][0], lines[14][0])]


def test_an_offset_without_state_is_rebuilt_from_the_window_then_carries_state():
    # An old checkpoint's offset (a bare int) in the middle of an open transaction.
    ops = [(0, "c"), (1, "out"), (0, "c"), (1, "out"), (0, "ack"), (1, "out")]
    lines = journal(ops)
    head = lines[-1][0] + len(lines[-1][1]) + 1
    got, entries, _ = chained(lines, [lines[2][0], lines[4][0], head], first=lines[2][0])
    assert got == [[3], [0, 2, 5]]
    assert isinstance(entries[1], dict) and state_of(entries[1])  # state from then on


def test_malformed_state_names_the_journal():
    import pytest

    with pytest.raises(ValueError, match=f"journal '{J}'.*malformed read-committed state"):
        state_of({"offset": 10, "producers": {"00": {"last_ack": 1, "begin": -1}}}, J)
    assert state_of(10) is None and state_of({"offset": 10, "producers": {}}) == ()
    assert offset_of(10) == offset_of({"offset": 10}) == 10


class FastRestored(FastWindow):
    """The executor's fast filter, its replays served from ``lines``."""

    def __init__(self, lines, part, hold_bytes):
        super().__init__(part, OPTS)
        self.lines, self.replayed, self.hold_bytes = lines, [], hold_bytes

    def _replay(self, begin, end):
        self.replayed.append((begin, end))
        batch = [m for m in self.lines if begin <= m[0] < end]
        if batch:
            yield messages(batch)


def pieces_of(batch, cuts):
    """``batch`` cut into pieces (the executor decodes a segment in 1 MiB pieces)."""
    bounds = sorted({0, len(batch), *(c % (len(batch) + 1) for c in cuts)})
    return [batch[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if a < b]


# A transaction open across a batch boundary whose next batch re-sends its last message: the
# restored state cannot tell the copy from a new message; the replay at the ACK must.
_RESENT = [(0, "c"), (0, "c"), (0, "resend"), (1, "out"), (0, "ack")]


@settings(max_examples=150, deadline=None)
@example(ops=_RESENT, cuts=[len(journal(_RESENT[:2])[1][1]) + 60], piece_cuts=[], hold=1 << 30)
@given(
    ops=OPS,
    cuts=st.lists(st.integers(0, 4000), max_size=6),
    piece_cuts=st.lists(st.integers(0, 40), max_size=4),
    hold=st.sampled_from([0, 100, 1 << 30]),
)
def test_the_fast_filter_and_state_scan_match_the_sequencer_exactly(ops, cuts, piece_cuts, hold):
    """Batch by batch, :class:`FastWindow` emits the same messages in the same order as the
    sequencer's :class:`WindowFilter` (also when it holds little and replays), and :func:`advance`
    leaves the same producer states as the sequencer's scan (the offsets' state)."""
    lines = journal(ops)
    head = lines[-1][0] + len(lines[-1][1]) + 1 if lines else 0
    starts = [o for o, _ in lines] + [head]
    bounds = sorted({0, head, *(min((o for o in starts if o >= c), default=head) for c in cuts)})
    _, entries, _ = chained(lines, bounds)
    for (start, end), first in zip(zip(bounds, bounds[1:], strict=False), entries, strict=False):
        state = state_of(first)
        begin = offset_of(first) if state is not None else 0
        batch = [m for m in lines if begin <= m[0] < end]
        part = CommittedStreamPartition(0, J, NDJSON, (Segment(J, begin, end),), start, False, state)
        slow, fast = Restored(lines, part), FastRestored(lines, part, hold)
        want, got = [], []
        for piece in pieces_of(batch, piece_cuts):
            want += emitted(slow, piece)
            got += emitted(fast, piece)
        assert got == want
        states = restored_states(state)
        for piece in pieces_of(batch, piece_cuts):
            m = messages(piece)
            producer, clock, flags = uuid_columns(m.values, NDJSON, OPTS.uuid_pointer)
            advance(states, producer, clock, flags, m.offsets.to_numpy())
        scan = Restored(lines, part, emit=False)
        if batch:
            scan.filter(messages(batch))
        assert entry(end, pruned_states(states)) == entry(end, scan.producer_states())


def test_the_fast_filter_reports_what_the_sequencer_reports(caplog):
    lines = journal([(0, "c"), (0, "out"), (1, "out"), (1, "out")])
    odd = lines[1][0]
    part = CommittedStreamPartition(0, J, NDJSON, (Segment(J, 0, lines[2][0]),), odd, False, None)
    with caplog.at_level(logging.ERROR, logger="pyspark_gazette.message.sequencer"):
        assert emitted(FastWindow(part, OPTS), lines[:2]) == [1]
    (record,) = caplog.records
    assert "discards a pending" in record.getMessage() and f"[{odd}, " in record.getMessage()


# -- the driver's scan of the next batch, ahead of time (spark/read/scan_ahead.py) ------------


@contextlib.contextmanager
def inline_scans(*, run: bool = True):
    """Scans ahead run at once in the caller's thread (``run``), or are never started."""
    original = scan_ahead._submit
    scan_ahead._submit = (lambda scan: scan._run()) if run else (lambda scan: None)
    try:
        yield
    finally:
        scan_ahead._submit = original


def ended(piece) -> Messages:
    """A piece as the executor's decoder gives it: ``end`` just past its last message."""
    last_offset, last_line = piece[-1]
    m = messages(piece)
    return Messages(m.offsets, m.values, 0, last_offset + len(last_line) + 1)


def served(lines, piece_cuts, calls=None):
    """``pieces(begin, end)`` over ``lines``: the messages beginning in ``[begin, end)``, cut into pieces."""

    def pieces(begin, end):
        if calls is not None:
            calls.append((begin, end))
        batch = [m for m in lines if begin <= m[0] < end]
        for piece in pieces_of(batch, piece_cuts):
            yield ended(piece)

    return pieces


def full_scan(lines, origin, end):
    """What :func:`scan_state` computes for the batch ``[origin, end)``."""
    states = restored_states(state_of(origin))
    batch = [m for m in lines if offset_of(origin) <= m[0] < end]
    if batch:
        m = messages(batch)
        advance(states, *uuid_columns(m.values, NDJSON, OPTS.uuid_pointer), m.offsets.to_numpy())
    return entry(end, pruned_states(states))


@settings(max_examples=150, deadline=None)
@given(
    ops=OPS,
    at=st.integers(0, 4000),
    ahead=st.integers(0, 4000),
    end=st.integers(0, 8000),
    piece_cuts=st.lists(st.integers(0, 40), max_size=4),
)
def test_a_scan_ahead_resumed_anywhere_gives_the_full_scans_state(ops, at, ahead, end, piece_cuts):
    """Whatever the next batch's end (before, at or past where the scan ahead stopped, inside a
    message or not) and however the pieces fall, the state resumed from the scan ahead is the
    full scan's, and only what the scan ahead did not read is read again. (Scans run in the
    caller's thread here; the next test runs them in the module's.)"""
    lines = journal(ops)
    head = lines[-1][0] + len(lines[-1][1]) + 1 if lines else 0
    at, end = min(at, head), min(end, head)
    origin = full_scan(lines, entry(0, ()), at)
    until = min(head, at + ahead)
    with inline_scans():
        scan = ScanAhead(J, origin, until, served(lines, piece_cuts), NDJSON, OPTS)
    calls = []
    end = max(end, at)
    got = scan.resume(json.loads(json.dumps(origin)), end, served(lines, piece_cuts, calls))
    assert got == full_scan(lines, origin, end)
    assert len(calls) <= 1 and all(e == end for _, e in calls)
    if end >= until:  # only what the scan ahead did not read
        assert all(b == until for b, _ in calls)


def test_a_batch_waits_for_the_running_scan_ahead_and_drops_one_not_started():
    lines = journal([(0, "c"), (1, "out"), (0, "c"), (1, "out"), (0, "ack"), (1, "out")] * 3)
    head = lines[-1][0] + len(lines[-1][1]) + 1
    origin = full_scan(lines, entry(0, ()), lines[2][0])
    go, started = threading.Event(), threading.Event()

    def slow(begin, end):
        started.set()
        go.wait()
        yield from served(lines, [3, 7])(begin, end)

    scan = ScanAhead(J, origin, head, slow, NDJSON, OPTS)
    assert started.wait(30)
    threading.Timer(0.05, go.set).start()  # the batch is planned while the scan reads on
    calls = []
    assert scan.resume(origin, lines[10][0], served(lines, [], calls)) == full_scan(lines, origin, lines[10][0])
    assert not calls or calls[0][0] > lines[2][0]  # resumed past the start, not scanned in full

    with inline_scans(run=False):  # queued behind busy workers: not started when its batch comes
        idle = ScanAhead(J, origin, head, served(lines, []), NDJSON, OPTS)
    assert idle.resume(origin, head, served(lines, [])) is None


def test_a_stalled_scan_ahead_is_given_up(monkeypatch):
    lines = journal([(0, "c"), (1, "out"), (0, "c"), (1, "out"), (0, "ack"), (1, "out")])
    head = lines[-1][0] + len(lines[-1][1]) + 1
    origin = full_scan(lines, entry(0, ()), lines[1][0])
    monkeypatch.setattr(scan_ahead, "STALL_SECONDS", 0.2)
    never, started = threading.Event(), threading.Event()

    def stuck(begin, end):
        started.set()
        never.wait(60)  # a read that does not come back (released at the end of the test)
        yield from ()

    scan = ScanAhead(J, origin, head, stuck, NDJSON, OPTS)
    try:
        assert started.wait(30)
        assert scan.resume(origin, head, served(lines, [])) is None
    finally:
        never.set()


def test_a_scan_ahead_from_another_start_or_that_failed_is_not_used():
    lines = journal([(0, "c"), (1, "out"), (0, "c"), (1, "out"), (0, "ack"), (1, "out")])
    head = lines[-1][0] + len(lines[-1][1]) + 1
    origin = full_scan(lines, entry(0, ()), lines[2][0])
    with inline_scans():
        scan = ScanAhead(J, origin, head, served(lines, []), NDJSON, OPTS)
    other = full_scan(lines, entry(0, ()), lines[1][0])
    assert scan.resume(other, head, served(lines, [])) is None

    def broken(begin, end):
        yield ended(lines[2:3])
        raise OSError("the store went away")

    with inline_scans():
        scan = ScanAhead(J, origin, head, broken, NDJSON, OPTS)
    assert scan.resume(origin, head, served(lines, [])) is None
    assert full_scan(lines, origin, head)["producers"]  # what the caller computes instead
