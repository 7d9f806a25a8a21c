"""Read-committed streaming reads: Gazette's sequencer across micro-batch boundaries.

Offsets stay ``{journal: byte offset}``: Spark fixes a batch's end on the driver before any
task reads, so the sequencer's state at that offset cannot be part of it. Each batch rebuilds
the state instead, which keeps a re-run of a batch (after a crash, from the checkpoint) exactly
the same:

* A committed message is emitted by the micro-batch ``[S, E)`` that holds the offset of the
  message that **committed** it: its own offset for OUTSIDE_TXN (and UUID-less) messages, the
  ACK_TXN message's offset for the members of a transaction. A transaction open at a batch
  boundary is therefore emitted whole, once, by the batch holding its ACK; rolled-back,
  duplicate and still-pending messages are never emitted.
* To know what is pending at ``S``, the batch's one task per journal reads from
  ``W = max(S - readCommittedLookbackBytes, start of the content covering S)`` and feeds
  ``[W, S)`` through the sequencer without emitting. ``W`` depends only on ``S``, the option and
  the journal's fragments, so the same batch gives the same rows each time it runs.
* A transaction whose first message lies before ``W`` loses the messages before ``W``, and a
  re-sent duplicate of a message acknowledged before ``W`` is not recognised. When the window
  was cut by the lookback (not by the journal's start) and an ACK in ``[S, E)`` commits a
  producer the window had not seen acknowledge anything before, a warning names the journal,
  producer and offsets: raise ``readCommittedLookbackBytes`` above the longest transaction.

Why one partition per journal and batch: the sequencer needs the journal's messages in order,
and a second partition would have to re-read the first one's range to learn its state.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.types import StructType

from pyspark_gazette.message import Envelope, Flags, Framing, Outcome, Sequencer
from pyspark_gazette.spark.options import ReadOptions
from pyspark_gazette.spark.read.arrow_output import OutputBuilder, uuid_parts
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


@dataclasses.dataclass(frozen=True)
class CommittedStreamPartition(GazettePartition):
    """One journal's micro-batch ``[emit_from, end)`` read from the window start ``segments[0].begin``.

    ``lookback_cut`` says whether the window was cut by ``readCommittedLookbackBytes`` (content
    before it exists), which is when a transaction may be lost.
    """

    emit_from: int
    lookback_cut: bool

    def __init__(
        self,
        index: int,
        journal: str,
        framing: Framing,
        segments: tuple,
        emit_from: int,
        lookback_cut: bool,
    ):
        super().__init__(index, journal, framing, segments)
        object.__setattr__(self, "emit_from", emit_from)
        object.__setattr__(self, "lookback_cut", lookback_cut)


def window_start(snap: Snapshot, start: int, lookback: int) -> tuple[int, bool]:
    """``(W, cut by the lookback)``: where the sequencer starts for a batch starting at ``start``.

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


def committed_partition(
    snap: Snapshot, start: int, end: int, opts: ReadOptions, index: int
) -> CommittedStreamPartition:
    """The one partition of ``snap``'s micro-batch ``[start, end)`` in read-committed mode."""
    begin, cut = window_start(snap, start, opts.read_committed_lookback)
    segs = segments(snap, begin, end, opts)
    return CommittedStreamPartition(index, snap.name, snap.framing, tuple(segs), start, cut)


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
    """Sequences a window's messages; keeps those committed at or after ``emit_from``."""

    def __init__(self, part: CommittedStreamPartition, opts: ReadOptions):
        super().__init__(part.journal, part.framing, opts)
        self.part = part
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
                quiet.on = env.begin < emit_from
                self._sequence(env, kept)
        finally:
            seq_log.removeFilter(quiet)
        return Messages.of_envelopes(kept, msgs.mod_time)

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
        emit = env.begin >= emit_from
        rng = seq.replay_range()
        if rng is not None:
            # Nothing is emitted before emit_from: the sequencer's state after the commit
            # does not depend on the replayed messages, so skip re-reading them.
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
    builder = OutputBuilder(schema, opts, part.framing)
    window = WindowFilter(part, opts)
    for msgs in partition_messages(part, opts):
        kept = window.filter(msgs)
        if kept is None:
            continue
        batch = builder.build(part.journal, kept)
        if batch is not None and batch.num_rows:
            yield batch
    window.finish()
