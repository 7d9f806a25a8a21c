"""The envelope of a message read from a journal, and the sequencer's queueing outcomes."""

from __future__ import annotations

import enum
import uuid as _uuid
from dataclasses import dataclass, field
from typing import Any

from pyspark_gazette.message.uuids import Flags, parse_uuid


@dataclass(frozen=True)
class Envelope:
    """One message read from a journal: where it sits, its UUID parts, and the message."""

    journal: str
    begin: int
    end: int
    producer: bytes
    clock: int
    flags: int
    message: Any = field(default=None, compare=False)

    @property
    def is_ack(self) -> bool:
        """ACK_TXN messages are dequeued too; most applications skip them."""
        return self.flags == Flags.ACK_TXN

    @classmethod
    def from_uuid(
        cls, journal: str, begin: int, end: int, u: _uuid.UUID | str | bytes, message: Any = None
    ) -> Envelope:
        producer, clock, flags = parse_uuid(u, allow_nil=True)
        return cls(journal, begin, end, producer, clock, flags, message)


class Outcome(str, enum.Enum):
    """What :meth:`Sequencer.queue` decided (the rows of the facts sheet's table)."""

    OUTSIDE_ALREADY_ACKED = "outside_already_acked"
    OUTSIDE_COMMIT = "outside_commit"
    CONTINUE_ALREADY_ACKED = "continue_already_acked"
    CONTINUE_DUPLICATE = "continue_duplicate"
    CONTINUE_BEGIN_SPAN = "continue_begin_span"
    CONTINUE_EXTEND_SPAN = "continue_extend_span"
    ACK_ROLLBACK = "ack_rollback"
    ACK_EMPTY = "ack_empty"
    ACK_COMMIT_RING = "ack_commit_ring"
    ACK_COMMIT_REPLAY = "ack_commit_replay"

    @property
    def commits(self) -> bool:
        return self in _COMMITTING

    @property
    def holds(self) -> bool:
        """The message joins its producer's open span (held until an ACK commits it)."""
        return self is Outcome.CONTINUE_BEGIN_SPAN or self is Outcome.CONTINUE_EXTEND_SPAN


_COMMITTING = frozenset({Outcome.OUTSIDE_COMMIT, Outcome.ACK_EMPTY, Outcome.ACK_COMMIT_RING, Outcome.ACK_COMMIT_REPLAY})


__all__ = ["Envelope", "Outcome"]
