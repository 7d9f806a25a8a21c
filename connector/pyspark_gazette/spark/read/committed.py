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
  (:func:`~pyspark_gazette.spark.read.uuid_columns.uuid_columns`), and the task
  (:mod:`~pyspark_gazette.spark.read.committed_task`) emits a whole piece of messages with
  array operations when every producer's clocks rise through it (what a publisher writes); any
  other piece is stepped through message by message. Every path follows the one statement of
  the rule, :mod:`~pyspark_gazette.message.producer`, and gives exactly what Gazette's
  sequencer (:class:`~pyspark_gazette.message.Sequencer`, which :class:`WindowFilter` drives)
  gives; the unit tests compare them on random journals cut anywhere.
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

from pyspark_gazette.flow.documents import TXN_MASK
from pyspark_gazette.message import Envelope, Flags, Framing, Outcome, Sequencer
from pyspark_gazette.message.producer import ProducerState, decide
from pyspark_gazette.spark.options import ReadOptions
from pyspark_gazette.spark.read.arrow_output import uuid_parts
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
SavedProducer = tuple[str, int, int]


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


def state_of(entry, journal: str = "") -> tuple[SavedProducer, ...] | None:
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


def entry(offset: int, producers: tuple[SavedProducer, ...]) -> dict:
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
    producers: tuple[SavedProducer, ...] | None
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
        producers: tuple[SavedProducer, ...] | None = None,
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

    def __init__(self, journal: str, framing: Framing, opts: ReadOptions, segments: tuple[Segment, ...] = ()):
        self.journal, self.framing, self.opts = journal, framing, opts
        self.sequencer = Sequencer()
        #: The partition's segments: a ``store.url`` read replays from them (there is no broker).
        self.segments = segments

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
        for seg in self._replayed(journal, begin, end):
            for msgs in segment_messages(seg, self.framing, self.opts):
                yield from self._envelopes(msgs)

    def _replayed(self, journal: str, begin: int, end: int) -> list[Segment]:
        """The segments a replay of ``[begin, end)`` reads: through the brokers, or for a
        ``store.url`` read the pieces of the partition's own store segments (every piece begins
        at a message: ``begin``, or where a fragment ended)."""
        if not self.opts.store_url:
            return [Segment(journal, begin, end)]
        return [
            dataclasses.replace(s, begin=max(s.begin, begin), end=min(s.end, end), boundary=True)
            for s in self.segments
            if s.fragment is not None and s.begin < end and begin < s.end
        ]

    def filter(self, msgs: Messages) -> Messages | None:
        committed = list(self.sequencer.sequence(self._envelopes(msgs), self._replay, include_acks=False))
        return Messages.of_envelopes(committed, msgs.mod_time)


class WindowFilter(CommittedFilter):
    """Sequences a partition's messages from its restored state (or its window); keeps those
    committed at or after ``emit_from``. With ``emit=False`` (the driver's :func:`scan_state`)
    nothing is kept, replays are skipped and the sequencer's reports are not logged."""

    def __init__(self, part: CommittedStreamPartition, opts: ReadOptions, *, emit: bool = True):
        super().__init__(part.journal, part.framing, opts, (*part.replay_segments, *part.segments))
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

    def producer_states(self) -> tuple[SavedProducer, ...]:
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


# -- the fast path: the same sequencing over numpy columns ------------------------------------


class SpanState(ProducerState):
    """A producer's :class:`~pyspark_gazette.message.producer.ProducerState` with its open span's
    messages still held (piece number, row, clock), oldest first."""

    __slots__ = ("held",)

    def __init__(self, last_ack: int, max_clock: int | None = None, begin: int = -1):
        super().__init__(last_ack, max_clock, begin)
        self.held: list[tuple[int, int, int]] = []

    def acked(self, clock: int) -> None:
        super().acked(clock)
        self.held = []


def restored_states(producers: tuple[SavedProducer, ...] | None) -> dict[int, SpanState]:
    """The producers of an offset entry as sequencing states to advance."""
    return {int(p, 16): SpanState(ack, ack, begin) for p, ack, begin in producers or ()}


def pruned_states(states: dict[int, SpanState]) -> tuple[SavedProducer, ...]:
    """The states as an offset's producers, pruned as :meth:`Sequencer.checkpoint` prunes."""
    newest = max((st.last_ack for st in states.values()), default=0)
    newest = max(newest, 0)
    horizon = int(PRUNE_HORIZON * 10_000_000) << 4
    return tuple(
        (format(p, "012x"), st.last_ack, st.begin)
        for p, st in sorted(states.items())
        if not st.max_clock < newest - horizon
    )


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
            states[p] = SpanState(c)
    keep = keep[np.arange(len(keep)) > last[inverse]]
    for p, c, f, b in zip(
        producer[keep].tolist(), clock[keep].tolist(), flags[keep].tolist(), begins[keep].tolist(), strict=True
    ):
        st = states.get(p)
        if st is None:
            st = states[p] = SpanState(c - 1)
        st.apply(decide(st, c, f), c, b)


def advance_messages(states: dict[int, SpanState], msgs: Messages, framing: Framing, opts: ReadOptions) -> None:
    """:func:`advance` over one piece of messages, their UUIDs read as columns."""
    producer, clock, flags = uuid_columns(msgs.values, framing, opts.uuid_pointer, opts.uuid_field)
    if opts.collection:
        flags &= TXN_MASK
    advance(states, producer, clock, flags, msgs.offsets.to_numpy())


def copy_states(states: dict[int, SpanState]) -> dict[int, SpanState]:
    """The producers' states as they are now (the driver's states hold no messages)."""
    return {p: SpanState(st.last_ack, st.max_clock, st.begin) for p, st in states.items()}


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
