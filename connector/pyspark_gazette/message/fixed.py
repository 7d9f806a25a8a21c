"""Gazette's fixed-header protobuf framing (facts sheet 5.1): magic word, uint32 LE length, payload.

The decoder follows Gazette's reader rules: 0 bytes at EOF is a clean end, 1-7 bytes an
unexpected EOF (a single leftover ``\\n`` excepted), a short payload an unexpected EOF, and a
header without the magic word a *desync* (see :class:`FixedDecoder`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from pyspark_gazette.errors import DesyncError, FramingError, UnexpectedEOFError
from pyspark_gazette.message.framing_base import Decoder, Framing, Message
from pyspark_gazette.message.uuids import extract_uuid_proto

#: Magic word opening every fixed-framing header.
FIXED_MAGIC = b"\x66\x33\x93\x36"
FIXED_HEADER_LEN = 8
_MAX_FIXED_LEN = 0xFFFFFFFF
_HEADER = struct.Struct("<4sI")


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
    overhead = FIXED_HEADER_LEN

    def uuid_of(self, payload: bytes, pointer: str, uuid_field: int = 0) -> Any:
        """The UUID in protobuf field ``uuid_field`` of the message (none when 0)."""
        return extract_uuid_proto(payload, uuid_field) if uuid_field else None

    def encode_array(self, values: Any, where: Callable[[int], str]) -> Any:
        """Header (magic word, uint32 LE length) plus payload for every value (vectorised)."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
            values = values.cast(pa.binary() if pa.types.is_string(values.type) else pa.large_binary())
        lengths = pc.binary_length(values).to_numpy(zero_copy_only=False).astype(np.uint32)
        header = np.empty((len(values), 2), dtype="<u4")
        header[:, 0] = int.from_bytes(FIXED_MAGIC, "little")
        header[:, 1] = lengths
        headers = pa.FixedSizeBinaryArray.from_buffers(pa.binary(8), len(values), [None, pa.py_buffer(header)])
        return pc.binary_join_element_wise(headers.cast(pa.binary()), values, b"")

    def encode(self, payload: bytes) -> bytes:
        if len(payload) > _MAX_FIXED_LEN:
            raise FramingError(f"protobuf-fixed: payload of {len(payload)} bytes is too large")
        return FIXED_MAGIC + len(payload).to_bytes(4, "little") + payload

    def decoder(self, start_offset: int = 0, *, strict: bool = False) -> FixedDecoder:
        return FixedDecoder(start_offset, strict=strict)
