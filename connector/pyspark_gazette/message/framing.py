"""Message framings (facts sheet section 5.1), chosen by a journal's ``content-type`` label.

A :class:`Framing` turns one message payload into journal bytes (:meth:`Framing.encode`) and
builds incremental decoders (:meth:`Framing.decoder`) that turn journal bytes back into
``(offset, payload)`` pairs, where ``offset`` is the journal offset of the message's first
framing byte and ``payload`` excludes the framing.

==========================  =========================  ===========================================
content-type                framing                    bytes of one message
==========================  =========================  ===========================================
application/x-ndjson        :data:`NDJSON`             JSON value + ``\\n``
application/x-protobuf-fixed :data:`PROTOBUF_FIXED`    ``66 33 93 36`` + uint32 LE length + payload
text/csv                    :data:`CSV`                one CSV record + ``\\n`` (quoted newlines kept)
text/plain                  :data:`LINES`              raw text line + ``\\n``
==========================  =========================  ===========================================

Decoders buffer partial messages between :meth:`Decoder.feed` calls; :meth:`Decoder.finish`
marks the end of the content and raises :class:`UnexpectedEOFError` for a torn message.

Line-based decoders split whole buffers with ``bytes.split`` (no per-byte Python loop). For
Arrow output see :mod:`pyspark_gazette.message.arrow`.
"""

from __future__ import annotations

import csv
import io
import json
import struct
from abc import ABC, abstractmethod
from typing import Any

from pyspark_gazette.errors import DesyncError, FramingError, MessageDecodeError, UnexpectedEOFError

#: Magic word opening every fixed-framing header.
FIXED_MAGIC = b"\x66\x33\x93\x36"
FIXED_HEADER_LEN = 8
_MAX_FIXED_LEN = 0xFFFFFFFF
_HEADER = struct.Struct("<4sI")

Message = tuple[int, bytes]


def _at(offset: int | None) -> str:
    return "" if offset is None else f" at offset {offset}"


class Decoder(ABC):
    """Incremental decoder of one framing, starting at a journal offset."""

    #: Journal offset of the next byte :meth:`feed` expects.
    offset: int

    @abstractmethod
    def feed(self, data: bytes) -> list[Message]:
        """Consume ``data``; return ``(offset, payload)`` of every message it completes."""

    @abstractmethod
    def finish(self) -> list[Message]:
        """End of content: return remaining messages, or raise :class:`UnexpectedEOFError`."""

    @property
    @abstractmethod
    def buffered(self) -> int:
        """Bytes held back as part of an incomplete message."""


class Framing(ABC):
    """One message framing; see the module docstring."""

    name: str = ""
    content_type: str = ""

    @abstractmethod
    def encode(self, payload: bytes) -> bytes:
        """Frame one message payload."""

    @abstractmethod
    def decoder(self, start_offset: int = 0, *, strict: bool = False) -> Decoder:
        """A new incremental decoder whose first byte sits at journal offset ``start_offset``."""

    def decode_message(self, payload: bytes, offset: int | None = None) -> Any:
        """The message of a payload; the base framing returns the bytes unchanged."""
        return payload

    def encode_all(self, payloads: list[bytes]) -> bytes:
        """Frame several payloads into one buffer (one append)."""
        return b"".join(map(self.encode, payloads))

    def decode_all(self, data: bytes, start_offset: int = 0) -> list[Message]:
        """Decode complete content in one go (raises on a torn final message)."""
        dec = self.decoder(start_offset)
        out = dec.feed(data)
        out.extend(dec.finish())
        return out

    def __repr__(self) -> str:
        return f"<Framing {self.name}>"


# --------------------------------------------------------------------------------------------
# Newline-terminated framings.


def _line_starts(base: int, data: bytes, n: int) -> list[int]:
    """Journal offsets of the first ``n`` lines of ``data`` (newlines located with numpy)."""
    import numpy as np

    newlines = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 0x0A)
    starts = np.empty(n, dtype=np.int64)
    starts[0] = base
    np.add(newlines[: n - 1], base + 1, out=starts[1:])
    return starts.tolist()


