"""Fragment file codecs: streaming decompressors and compressors (facts sheet 4.4).

Decoding is streaming and in bounded memory whatever the fragment size:

* NONE: the bytes as they are.
* GZIP: RFC 1952 multi-member gzip, every member read (Python's ``gzip`` semantics).
* ZSTANDARD: a zstd stream of one or more frames without content size. The frame structure is
  followed alongside decoding so that a truncated stream is an error, not a quiet short read.
* SNAPPY: the Snappy framing format. Chunk headers are parsed here; runs of complete chunks
  are handed to cramjam's framed decoder, which also checks every chunk's masked CRC-32C.
* GZIP_OFFLOAD_DECOMPRESSION: gunzipped when the bytes start with the gzip magic ``1f 8b``
  (the store did not transcode), passed through otherwise (it did).

Malformed input raises :class:`FragmentDecodeError`; callers add the fragment's context.
Errors of the underlying stream (network, disk) propagate unchanged.
"""

from __future__ import annotations

import gzip
import io
import zlib
from typing import BinaryIO, cast

import cramjam
import zstandard

from pyspark_gazette.errors import FragmentDecodeError
from pyspark_gazette.protocol import codec_name, pb

#: GZIP compresses batches of at least this much uncompressed input per member, like Gazette.
GZIP_MEMBER_SIZE = 1 << 20
#: SNAPPY compressors flush a run of framed chunks after this much uncompressed input.
SNAPPY_FLUSH_SIZE = 1 << 20
#: Compressed bytes read from the underlying stream at a time.
READ_SIZE = 1 << 18

_GZIP_MAGIC = b"\x1f\x8b"
_SNAPPY_STREAM_ID = b"\xff\x06\x00\x00sNaPpY"
_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_SKIPPABLE_MASK, _ZSTD_SKIPPABLE = 0xFFFFFFF0, 0x184D2A50


