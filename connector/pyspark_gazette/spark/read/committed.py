"""Read-committed streaming reads: Gazette's sequencer across micro-batch boundaries.

Like a Gazette consumer's checkpoint, a read-committed stream's offsets carry the sequencer's
state with each journal's byte offset (Gazette's ``ProducerState``: per producer, the clock of
its last ACK and the first offset of its open transaction, or -1)::

    {"journal": {"offset": 2048, "producers": {"0a1b2c3d4e5f": {"last_ack": 1234, "begin": 1980}}}}

* A committed message is emitted by the micro-batch ``[S, E)`` that holds the offset of the
  message that **committed** it: its own offset for OUTSIDE_TXN (and UUID-less) messages, the
  ACK_TXN message's offset for the members of a transaction. A transaction open at a batch
  boundary is therefore emitted whole, once, by the batch holding its ACK; rolled-back,
  duplicate and still-pending messages are never emitted.
* The batch's one task per journal restores the sequencer from the state at ``S`` and reads
  ``[S, E)``. An ACK that commits a transaction begun before ``S`` makes the sequencer ask for a
  **replay** of exactly ``[begin, first message of the span it still holds)``, which the task
  re-reads (Gazette's ``ReplayRange``). Nothing else before ``S`` is read, so no lookback needs
  sizing, and a re-run of a batch from the checkpoint gives the same rows.
* The state at ``E`` is computed on the driver when ``latestOffset`` fixes ``E`` (Spark fixes a
  batch's end before any task reads, and tasks cannot hand state back): :func:`scan_state`
  reads the same messages the task reads and moves the producer states over their UUIDs
  (:func:`advance`: an ACK sets its producer's state whatever came before, so only the messages
  after each producer's last ACK are stepped through); most of that read is done while the
  previous batch runs (:mod:`~pyspark_gazette.spark.read.scan_ahead`). Producers last seen more than
  :data:`PRUNE_HORIZON` seconds (of their clocks) before the journal's newest ACK are dropped,
  as Gazette's consumers do.
* Speed: UUIDs are read as numpy columns
  (:func:`~pyspark_gazette.spark.read.uuid_columns.uuid_columns`), and the task's
  :class:`FastWindow` emits a whole piece of messages with array operations when every
  producer's clocks rise through it (what a publisher writes); any other piece is stepped
  through message by message. Both give exactly what Gazette's sequencer
  (:class:`~pyspark_gazette.message.Sequencer`, which :class:`WindowFilter` drives) gives; the
  unit tests compare them on random journals cut anywhere.
* An offset **without** state (a bare integer: the stream's starting offsets, a journal that
  appeared later, or a checkpoint written before offsets carried state) is rebuilt from a
  window: the sequencer starts at ``W = max(S - readCommittedLookbackBytes, start of the content
  covering S)`` and feeds ``[W, S)`` without emitting. A transaction whose first message lies
  before ``W`` loses the messages before ``W``; when the window was cut by the lookback and an
  ACK in ``[S, E)`` commits a producer the window had not seen acknowledge anything before, a
  warning names the journal, producer and offsets. From that batch's end on, the offsets carry
  state.

Why one partition per journal and batch: the sequencer needs the journal's messages in order,
and a second partition would have to re-read the first one's range to learn its state.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql.types import StructType

from pyspark_gazette.flow.documents import TXN_MASK
from pyspark_gazette.message import Envelope, Flags, Framing, Outcome, Sequencer
from pyspark_gazette.message.sequencer import log_sequencing_error
from pyspark_gazette.spark.options import ReadOptions
from pyspark_gazette.spark.read.arrow_output import uuid_parts
from pyspark_gazette.spark.read.flow import output_builder
from pyspark_gazette.spark.read.plan import GazettePartition, Segment, Snapshot, segments
from pyspark_gazette.spark.read.segments import Messages, partition_messages, segment_messages
from pyspark_gazette.spark.read.uuid_columns import uuid_columns

log = logging.getLogger(__name__)

_KNOWN_AFTER = frozenset(
    {
        Outcome.OUTSIDE_COMMIT,
        Outcome.OUTSIDE_ALREADY_ACKED,
        Outcome.ACK_ROLLBACK,
        Outcome.ACK_EMPTY,
        Outcome.ACK_COMMIT_RING,
        Outcome.ACK_COMMIT_REPLAY,
    }
)


#: Producers whose newest clock is this many seconds older than the newest ACK of their journal
#: are dropped from a stream's offsets (Gazette's consumers prune theirs at 24 hours too).
PRUNE_HORIZON = 24 * 3600.0

#: A producer's state in an offset: (producer id hex, clock of its last ACK, begin of its open span or -1).
ProducerState = tuple[str, int, int]


def offset_of(entry) -> int:
    """The byte offset of one journal's entry in a stream offset (an int, or ``{"offset": ...}``)."""
    return int(entry["offset"]) if isinstance(entry, dict) else int(entry)


