"""Vectorised decoding of newline framings straight into Arrow arrays.

A Spark reader decoding MiB-sized chunks should not touch each message in Python. Here the
newline positions are found with numpy, the payload bytes (the buffer minus its newlines) are
gathered with one vectorised copy, and the Arrow offsets buffer is derived arithmetically:
message ``i`` starts at ``start_i - i`` once ``i`` newlines have been removed before it. No
per-message Python object is ever created.

:func:`split_lines_arrow` handles one buffer; :class:`ArrowLineDecoder` carries an incomplete
last line between chunks, like the decoders of :mod:`pyspark_gazette.message.framing`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa

from pyspark_gazette.errors import UnexpectedEOFError

_INT32_MAX = 2**31 - 1


class LineBatch(NamedTuple):
    """Complete lines of one buffer.

    ``offsets``: int64 journal offset of each line's first byte; ``values``: the lines without
    their ``\\n`` (``pa.binary()``, or ``pa.large_binary()`` past 2 GiB); ``consumed``: bytes
    up to and including the last newline (the rest is an incomplete line).
    """

    offsets: pa.Int64Array
    values: pa.Array
    consumed: int

    def __len__(self) -> int:  # type: ignore[override]
        return len(self.values)

    def to_record_batch(self, offset_field: str = "offset", value_field: str = "value") -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays([self.offsets, self.values], names=[offset_field, value_field])


def _empty() -> LineBatch:
    return LineBatch(pa.array([], pa.int64()), pa.array([], pa.binary()), 0)


def split_lines_arrow(
    data: bytes | bytearray | memoryview,
    base_offset: int = 0,
    *,
    strip_cr: bool = False,
    scratch: np.ndarray | None = None,
) -> LineBatch:
    """Split ``data`` at newlines into Arrow arrays, without per-message Python work.

    ``base_offset`` is the journal offset of ``data[0]``. Bytes after the last newline are not
    returned (see :attr:`LineBatch.consumed`). With ``strip_cr`` a ``\\r`` before a newline is
    dropped as well. ``scratch``, a bool array at least ``len(data)`` long, is reused for the
    newline mask instead of allocating (and page-faulting in) a fresh one per call.
    """
    arr = np.frombuffer(data, dtype=np.uint8)
    if scratch is not None and scratch.size >= arr.size:
        mask = np.equal(arr, 0x0A, out=scratch[: arr.size])
    else:
        mask = arr == 0x0A
    newlines = np.flatnonzero(mask)
    n = int(newlines.size)
    if n == 0:
        return _empty()
    consumed = int(newlines[-1]) + 1
    starts = np.empty(n, dtype=np.int64)
    starts[0] = base_offset
    np.add(newlines[:-1], base_offset + 1, out=starts[1:])
    offsets = pa.array(starts, pa.int64())

    # The whole buffer is compacted (bytes after the last newline included, then sliced off):
    # cheaper than copying the consumed part out first.
    body = data if isinstance(data, (bytes, bytearray)) else bytes(data)
    # Line i ends (exclusive) at ends[i]; once the i newlines (and CRs) of earlier lines are
    # removed from the buffer, it ends at ends[i] - removed_before[i].
    removed_before = np.arange(n, dtype=np.int64)
    ends = newlines
    if strip_cr:
        before = newlines - 1
        has_cr = (before >= 0) & (arr[np.maximum(before, 0)] == 0x0D)
        if has_cr.any():
            ends = newlines - has_cr
            removed_before += np.cumsum(has_cr, dtype=np.int64) - has_cr
            body = body.replace(b"\r\n", b"\n")
    value_offsets = np.empty(n + 1, dtype=np.int64)
    value_offsets[0] = 0
    np.subtract(ends, removed_before, out=value_offsets[1:])
    payload = np.frombuffer(body.replace(b"\n", b""), dtype=np.uint8)[: int(value_offsets[-1])]
    if payload.size > _INT32_MAX:
        typ, off_buf = pa.large_binary(), pa.py_buffer(value_offsets)
    else:
        typ, off_buf = pa.binary(), pa.py_buffer(value_offsets.astype(np.int32))
    values = pa.Array.from_buffers(typ, n, [None, off_buf, pa.py_buffer(payload)])
    return LineBatch(offsets, values, consumed)


class ArrowLineDecoder:
    """Incremental :func:`split_lines_arrow`: ``feed`` chunks, get a :class:`LineBatch` each time."""

    def __init__(self, start_offset: int = 0, *, strip_cr: bool = False, framing: str = "ndjson"):
        self.offset = start_offset  # Journal offset of the first buffered byte.
        self.strip_cr = strip_cr
        self._framing = framing
        self._pieces: list[bytes] = []  # An incomplete line, joined once its newline arrives.
        self._size = 0
        self._scratch = np.empty(0, dtype=np.bool_)

    @property
    def buffered(self) -> int:
        return self._size

    def feed(self, data: bytes) -> LineBatch:
        if not isinstance(data, bytes):
            data = bytes(data)
        if data.find(b"\n") < 0:
            if data:
                self._pieces.append(data)
                self._size += len(data)
            return _empty()
        if self._pieces:
            data = b"".join([*self._pieces, data])
        if self._scratch.size < len(data):
            self._scratch = np.empty(max(len(data), 2 * self._scratch.size), dtype=np.bool_)
        batch = split_lines_arrow(data, self.offset, strip_cr=self.strip_cr, scratch=self._scratch)
        tail = data[batch.consumed :]
        self._pieces, self._size = ([tail] if tail else []), len(tail)
        self.offset += batch.consumed
        return batch

    def finish(self) -> None:
        if self._size:
            raise UnexpectedEOFError(
                f"{self._framing}: content ends inside a message at offset {self.offset} "
                f"({self._size} bytes without a terminating newline)"
            )