class _LineDecoder(Decoder):
    """Splits on ``\\n``; the payload is the line without its terminator.

    Bytes of an incomplete line are kept as a list of pieces and joined only once a newline
    arrives, so a line much longer than the chunks costs linear, not quadratic, copying.
    """

    def __init__(self, framing: str, start_offset: int):
        self._framing = framing
        self.offset = start_offset  # Journal offset of the first buffered byte.
        self._pieces: list[bytes] = []
        self._size = 0

    @property
    def buffered(self) -> int:
        return self._size

    def _take(self, data: bytes) -> bytes | None:
        """Buffer ``data`` and return everything buffered once it holds a newline, else None."""
        if not data:
            return None
        if not isinstance(data, bytes):
            data = bytes(data)
        if data.find(b"\n") < 0:
            self._pieces.append(data)
            self._size += len(data)
            return None
        if self._pieces:
            data = b"".join([*self._pieces, data])
        return data

    def _keep(self, tail: bytes) -> None:
        self._pieces = [tail] if tail else []
        self._size = len(tail)

    def feed(self, data: bytes) -> list[Message]:
        buf = self._take(data)
        if buf is None:
            return []
        parts = buf.split(b"\n")
        tail = parts.pop()  # Bytes after the last newline (possibly empty).
        self._keep(tail)
        base = self.offset
        self.offset += len(buf) - len(tail)
        return self._post(list(zip(_line_starts(base, buf, len(parts)), parts, strict=True)))

    def _post(self, messages: list[Message]) -> list[Message]:
        return messages

    def finish(self) -> list[Message]:
        if self._size:
            raise UnexpectedEOFError(
                f"{self._framing}: content ends inside a message at offset {self.offset} "
                f"({self._size} bytes without a terminating newline)"
            )
        return []


class _LineFraming(Framing):
    def encode(self, payload: bytes) -> bytes:
        if b"\n" in payload:
            raise FramingError(f"{self.name}: a message payload may not contain a newline")
        return payload + b"\n"

    def decoder(self, start_offset: int = 0, *, strict: bool = False) -> Decoder:
        return _LineDecoder(self.name, start_offset)


class NDJSONFraming(_LineFraming):
    """JSON lines: one JSON value per line. The payload excludes the trailing ``\\n``."""

    name = "ndjson"
    content_type = "application/x-ndjson"

    def decode_message(self, payload: bytes, offset: int | None = None) -> Any:
        """``json.loads`` of the payload; raises :class:`MessageDecodeError` naming the offset."""
        try:
            return json.loads(payload)
        except ValueError as e:
            raise MessageDecodeError(f"ndjson: invalid JSON{_at(offset)}: {e}") from e


class LinesFraming(_LineFraming):
    """Raw text lines (no decoding of the payload)."""

    name = "lines"
    content_type = "text/plain"

    def decode_message(self, payload: bytes, offset: int | None = None) -> str:
        """The line as UTF-8 text; raises :class:`MessageDecodeError`."""
        try:
            return payload.decode("utf-8")
        except UnicodeDecodeError as e:
            raise MessageDecodeError(f"lines: invalid UTF-8{_at(offset)}: {e}") from e


class _CSVDecoder(_LineDecoder):
    """CSV records: a newline ends a record only outside double quotes; ``\\r\\n`` is accepted."""

    def feed(self, data: bytes) -> list[Message]:
        buf = self._take(data)
        if buf is None:
            return []
        if b'"' not in buf:
            self._keep(b"")
            return super().feed(buf)
        ends = _csv_record_ends(buf)
        out: list[Message] = []
        start = 0
        for end in ends:
            out.append((self.offset + start, buf[start:end]))
            start = end + 1
        self._keep(buf[start:])
        self.offset += start
        return self._post(out)

    def _post(self, messages: list[Message]) -> list[Message]:
        return [(o, p[:-1]) if p.endswith(b"\r") else (o, p) for o, p in messages]


