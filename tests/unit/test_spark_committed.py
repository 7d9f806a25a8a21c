"""Read-committed stream windows (spark/read/committed.py) without Spark or a broker.

The property: cutting a journal into micro-batches anywhere, each sequenced from a window that
reaches back to the journal's start, emits exactly what one read-committed pass over the whole
journal emits, each message once, in the batch holding its committing message.
"""

from __future__ import annotations

import json
import logging

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from pyspark_gazette.message import NDJSON, Flags, TransactionalPublisher, build_uuid, set_uuid_at
from pyspark_gazette.spark.options import ReadOptions
from pyspark_gazette.spark.read.committed import CommittedFilter, CommittedStreamPartition, WindowFilter
from pyspark_gazette.spark.read.plan import Segment
from pyspark_gazette.spark.read.segments import Messages

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