def created_of(entry) -> int:
    """The Etcd creation revision of the journal one entry of a stream offset was read from
    (``{"offset": ..., "created": R}``), or 0 where the entry has none (an older checkpoint, or a
    broker that does not report one)."""
    return int(entry.get("created", 0)) if isinstance(entry, dict) else 0


def with_created(entry, revision: int):
    """``entry`` tied to the journal's creation revision ``revision`` (unchanged when it is 0)."""
    if not revision:
        return entry
    return {**entry, "created": revision} if isinstance(entry, dict) else {"offset": int(entry), "created": revision}


def same_journal(a, b) -> bool:
    """Whether two entries of a stream offset were read from the same journal, not one deleted and
    re-created in between: false only where both carry a creation revision and they differ."""
    return not (created_of(a) and created_of(b) and created_of(a) != created_of(b))


def state_of(entry, journal: str = "") -> tuple[ProducerState, ...] | None:
    """The producer states of one journal's offset entry, or ``None`` for an entry without state."""
    if not isinstance(entry, dict) or "producers" not in entry:
        return None
    try:
        out = []
        for producer, st in sorted(entry["producers"].items()):
            if len(bytes.fromhex(producer)) != 6:
                raise ValueError(f"producer id {producer!r} is not 6 bytes")
            out.append((producer, int(st["last_ack"]), int(st["begin"])))
        return tuple(out)
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        raise ValueError(
            f"journal {journal!r}: malformed read-committed state in the stream offset {entry!r}: {e}"
        ) from e


def entry(offset: int, producers: tuple[ProducerState, ...]) -> dict:
    """One journal's stream offset with its sequencer state (see the module docstring)."""
    return {
        "offset": offset,
        "producers": {p: {"last_ack": ack, "begin": begin} for p, ack, begin in producers},
    }


@dataclasses.dataclass(frozen=True)
class CommittedStreamPartition(GazettePartition):
    """One journal's micro-batch ``[emit_from, end)`` read from ``segments[0].begin``.

    ``producers`` is the sequencer's state at ``emit_from`` (then the segments start there), or
    ``None``: the state is rebuilt from a window before ``emit_from``. ``lookback_cut`` says
    whether that window was cut by ``readCommittedLookbackBytes`` (content before it exists),
    which is when a transaction may be lost.
    """

    emit_from: int
    lookback_cut: bool
    producers: tuple[ProducerState, ...] | None
    #: Segments of ``[oldest open span's begin, emit_from)`` (restored state only): replays read
    #: their fragments straight from the store, as the batch's own segments are read.
    replay_segments: tuple

    def __init__(
        self,
        index: int,
        journal: str,
        framing: Framing,
        segments: tuple,
        emit_from: int,
        lookback_cut: bool,
        producers: tuple[ProducerState, ...] | None = None,
        replay_segments: tuple = (),
        truncated_at: int = 0,
    ):
        super().__init__(index, journal, framing, segments, truncated_at)
        object.__setattr__(self, "emit_from", emit_from)
        object.__setattr__(self, "lookback_cut", lookback_cut)
        object.__setattr__(self, "producers", producers)
        object.__setattr__(self, "replay_segments", replay_segments)


def window_start(snap: Snapshot, start: int, lookback: int) -> tuple[int, bool]:
    """``(W, cut by the lookback)``: where the sequencer starts for a batch starting at ``start``
    whose offset carries no state.

    ``W`` never precedes the contiguous run of fragments that reaches ``start``, so the window
    reads no hole (content pruned by retention) that a re-run could not read either.
    """
    covered = start
    for listed in reversed(snap.fragments):  # ordered by begin: walk back from start
        f = listed.spec
        if f.begin < covered <= f.end:
            covered = f.begin
    wanted = start - lookback
    return max(wanted, covered), wanted > covered