def _csv_record_ends(data: bytes) -> list[int]:
    """Positions of the newlines in ``data`` that end a CSV record (even count of quotes before)."""
    import numpy as np

    arr = np.frombuffer(data, dtype=np.uint8)
    newlines = np.flatnonzero(arr == 0x0A)
    if newlines.size == 0:
        return []
    quotes_before = np.cumsum(arr == 0x22, dtype=np.int64)[newlines]
    return newlines[(quotes_before & 1) == 0].tolist()


class CSVFraming(Framing):
    """CSV: each message is one already-formatted record; ``encode`` adds the ``\\n``.

    A trailing ``\\n`` or ``\\r\\n`` on the payload is replaced by a single ``\\n``. Decoded
    payloads exclude the terminator (and a ``\\r`` before it).
    """

    name = "csv"
    content_type = "text/csv"

    def decode_message(self, payload: bytes, offset: int | None = None) -> list[str]:
        """The fields of one UTF-8 CSV record; raises :class:`MessageDecodeError`."""
        try:
            rows = list(csv.reader(io.StringIO(payload.decode("utf-8"), newline=""), strict=True))
        except (UnicodeDecodeError, csv.Error) as e:
            raise MessageDecodeError(f"csv: invalid record{_at(offset)}: {e}") from e
        if len(rows) != 1:
            raise MessageDecodeError(f"csv: expected one record{_at(offset)}, found {len(rows)}")
        return rows[0]

    def encode(self, payload: bytes) -> bytes:
        if payload.endswith(b"\r\n"):
            payload = payload[:-2]
        elif payload.endswith(b"\n"):
            payload = payload[:-1]
        if payload.count(b'"') % 2:
            raise FramingError("csv: a record has an unbalanced double quote")
        return payload + b"\n"

    def decoder(self, start_offset: int = 0, *, strict: bool = False) -> Decoder:
        return _CSVDecoder(self.name, start_offset)


# --------------------------------------------------------------------------------------------
# Fixed-header protobuf framing.


class FixedDecoder(Decoder):
    """Decoder of :class:`ProtobufFixedFraming`.

    On a desync (a header not starting with the magic word) it scans the buffered bytes from
    index 1 for the next magic word and discards everything before it, or all but the last 3
    bytes if there is none (Gazette's rule). By default it then carries on, recording each
    discarded ``(offset, length)`` in :attr:`skipped`; with ``strict=True`` it raises
    :class:`DesyncError` instead. The decoder stays usable after that error: messages decoded
    before the desync in the same :meth:`feed` are returned by the next call.
    """

    def __init__(self, start_offset: int = 0, *, strict: bool = False, max_message_size: int | None = None):
        self.offset = start_offset  # Journal offset of the first buffered byte.
        self.strict = strict
        self.max_message_size = max_message_size
        self.skipped: list[tuple[int, int]] = []
        self._pieces: list[bytes] = []  # Buffered bytes, joined only once _need are there.
        self._size = 0
        self._need = FIXED_HEADER_LEN
        self._pending: list[Message] = []

    @property
    def buffered(self) -> int:
        return self._size

    @property
    def skipped_bytes(self) -> int:
        return sum(n for _, n in self.skipped)

    def feed(self, data: bytes) -> list[Message]:
        if not isinstance(data, bytes):
            data = bytes(data)
        out, self._pending = self._pending, []
        if self._size + len(data) < self._need:
            if data:
                self._pieces.append(data)
                self._size += len(data)
            return out
        buf = b"".join([*self._pieces, data]) if self._pieces else data
        append = out.append
        pos, size, base = 0, len(buf), self.offset
        need = FIXED_HEADER_LEN
        error: DesyncError | None = None
        max_size = self.max_message_size
        while size - pos >= FIXED_HEADER_LEN:
            magic, length = _HEADER.unpack_from(buf, pos)
            if magic == FIXED_MAGIC:
                if max_size is None or length <= max_size:
                    end = pos + FIXED_HEADER_LEN + length
                    if end > size:
                        need = end - pos
                        break
                    append((base + pos, buf[pos + FIXED_HEADER_LEN : end]))
                    pos = end
                    continue
                why = f"message length {length} exceeds max_message_size {max_size}"
            else:
                why = "header does not start with the magic word"
            # Desync: resume at the next magic word after pos, else keep only the last 3 bytes.
            found = buf.find(FIXED_MAGIC, pos + 1)
            new_pos = found if found >= 0 else max(pos + 1, size - 3)
            self.skipped.append((base + pos, new_pos - pos))
            if self.strict:
                error = DesyncError(
                    f"protobuf-fixed: desync at offset {base + pos}: {why}; skipped {new_pos - pos} bytes",
                    skipped=buf[pos:new_pos],
                )
                pos, need = new_pos, 0  # Carry on at the next call.
                break
            pos = new_pos
        rest = buf[pos:] if pos else buf
        self._pieces = [rest] if rest else []
        self._size, self._need = len(rest), need
        self.offset = base + pos
        if error is not None:
            self._pending = out  # Returned by the next call.
            raise error
        return out

    def finish(self) -> list[Message]:
        out = self.feed(b"")  # Pending messages, and anything left after a strict desync.
        rest = b"".join(self._pieces)
        if not rest or rest == b"\n":
            self._pieces, self._size = [], 0
            return out
        raise UnexpectedEOFError(
            f"protobuf-fixed: content ends inside a message at offset {self.offset} ({len(rest)} bytes buffered)"
        )


