"""A framing from outside the package, as a plugin would add one: varint length-delimited
messages (each payload preceded by its length as a protobuf varint, protobuf's delimited
stream format). Tests register it with :func:`pyspark_gazette.message.register_framing`; nothing
here names a framing of the package, and no module of the package names this one."""

from __future__ import annotations

from pyspark_gazette.errors import UnexpectedEOFError
from pyspark_gazette.message import Decoder, Framing


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _read_varint(buf: bytes, pos: int) -> tuple[int, int] | None:
    """(value, position after it), or None when ``buf`` ends inside the varint."""
    value = shift = 0
    while pos < len(buf):
        byte = buf[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            return value, pos
        shift += 7
    return None


class VarintDecoder(Decoder):
    def __init__(self, start_offset: int):
        self.offset = start_offset
        self._buf = b""

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        buf, pos, out = self._buf + bytes(data), 0, []
        while (head := _read_varint(buf, pos)) is not None and head[1] + head[0] <= len(buf):
            length, start = head
            out.append((self.offset + pos, buf[start : start + length]))
            pos = start + length
        self._buf, self.offset = buf[pos:], self.offset + pos
        return out

    def finish(self) -> list[tuple[int, bytes]]:
        if self._buf:
            raise UnexpectedEOFError(f"test-varint: content ends inside a message at offset {self.offset}")
        return []


class VarintFraming(Framing):
    """Binary, not line-based, a per-message overhead that depends on the payload's length."""

    name = "test-varint"
    content_type = "application/x-test-varint"

    def framed_size(self, payload_size: int) -> int:
        return len(varint(payload_size)) + payload_size

    def encode(self, payload: bytes) -> bytes:
        return varint(len(payload)) + payload

    def decoder(self, start_offset: int = 0, *, strict: bool = False) -> Decoder:
        return VarintDecoder(start_offset)


VARINT = VarintFraming()