def committed_partition(snap: Snapshot, start, end: int, opts: ReadOptions, index: int) -> CommittedStreamPartition:
    """The one partition of ``snap``'s micro-batch from ``start`` (an offset entry) to ``end``."""
    s = offset_of(start)
    producers = state_of(start, snap.name)
    if producers is not None:
        begin, cut = s, False
    else:
        begin, cut = window_start(snap, s, opts.read_committed_lookback)
    segs = segments(snap, begin, end, opts)
    replay: tuple = ()
    opened = [b for _, _, b in producers or () if 0 <= b < s]
    if opened:
        try:
            replay = tuple(segments(snap, min(opened), s, opts, start_is_boundary=True))
        except Exception:  # a hole before the batch: replays go through the broker, which reports it
            replay = ()
    return CommittedStreamPartition(
        index, snap.name, snap.framing, tuple(segs), s, cut, producers, replay, snap.truncated_at
    )


class _Quiet(logging.Filter):
    """Drops the sequencer's reports while ``on``: a window's messages before ``emit_from`` were
    reported by the batch that holds them, and would be again by every later batch re-reading them."""

    def __init__(self) -> None:
        super().__init__()
        self.on = False

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.on


class CommittedFilter:
    """Read-committed: feeds a partition's messages through Gazette's sequencer."""

    def __init__(self, journal: str, framing: Framing, opts: ReadOptions):
        self.journal, self.framing, self.opts = journal, framing, opts
        self.sequencer = Sequencer()

    def _envelopes(self, msgs: Messages) -> list:
        parts = uuid_parts(msgs.values, self.framing, self.opts.uuid_pointer, self.opts.uuid_field)
        out = []
        for offset, raw, p in zip(msgs.offsets.to_pylist(), msgs.values.to_pylist(), parts, strict=True):
            producer, clock, flags = p if p else (b"\0" * 6, 0, 0)
            if self.opts.collection:
                flags &= TXN_MASK  # Flow's CONTROL flag (0x4) does not change sequencing
            out.append(
                Envelope(self.journal, offset, offset + self.framing.framed_size(len(raw)), producer, clock, flags, raw)
            )
        return out

    def _replay(self, journal: str, begin: int, end: int) -> Iterator:
        for msgs in segment_messages(Segment(journal, begin, end), self.framing, self.opts):
            yield from self._envelopes(msgs)

    def filter(self, msgs: Messages) -> Messages | None:
        committed = list(self.sequencer.sequence(self._envelopes(msgs), self._replay, include_acks=False))
        return Messages.of_envelopes(committed, msgs.mod_time)


class WindowFilter(CommittedFilter):
    """Sequences a partition's messages from its restored state (or its window); keeps those
    committed at or after ``emit_from``. With ``emit=False`` (the driver's :func:`scan_state`)
    nothing is kept, replays are skipped and the sequencer's reports are not logged."""

    def __init__(self, part: CommittedStreamPartition, opts: ReadOptions, *, emit: bool = True):
        super().__init__(part.journal, part.framing, opts)
        self.part, self.emit = part, emit
        if part.producers is not None:
            self.sequencer = Sequencer(
                initial={
                    "producers": [
                        {"journal": part.journal, "producer": p, "last_ack": ack, "begin": begin}
                        for p, ack, begin in part.producers
                    ]
                }
            )
        self._known: set[bytes] = set()  # producers whose last ACK the window has seen
        self._first_seen: dict[bytes, int] = {}
        #: (producer, its first offset in the window, ACK offset) of commits that may be partial.
        self.suspects: list[tuple[bytes, int, int]] = []

    def filter(self, msgs: Messages) -> Messages | None:
        emit_from = self.part.emit_from
        kept: list[Envelope] = []
        quiet, seq_log = _Quiet(), logging.getLogger(Sequencer.__module__)
        seq_log.addFilter(quiet)
        try:
            for env in self._envelopes(msgs):
                quiet.on = not self.emit or env.begin < emit_from
                self._sequence(env, kept)
        finally:
            seq_log.removeFilter(quiet)
        return Messages.of_envelopes(kept, msgs.mod_time) if self.emit else None

    def producer_states(self) -> tuple[ProducerState, ...]:
        """The sequencer's producer states now (pruned by :data:`PRUNE_HORIZON`), for an offset."""
        cp = self.sequencer.checkpoint(prune_horizon=PRUNE_HORIZON)
        return tuple((p["producer"], p["last_ack"], p["begin"]) for p in cp["producers"])

    def _sequence(self, env: Envelope, kept: list[Envelope]) -> None:
        """Queue ``env``; add what it commits to ``kept`` when it lies at or after ``emit_from``."""
        seq, emit_from = self.sequencer, self.part.emit_from
        outcome = seq.queue(env)
        if env.clock and self.part.lookback_cut:  # only a cut window can miss a transaction's start
            self._first_seen.setdefault(env.producer, env.begin)
            if env.flags == Flags.ACK_TXN and outcome.commits and env.begin >= emit_from:
                self._check_known(env)
            if outcome in _KNOWN_AFTER:
                self._known.add(env.producer)
        if not seq.pending_commit:
            return
        emit = self.emit and env.begin >= emit_from
        rng = seq.replay_range()
        if rng is not None:
            # Nothing is emitted before emit_from (nor by the driver's scan): the sequencer's
            # state after the commit does not depend on the replayed messages, so skip them.
            seq.replay(self._replay(*rng) if emit else ())
        committed = list(seq.dequeue(include_acks=False))  # drained either way: it moves the state
        if emit:
            kept.extend(committed)

    def _check_known(self, env: Envelope) -> None:
        if env.producer not in self._known:
            self.suspects.append((env.producer, self._first_seen.get(env.producer, env.begin), env.begin))

    def finish(self) -> None:
        """Log (once per partition) the transactions that may have begun before the window."""
        if not self.suspects:
            return
        producer, first, ack = self.suspects[0]
        window = self.part.segments[0].begin if self.part.segments else self.part.emit_from
        log.warning(
            "journal %r: %d transaction(s) committed in [%d, %d) may have begun before the read-committed "
            "window, which starts at offset %d (readCommittedLookbackBytes=%d): their messages before offset "
            "%d, if any, are not emitted. The window saw no earlier ACK of their producers, e.g. producer %s, "
            "whose ACK at offset %d commits messages from offset %d. Raise readCommittedLookbackBytes above "
            "the longest transaction (in bytes of the journal)",
            self.journal,
            len(self.suspects),
            self.part.emit_from,
            self.part.segments[-1].end if self.part.segments else self.part.emit_from,
            window,
            self.opts.read_committed_lookback,
            window,
            producer.hex(),
            ack,
            first,
        )


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


