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
import pyarrow.compute as pc

from pyspark_gazette.message import NDJSON, Framing
from pyspark_gazette.message.uuids import pointer_keys
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
            keys = pointer_keys(pointer)
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
    head = _head(pointer) if framing.name == NDJSON.name else None
    if head is not None and n and values.null_count == 0 and pa.types.is_binary(values.type):
        width = len(head) + 37  # head, 36 characters, closing quote
        lengths = pc.binary_length(values).to_numpy()
        room = lengths >= width
        if room.all():
            sliced = pc.binary_slice(values, 0, width)
        else:  # short messages are padded to the width (they cannot match the head's quote)
            pad = pa.scalar(b"\0" * width, pa.binary())
            sliced = pc.binary_slice(pc.binary_join_element_wise(values, pad, pa.scalar(b"", pa.binary())), 0, width)
        grid = np.frombuffer(sliced.buffers()[2], np.uint8, n * width, 0).reshape(n, width)
        text = grid[:, len(head) : len(head) + 36]
        ok = room & (grid[:, : len(head)] == np.frombuffer(head, np.uint8)).all(axis=1)
        ok &= grid[:, -1] == ord('"')
        ok &= (text[:, [8, 13, 18, 23]] == ord("-")).all(axis=1)
        nib = _HEX[text[:, _DIGITS]]
        ok &= (nib != 255).all(axis=1)
        raw = np.ascontiguousarray((nib[:, 0::2] << 4) | nib[:, 1::2])  # the UUID's 16 bytes
        words = raw.view(">u8").astype(np.uint64)  # bytes 0-7 and 8-15, big-endian
        hi, lo = words[:, 0], words[:, 1]
        s = np.uint64
        version, variant = (hi >> s(12)) & s(0xF), (lo >> s(62)) & s(0x3)
        valid = ok & (version == 1) & (variant == 2)
        time_low, time_mid, time_high = hi >> s(32), (hi >> s(16)) & s(0xFFFF), hi & s(0x0FFF)
        counter = (lo >> s(58)) & s(0xF)
        producer = np.where(valid, lo & s(0xFFFFFFFFFFFF), s(0))
        clock = np.where(valid, time_high << s(52) | time_mid << s(36) | time_low << s(4) | counter, s(0))
        flags = np.where(valid, ((lo >> s(48)) & s(0x3FF)).astype(np.int64), 0)
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
