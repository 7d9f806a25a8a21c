"""Vectorised encoding of Arrow batches into framed journal content (the write path).

Every function here turns Arrow arrays into one contiguous buffer of whole, framed messages
plus the offsets of the message boundaries, without a Python loop over rows where Arrow or
numpy can do the work:

* :func:`frame_values` frames a ``value`` column (string or binary) for a framing
  (:meth:`~pyspark_gazette.message.Framing.encode_array`);
* :func:`json_lines` encodes columns as one JSON document per row, built column by column
  from JSON fragments (:func:`json_fragments`) joined row by row: in one pass of the C
  extension where it is built (:mod:`pyspark_gazette.native`; it escapes strings and formats
  integers, float64s, booleans, microsecond timestamps and dates straight from their Arrow
  buffers, writing the same text as the Arrow path, and takes the other types' JSON fragments),
  else with Arrow's ``binary_join_element_wise``, whose joined string array's data buffer *is*
  the journal content;
* :func:`uuid_strings` builds Gazette message UUIDs for consecutive clocks in numpy.

JSON encoding of Spark types: null is ``null`` (null fields are written, not omitted);
booleans and integers as JSON; floats in shortest round-trip form, NaN and infinities as the
strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` (as Spark's JSON writer); **decimals as
JSON numbers with their exact digits** (``12.50``); strings escaped (control characters and
non-BMP text as :func:`json.dumps` with ``ensure_ascii=False``); binary as base64 strings;
timestamps as ISO-8601 in UTC with microseconds (``2026-11-22T03:04:05.123456Z``), timestamps
without time zone the same without ``Z``; dates as ``YYYY-MM-DD``; structs and maps as
objects (map keys as strings), arrays as arrays. Other types go through ``json.dumps`` of the
Python value, one value at a time.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pyspark_gazette.errors import FramingError
from pyspark_gazette.message import Framing
from pyspark_gazette.native import PART_KINDS, extension

#: Framed content of some messages: the bytes, and the ``n + 1`` message boundaries in them.
Framed = tuple[memoryview, np.ndarray]

_NULL = pa.scalar("null")
_CONTROL = r"[\x00-\x1f]"


def framed(lines: pa.Array) -> Framed:
    """The data buffer of a string/binary array without nulls, and its offsets (from 0)."""
    if lines.null_count:
        raise ValueError("framed content cannot hold nulls")
    n = len(lines)
    width = np.int64 if pa.types.is_large_string(lines.type) or pa.types.is_large_binary(lines.type) else np.int32
    _, offsets_buf, data_buf = lines.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=width)[lines.offset : lines.offset + n + 1].astype(np.int64)
    if data_buf is None:
        return memoryview(b""), offsets - offsets[0]
    data = memoryview(data_buf)[offsets[0] : offsets[-1]]
    return data, offsets - offsets[0]


# --------------------------------------------------------------------------------------------
# Values.


def frame_values(values: pa.Array, framing: Framing, where: Any) -> Framed:
    """Frame a ``value`` column for ``framing``; ``where(i)`` describes row ``i`` for errors."""
    if values.null_count:
        raise FramingError(f"{where(_first(pc.is_null(values)))} has a null value; a message needs content")
    return framed(framing.encode_array(values, where))


def _first(mask: pa.Array) -> int:
    return int(np.flatnonzero(mask.to_numpy(zero_copy_only=False))[0])


# --------------------------------------------------------------------------------------------
# JSON documents.


def json_lines(columns: list[tuple[str, pa.Array]], prefix: pa.Array | None = None) -> Framed:
    """One JSON object per row of ``columns`` (name, array) plus ``\\n``.

    ``prefix`` (strings such as ``{"_meta":{"uuid":"..."}}`` without the closing brace) opens
    each document instead of ``{``: that is how the message UUID goes in first.
    """
    if not columns and prefix is None:
        raise ValueError("no columns to encode")
    native = extension()
    if native is not None:
        return _joined(native, columns, prefix)
    parts: list[Any] = []
    for i, (name, arr) in enumerate(columns):
        lead = "," if (i or prefix is not None) else "{"
        parts += [f"{lead}{json.dumps(name, ensure_ascii=False)}:", json_fragments(arr)]
    if prefix is not None:
        parts.insert(0, prefix)
    parts.append("}\n")
    return framed(pc.binary_join_element_wise(*parts, ""))


#: Part kinds of the C extension's ``join`` (native.PART_KINDS, ``P_*`` in _native/common.h).
_RAW, _STRING, _INT, _BOOL, _MICROS, _DATE, _DOUBLE, _DECIMAL = (
    PART_KINDS[k] for k in ("raw", "string", "int", "bool", "micros", "date", "double", "decimal")
)
#: Days of 0001-01-01 and 9999-12-31 since 1970-01-01: the years the extension writes itself.
_FIRST_DAY, _LAST_DAY = -719162, 2932896
_DAY_US = 86_400_000_000


def _joined(native: Any, columns: list[tuple[str, pa.Array]], prefix: pa.Array | None) -> Framed:
    """:func:`json_lines` in one pass of the C extension's ``join``: strings (escaped there),
    integers, booleans, microsecond timestamps, dates, float64s and decimal128s go in as their
    Arrow buffers; other columns as the JSON text of :func:`json_fragments`."""
    n = len(prefix) if prefix is not None else len(columns[0][1])
    if n == 0:
        return memoryview(b""), np.zeros(1, dtype=np.int64)
    parts: list[Any] = [] if prefix is None else [_text_part(_RAW, prefix)]
    arrays = [arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr for _, arr in columns]
    column_of: dict[int, pa.Array] = {}  # a column's part index -> its array
    for i, ((name, _), arr) in enumerate(zip(columns, arrays, strict=True)):
        lead = "," if (i or prefix is not None) else "{"
        parts.append((lead + json.dumps(name, ensure_ascii=False) + ":").encode())
        column_of[len(parts)] = arr
        parts.append(_part(arr))
    parts.append(b"}\n")
    joined = native.join(tuple(parts), n)
    while isinstance(joined, int):  # a column with a value only Arrow's cast writes (float64, decimal)
        parts[joined] = _text_part(_RAW, json_fragments(column_of[joined]))
        joined = native.join(tuple(parts), n)
    data, bounds = joined
    return memoryview(data), np.frombuffer(bounds, dtype=np.int64)


def _text_part(kind: int, arr: pa.Array) -> tuple:
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    validity, offsets, data = arr.buffers()
    return (kind, offsets, data, arr.offset, large, validity if arr.null_count else None)


def _part(arr: pa.Array) -> tuple:
    """The ``join`` part of a column (see _native/join.c's ``join``)."""
    t = arr.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _text_part(_STRING, arr)
    if pa.types.is_null(t):  # NullType (lit(None)): no buffers, every value null
        return _text_part(_RAW, json_fragments(arr))
    bits, values = arr.buffers()[:2]
    validity = bits if arr.null_count else None
    if pa.types.is_signed_integer(t):
        return (_INT, values, arr.offset, t.bit_width // 8, validity)
    if pa.types.is_boolean(t):
        return (_BOOL, values, arr.offset, validity)
    if pa.types.is_float64(t):
        return (_DOUBLE, values, arr.offset, validity)
    if isinstance(t, pa.Decimal128Type):
        return (_DECIMAL, values, arr.offset, t.scale, validity)
    if pa.types.is_timestamp(t) and t.unit == "us" and _in_years(arr, _DAY_US):
        return (_MICROS, values, arr.offset, t.tz is not None, validity)
    if pa.types.is_date32(t) and _in_years(arr, 1):
        return (_DATE, values, arr.offset, validity)
    return _text_part(_RAW, json_fragments(arr))


def _in_years(arr: pa.Array, per_day: int) -> bool:
    """Whether every value of ``arr`` (``per_day`` units a day) falls in years 0001-9999."""
    if arr.null_count == len(arr):
        return True
    bounds = pc.min_max(arr.cast(pa.int64() if per_day > 1 else pa.int32()))
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    return _FIRST_DAY * per_day <= low and high < (_LAST_DAY + 1) * per_day


def json_fragments(arr: pa.Array) -> pa.Array:
    """The JSON text of every value of ``arr`` (a string array without nulls)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    t = arr.type
    if pa.types.is_null(t):
        return pa.nulls(len(arr), pa.string()).fill_null(_NULL)
    if pa.types.is_boolean(t):
        out = pc.if_else(arr, "true", "false")
    elif pa.types.is_integer(t) or pa.types.is_decimal(t):
        out = arr.cast(pa.string())
    elif pa.types.is_floating(t):
        out = _floats(arr)
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        out = _strings(arr.cast(pa.string()) if pa.types.is_large_string(t) else arr)
    elif pa.types.is_timestamp(t):
        out = _timestamps(arr)
    elif pa.types.is_date(t):
        out = _quote(arr.cast(pa.date32()).cast(pa.string()))
    elif pa.types.is_struct(t):
        out = _struct(arr)
    elif pa.types.is_map(t):
        out = _map(arr)
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        out = _list(arr)
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        out = pa.array(
            [None if b is None else '"' + base64.b64encode(b).decode("ascii") + '"' for b in arr.to_pylist()],
            pa.string(),
        )
    else:
        out = pa.array([None if v is None else _dumps(v) for v in arr.to_pylist()], pa.string())
    return out.fill_null(_NULL) if out.null_count else out


def _quote(strings: pa.Array) -> pa.Array:
    return pc.binary_join_element_wise('"', strings, '"', "")


def _timestamps(arr: pa.Array) -> pa.Array:
    """ISO-8601 text: the values are UTC instants, so drop the zone and format them as naive
    timestamps (Arrow's cast is ~10x faster than ``strftime`` or a cast with a zone), then turn
    the space at index 10 into ``T`` in place."""
    t = arr.type
    out = pc.binary_join_element_wise('"', _iso(arr), '"' if t.tz is None else 'Z"', "")
    return _children_valid(arr, out)


def _iso(arr: pa.Array) -> pa.Array:
    """ISO-8601 text of timestamps without the quotes or the zone (see :func:`_timestamps`);
    arbitrary text where ``arr`` is null."""
    t = arr.type
    text = arr.cast(pa.timestamp(t.unit)).cast(pa.string())
    if text.null_count:
        text = text.fill_null("0000-00-00 00:00:00")
    data, offsets = framed(text)
    starts = offsets[:-1]
    if len(starts) and (np.all(np.diff(offsets) >= 19) and bytes(data[10:11]) == b" "):
        patched = np.frombuffer(data, dtype=np.uint8).copy()
        if np.all(patched[starts + 10] == 0x20):
            patched[starts + 10] = ord("T")
            text = pa.Array.from_buffers(
                pa.string(), len(text), [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(patched)]
            )
        else:  # years outside 0001-9999
            text = pc.replace_substring_regex(text, r"^(-?\d+-\d\d-\d\d) ", r"\1T")
    return text


def _floats(arr: pa.Array) -> pa.Array:
    out = arr.cast(pa.string())
    special = pc.or_(pc.is_nan(arr), pc.is_inf(arr)).fill_null(False)
    if special.true_count:
        text = pc.if_else(pc.is_nan(arr), '"NaN"', pc.if_else(pc.greater(arr, 0), '"Infinity"', '"-Infinity"'))
        out = pc.if_else(special, text, out)
    return out


def _strings(arr: pa.Array) -> pa.Array:
    """Quoted JSON strings (null where ``arr`` is)."""
    return _quote(_escaped(arr))


def _escaped(arr: pa.Array) -> pa.Array:
    """JSON string text without the quotes. numpy scans the data buffer first, so the escaping
    passes run only when a quote, backslash or control character occurs at all."""
    _, offsets_buf, data_buf = arr.buffers()
    if data_buf is None or len(arr) == 0:
        return arr
    offsets = np.frombuffer(offsets_buf, dtype=np.int32)[arr.offset : arr.offset + len(arr) + 1]
    buf = np.frombuffer(data_buf, dtype=np.uint8)[offsets[0] : offsets[-1]]
    escaped = arr
    if np.any(buf == 0x5C):
        escaped = pc.replace_substring(escaped, "\\", "\\\\")
    if np.any(buf == 0x22):
        escaped = pc.replace_substring(escaped, '"', '\\"')
    if np.any(buf < 0x20):
        control = pc.match_substring_regex(arr, _CONTROL).fill_null(False)
        fixed = [json.dumps(s, ensure_ascii=False)[1:-1] for s in arr.filter(control).to_pylist()]
        escaped = pc.replace_with_mask(escaped, control, pa.array(fixed, pa.string()))
    return escaped


def _children_valid(arr: pa.Array, out: pa.Array) -> pa.Array:
    """``out`` where ``arr`` is valid, JSON null elsewhere."""
    if not arr.null_count:
        return out
    return pc.if_else(arr.is_valid(), out, _NULL)


def _struct(arr: pa.StructArray) -> pa.Array:
    fields = [(arr.type.field(i).name, arr.field(i)) for i in range(arr.type.num_fields)]
    if not fields:
        return _children_valid(arr, pa.array(["{}"] * len(arr), pa.string()))
    parts: list[Any] = []
    for i, (name, child) in enumerate(fields):
        parts += [("," if i else "{") + json.dumps(name, ensure_ascii=False) + ":", json_fragments(child)]
    parts.append("}")
    return _children_valid(arr, pc.binary_join_element_wise(*parts, ""))


def _rebuild_list(arr: pa.Array, items: pa.Array, sep: str) -> pa.Array:
    offsets = arr.offsets
    base = offsets[0].as_py()
    offsets = pc.subtract(offsets, base) if base else offsets
    if isinstance(offsets, pa.ChunkedArray):
        offsets = offsets.combine_chunks()
    if pa.types.is_int64(offsets.type):
        joined = pc.binary_join(pa.LargeListArray.from_arrays(offsets, items), sep)
    else:
        joined = pc.binary_join(pa.ListArray.from_arrays(offsets, items), sep)
    return joined


def _list(arr: pa.Array) -> pa.Array:
    items = json_fragments(arr.flatten())
    joined = _rebuild_list(arr, items, ",")
    return _children_valid(arr, pc.binary_join_element_wise("[", joined, "]", ""))


def _map(arr: pa.MapArray) -> pa.Array:
    keys, items = arr.keys, arr.items
    if pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type):
        key_text = json_fragments(keys)
    else:
        plain = json_fragments(keys)
        key_text = pc.if_else(pc.starts_with(plain, '"'), plain, _quote(plain))
    entries = pc.binary_join_element_wise(key_text, ":", json_fragments(items), "")
    joined = _rebuild_list(arr, entries, ",")
    return _children_valid(arr, pc.binary_join_element_wise("{", joined, "}", ""))


def _default(v: Any) -> Any:
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(v).decode("ascii")
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, datetime.timedelta):
        return v.total_seconds()
    if isinstance(v, (datetime.date, datetime.time)):
        return v.isoformat()
    return str(v)


def _dumps(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False, default=_default, allow_nan=True)


# --------------------------------------------------------------------------------------------
# Message UUIDs.

_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
#: Column of each of the 32 hex digits in the 36-character UUID text.
_DIGITS = np.array([c for c in range(36) if c not in (8, 13, 18, 23)])


def uuid_strings(producer: bytes, first_clock: int, n: int, step: int, flags: int) -> pa.Array:
    """``n`` UUID strings of ``producer`` for clocks ``first_clock + i * step``, with ``flags``.

    The same bytes as :func:`pyspark_gazette.message.build_uuid`, computed for all rows at once.
    """
    clocks = np.uint64(first_clock) + np.arange(n, dtype=np.uint64) * np.uint64(step)
    raw = np.empty((n, 16), dtype=np.uint8)
    fields = np.empty((n, 4), dtype=">u4")
    fields[:, 0] = (clocks >> np.uint64(4)) & np.uint64(0xFFFFFFFF)
    mid = (clocks >> np.uint64(36)) & np.uint64(0xFFFF)
    high = ((clocks >> np.uint64(52)) & np.uint64(0x0FFF)) | np.uint64(0x1000)
    fields[:, 1] = (mid << np.uint64(16)) | high
    seq = np.uint64(0x8000) | ((clocks & np.uint64(0xF)) << np.uint64(10)) | np.uint64(flags)
    fields[:, 2] = seq << np.uint64(16) | np.uint64(int.from_bytes(producer[:2], "big"))
    fields[:, 3] = int.from_bytes(producer[2:], "big")
    raw[:] = fields.view(np.uint8).reshape(n, 16)
    text = np.full((n, 36), ord("-"), dtype=np.uint8)
    digits = np.empty((n, 16, 2), dtype=np.uint8)
    digits[:, :, 0] = _HEX[raw >> 4]
    digits[:, :, 1] = _HEX[raw & 0x0F]
    text[:, _DIGITS] = digits.reshape(n, 32)
    offsets = np.arange(0, 36 * (n + 1), 36, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(text.tobytes())])