class ProtobufFixedFraming(Framing):
    """Fixed-header framing: magic ``66 33 93 36``, uint32 LE payload length, payload."""

    name = "protobuf-fixed"
    content_type = "application/x-protobuf-fixed"

    def encode(self, payload: bytes) -> bytes:
        if len(payload) > _MAX_FIXED_LEN:
            raise FramingError(f"protobuf-fixed: payload of {len(payload)} bytes is too large")
        return FIXED_MAGIC + len(payload).to_bytes(4, "little") + payload

    def decoder(self, start_offset: int = 0, *, strict: bool = False) -> FixedDecoder:
        return FixedDecoder(start_offset, strict=strict)


# --------------------------------------------------------------------------------------------

NDJSON = NDJSONFraming()
PROTOBUF_FIXED = ProtobufFixedFraming()
CSV = CSVFraming()
LINES = LinesFraming()

FRAMINGS: dict[str, Framing] = {f.name: f for f in (NDJSON, PROTOBUF_FIXED, CSV, LINES)}
_BY_CONTENT_TYPE: dict[str, Framing] = {
    "application/x-ndjson": NDJSON,
    "application/x-protobuf-fixed": PROTOBUF_FIXED,
    "text/csv": CSV,
    "text/plain": LINES,
}


def framing_for_content_type(ct: str) -> Framing:
    """The framing for a journal's ``content-type`` label value (parameters and case ignored).

    Raises :class:`FramingError` for a content type without a framing (including
    ``application/x-gazette-recoverylog``, which only Gazette consumers read).
    """
    key = ct.split(";", 1)[0].strip().lower()
    try:
        return _BY_CONTENT_TYPE[key]
    except KeyError:
        raise FramingError(
            f"no framing for content-type {ct!r} (known: {', '.join(sorted(_BY_CONTENT_TYPE))})"
        ) from None


def framing_by_name(name: str) -> Framing:
    """A framing by its short name (``ndjson``, ``protobuf-fixed``, ``csv``, ``lines``)."""
    try:
        return FRAMINGS[name.strip().lower()]
    except KeyError:
        raise FramingError(f"unknown framing {name!r} (known: {', '.join(sorted(FRAMINGS))})") from None
