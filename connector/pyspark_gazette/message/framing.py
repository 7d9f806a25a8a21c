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
from collections.abc import Callable
from typing import Any

from pyspark_gazette.errors import FramingError, MessageDecodeError, UnexpectedEOFError
from pyspark_gazette.message import jsondoc
from pyspark_gazette.message.fixed import FIXED_HEADER_LEN, FIXED_MAGIC, FixedDecoder, ProtobufFixedFraming
from pyspark_gazette.message.framing_base import Decoder, Framing, Message, at_offset
from pyspark_gazette.message.uuids import extract_uuid_json

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
    text = True
    line_based = True
    newline_split = True
    overhead = 1

    def encode_array(self, values: Any, where: Callable[[int], str]) -> Any:
        """``value + "\\n"`` for every value (vectorised); a value holding a newline is an error."""
        import numpy as np
        import pyarrow.compute as pc

        newline = pc.match_substring(values, "\n")
        if newline.true_count:
            rows = np.flatnonzero(newline.to_numpy(zero_copy_only=False))
            raise FramingError(
                f"{where(int(rows[0]))} has a value containing a newline, which {self.name} framing cannot "
                "carry (one message is one line); escape it or use protobuf-fixed framing"
            )
        return _join_newline(values)

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
    json_documents = True

    def uuid_of(self, payload: bytes, pointer: str, uuid_field: int = 0) -> Any:
        """The UUID at JSON pointer ``pointer`` of the document."""
        return extract_uuid_json(payload, pointer)

    def decode_message(self, payload: bytes, offset: int | None = None) -> Any:
        """``json.loads`` of the payload; raises :class:`MessageDecodeError` naming the offset."""
        try:
            return jsondoc.loads(payload)
        except ValueError as e:
            raise MessageDecodeError(f"ndjson: invalid JSON{at_offset(offset)}: {e}") from e


class LinesFraming(_LineFraming):
    """Raw text lines (no decoding of the payload)."""

    name = "lines"
    content_type = "text/plain"

    def decode_message(self, payload: bytes, offset: int | None = None) -> str:
        """The line as UTF-8 text; raises :class:`MessageDecodeError`."""
        try:
            return payload.decode("utf-8")
        except UnicodeDecodeError as e:
            raise MessageDecodeError(f"lines: invalid UTF-8{at_offset(offset)}: {e}") from e


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
    text = True
    #: A newline outside double quotes ends a record; readers resync at the next newline.
    line_based = True
    overhead = 1

    def uuid_of(self, payload: bytes, pointer: str, uuid_field: int = 0) -> Any:
        """The record's first field (Gazette's CSV UUID column)."""
        row = next(csv.reader(io.StringIO(payload.decode("utf-8", "replace"))), [])
        return row[0] if row else None

    def encode_array(self, values: Any, where: Callable[[int], str]) -> Any:
        """Each value as one record plus ``\\n`` (a trailing ``\\n`` or ``\\r\\n`` dropped first);
        newlines only inside double quotes, quotes balanced."""
        import numpy as np
        import pyarrow.compute as pc

        values = pc.replace_substring_regex(values, r"\r?\n\z", "")
        newline = pc.match_substring(values, "\n")
        if newline.true_count:
            rows = np.flatnonzero(newline.to_numpy(zero_copy_only=False))
            for row in rows.tolist():  # CSV: a newline is fine inside a quoted field only.
                _check_csv_record(values[row].as_py(), where(row))
        quotes = pc.count_substring(values, '"').to_numpy(zero_copy_only=False)
        odd = np.flatnonzero(quotes & 1)
        if odd.size:
            raise FramingError(f"{where(int(odd[0]))} is a csv record with an unbalanced double quote")
        return _join_newline(values)

    def decode_message(self, payload: bytes, offset: int | None = None) -> list[str]:
        """The fields of one UTF-8 CSV record; raises :class:`MessageDecodeError`."""
        try:
            rows = list(csv.reader(io.StringIO(payload.decode("utf-8"), newline=""), strict=True))
        except (UnicodeDecodeError, csv.Error) as e:
            raise MessageDecodeError(f"csv: invalid record{at_offset(offset)}: {e}") from e
        if len(rows) != 1:
            raise MessageDecodeError(f"csv: expected one record{at_offset(offset)}, found {len(rows)}")
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


def _check_csv_record(record: str | bytes, where: str) -> None:
    text = record.encode() if isinstance(record, str) else record
    quoted = False
    for ch in text:
        if ch == 0x22:
            quoted = not quoted
        elif ch == 0x0A and not quoted:
            raise FramingError(f"{where} is a csv value with a newline outside quotes (more than one record)")


def _join_newline(values: Any) -> Any:
    """Each value of a pyarrow string/binary array with ``\\n`` appended."""
    import pyarrow as pa
    import pyarrow.compute as pc

    sep = b"\n" if pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type) else "\n"
    return pc.binary_join_element_wise(values, sep, b"" if isinstance(sep, bytes) else "")


# --------------------------------------------------------------------------------------------
# The registry: every framing by name and by content type (Gazette's RegisterFraming).

NDJSON = NDJSONFraming()
PROTOBUF_FIXED = ProtobufFixedFraming()
CSV = CSVFraming()
LINES = LinesFraming()

#: Registered framings by name, in registration order (the ``framing`` option's choices).
FRAMINGS: dict[str, Framing] = {}
_BY_CONTENT_TYPE: dict[str, Framing] = {}


def register_framing(framing: Framing) -> Framing:
    """Register ``framing`` under its name and its content types (Gazette's ``RegisterFraming``);
    returns it. A name or a content type registered to another framing is an error."""
    name = framing.name.strip().lower()
    types = [t.split(";", 1)[0].strip().lower() for t in (framing.content_types or (framing.content_type,))]
    if not name or not all(types):
        raise FramingError(f"a framing needs a name and a content type, got {framing!r}")
    taken = [k for k in (name,) if FRAMINGS.get(k, framing) != framing]
    taken += [t for t in types if _BY_CONTENT_TYPE.get(t, framing) != framing]
    if taken:
        raise FramingError(f"cannot register framing {name!r}: {', '.join(map(repr, taken))} already registered")
    FRAMINGS[name] = framing
    for t in types:
        _BY_CONTENT_TYPE[t] = framing
    return framing


def unregister_framing(framing: Framing) -> None:
    """Forget ``framing`` (a test's framing, once the test is done)."""
    for table in (FRAMINGS, _BY_CONTENT_TYPE):
        for key in [k for k, v in table.items() if v == framing]:
            del table[key]


def framings() -> tuple[Framing, ...]:
    """Every registered framing, in registration order."""
    return tuple(FRAMINGS.values())


for _f in (NDJSON, PROTOBUF_FIXED, CSV, LINES):
    register_framing(_f)


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


def document_framings() -> str:
    """The names of the framings whose messages are JSON documents (for errors: "ndjson")."""
    return " or ".join(f.name for f in FRAMINGS.values() if f.json_documents)


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
    "document_framings",
    "framing_by_name",
    "framing_for_content_type",
    "framings",
    "register_framing",
    "unregister_framing",
]