class _Decoder(io.BufferedIOBase):
    """Read-only decompressed stream. ``read(n)`` returns ``n`` bytes unless at EOF;
    ``read1(n)`` returns what is at hand (at least one byte unless at EOF). Closing it closes
    the underlying stream."""

    codec: int = pb.INVALID
    _errors: tuple[type[BaseException], ...] = ()

    def __init__(self, raw: BinaryIO) -> None:
        super().__init__()
        self._raw = raw

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        self._check_open()
        try:
            if size is None or size < 0:
                return self._readall()
            return self._read(size)
        except self._errors as e:
            raise self._decode_error(e) from e

    def read1(self, size: int = -1) -> bytes:
        self._check_open()
        try:
            return self._read1(size if size >= 0 else 1 << 20)
        except self._errors as e:
            raise self._decode_error(e) from e

    def close(self) -> None:
        if not self.closed:
            try:
                self._raw.close()
            finally:
                super().close()

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("I/O operation on closed decompressor")

    def _decode_error(self, e: BaseException) -> FragmentDecodeError:
        return FragmentDecodeError(f"{codec_name(self.codec)} content does not decode: {e}")

    def _read(self, size: int) -> bytes:
        parts = []
        while size > 0:
            chunk = self._read1(size)
            if not chunk:
                break
            parts.append(chunk)
            size -= len(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _readall(self) -> bytes:
        parts = []
        while chunk := self._read1(1 << 20):
            parts.append(chunk)
        return b"".join(parts)

    def _read1(self, size: int) -> bytes:  # pragma: no cover - abstract
        raise NotImplementedError


class _Plain(_Decoder):
    """The bytes as they are, after an optional already-read ``prefix``."""

    codec = pb.NONE

    def __init__(self, raw: BinaryIO, prefix: bytes = b"") -> None:
        super().__init__(raw)
        self._prefix = prefix

    def _read1(self, size: int) -> bytes:
        if self._prefix:
            out, self._prefix = self._prefix[:size], self._prefix[size:]
            return out
        return self._raw.read(size) if size else b""


class _Gzip(_Decoder):
    codec = pb.GZIP
    _errors = (gzip.BadGzipFile, zlib.error, EOFError)

    def __init__(self, raw: BinaryIO) -> None:
        super().__init__(raw)
        self._gz = gzip.GzipFile(fileobj=raw, mode="rb")

    def _read(self, size: int) -> bytes:
        return self._gz.read(size)

    def _read1(self, size: int) -> bytes:
        return self._gz.read1(size)

    def _readall(self) -> bytes:
        return self._gz.read()

    def close(self) -> None:
        if not self.closed:
            try:
                self._gz.close()
            finally:
                super().close()


class _ZstdFrameTracker:
    """Passes ``read`` through to ``raw`` while following the zstd frame layout (frame header,
    block headers, checksum, skippable frames) so that, at EOF, we know whether the input
    stopped on a frame boundary. zstandard's stream reader does not report truncation."""

    _MAGIC, _SKIP_SIZE, _DESCRIPTOR, _BLOCK, _BAD = range(5)
    _NEED = {_MAGIC: 4, _SKIP_SIZE: 4, _DESCRIPTOR: 1, _BLOCK: 3}

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self.eof = False
        self._state = self._MAGIC
        self._header = bytearray()
        self._skip = 0
        self._checksum = False

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(size)
        if not data:
            self.eof = True
        elif self._state != self._BAD:
            self._feed(data)
        return data

    @property
    def at_frame_boundary(self) -> bool:
        return self._state == self._MAGIC and not self._header and not self._skip

    def _feed(self, data: bytes) -> None:
        pos, total = 0, len(data)
        while pos < total and self._state != self._BAD:
            if self._skip:
                step = min(self._skip, total - pos)
                self._skip -= step
                pos += step
                continue
            need = self._NEED[self._state] - len(self._header)
            self._header += data[pos : pos + need]
            pos += need
            if len(self._header) < self._NEED[self._state]:
                return
            self._advance(int.from_bytes(self._header, "little"))
            self._header.clear()

    def _advance(self, value: int) -> None:
        if self._state == self._MAGIC:
            if value == _ZSTD_MAGIC:
                self._state = self._DESCRIPTOR
            elif value & _ZSTD_SKIPPABLE_MASK == _ZSTD_SKIPPABLE:
                self._state = self._SKIP_SIZE
            else:
                self._state = self._BAD  # zstd itself rejects it
        elif self._state == self._SKIP_SIZE:
            self._skip, self._state = value, self._MAGIC
        elif self._state == self._DESCRIPTOR:
            size_flag, single_segment = value >> 6, (value >> 5) & 1
            self._checksum = bool(value & 0x04)
            content_size_bytes = (1 if single_segment else 0, 2, 4, 8)[size_flag]
            dictionary_bytes = (0, 1, 2, 4)[value & 0x03]
            self._skip = (0 if single_segment else 1) + dictionary_bytes + content_size_bytes
            self._state = self._BLOCK
        else:  # block header: last flag, type, size
            block_type, block_size = (value >> 1) & 0x03, value >> 3
            if block_type == 3:
                self._state = self._BAD
                return
            self._skip = 1 if block_type == 1 else block_size
            if value & 0x01:
                self._skip += 4 if self._checksum else 0
                self._state = self._MAGIC


class _Zstd(_Decoder):
    codec = pb.ZSTANDARD
    _errors = (zstandard.ZstdError,)

    def __init__(self, raw: BinaryIO) -> None:
        super().__init__(raw)
        self._tracker = _ZstdFrameTracker(raw)
        self._zr = zstandard.ZstdDecompressor().stream_reader(
            cast(BinaryIO, self._tracker), read_size=READ_SIZE, read_across_frames=True, closefd=False
        )

    def _read(self, size: int) -> bytes:
        # With read_across_frames the reader fills `size` unless its input is exhausted.
        data = self._zr.read(size)
        if len(data) < size:
            self._check_end()
        return data

    _read1 = _read

    def _check_end(self) -> None:
        if self._tracker.eof and not self._tracker.at_frame_boundary:
            raise FragmentDecodeError("ZSTANDARD content is truncated: input ended inside a zstd frame")

    def close(self) -> None:
        if not self.closed:
            try:
                self._zr.close()
            finally:
                super().close()


class _SnappyFramed(_Decoder):
    """Snappy framing format. Complete chunks are found by their 4-byte headers (type, 24-bit
    little-endian length) and decoded in runs by cramjam's framed decoder (CRC-32C checked).
    Each run after the first is prefixed with the stream identifier, which that decoder needs."""

    codec = pb.SNAPPY
    _errors = (cramjam.DecompressionError,)

    def __init__(self, raw: BinaryIO) -> None:
        super().__init__(raw)
        self._pending = bytearray()
        self._scanned = 0  # _pending[:_scanned] holds complete chunks
        self._raw_eof = False
        self._block: memoryview = memoryview(b"")
        self._pos = 0

    def _read1(self, size: int) -> bytes:
        if self._pos >= len(self._block) and not self._fill():
            return b""
        start = self._pos
        self._pos = min(start + size, len(self._block))
        return bytes(self._block[start : self._pos])

    def _fill(self) -> bool:
        """Decode the next run of chunks into ``_block``; False at a clean EOF."""
        while True:
            buf, pos = self._pending, self._scanned
            while pos + 4 <= len(buf):
                end = pos + 4 + (buf[pos + 1] | buf[pos + 2] << 8 | buf[pos + 3] << 16)
                if end > len(buf):
                    break
                pos = end
            self._scanned = pos
            if pos > len(_SNAPPY_STREAM_ID) or (pos and buf[:pos] != _SNAPPY_STREAM_ID):
                out = self._decode_run(pos)
                if len(out):
                    self._block, self._pos = memoryview(out), 0
                    return True
                continue
            if self._raw_eof:
                if len(buf) > pos:
                    raise FragmentDecodeError(
                        f"SNAPPY content is truncated: input ended inside a chunk ({len(buf) - pos} trailing bytes)"
                    )
                return False
            data = self._raw.read(READ_SIZE)
            if data:
                buf += data
            else:
                self._raw_eof = True

    def _decode_run(self, end: int) -> cramjam.Buffer:
        view = memoryview(self._pending)
        run = view[:end]
        try:
            out = cramjam.snappy.decompress(run)
        finally:
            run.release()
            view.release()
        self._pending = bytearray(_SNAPPY_STREAM_ID) + self._pending[end:]
        self._scanned = len(_SNAPPY_STREAM_ID)
        return out


def open_decompressor(codec: int, raw: BinaryIO) -> BinaryIO:
    """A readable stream of the decompressed content of ``raw``, compressed with ``codec``.

    ``read(n)`` returns ``n`` bytes unless at EOF, ``read()`` reads to EOF and ``read1(n)``
    returns what is at hand. Memory stays bounded for any input size. Closing the result
    closes ``raw``. Malformed input raises :class:`FragmentDecodeError`, as does an unknown codec.
    """
    return cast(BinaryIO, open_decoder(codec, raw))


def open_decoder(codec: int, raw: BinaryIO) -> _Decoder:
    """Like :func:`open_decompressor`, typed as our decoder class (which has ``read1``)."""
    if codec == pb.NONE:
        return _Plain(raw)
    if codec == pb.GZIP:
        return _Gzip(raw)
    if codec == pb.ZSTANDARD:
        return _Zstd(raw)
    if codec == pb.SNAPPY:
        return _SnappyFramed(raw)
    if codec == pb.GZIP_OFFLOAD_DECOMPRESSION:
        head = b""
        while len(head) < 2 and (more := raw.read(2 - len(head))):
            head += more
        if head == _GZIP_MAGIC:
            decoder: _Decoder = _Gzip(cast(BinaryIO, _Plain(raw, head)))
        else:
            decoder = _Plain(raw, head)
        decoder.codec = pb.GZIP_OFFLOAD_DECOMPRESSION
        return decoder
    raise FragmentDecodeError(f"cannot decode fragments with codec {codec_name(codec)}")


class Compressor:
    """Writes ``codec``-compressed bytes of the content given to :meth:`write` to ``out``.

    GZIP closes a member after each >= 1 MiB of input (multi-member, like Gazette);
    GZIP_OFFLOAD_DECOMPRESSION writes one member; ZSTANDARD one frame without content size;
    SNAPPY the framing format with its stream identifier. :meth:`close` finishes the stream
    but leaves ``out`` open.
    """

    def __init__(self, codec: int, out: BinaryIO, *, level: int | None = None) -> None:
        if codec not in (pb.NONE, pb.GZIP, pb.ZSTANDARD, pb.SNAPPY, pb.GZIP_OFFLOAD_DECOMPRESSION):
            raise ValueError(f"cannot compress with codec {codec_name(codec)}")
        self.codec = codec
        self._out = out
        self._level = level
        self._closed = False
        self._pending = 0  # uncompressed bytes in the current gzip member / snappy run
        self._wrote = False
        self._gzip: zlib._Compress | None = None
        self._zstd: zstandard.ZstdCompressionWriter | None = None
        self._snappy: cramjam.snappy.Compressor | None = None
        if codec == pb.ZSTANDARD:
            cctx = zstandard.ZstdCompressor(level=3 if level is None else level)
            self._zstd = cctx.stream_writer(out, closefd=False, write_return_read=True)
        elif codec == pb.SNAPPY:
            self._snappy = cramjam.snappy.Compressor()

    def write(self, data: bytes) -> None:
        if self._closed:
            raise ValueError("write to a closed Compressor")
        if not data:
            return
        self._wrote = True
        if self.codec == pb.NONE:
            self._out.write(data)
        elif self._zstd is not None:
            self._zstd.write(data)
        elif self._snappy is not None:
            self._snappy.compress(data)
            self._pending += len(data)
            if self._pending >= SNAPPY_FLUSH_SIZE:
                self._out.write(bytes(self._snappy.flush()))
                self._pending = 0
        else:
            if self._gzip is None:
                self._gzip = self._new_gzip_member()
            self._out.write(self._gzip.compress(data))
            self._pending += len(data)
            if self.codec == pb.GZIP and self._pending >= GZIP_MEMBER_SIZE:
                self._out.write(self._gzip.flush())
                self._gzip, self._pending = None, 0

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._zstd is not None:
            self._zstd.close()
        elif self._snappy is not None:
            self._out.write(bytes(self._snappy.flush()) + bytes(self._snappy.finish()))
        elif self.codec != pb.NONE:
            if self._gzip is None and not self._wrote:
                self._gzip = self._new_gzip_member()  # an empty file is still one gzip member
            if self._gzip is not None:
                self._out.write(self._gzip.flush())
                self._gzip = None

    def _new_gzip_member(self) -> zlib._Compress:
        level = zlib.Z_DEFAULT_COMPRESSION if self._level is None else self._level
        return zlib.compressobj(level, zlib.DEFLATED, 31)

    def __enter__(self) -> Compressor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def compress_bytes(codec: int, data: bytes) -> bytes:
    """``data`` compressed as a whole fragment file with ``codec``."""
    out = io.BytesIO()
    with Compressor(codec, out) as c:
        c.write(data)
    return out.getvalue()


def decompress_bytes(codec: int, data: bytes) -> bytes:
    """The content of a whole fragment file ``data`` compressed with ``codec``."""
    with open_decompressor(codec, io.BytesIO(data)) as d:
        return d.read()
