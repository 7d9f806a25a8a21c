"""Read-committed sequencing of read-uncommitted messages (facts sheet section 5.4).

Messages are read from journals in offset order, each with its UUID's producer, clock and
flags, and :meth:`Sequencer.queue`-d one at a time. After each queue, :meth:`Sequencer.dequeue`
yields the messages that are now committed, in order:

* a message with clock 0 (e.g. a nil UUID) is committed at once, without deduplication;
* OUTSIDE_TXN commits itself, unless its clock is at or below the producer's last ACK
  (a duplicate). A pending CONTINUE_TXN span of that producer is discarded (logged);
* CONTINUE_TXN opens or extends the producer's pending span; clocks at or below the last
  ACK, or at or below the span's highest clock, are duplicates and ignored;
* ACK_TXN at or below the last ACK rolls the span back (below it is logged as a loss of
  exactly-once: an upstream checkpoint regressed); otherwise it commits the span's messages
  with clock <= its own, in order, followed by the ACK itself. Messages of the span with a
  larger clock are rolled back.

The rule itself (the outcome of each message, and the producer's state after it) lives in
:mod:`~pyspark_gazette.message.producer`, which every read-committed path shares; this module
adds what emitting needs: per (journal, producer) a
:class:`~pyspark_gazette.message.producer.ProducerState` with its span's envelopes. Recent
envelopes sit in a ring buffer of ``ring_size``; a commit whose span starts before what the
ring still holds needs a **replay**: :meth:`Sequencer.replay_range` gives ``(journal, begin,
end)``, the caller re-reads those bytes and hands the envelopes to :meth:`Sequencer.replay`
(other producers' messages are filtered out), then dequeues as usual.

:meth:`Sequencer.checkpoint` returns JSON-able state (read-through offsets and, per producer,
the last ACK clock and the pending span's begin) that :class:`Sequencer` restores from. A
transaction open at a checkpoint commits correctly after a restore, through a replay from
its ``begin``. Readers resume at :attr:`Sequencer.offsets`.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator

from pyspark_gazette.errors import SequencerError
from pyspark_gazette.message.envelope import Envelope, Outcome
from pyspark_gazette.message.producer import ProducerState, decide, reports
from pyspark_gazette.message.uuids import Flags

log = logging.getLogger(__name__)

CHECKPOINT_VERSION = 1
DEFAULT_RING_SIZE = 1024


class _Producer(ProducerState):
    """A :class:`ProducerState` with the ring sequence numbers of its open span's envelopes."""

    __slots__ = ("journal", "producer", "ring")

    def __init__(self, journal: str, producer: bytes, last_ack: int, max_clock: int, begin: int = -1):
        super().__init__(last_ack, max_clock, begin)
        self.journal, self.producer = journal, producer
        self.ring: deque[int] = deque()

    def acked(self, clock: int) -> None:
        super().acked(clock)
        self.ring.clear()


