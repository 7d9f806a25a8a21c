"""Gazette message UUIDs (facts sheet section 5.2).

A message UUID is an RFC 4122 version-1 UUID whose fields Gazette uses as follows:

==========  ==================================================================================
bytes 0-3   clock bits 4..35 (low 32 timestamp bits), big-endian
bytes 4-5   clock bits 36..51 (middle 16 timestamp bits)
bytes 6-7   ``(clock >> 52) & 0x0fff | 0x1000`` (high 12 timestamp bits, version 1)
bytes 8-9   ``0x8000 | (clock & 0xf) << 10 | flags`` (RFC variant, 4-bit counter, 10-bit flags)
bytes 10-15 producer id (6 random bytes, multicast bit ``0x01`` of byte 0 set)
==========  ==================================================================================

The *clock* is a uint64 ``(100 ns ticks since 1582-10-15) << 4 | counter``. Since Gazette
v0.101 each tick adds :data:`TICK` = 160 (1 µs), leaving the counter at 0.

The facts-sheet check vector pins this down: producer ``010203040506``, the clock of Unix time
1567304621.981273734 advanced by **2 ticks of 160** (2 µs, counter still 0) and flags 682 give
``83fc2f95-cc5f-11e9-82aa-010203040506``. With the pre-v0.101 tick (+1 per tick) the counter
would be 2 and bytes 8-9 would read ``8aaa`` instead of ``82aa``.
"""

from __future__ import annotations

import enum
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from pyspark_gazette.errors import UUIDError
from pyspark_gazette.message import jsondoc

#: 100 ns intervals from 1582-10-15 (the UUID epoch) to 1970-01-01.
GREGORIAN_OFFSET = 122_192_928_000_000_000
#: One clock tick since Gazette v0.101: 1 µs (10 intervals of 100 ns, shifted past the counter).
TICK = 160
_MASK64 = (1 << 64) - 1
_MAX_FLAGS = 0x3FF

NIL_UUID = uuid.UUID(int=0)
DEFAULT_UUID_POINTER = "/_meta/uuid"


class Flags(enum.IntEnum):
    """The low 10 bits of UUID bytes 8-9."""

    OUTSIDE_TXN = 0x0  #: committed immediately
    CONTINUE_TXN = 0x1  #: part of an open transaction
    ACK_TXN = 0x2  #: commits the producer's earlier CONTINUE_TXN messages with clock <= its own


# --------------------------------------------------------------------------------------------
# Clocks.


def clock_from_unix(seconds: int, nanos: int = 0) -> int:
    """The clock of a Unix time (counter 0)."""
    intervals = seconds * 10_000_000 + nanos // 100 + GREGORIAN_OFFSET
    if intervals < 0:
        raise UUIDError(f"time {seconds}.{nanos:09d} is before the UUID epoch (1582-10-15)")
    return (intervals << 4) & _MASK64


def clock_to_unix(clock: int) -> tuple[int, int]:
    """``(seconds, nanos)`` of a clock (the 4-bit counter is ignored)."""
    intervals = (clock >> 4) - GREGORIAN_OFFSET
    seconds, rest = divmod(intervals, 10_000_000)
    return seconds, rest * 100


def clock_to_micros(clock: int) -> int:
    """Microseconds since the Unix epoch (UTC) of a clock: the time its publisher stamped the
    message, as Spark's ``TimestampType`` and Arrow's ``timestamp("us", "UTC")`` hold it (the
    4-bit counter and the sub-microsecond digits are dropped). The one conversion of a message's
    clock to a timestamp (the ``timestamp`` metadata column uses it)."""
    return ((clock >> 4) - GREGORIAN_OFFSET) // 10