# -- the fast path: the same sequencing over numpy columns ------------------------------------

#: A span's held messages (its CONTINUE_TXN messages not yet committed) keep their 1 MiB pieces
#: alive; past this many bytes of pieces a span forgets its oldest pieces and its commit replays
#: them from the journal instead, as the sequencer's bounded ring does.
HOLD_BYTES = 64 << 20


class SpanState:
    """One producer's sequencing state (the sequencer's per-producer state): last ACK clock (``min``),
    highest clock of the open span (``max``), its begin offset or -1, and the span's messages
    still held (piece number, row, clock), oldest first."""

    __slots__ = ("min", "max", "begin", "held")

    def __init__(self, lo: int, hi: int, begin: int = -1):
        self.min, self.max, self.begin = lo, hi, begin
        self.held: list[tuple[int, int, int]] = []


def restored_states(producers: tuple[ProducerState, ...] | None) -> dict[int, SpanState]:
    """The producers of an offset entry as sequencing states to advance."""
    return {int(p, 16): SpanState(ack, ack, begin) for p, ack, begin in producers or ()}


def pruned_states(states: dict[int, SpanState]) -> tuple[ProducerState, ...]:
    """The states as an offset's producers, pruned as :meth:`Sequencer.checkpoint` prunes."""
    newest = max((st.min for st in states.values()), default=0)
    newest = max(newest, 0)
    horizon = int(PRUNE_HORIZON * 10_000_000) << 4
    return tuple(
        (format(p, "012x"), st.min, st.begin) for p, st in sorted(states.items()) if not st.max < newest - horizon
    )


#: The former names, which the unit tests of this module still import.
_restored, _pruned = restored_states, pruned_states


def advance(states: dict[int, SpanState], producer, clock, flags, begins) -> None:
    """Move ``states`` over messages (numpy columns, journal order) as Gazette's sequencer does.

    Only the state is tracked: whatever a commit emits, the producer's state after it is its
    committing clock with no open span, so no message needs holding."""
    keep = np.flatnonzero(clock)  # clock 0: committed at once, no state
    if not keep.size:
        return
    # An ACK leaves its producer at (its clock, its clock, no span) whatever came before: start
    # each producer at its last ACK, and step through the messages after it only.
    ids, inverse = np.unique(producer[keep], return_inverse=True)
    acked = flags[keep] == Flags.ACK_TXN
    last = np.full(len(ids), -1, np.int64)
    np.maximum.at(last, inverse[acked], np.flatnonzero(acked))
    for p, i in zip(ids.tolist(), last.tolist(), strict=True):
        if i >= 0:
            c = int(clock[keep[i]])
            states[p] = SpanState(c, c)
    keep = keep[np.arange(len(keep)) > last[inverse]]
    for p, c, f, b in zip(
        producer[keep].tolist(), clock[keep].tolist(), flags[keep].tolist(), begins[keep].tolist(), strict=True
    ):
        st = states.get(p)
        if st is None:
            st = states[p] = SpanState(c - 1, c - 1)
        if f == Flags.CONTINUE_TXN:
            if c > st.max:  # else a duplicate, or at or below the last ACK
                if st.begin == -1:
                    st.begin = b
                st.max = c
        elif f == Flags.ACK_TXN or c > st.min:  # an ACK commits or rolls back; OUTSIDE commits
            st.min = st.max = c
            st.begin = -1


