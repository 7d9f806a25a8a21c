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
  sequences ``[S, E)`` from the state at ``S``, reading message UUIDs only, the same messages
  the task reads. Producers last seen more than :data:`PRUNE_HORIZON` seconds (of their clocks)
  before the journal's newest ACK are dropped, as Gazette's consumers do.
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

import pyarrow as pa
from pyspark.sql.types import StructType

from pyspark_gazette.flow.documents import TXN_MASK
from pyspark_gazette.message import Envelope, Flags, Framing, Outcome, Sequencer
from pyspark_gazette.spark.options import ReadOptions
from pyspark_gazette.spark.read.arrow_output import uuid_parts
from pyspark_gazette.spark.read.flow import output_builder
from pyspark_gazette.spark.read.plan import GazettePartition, Segment, Snapshot, segments
from pyspark_gazette.spark.read.segments import Messages, partition_messages, segment_messages

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

    def __init__(
        self,
        index: int,
        journal: str,
        framing: Framing,
        segments: tuple,
        emit_from: int,
        lookback_cut: bool,
        producers: tuple[ProducerState, ...] | None = None,
    ):
        super().__init__(index, journal, framing, segments)
        object.__setattr__(self, "emit_from", emit_from)
        object.__setattr__(self, "lookback_cut", lookback_cut)
        object.__setattr__(self, "producers", producers)


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
    return CommittedStreamPartition(index, snap.name, snap.framing, tuple(segs), s, cut, producers)


def scan_state(snap: Snapshot, start, end: int, opts: ReadOptions) -> dict:
    """Driver side: the offset entry of ``end`` with the sequencer's state there, from the batch
    ``[start, end)`` (``start`` an offset entry). Reads what the batch's task reads, UUIDs only."""
    part = committed_partition(snap, start, end, opts, 0)
    window = WindowFilter(part, opts, emit=False)
    for msgs in partition_messages(part, opts):
        window.filter(msgs)
    return entry(end, window.producer_states())


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
    builder = output_builder(schema, opts, part.framing)
    window = WindowFilter(part, opts)
    for msgs in partition_messages(part, opts):
        kept = window.filter(msgs)
        if kept is None:
            continue
        batch = builder.build(part.journal, kept)
        if batch is not None and batch.num_rows:
            yield batch
    window.finish()