class Sequencer:
    """Read-committed sequencer; see the module docstring.

    ``initial`` is a dict from :meth:`checkpoint`. Not thread-safe.
    """

    def __init__(self, ring_size: int = DEFAULT_RING_SIZE, initial: dict | None = None):
        if ring_size < 1:
            raise SequencerError(f"ring_size must be at least 1, not {ring_size}")
        self.ring_size = ring_size
        self._ring: deque[Envelope] = deque()
        self._ring_first = 0  # Sequence number of self._ring[0].
        self._producers: dict[tuple[str, bytes], _Producer] = {}
        self._offsets: dict[str, int] = {}
        self._emit: _Producer | None = None
        self._replay_it: Iterator[Envelope] | None = None
        self._replay_head: Envelope | None = None  # Yielded but not yet acknowledged by the caller.
        self._needs_replay = False
        if initial is not None:
            self._restore(initial)

    # ---------------------------------------------------------------------------------------
    # Queueing.

    def queue(self, env: Envelope) -> Outcome:
        """Apply the next read-uncommitted envelope; returns what was decided.

        When the outcome commits (see :attr:`Outcome.commits`), drain :meth:`dequeue` before
        queueing again (after :meth:`replay` for ``ACK_COMMIT_REPLAY``).
        """
        if self._emit is not None:
            raise SequencerError("committed messages remain to dequeue; drain dequeue() first")
        self._make_room()  # Evict first, so the outcome sees what the ring will really hold.
        key = (env.journal, env.producer)
        clock, flags = env.clock, env.flags

        if clock == 0:
            # Committed at once; not indexed, never deduplicated.
            state = _Producer(env.journal, env.producer, 0, 0)
            flags, clock = Flags.OUTSIDE_TXN, 1
        else:
            state = self._producers.get(key)  # type: ignore[assignment]
            if state is None:
                state = self._producers[key] = _Producer(env.journal, env.producer, clock - 1, clock - 1)

        outcome = decide(state, clock, flags)
        for what in reports(state, clock, flags, outcome):
            self._log(env, state, what)
        if outcome is Outcome.ACK_COMMIT_RING and not (state.ring and self._at(state.ring[0]).begin == state.begin):
            outcome = Outcome.ACK_COMMIT_REPLAY  # the span's start has left the ring

        if not outcome.commits:
            if outcome.holds:
                self._push(env, state)
            state.apply(outcome, clock, env.begin)
            self._offsets[env.journal] = env.end
        else:
            # A commit. The read-through offset moves only once the sequence is dequeued, so a
            # checkpoint taken meanwhile re-reads the committing message after a restore.
            if outcome is Outcome.OUTSIDE_COMMIT:
                state.begin = env.begin
                state.ring.clear()
            elif outcome is Outcome.ACK_EMPTY:
                state.begin = env.begin
            self._push(env, state)
            state.max_clock = clock  # Commit through clock; higher clocks of the span roll back.
            self._emit = state
            self._needs_replay = outcome is Outcome.ACK_COMMIT_REPLAY
            self._replay_it = None
        return outcome

    # ---------------------------------------------------------------------------------------
    # Dequeueing and replays.

    @property
    def pending_commit(self) -> bool:
        """Whether committed messages wait to be dequeued."""
        return self._emit is not None

    def replay_range(self) -> tuple[str, int, int] | None:
        """``(journal, begin, end)`` to re-read before dequeueing, or ``None`` if no replay is needed."""
        emit = self._emit
        if emit is None or not self._needs_replay:
            return None
        return emit.journal, emit.begin, self._at(emit.ring[0]).begin

    def replay(self, envelopes: Iterable[Envelope]) -> None:
        """Supply the envelopes read from :meth:`replay_range` (any producer; others are skipped)."""
        if self._emit is None or not self._needs_replay:
            raise SequencerError("no replay is needed")
        self._replay_it = iter(envelopes)
        self._replay_head = None

    def dequeue(self, *, include_acks: bool = True) -> Iterator[Envelope]:
        """Yield the committed messages of the last :meth:`queue`, in order, then finish.

        The committing ACK itself is yielded last unless ``include_acks=False`` (see
        :attr:`Envelope.is_ack`). Each yielded message counts as processed when the caller asks
        for the next one; a caller that stops early may call ``dequeue()`` again and gets the
        unprocessed message again.
        """
        emit = self._emit
        if emit is None:
            return
        if self._needs_replay:
            if self._replay_it is None and self._replay_head is None:
                raise SequencerError(
                    f"a replay of {self.replay_range()} is required: read it and call replay() before dequeue()"
                )
            ring_begin = self._at(emit.ring[0]).begin
            while True:
                env = self._replay_head
                if env is None:
                    env = next(self._replay_it, None) if self._replay_it is not None else None
                    if env is None:
                        break
                    self._check_replayed(env, emit, ring_begin)
                    if env.producer != emit.producer or env.clock == 0 or not self._committable(env, emit):
                        continue  # Other producers, and clock-0 messages (committed on their own).
                    self._replay_head = env
                emit.begin = env.begin
                if include_acks or not env.is_ack:
                    yield env
                self._replay_head = None
                emit.last_ack = env.clock
            self._replay_it = None
            self._needs_replay = False

        last: Envelope | None = None
        while emit.ring:
            env = self._at(emit.ring[0])
            if not self._committable(env, emit):
                emit.ring.popleft()
                continue
            emit.begin = env.begin
            if include_acks or not env.is_ack:
                yield env
            emit.ring.popleft()
            if env.clock:
                emit.last_ack = env.clock
            last = env

        if last is not None:
            self._offsets[emit.journal] = last.end
        emit.acked(emit.last_ack)
        self._emit = None

    @staticmethod
    def _committable(env: Envelope, emit: _Producer) -> bool:
        # Skip duplicates of what was already dequeued: expected while replaying, and in the
        # ring after a restore (the restored span's max clock is unknown, so re-sent copies
        # of its messages were queued), and messages past the ACK's clock (rolled back).
        if env.clock != 0 and env.clock <= emit.last_ack:
            return False
        return env.clock <= emit.max_clock

    @staticmethod
    def _check_replayed(env: Envelope, emit: _Producer, ring_begin: int) -> None:
        if env.journal != emit.journal:
            raise SequencerError(f"replay of journal {env.journal!r}, expected {emit.journal!r}")
        if env.begin < emit.begin:
            raise SequencerError(f"replayed message begins at {env.begin}, before {emit.begin}")
        if env.end > ring_begin:
            raise SequencerError(f"replayed message ends at {env.end}, past {ring_begin}")

    def sequence(
        self,
        envelopes: Iterable[Envelope],
        replay_reader: Callable[[str, int, int], Iterable[Envelope]] | None = None,
        *,
        include_acks: bool = True,
    ) -> Iterator[Envelope]:
        """Queue every envelope and yield committed messages; ``replay_reader(journal, begin,
        end)`` re-reads a byte range when a commit needs a replay (required in that case)."""
        for env in envelopes:
            self.queue(env)
            if self._emit is None:
                continue
            rng = self.replay_range()
            if rng is not None:
                if replay_reader is None:
                    raise SequencerError(f"a replay of {rng} is required but no replay_reader was given")
                self.replay(replay_reader(*rng))
            yield from self.dequeue(include_acks=include_acks)

    # ---------------------------------------------------------------------------------------
    # Ring buffer.

    def _at(self, seq: int) -> Envelope:
        return self._ring[seq - self._ring_first]

    def _make_room(self) -> None:
        if len(self._ring) < self.ring_size:
            return
        old = self._ring.popleft()
        seq = self._ring_first
        self._ring_first += 1
        owner = self._producers.get((old.journal, old.producer))
        if owner is not None and owner.ring and owner.ring[0] == seq:
            owner.ring.popleft()  # Its span now starts before the ring: a commit needs a replay.

    def _push(self, env: Envelope, state: _Producer) -> None:
        self._ring.append(env)
        state.ring.append(self._ring_first + len(self._ring) - 1)

    # ---------------------------------------------------------------------------------------
    # Checkpoints.

    @property
    def offsets(self) -> dict[str, int]:
        """Per journal, the offset through which messages are fully sequenced (resume here)."""
        return dict(self._offsets)

    def has_pending(self) -> bool:
        """Whether some producer has an open (uncommitted) span."""
        return any(p.begin != -1 for p in self._producers.values())

    def checkpoint(self, prune_horizon: float | None = None) -> dict:
        """JSON-able state to restore a :class:`Sequencer` from (``Sequencer(initial=...)``).

        ``{"version": 1, "offsets": {journal: offset}, "producers": [{"journal", "producer"
        (hex), "last_ack", "begin"}]}``. ``begin`` is the first offset of the producer's open
        span, or -1. With ``prune_horizon`` (seconds), producers whose newest clock is older
        than the journal's newest last-ACK minus the horizon are forgotten.
        """
        if self._emit is not None:
            raise SequencerError("cannot checkpoint while committed messages remain to dequeue")
        if prune_horizon is not None and prune_horizon > 0:
            newest: dict[str, int] = {}
            for p in self._producers.values():
                newest[p.journal] = max(newest.get(p.journal, 0), p.last_ack)
            horizon = int(prune_horizon * 10_000_000) << 4
            for key, p in list(self._producers.items()):
                if p.max_clock < newest[p.journal] - horizon:
                    del self._producers[key]
        producers = [
            {"journal": p.journal, "producer": p.producer.hex(), "last_ack": p.last_ack, "begin": p.begin}
            for p in sorted(self._producers.values(), key=lambda p: (p.journal, p.producer))
        ]
        return {"version": CHECKPOINT_VERSION, "offsets": dict(sorted(self._offsets.items())), "producers": producers}

    def _restore(self, state: dict) -> None:
        try:
            if state.get("version", CHECKPOINT_VERSION) != CHECKPOINT_VERSION:
                raise SequencerError(f"unsupported sequencer checkpoint version {state.get('version')!r}")
            self._offsets = {str(j): int(o) for j, o in state.get("offsets", {}).items()}
            for item in state.get("producers", []):
                journal, producer = str(item["journal"]), bytes.fromhex(item["producer"])
                if len(producer) != 6:
                    raise SequencerError(f"producer id {item['producer']!r} is not 6 bytes")
                last_ack = int(item["last_ack"])
                self._producers[(journal, producer)] = _Producer(
                    journal, producer, last_ack, last_ack, int(item["begin"])
                )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise SequencerError(f"malformed sequencer checkpoint: {e!r}") from e

    # ---------------------------------------------------------------------------------------

    @staticmethod
    def _log(env: Envelope, st: _Producer, what: str) -> None:
        log_sequencing_error(env, st.last_ack, st.max_clock, st.begin, what)


def log_sequencing_error(env: Envelope, last_ack: int, max_clock: int, begin: int, what: str) -> None:
    """Log ``what`` went wrong sequencing ``env``, with its producer's state (last ACK clock,
    highest clock of the open span, the span's begin offset or -1)."""
    log.error(
        f"{what} (journal {env.journal}, offsets [{env.begin}, {env.end}), producer {env.producer.hex()}, "
        f"clock {env.clock}, flags {env.flags:#x}; last ack {last_ack}, max {max_clock}, begin {begin})"
    )


__all__ = ["CHECKPOINT_VERSION", "DEFAULT_RING_SIZE", "Envelope", "Outcome", "Sequencer", "log_sequencing_error"]
