"""Gazette's per-producer sequencing rule, stated once (docs/protocol.md, read-committed reads).

Every reader of read-committed journals moves one :class:`ProducerState` per (journal, producer)
over that producer's messages in journal order, with :func:`decide` (what a message does) and
:meth:`ProducerState.apply` (the state after it). The callers differ only in what they keep of the
messages themselves:

* :class:`~pyspark_gazette.message.Sequencer` holds a pending span's messages in a ring and emits
  them when an ACK commits it (Gazette's ``message.Sequencer``);
* a read-committed stream's driver tracks states only, to put them into the stream's offsets
  (:func:`~pyspark_gazette.spark.read.committed.advance`), and so does the scan done ahead of the
  next micro-batch;
* a micro-batch's task emits with numpy columns where every producer's clocks rise through a
  piece of messages, and steps through anything else with these two functions
  (:class:`~pyspark_gazette.spark.read.committed_task.FastWindow`).

The rule (``last_ack`` is the clock of the producer's last ACK, an exclusive minimum; ``max_clock``
the highest clock of its open span; ``begin`` the span's first offset, or -1 without one):

======================  ======================================  ===========================
message                 condition                               outcome
======================  ======================================  ===========================
CONTINUE_TXN            clock <= last_ack                       CONTINUE_ALREADY_ACKED
CONTINUE_TXN            clock <= max_clock                      CONTINUE_DUPLICATE
CONTINUE_TXN            otherwise, no open span / open span     CONTINUE_BEGIN_SPAN / _EXTEND_SPAN
ACK_TXN                 clock <= last_ack                       ACK_ROLLBACK (below: reported)
ACK_TXN                 no open span                            ACK_EMPTY
ACK_TXN                 otherwise                               ACK_COMMIT_RING
OUTSIDE_TXN (or other)  clock <= last_ack                       OUTSIDE_ALREADY_ACKED
OUTSIDE_TXN (or other)  otherwise                               OUTSIDE_COMMIT
======================  ======================================  ===========================

After a commit or a rollback the producer's state is its message's clock, with no open span.
A message of clock 0 (a nil UUID) commits at once and touches no state; the callers handle it.
``ACK_COMMIT_RING`` is the rule's one answer for an ACK that commits its span: a caller that holds
a bounded window of messages turns it into ``ACK_COMMIT_REPLAY`` when the span's start has left it.
"""

from __future__ import annotations

from typing import TypeVar

from pyspark_gazette.message.envelope import Outcome
from pyspark_gazette.message.uuids import Flags

_CONTINUE, _ACK, _OUTSIDE = int(Flags.CONTINUE_TXN), int(Flags.ACK_TXN), int(Flags.OUTSIDE_TXN)

#: What :func:`reports` says; Gazette logs the same three conditions.
ACK_BELOW_LAST_ACK = "ACK_TXN below the last ACK: loss of exactly-once (an upstream checkpoint regressed)"
DISCARDS_SPAN = "OUTSIDE_TXN discards a pending CONTINUE_TXN span of the same producer"


_State = TypeVar("_State", bound="ProducerState")


class ProducerState:
    """The sequencing state of one (journal, producer); see the module docstring."""

    __slots__ = ("last_ack", "max_clock", "begin")

    def __init__(self, last_ack: int, max_clock: int | None = None, begin: int = -1):
        self.last_ack = last_ack
        self.max_clock = last_ack if max_clock is None else max_clock
        self.begin = begin

    @classmethod
    def first_seen(cls: type[_State], clock: int) -> _State:
        """The state of a producer first seen with a message of ``clock``: everything before it is
        unknown, so the message is neither a duplicate nor already acknowledged."""
        return cls(clock - 1)

    def acked(self, clock: int) -> None:
        """The state after a commit or rollback at ``clock``: no open span."""
        self.last_ack = self.max_clock = clock
        self.begin = -1

    def apply(self, outcome: Outcome, clock: int, begin: int) -> None:
        """Move to the state after a message of ``clock`` at offset ``begin`` decided ``outcome``."""
        if outcome is Outcome.CONTINUE_BEGIN_SPAN:
            self.begin, self.max_clock = begin, clock
        elif outcome is Outcome.CONTINUE_EXTEND_SPAN:
            self.max_clock = clock
        elif outcome is Outcome.ACK_ROLLBACK or outcome.commits:
            self.acked(clock)

    def __repr__(self) -> str:
        return f"ProducerState(last_ack={self.last_ack}, max_clock={self.max_clock}, begin={self.begin})"


def decide(state: ProducerState, clock: int, flags: int) -> Outcome:
    """What a message of ``clock`` (not 0) and ``flags`` does to a producer in ``state``."""
    if flags == _CONTINUE:
        if clock <= state.last_ack:
            return Outcome.CONTINUE_ALREADY_ACKED
        if clock <= state.max_clock:
            return Outcome.CONTINUE_DUPLICATE
        return Outcome.CONTINUE_BEGIN_SPAN if state.begin == -1 else Outcome.CONTINUE_EXTEND_SPAN
    if flags == _ACK:
        if clock <= state.last_ack:
            return Outcome.ACK_ROLLBACK
        return Outcome.ACK_EMPTY if state.begin == -1 else Outcome.ACK_COMMIT_RING
    return Outcome.OUTSIDE_ALREADY_ACKED if clock <= state.last_ack else Outcome.OUTSIDE_COMMIT


def reports(state: ProducerState, clock: int, flags: int, outcome: Outcome) -> tuple[str, ...]:
    """What is worth an error log about a message that decided ``outcome`` from ``state`` (the
    state before it): an ACK below the last ACK, flags that are none of the three, an OUTSIDE_TXN
    message that discards an open span."""
    out: tuple[str, ...] = ()
    if flags != _CONTINUE and flags != _ACK and flags != _OUTSIDE:
        out = (f"unexpected UUID flags {flags:#x}, treated as OUTSIDE_TXN",)
    if outcome is Outcome.ACK_ROLLBACK and clock < state.last_ack:
        out += (ACK_BELOW_LAST_ACK,)
    elif outcome is Outcome.OUTSIDE_COMMIT and state.begin != -1:
        out += (DISCARDS_SPAN,)
    return out


__all__ = ["ProducerState", "decide", "reports"]