def advance_messages(states: dict[int, SpanState], msgs: Messages, framing: Framing, opts: ReadOptions) -> None:
    """:func:`advance` over one piece of messages, their UUIDs read as columns."""
    producer, clock, flags = uuid_columns(msgs.values, framing, opts.uuid_pointer, opts.uuid_field)
    if opts.collection:
        flags &= TXN_MASK
    advance(states, producer, clock, flags, msgs.offsets.to_numpy())


def copy_states(states: dict[int, SpanState]) -> dict[int, SpanState]:
    """The producers' states as they are now (the driver's states hold no messages)."""
    return {p: SpanState(st.min, st.max, st.begin) for p, st in states.items()}


def state_pieces(snap: Snapshot, begin: int, end: int, opts: ReadOptions) -> Iterator[Messages]:
    """The pieces of messages beginning in ``[begin, end)`` as a state scan reads them (a message
    that begins before ``begin`` is skipped, as the batch starting there skips it)."""
    yield from partition_messages(committed_partition(snap, entry(begin, ()), end, opts, 0), opts)


def scan_state(snap: Snapshot, start, end: int, opts: ReadOptions) -> dict:
    """Driver side: the offset entry of ``end`` with the sequencer's state there, from the batch
    ``[start, end)`` (``start`` an offset entry). Reads what the batch's task reads, UUIDs only,
    and tracks producer states in numpy columns (:func:`advance`)."""
    part = committed_partition(snap, start, end, opts, 0)
    states = restored_states(part.producers)
    for msgs in partition_messages(part, opts):
        advance_messages(states, msgs, part.framing, opts)
    return entry(end, pruned_states(states))


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
            if (st is not None and first <= st.max) or (c.size > 1 and not (c[1:] > c[:-1]).all()):
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
                st = states[p] = SpanState(int(c[0]) - 1, int(c[0]) - 1)
            if at.size:
                last = int(at[-1])
                st.min = st.max = int(c[last])
                st.begin, st.held = -1, []
                tail = slice(last + 1, None)
            else:
                tail = slice(0, None)
            if r[tail].size:
                if st.begin == -1:
                    st.begin = int(b[tail][0])
                st.max = int(c[-1])
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
                st = states[p] = SpanState(c - 1, c - 1)
            if f == Flags.CONTINUE_TXN:
                if c > st.max:
                    if st.begin == -1:
                        st.begin = b
                    st.max = c
                    st.held.append((piece, i, c))
            elif f == Flags.ACK_TXN:
                if c < st.min and b >= emit_from:
                    self._log(
                        msgs,
                        i,
                        p,
                        c,
                        f,
                        st,
                        "ACK_TXN below the last ACK: loss of exactly-once (an upstream checkpoint regressed)",
                    )
                if c > st.min and st.begin != -1 and b >= emit_from:
                    self._commit(p, st, c, b, out)
                st.min = st.max = c
                st.begin = -1
                st.held = []
            else:
                if f != Flags.OUTSIDE_TXN and b >= emit_from:
                    self._log(msgs, i, p, c, f, st, f"unexpected UUID flags {f:#x}, treated as OUTSIDE_TXN")
                if c > st.min:
                    if st.begin != -1 and b >= emit_from:
                        self._log(
                            msgs,
                            i,
                            p,
                            c,
                            f,
                            st,
                            "OUTSIDE_TXN discards a pending CONTINUE_TXN span of the same producer",
                        )
                    if b >= emit_from:
                        out.append((piece, i))
                    st.min = st.max = c
                    st.begin = -1
                    st.held = []
        return out

    def _commit(self, p: int, st: SpanState, ack: int, at: int, out: list[tuple[int, int]]) -> int:
        """Emit ``st``'s span committed by an ACK of clock ``ack`` at offset ``at``: the replay of
        what is no longer held, then the held messages, skipping duplicates and clocks past ``ack``."""
        lo = st.min
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
        log_sequencing_error(env, st.min, st.max, st.begin, what)

    def finish(self) -> None:
        pass
