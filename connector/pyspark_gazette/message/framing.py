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
from typing import Any

from pyspark_gazette.errors import FramingError, MessageDecodeError, UnexpectedEOFError
from pyspark_gazette.message.fixed import FIXED_HEADER_LEN, FIXED_MAGIC, FixedDecoder, ProtobufFixedFraming
from pyspark_gazette.message.framing_base import Decoder, Framing, Message, _at

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


__all__ = [
    "CSV",
    "FIXED_HEADER_LEN",
    "FIXED_MAGIC",
    "FRAMINGS",
    "LINES",
    "NDJSON",
    "PROTOBUF_FIXED",
    "CSVFraming",
    "Decoder",
    "FixedDecoder",
    "Framing",
    "LinesFraming",
    "Message",
    "NDJSONFraming",
    "ProtobufFixedFraming",
    "framing_by_name",
    "framing_for_content_type",
]