def clock_now(time_ns: Callable[[], int] = time.time_ns) -> int:
    """The clock of the current time."""
    now = time_ns()
    return clock_from_unix(now // 1_000_000_000, now % 1_000_000_000)


def tick(clock: int, n: int = 1) -> int:
    """``clock`` advanced by ``n`` ticks of 1 µs (Gazette v0.101+ semantics)."""
    return (clock + n * TICK) & _MASK64


# --------------------------------------------------------------------------------------------
# Building and parsing.


def new_producer_id() -> bytes:
    """6 random bytes with the multicast bit set, as every Gazette publisher uses."""
    raw = bytearray(os.urandom(6))
    raw[0] |= 0x01
    return bytes(raw)


def build_uuid(producer: bytes, clock: int, flags: int) -> uuid.UUID:
    """The message UUID of ``producer`` (6 bytes), ``clock`` (uint64) and ``flags`` (10 bits)."""
    if not isinstance(producer, (bytes, bytearray)) or len(producer) != 6:
        raise UUIDError(f"a producer id is 6 bytes, not {producer!r}")
    if not 0 <= clock <= _MASK64:
        raise UUIDError(f"clock {clock} is not a uint64")
    if not 0 <= flags <= _MAX_FLAGS:
        raise UUIDError(f"flags {flags:#x} do not fit in 10 bits")
    head = ((clock >> 4) & 0xFFFFFFFF) << 32 | ((clock >> 36) & 0xFFFF) << 16 | ((clock >> 52) & 0x0FFF) | 0x1000
    seq = 0x8000 | (clock & 0xF) << 10 | flags
    return uuid.UUID(bytes=head.to_bytes(8, "big") + seq.to_bytes(2, "big") + bytes(producer))


def _as_bytes(u: uuid.UUID | str | bytes) -> bytes:
    if isinstance(u, uuid.UUID):
        return u.bytes
    if isinstance(u, (bytes, bytearray)):
        if len(u) == 16:
            return bytes(u)
        raw = bytes(u)
        try:
            u = raw.decode("ascii")
        except UnicodeDecodeError:
            raise UUIDError(f"not a UUID: {raw!r}") from None
    if isinstance(u, str):
        try:
            return uuid.UUID(u).bytes
        except ValueError:
            raise UUIDError(f"not a UUID: {u!r}") from None
    raise UUIDError(f"not a UUID: {u!r}")


def parse_uuid(u: uuid.UUID | str | bytes, *, allow_nil: bool = False) -> tuple[bytes, int, int]:
    """``(producer, clock, flags)`` of a Gazette message UUID.

    Accepts a :class:`uuid.UUID`, its string form, or its 16 raw bytes. Raises
    :class:`UUIDError` unless it is an RFC 4122 (variant ``10``) version-1 UUID. With
    ``allow_nil`` the nil UUID parses as ``(b"\\0" * 6, 0, 0)`` (clock 0: always committed).
    """
    raw = _as_bytes(u)
    if allow_nil and raw == NIL_UUID.bytes:
        return bytes(6), 0, 0
    if raw[6] >> 4 != 1:
        raise UUIDError(f"UUID {uuid.UUID(bytes=raw)} is version {raw[6] >> 4}, expected version 1")
    if raw[8] & 0xC0 != 0x80:
        raise UUIDError(f"UUID {uuid.UUID(bytes=raw)} is not of the RFC 4122 variant")
    return raw[10:16], _clock_of(raw), int.from_bytes(raw[8:10], "big") & _MAX_FLAGS


def _clock_of(raw: bytes) -> int:
    # Rebuild the timestamp from bytes 0-7 (dropping the version nibble) and the counter bits.
    low = int.from_bytes(raw[0:4], "big")
    mid = int.from_bytes(raw[4:6], "big")
    high = int.from_bytes(raw[6:8], "big") & 0x0FFF
    counter = (raw[8] >> 2) & 0xF
    return (high << 52 | mid << 36 | low << 4 | counter) & _MASK64


def get_clock(u: uuid.UUID | str | bytes) -> int:
    return parse_uuid(u, allow_nil=True)[1]


def get_flags(u: uuid.UUID | str | bytes) -> int:
    return parse_uuid(u, allow_nil=True)[2]


def get_producer(u: uuid.UUID | str | bytes) -> bytes:
    return parse_uuid(u, allow_nil=True)[0]


# --------------------------------------------------------------------------------------------
# Publishing.


class TransactionalPublisher:
    """Hands out message UUIDs for one producer, with clocks that only move forward.

    Every UUID gets a fresh clock: the later of the wall clock and the previous clock plus
    one :data:`TICK`, so clocks rise strictly by at least 160 per message even when the wall
    clock stalls or steps back. :meth:`uncommitted` (CONTINUE_TXN) remembers the journal it
    is for (if given), and :meth:`acks` builds one ACK_TXN UUID per such journal, which commits
    the transaction once the ACK messages are appended. Thread-safe.
    """

    def __init__(self, producer: bytes | None = None, *, time_ns: Callable[[], int] = time.time_ns, clock: int = 0):
        self.producer = new_producer_id() if producer is None else bytes(producer)
        if len(self.producer) != 6:
            raise UUIDError(f"a producer id is 6 bytes, not {self.producer!r}")
        self._time_ns = time_ns
        self._clock = clock
        self._journals: list[str] = []
        self._lock = threading.Lock()

    @property
    def clock(self) -> int:
        """The clock of the last UUID handed out (0 before the first)."""
        return self._clock

    def next_clock(self) -> int:
        with self._lock:
            self._clock = max(self._clock + TICK, clock_now(self._time_ns)) & _MASK64
            return self._clock

    def _uuid(self, flags: Flags) -> uuid.UUID:
        return build_uuid(self.producer, self.next_clock(), flags)

    def committed(self) -> uuid.UUID:
        """A UUID for a message committed on its own (OUTSIDE_TXN)."""
        return self._uuid(Flags.OUTSIDE_TXN)

    def uncommitted(self, journal: str | None = None) -> uuid.UUID:
        """A UUID for a message of the open transaction (CONTINUE_TXN)."""
        if journal is not None:
            with self._lock:
                if journal not in self._journals:
                    self._journals.append(journal)
        return self._uuid(Flags.CONTINUE_TXN)

    def ack(self) -> uuid.UUID:
        """An ACK_TXN UUID, committing this producer's earlier CONTINUE_TXN messages."""
        return self._uuid(Flags.ACK_TXN)

    @property
    def pending_journals(self) -> list[str]:
        """Journals given to :meth:`uncommitted` since the last :meth:`acks`."""
        return list(self._journals)

    def acks(self) -> dict[str, uuid.UUID]:
        """One ACK_TXN UUID per pending journal (then forgotten), in first-use order."""
        with self._lock:
            journals, self._journals = self._journals, []
        return {journal: self.ack() for journal in journals}


# --------------------------------------------------------------------------------------------
# UUIDs inside JSON documents.


def pointer_keys(pointer: str) -> list[str]:
    """The keys of a JSON pointer (RFC 6901), unescaped; ``""`` is the whole document."""
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise UUIDError(f"JSON pointer {pointer!r} must start with '/'")
    return [part.replace("~1", "/").replace("~0", "~") for part in pointer[1:].split("/")]


def get_uuid_at(doc: Any, pointer: str = DEFAULT_UUID_POINTER) -> uuid.UUID | None:
    """The UUID at JSON ``pointer`` in a decoded document, or ``None`` if absent.

    Raises :class:`UUIDError` if a value is there but is not a UUID string.
    """
    node = doc
    for key in pointer_keys(pointer):
        if isinstance(node, dict):
            if key not in node:
                return None
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return None
    if not isinstance(node, str):
        raise UUIDError(f"value at {pointer!r} is not a UUID string: {node!r}")
    try:
        return uuid.UUID(node)
    except ValueError:
        raise UUIDError(f"value at {pointer!r} is not a UUID: {node!r}") from None


def set_uuid_at(doc: dict, u: uuid.UUID, pointer: str = DEFAULT_UUID_POINTER) -> dict:
    """Store ``str(u)`` at JSON ``pointer`` in ``doc``, creating objects on the way; returns ``doc``.

    A newly created parent object gets the UUID as its first key, which keeps
    :func:`extract_uuid_json` on its fast path.
    """
    keys = pointer_keys(pointer)
    if not keys:
        raise ValueError("cannot set a UUID at the document root")
    node: Any = doc
    for key in keys[:-1]:
        if isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
            continue
        if not isinstance(node, dict):
            raise ValueError(f"cannot set {pointer!r}: {key!r} is inside a {type(node).__name__}")
        node = node.setdefault(key, {})
    if not isinstance(node, dict):
        raise ValueError(f"cannot set {pointer!r}: parent is a {type(node).__name__}")
    node[keys[-1]] = str(u)
    return doc


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_UUID_STR = rb'"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"'
_fast_patterns: dict[str, re.Pattern[bytes]] = {}


def _fast_pattern(pointer: str) -> re.Pattern[bytes]:
    pat = _fast_patterns.get(pointer)
    if pat is None:
        keys = [re.escape(json.dumps(k).encode()) for k in pointer_keys(pointer)]
        # Each nested key must be the first key of its object: "a"\s*:\s*{\s*"b"\s*:\s*"<uuid>".
        body = rb"\s*:\s*\{\s*".join(keys)
        pat = re.compile(body + rb"\s*:\s*" + _UUID_STR)
        _fast_patterns[pointer] = pat
    return pat


def extract_uuid_json(raw: bytes, pointer: str = DEFAULT_UUID_POINTER) -> uuid.UUID | None:
    """The UUID at ``pointer`` of a raw JSON document, without decoding all of it when possible.

    Fast path: a regular expression finds the key chain (each nested key being the first key
    of its object, as :func:`set_uuid_at` writes it) and checks that the match sits at the top
    level of the document (strings stripped, braces balanced up to it). Anything else falls
    back to ``json.loads``. Raises :class:`UUIDError` for a malformed UUID or document.
    """
    keys = pointer_keys(pointer)
    if keys:
        m = _fast_pattern(pointer).search(raw)
        if m is not None:
            prefix = _STRING.sub(b"", raw[: m.start()])
            if b'"' not in prefix and prefix.lstrip().startswith(b"{") and prefix.rstrip()[-1:] in (b"{", b","):
                depth = prefix.count(b"{") + prefix.count(b"[") - prefix.count(b"}") - prefix.count(b"]")
                if depth == 1 and prefix.count(b"[") == prefix.count(b"]"):
                    return uuid.UUID(m.group(1).decode())
    try:
        doc = jsondoc.loads(raw)
    except ValueError as e:
        raise UUIDError(f"cannot read a UUID from a malformed JSON document: {e}") from e
    return get_uuid_at(doc, pointer)


# --------------------------------------------------------------------------------------------
# UUIDs inside protobuf messages.


def _varint(raw: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(raw) or shift > 63:
            raise UUIDError("cannot read a UUID from a malformed protobuf message: bad varint")
        b = raw[pos]
        value |= (b & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if not b & 0x80:
            return value, pos


def extract_uuid_proto(raw: bytes, field: int) -> uuid.UUID | None:
    """The UUID in top-level field number ``field`` of a serialized protobuf message, or ``None``.

    The field is a ``bytes`` field of the UUID's 16 raw bytes or a ``string`` of its text
    form; as protobuf does for a repeated singular field, the last occurrence wins. Raises
    :class:`UUIDError` for a malformed message or a value that is not a UUID.
    """
    found: bytes | None = None
    pos, size = 0, len(raw)
    while pos < size:
        key, pos = _varint(raw, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, pos = _varint(raw, pos)
            continue
        if wire in (1, 5):
            pos += 8 if wire == 1 else 4
        elif wire == 2:
            length, pos = _varint(raw, pos)
            if number == field:
                found = raw[pos : pos + length]
            pos += length
        else:
            raise UUIDError(f"cannot read a UUID from a protobuf message: unsupported wire type {wire}")
        if pos > size:
            raise UUIDError("cannot read a UUID from a truncated protobuf message")
    if found is None:
        return None
    try:
        return uuid.UUID(bytes=found) if len(found) == 16 else uuid.UUID(found.decode("ascii"))
    except (ValueError, UnicodeDecodeError):
        raise UUIDError(f"protobuf field {field} is not a UUID: {found!r}") from None
