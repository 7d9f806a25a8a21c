"""The task side of a read-committed micro-batch: its partition's committed messages as Arrow.

:func:`read_committed_batches` reads one journal's micro-batch (planned by
:func:`~pyspark_gazette.spark.read.committed.committed_partition`) and keeps the messages that
Gazette's sequencer would emit there. :class:`FastWindow` does that over numpy columns: a whole
piece of messages with array operations when every producer's clocks rise through it (what a
publisher writes), and message by message, through the one statement of the rule
(:mod:`~pyspark_gazette.message.producer`), for anything else. A window cut by
``readCommittedLookbackBytes`` goes through
:class:`~pyspark_gazette.spark.read.committed.WindowFilter` (the sequencer itself), which reports
transactions that may have begun before it. The unit tests compare the two on random journals cut
anywhere (tests/unit/test_spark_committed.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql.types import StructType

from pyspark_gazette.flow.documents import TXN_MASK
from pyspark_gazette.message import Envelope, Flags, Outcome
from pyspark_gazette.message.producer import decide, reports
from pyspark_gazette.message.sequencer import log_sequencing_error
from pyspark_gazette.spark.options import ReadOptions
from pyspark_gazette.spark.read.committed import CommittedStreamPartition, SpanState, WindowFilter, restored_states
from pyspark_gazette.spark.read.flow import output_builder
from pyspark_gazette.spark.read.plan import Segment
from pyspark_gazette.spark.read.segments import Messages, partition_messages, segment_messages
from pyspark_gazette.spark.read.uuid_columns import uuid_columns

#: A span's held messages (its CONTINUE_TXN messages not yet committed) keep their 1 MiB pieces
#: alive; past this many bytes of pieces a span forgets its oldest pieces and its commit replays
#: them from the journal instead, as the sequencer's bounded ring does.
HOLD_BYTES = 64 << 20


def read_committed_batches(
    part: CommittedStreamPartition, opts: ReadOptions, schema: StructType
) -> Iterator[pa.RecordBatch]:
    """The record batches of one read-committed micro-batch partition (executor side)."""
    builder = output_builder(schema, opts, part.framing, part.truncated_at)
    # A window cut by the lookback (an offset without state) keeps the sequencer's own filter,
    # which reports transactions that may have begun before the window.
    window: FastWindow | WindowFilter = WindowFilter(part, opts) if part.lookback_cut else FastWindow(part, opts)
    for msgs in partition_messages(part, opts):
        kept = window.filter(msgs)
        if kept is None:
            continue
        batch = builder.build(part.journal, kept)
        if batch is not None and batch.num_rows:
            yield batch
    window.finish()


class FastWindow:
    """:class:`WindowFilter` (``emit=True``) over numpy columns: the same messages in the same
    order, with a Python step per message of a few integer operations and one ``take`` per
    commit instead of an :class:`Envelope` and the sequencer's ring.

    Held span messages stay in their pieces (bounded by :data:`HOLD_BYTES`); a commit whose span
    begins before what is held replays ``[begin, first held message)`` from the journal, as the
    sequencer asks for a replay when its ring no longer holds a span's start."""

    def __init__(self, part: CommittedStreamPartition, opts: ReadOptions):
        self.part, self.opts = part, opts
        self.states = restored_states(part.producers)
        self.pieces: dict[int, Messages] = {}
        self._next = 0
        self.hold_bytes = HOLD_BYTES

    def _columns(self, msgs: Messages):
        producer, clock, flags = uuid_columns(
            msgs.values, self.part.framing, self.opts.uuid_pointer, self.opts.uuid_field
        )
        if self.opts.collection:
            flags &= TXN_MASK
        return producer, clock, flags

    def _add(self, msgs: Messages) -> int:
        n = self._next
        self._next += 1
        self.pieces[n] = msgs
        return n

    def filter(self, msgs: Messages) -> Messages | None:
        producer, clock, flags = self._columns(msgs)
        piece = self._add(msgs)
        offsets = msgs.offsets.to_numpy()
        out = self._vectorised(piece, producer, clock, flags, offsets)
        if out is None:
            stepped = self._stepped(msgs, piece, producer, clock, flags, offsets)
            out = (np.array([x for x, _ in stepped], np.int64), np.array([y for _, y in stepped], np.int64))
        kept = self._gather(*out, msgs.mod_time)
        self._trim(piece)
        return kept

    def _vectorised(self, piece: int, producer, clock, flags, offsets) -> tuple[np.ndarray, np.ndarray] | None:
        """``(pieces, rows)`` emitted by a piece, in numpy, when every producer's clocks rise
        strictly through it from above its state (a publisher's clocks always do): then every
        CONTINUE_TXN message extends its span, every OUTSIDE_TXN message and ACK commits, and an
        ACK commits all of its span. ``None`` (step through the piece) otherwise, or where the
        sequencer would report something (an OUTSIDE_TXN message discarding a span, odd flags)."""
        emit_from, states = self.part.emit_from, self.states
        nz = np.flatnonzero(clock)
        if nz.size and int(flags[nz].max()) > Flags.ACK_TXN:
            return None
        ids, inverse = np.unique(producer[nz], return_inverse=True)
        if len(ids) > 64:
            return None
        zero = np.flatnonzero(clock == 0)  # committed at once
        zero = zero[offsets[zero] >= emit_from]
        keys, subs, pieces, rows = [zero], [zero], [np.full(zero.size, piece)], [zero]
        updates = []
        for k, p in enumerate(ids.tolist()):
            r = nz[inverse == k]
            c, f, b = clock[r], flags[r], offsets[r]
            st = states.get(p)
            first = int(c[0])
            if (st is not None and first <= st.max_clock) or (c.size > 1 and not (c[1:] > c[:-1]).all()):
                return None
            reset = f != Flags.CONTINUE_TXN
            m = r.size
            at = np.flatnonzero(reset)
            open_before = st is not None and st.begin != -1
            # An OUTSIDE_TXN message after an open span discards it (and the sequencer logs it).
            prev_cont = np.zeros(m, bool)
            prev_cont[1:] = f[:-1] == Flags.CONTINUE_TXN
            if at.size and open_before:
                prev_cont[at[0]] |= True
            if (prev_cont & (f == Flags.OUTSIDE_TXN) & (b >= emit_from)).any():
                return None
            pos = np.where(reset, np.arange(m), m)
            nxt = np.minimum.accumulate(pos[::-1])[::-1]  # the next reset at or after each message
            cont = np.flatnonzero(~reset & (nxt < m))
            by_ack = cont[f[nxt[cont]] == Flags.ACK_TXN]
            by_ack = by_ack[b[nxt[by_ack]] >= emit_from]
            if open_before and at.size and f[at[0]] == Flags.ACK_TXN and b[at[0]] >= emit_from:
                # A span begun before this piece, committed by the producer's first ACK here: its
                # held (or replayed) messages come first, then those here above their clocks.
                before: list[tuple[int, int]] = []
                lo = self._commit(p, st, int(c[at[0]]), int(b[0]), before)  # type: ignore[arg-type]
                by_ack = by_ack[(nxt[by_ack] != at[0]) | (c[by_ack] > np.uint64(lo))]
                if before:
                    n = len(before)
                    keys.append(np.full(n, r[at[0]]))
                    subs.append(np.arange(n) - n)
                    pieces.append(np.array([x for x, _ in before], np.int64))
                    rows.append(np.array([y for _, y in before], np.int64))
            outside = np.flatnonzero(f == Flags.OUTSIDE_TXN)
            outside = outside[b[outside] >= emit_from]
            keys += [r[nxt[by_ack]], r[outside]]
            subs += [r[by_ack], r[outside]]
            pieces += [np.full(by_ack.size + outside.size, piece)]
            rows += [np.concatenate([r[by_ack], r[outside]])]
            updates.append((p, st, r, c, f, b, at, open_before))
        for p, st, r, c, _f, b, at, _ in updates:
            if st is None:
                st = states[p] = SpanState.first_seen(int(c[0]))
            if at.size:
                last = int(at[-1])
                st.acked(int(c[last]))
                tail = slice(last + 1, None)
            else:
                tail = slice(0, None)
            if r[tail].size:
                if st.begin == -1:
                    st.begin = int(b[tail][0])
                st.max_clock = int(c[-1])
                st.held.extend(zip([piece] * r[tail].size, r[tail].tolist(), c[tail].tolist(), strict=True))
        key, sub = np.concatenate(keys), np.concatenate(subs)
        order = np.lexsort((sub, key))
        return np.concatenate(pieces)[order], np.concatenate(rows)[order]

    def _stepped(self, msgs: Messages, piece: int, producer, clock, flags, offsets) -> list[tuple[int, int]]:
        """The (piece, row) emitted by a piece, one message at a time (any clocks and flags)."""
        emit_from, states = self.part.emit_from, self.states
        out: list[tuple[int, int]] = []  # (piece, row) in emit order
        for i, p, c, f, b in zip(
            range(len(offsets)), producer.tolist(), clock.tolist(), flags.tolist(), offsets.tolist(), strict=True
        ):
            if c == 0:
                if b >= emit_from:
                    out.append((piece, i))
                continue
            st = states.get(p)
            if st is None:
                st = states[p] = SpanState.first_seen(c)
            outcome = decide(st, c, f)
            if b >= emit_from:
                for what in reports(st, c, f, outcome):
                    self._log(msgs, i, p, c, f, st, what)
                if outcome is Outcome.ACK_COMMIT_RING:
                    self._commit(p, st, c, b, out)
                elif outcome is Outcome.OUTSIDE_COMMIT:
                    out.append((piece, i))
            st.apply(outcome, c, b)
            if outcome.holds:
                st.held.append((piece, i, c))
        return out

    def _commit(self, p: int, st: SpanState, ack: int, at: int, out: list[tuple[int, int]]) -> int:
        """Emit ``st``'s span committed by an ACK of clock ``ack`` at offset ``at``: the replay of
        what is no longer held, then the held messages, skipping duplicates and clocks past ``ack``."""
        lo = st.last_ack
        first_held = self.pieces[st.held[0][0]].offsets[st.held[0][1]].as_py() if st.held else at
        if st.begin < first_held:
            for msgs in self._replay(st.begin, first_held):
                producer, clock, _ = self._columns(msgs)
                rows = np.flatnonzero((producer == np.uint64(p)) & (clock != 0))
                if not rows.size:
                    continue
                piece = self._add(msgs)
                for i, c in zip(rows.tolist(), clock[rows].tolist(), strict=True):
                    if lo < c <= ack:
                        out.append((piece, i))
                        lo = c
        for piece, i, c in st.held:
            if lo < c <= ack:
                out.append((piece, i))
                lo = c
        return lo

    def _replay(self, begin: int, end: int) -> Iterator[Messages]:
        """The journal's messages beginning in ``[begin, end)`` (a replay, read again): through the
        planned segments that cover the range (fragments read from the store), else the broker."""
        pieces = []
        for seg in (*self.part.replay_segments, *self.part.segments):
            b, e = max(seg.begin, begin), min(seg.end, end)
            if b < e:
                pieces.append(dataclasses.replace(seg, begin=b, end=e, boundary=True if b == begin else seg.boundary))
        covered = begin
        for seg in pieces:
            covered = seg.end if seg.begin <= covered else covered
        if not pieces or pieces[0].begin != begin or covered < end:
            pieces = [Segment(self.part.journal, begin, end)]
        for seg in pieces:
            yield from segment_messages(seg, self.part.framing, self.opts)

    def _gather(self, pieces: np.ndarray, rows: np.ndarray, mod_time: int) -> Messages | None:
        if not rows.size:
            return None
        offsets, values = [], []
        cut = np.flatnonzero(pieces[1:] != pieces[:-1]) + 1
        for lo, hi in zip([0, *cut.tolist()], [*cut.tolist(), rows.size], strict=True):
            src, take = self.pieces[int(pieces[lo])], pa.array(rows[lo:hi])
            vals = src.values.take(take)
            offsets.append(src.offsets.take(take))
            values.append(vals.cast(pa.binary()) if pa.types.is_large_binary(vals.type) else vals)
        return Messages(pa.concat_arrays(offsets), pa.concat_arrays(values), mod_time)

    def _trim(self, current: int) -> None:
        """Forget pieces no held message needs; past :data:`HOLD_BYTES`, the oldest held ones."""
        live = {piece for st in self.states.values() for piece in {h[0] for h in st.held}}
        for n in [n for n in self.pieces if n not in live]:
            del self.pieces[n]
        while sum(m.values.nbytes for m in self.pieces.values()) > self.hold_bytes and len(self.pieces) > 1:
            oldest = min(self.pieces)
            for st in self.states.values():
                st.held = [h for h in st.held if h[0] != oldest]
            del self.pieces[oldest]

    def _log(self, msgs: Messages, i: int, p: int, c: int, f: int, st: SpanState, what: str) -> None:
        raw = msgs.values[i].as_py()
        begin = msgs.offsets[i].as_py()
        env = Envelope(
            self.part.journal, begin, begin + self.part.framing.framed_size(len(raw)), p.to_bytes(6, "big"), c, f, raw
        )
        log_sequencing_error(env, st.last_ack, st.max_clock, st.begin, what)

    def finish(self) -> None:
        pass
