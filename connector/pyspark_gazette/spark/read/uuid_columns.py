"""Message UUIDs of a piece of messages as numpy columns (read-committed's hot path).

:func:`uuid_columns` gives each message's producer (the UUID's 6 node bytes as an integer),
clock and flags, the same values as
:func:`~pyspark_gazette.spark.read.arrow_output.uuid_parts` (which parses each message in
Python), without a Python step per message where the document starts with its UUID: an ndjson
document that begins ``{"k1":{"k2":"<uuid>"`` (the keys of ``uuidPointer``, no whitespace; how
:func:`~pyspark_gazette.message.set_uuid_at` and Flow write documents) has its UUID read at that
fixed place for every message at once, in numpy. Every other message (another layout,
whitespace, escaped keys, other framings) goes through ``uuid_parts``, so the result is the
same for every document.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from pyspark_gazette.message import Framing
from pyspark_gazette.message.uuids import _pointer_keys
from pyspark_gazette.spark.read.arrow_output import uuid_parts

#: Hex digit values by byte (255: not a hex digit).
_HEX = np.full(256, 255, np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _HEX[_c] = 10 + _i
#: Positions of the 32 hex digits in a UUID's 36-character text form.
_DIGITS = np.array([i for i in range(36) if i not in (8, 13, 18, 23)])
_heads: dict[str, bytes | None] = {}


def _head(pointer: str) -> bytes | None:
    """The bytes a document starts with when its UUID comes first: ``{"a":{"b":"``."""
    if pointer not in _heads:
        try:
            keys = _pointer_keys(pointer)
        except ValueError:
            keys = []
        _heads[pointer] = (
            b"{" + b":{".join(json.dumps(k).encode() for k in keys) + b':"' if keys and all(keys) else None
        )
    return _heads[pointer]


def uuid_columns(
    values: pa.Array, framing: Framing, pointer: str, uuid_field: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(producer, clock, flags)`` (uint64, uint64, int64) of each message; all 0 for a message
    without a valid Gazette UUID (read committed at once, as the sequencer treats clock 0)."""
    n = len(values)
    producer = np.zeros(n, np.uint64)
    clock = np.zeros(n, np.uint64)
    flags = np.zeros(n, np.int64)
    slow = np.ones(n, bool)
    head = _head(pointer) if framing.name == "ndjson" else None
    wide = pa.types.is_large_binary(values.type)
    if head is not None and n and values.null_count == 0 and (wide or pa.types.is_binary(values.type)):
        _, off_buf, data_buf = values.buffers()
        size = 8 if wide else 4
        offsets = np.frombuffer(off_buf, np.int64 if wide else np.int32, n + 1, values.offset * size)
        data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
        width = len(head) + 37  # head, 36 characters, closing quote
        starts = offsets[:-1].astype(np.int64)
        room = (offsets[1:] - offsets[:-1]) >= width
        idx = np.where(room, starts, 0)[:, None] + np.arange(width)
        grid = data[np.minimum(idx, max(len(data) - 1, 0))] if len(data) else np.zeros((n, width), np.uint8)
        text = grid[:, len(head) : len(head) + 36]
        ok = room & (grid[:, : len(head)] == np.frombuffer(head, np.uint8)).all(axis=1)
        ok &= grid[:, -1] == ord('"')
        ok &= (text[:, [8, 13, 18, 23]] == ord("-")).all(axis=1)
        nib = _HEX[text[:, _DIGITS]]
        ok &= (nib != 255).all(axis=1)
        raw = (nib[:, 0::2].astype(np.uint64) << np.uint64(4)) | nib[:, 1::2].astype(np.uint64)  # 16 bytes
        valid = ok & ((raw[:, 6] >> np.uint64(4)) == 1) & ((raw[:, 8] & np.uint64(0xC0)) == 0x80)
        s = np.uint64
        low = raw[:, 0] << s(24) | raw[:, 1] << s(16) | raw[:, 2] << s(8) | raw[:, 3]
        mid = raw[:, 4] << s(8) | raw[:, 5]
        high = (raw[:, 6] << s(8) | raw[:, 7]) & s(0x0FFF)
        counter = (raw[:, 8] >> s(2)) & s(0xF)
        node = np.zeros(n, np.uint64)
        for k in range(10, 16):
            node = node << s(8) | raw[:, k]
        producer = np.where(valid, node, s(0))
        clock = np.where(valid, high << s(52) | mid << s(36) | low << s(4) | counter, s(0))
        flags = np.where(valid, ((raw[:, 8] << s(8) | raw[:, 9]) & s(0x3FF)).astype(np.int64), 0)
        slow = ~ok
    rest = np.flatnonzero(slow)
    if rest.size:
        parts = uuid_parts(values.take(pa.array(rest)), framing, pointer, uuid_field)
        for i, p in zip(rest.tolist(), parts, strict=True):
            if p is not None:
                producer[i] = int.from_bytes(p[0], "big")
                clock[i] = p[1]
                flags[i] = p[2]
    return producer, clock, flags
