"""The pyarrow engine of typed reads: pyarrow's JSON reader, and the conversions after it.

The pure-Python path: the batch is parsed by ``pyarrow.json`` with an explicit schema of only
the schema's fields (fields outside it are skipped by the parser, never materialised). Zoned
timestamps (``TimestampType``) are parsed natively by pyarrow's ISO-8601 parser; the two forms
it takes that Spark rejects (a zone without seconds, an offset past 18:00) are found by one
vectorised regex over the records (:data:`~.json_rules.PYARROW_ONLY_TS`) and left to the
per-record rules, and a block with a form only Spark takes (``2024-1-2 3:4:5``) is parsed again
with timestamps as strings. Dates, ``TimestampNTZ`` and binary are read as strings and converted
afterwards (vectorised, for the common form of :mod:`.json_rules`). ``MapType`` fields, which
pyarrow cannot parse, are converted in Python from one parse of each record beside pyarrow's
columns: a top-level map whole; a map in a struct (at any depth of structs) along its path,
pyarrow parsing the struct without it and the struct rebuilt with the map in place (a record
whose map does not convert takes the per-record rules). Records with invalid UTF-8 (which
pyarrow passes through inside strings) take the per-record rules. Any record pyarrow rejects is
found by re-parsing parts of the failing range (the failing record itself when pyarrow names its
row, sixteenths otherwise), and records in small failing ranges (or with unusual values) are
converted one by one in Python following Spark's rules; so pyarrow only ever accepts records
Spark accepts with the same values (but see year 0 in :mod:`.json_rules`).

Records pyarrow cannot be trusted with are deferred (a ``bad`` mask) to the per-record rules of
:mod:`.json_rules`, as :mod:`.typed_native` states the protocol.
"""

from __future__ import annotations

import decimal
import re
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    MapType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from pyspark_gazette.message import jsondoc
from pyspark_gazette.spark.read.json_rules import (
    DATE_RE,
    DECODER,
    JSON_WS,
    NTZ_RE,
    PYARROW_ONLY_TS,
    TS_RE,
    TS_ZONED_RE,
    Bad,
    Partial,
    binary_conv,
    converter,
)
from pyspark_gazette.spark.read.typed_native import PATIENCE, Piece

# A failing range is re-parsed in up to _FANOUT parts (fewer, larger re-parses than halving:
# a pyarrow call costs about as much as 50 records converted in Python); ranges of _LEAF
# records or fewer are converted record by record.
_LEAF = 64
_ERROR_ROW = re.compile(r" in row (\d+)$")
_FANOUT = 16


def _parse_type(t: DataType, out: pa.DataType, native: bool = False) -> pa.DataType:
    """The type pyarrow.json reads a field as: strings where we convert afterwards, except
    zoned timestamps with ``native`` (pyarrow parses ISO-8601 itself; see :data:`PYARROW_ONLY_TS`)."""
    if native and type(t) is TimestampType:
        return out
    if isinstance(t, (TimestampType, TimestampNTZType, DateType, BinaryType)):
        return pa.string()
    if isinstance(t, StructType):
        return pa.struct(
            [pa.field(f.name, _parse_type(f.dataType, o.type, native)) for f, o in zip(t.fields, out, strict=True)]
        )
    if isinstance(t, ArrayType):
        return pa.list_(_parse_type(t.elementType, out.value_type, native))
    if isinstance(t, DecimalType) and t.precision + t.scale > 38:
        # pyarrow checks a number's digits against the precision, then scales it up without an
        # overflow check: 2995 read as decimal128(38, 38) wraps to 0.515... Read with at most
        # 38 - scale digits, nothing scaled up passes 10^38; longer numbers fail the parse and
        # go to the per-record rules. (A scale of 38 has no such precision: :func:`_scale_38`.)
        return pa.decimal128(max(1, 38 - t.scale), t.scale)  # (never read at scale 38)
    return out


def _scale_38(t: DataType) -> bool:
    """Whether ``t`` holds a decimal of scale 38, which pyarrow cannot read without the risk of a
    wrapped value (see :func:`_parse_type`): its records all take the per-record rules."""
    if isinstance(t, DecimalType):
        return t.scale >= 38
    if isinstance(t, StructType):
        return any(_scale_38(f.dataType) for f in t.fields)
    if isinstance(t, ArrayType):
        return _scale_38(t.elementType)
    return False  # maps are converted in Python


def _has(t: DataType, kinds: tuple[type, ...]) -> bool:
    if isinstance(t, kinds):
        return True
    if isinstance(t, StructType):
        return any(_has(f.dataType, kinds) for f in t.fields)
    if isinstance(t, ArrayType):
        return _has(t.elementType, kinds)
    if isinstance(t, MapType):
        return _has(t.valueType, kinds)
    return False


def _has_ts(t: DataType) -> bool:
    """A zoned timestamp pyarrow parses natively (outside maps, which pyarrow never sees)."""
    if type(t) is TimestampType:
        return True
    if isinstance(t, StructType):
        return any(_has_ts(f.dataType) for f in t.fields)
    if isinstance(t, ArrayType):
        return _has_ts(t.elementType)
    return False


# A map plan: how to take a field's maps from a parsed record. ``(slot, conv, children)``: a map
# (``children`` None) converted whole by ``conv``, or a struct whose ``children`` (name, plan)
# hold maps; ``slot`` indexes the node's values (a map's, a struct's validity) in a batch.
_Plan = tuple[int, Callable[[Any], Any] | None, list[tuple[str, Any]] | None]


def _map_in_array(t: DataType) -> bool:
    """Whether a map sits inside an array (a map's own values are converted with it)."""
    if isinstance(t, StructType):
        return any(_map_in_array(f.dataType) for f in t.fields)
    if isinstance(t, ArrayType):
        return _has(t.elementType, (MapType,))
    return False


def _without_maps(f: StructField) -> StructField:
    """The field as pyarrow parses it: structs without their map fields, at any depth."""
    t = f.dataType
    if not isinstance(t, StructType) or not _has(t, (MapType,)):
        return f
    kept = [_without_maps(c) for c in t.fields if not isinstance(c.dataType, MapType)]
    return StructField(f.name, StructType(kept), f.nullable)


def _map_plan(t: DataType, conv: Callable[[Any], Any], slots: list[int]) -> _Plan:
    """The plan of a map or a struct holding maps; ``slots`` counts the slots taken so far."""
    slot = slots[0]
    slots[0] += 1
    if isinstance(t, MapType):
        return (slot, conv, None)
    assert isinstance(t, StructType)
    children = [
        (f.name, _map_plan(f.dataType, converter(f.dataType), slots)) for f in t.fields if _has(f.dataType, (MapType,))
    ]
    return (slot, None, children)


def _plan_slots(plan: _Plan, n: int, vals: list[list[Any]]) -> None:
    """Empty slots: a map's values (null), a struct's validity (null until seen)."""
    slot, _, children = plan
    vals[slot] = [None] * n if children is None else [False] * n
    for _, child in children or ():
        _plan_slots(child, n, vals)


def _plan_fill(v: Any, plan: _Plan, i: int, vals: list[list[Any]]) -> bool:
    """Record ``i``'s non-null value ``v`` into the slots; False if it does not convert."""
    slot, conv, children = plan
    if children is None:
        try:
            vals[slot][i] = conv(v)  # type: ignore[misc]
        except (Bad, Partial):
            return False
        return True
    if type(v) is not dict:
        return False
    vals[slot][i] = True
    ok = True
    for name, child in children:
        c = v.get(name)
        if c is not None and not _plan_fill(c, child, i, vals):
            ok = False
    return ok


def _plan_build(plan: _Plan, out: pa.DataType, arr: pa.Array | None, vals: list[list[Any]]) -> pa.Array:
    """The column of ``out``: a map from its slot, a struct from pyarrow's ``arr`` (the struct
    without its maps) with the maps in place, in the schema's field order, validity as parsed."""
    slot, _, children = plan
    if children is None:
        return pa.array(vals[slot], out)
    assert arr is not None
    sub = dict(children)
    kids = []
    for f in out:
        if f.name in sub:
            inner = None if pa.types.is_map(f.type) else arr.field(f.name)
            kids.append(_plan_build(sub[f.name], f.type, inner, vals))
        else:
            kids.append(arr.field(f.name))
    valid = np.array(vals[slot], np.bool_)
    return pa.StructArray.from_arrays(kids, fields=list(out), mask=pa.array(~valid))


_CONVERTED = (TimestampType, TimestampNTZType, DateType, BinaryType, DecimalType)
# Zeros pyarrow reads as -0.0 go to the per-record rules (the text decides: -0 or -0.0).
_FLOATS = (FloatType, DoubleType)


def _post(arr: pa.Array, t: DataType, out: pa.DataType) -> tuple[pa.Array, np.ndarray | None]:
    """Convert a pyarrow-parsed column to ``out``; also return a mask of values left to the
    per-record rules (None when there are none)."""
    if arr.type == out and not _has(t, (DecimalType, BinaryType, *_FLOATS)):
        return arr, None  # natively parsed (zoned timestamps), or nothing to convert
    if not _has(t, _CONVERTED + _FLOATS):
        return arr.cast(out), None
    if isinstance(t, _FLOATS):  # pyarrow reads the JSON integer -0 as -0.0, Spark as 0.0
        x = arr.to_numpy(zero_copy_only=False)
        negative_zero = (x == 0) & np.signbit(x)
        return arr.cast(out), (negative_zero if negative_zero.any() else None)
    valid = pc.is_valid(arr)
    if isinstance(t, StructType):
        children, bad = [], None
        for i, f in enumerate(t.fields):
            child, b = _post(arr.field(i), f.dataType, out.field(i).type)
            children.append(child)
            bad = b if bad is None else (bad if b is None else bad | b)
        res = pa.StructArray.from_arrays(children, fields=list(out), mask=pc.invert(valid))
        return res, bad
    if isinstance(t, ArrayType):
        offsets = arr.offsets
        values, b = _post(arr.values, t.elementType, out.value_type)
        res = pa.ListArray.from_arrays(offsets, values, type=out, mask=pc.invert(valid))
        if b is None:
            return res, None
        parents = np.searchsorted(offsets.to_numpy(), np.flatnonzero(b), side="right") - 1
        bad = np.zeros(len(arr), np.bool_)
        bad[parents] = True
        return res, bad
    if isinstance(t, DecimalType):  # pyarrow does not check the precision.
        # The largest value of the type (precision nines), which decimal128(38, scale) holds even
        # at precision 38, unlike the first value past it.
        largest = decimal.Decimal((0, (9,) * t.precision, -t.scale))  # exact, whatever the context
        limit = pa.scalar(largest, pa.decimal128(38, t.scale))
        over = pc.fill_null(pc.greater(pc.abs(arr.cast(pa.decimal128(38, t.scale))), limit), False)
        bad = over.to_numpy(zero_copy_only=False)
        if not bad.any():
            return arr.cast(out), None
        return pc.if_else(over, pa.scalar(None, arr.type), arr).cast(out), bad
    if isinstance(t, BinaryType):
        vals, bad = [], np.zeros(len(arr), np.bool_)
        for i, s in enumerate(arr.to_pylist()):
            try:
                vals.append(None if s is None else binary_conv(s))
            except Bad:
                vals.append(None)
                bad[i] = True
        return pa.array(vals, out), (bad if bad.any() else None)
    pattern = DATE_RE if isinstance(t, DateType) else NTZ_RE if isinstance(t, TimestampNTZType) else TS_RE
    ok = pc.fill_null(pc.match_substring_regex(arr, pattern), True)
    if isinstance(t, TimestampType):
        zoned = pc.fill_null(pc.match_substring_regex(arr, TS_ZONED_RE), True)
        arr = pc.if_else(zoned, arr, pc.binary_join_element_wise(arr, "Z", ""))
    good = pc.if_else(ok, arr, pa.scalar(None, pa.string()))
    try:
        res = good.cast(out)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # e.g. 2024-02-30: all per record.
        return pa.nulls(len(arr), out), valid.to_numpy(zero_copy_only=False)
    bad = pc.invert(ok).to_numpy(zero_copy_only=False)
    return res, (bad if bad.any() else None)


def _is_utf8(raw: bytes | None) -> bool:
    try:
        (raw or b"").decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def join_lines(values: pa.Array) -> pa.Buffer:
    """The values as one ndjson buffer (each followed by a newline), without a Python loop."""
    joined = pc.binary_join_element_wise(values, pa.scalar(b"", values.type), pa.scalar(b"\n", values.type))
    offs = np.frombuffer(joined.buffers()[1], np.int64 if pa.types.is_large_binary(values.type) else np.int32)
    start, end = int(offs[joined.offset]), int(offs[joined.offset + len(joined)])
    return joined.buffers()[2][start:end]


class ArrowPath:
    """The pure-Python path of :class:`~pyspark_gazette.spark.read.typed.TypedDecoder`:
    pyarrow's reader over runs of records, the per-record rules (the decoder's ``_records``)
    for the others. Its state is set by :meth:`_init_arrow`."""

    _json: StructType  # the schema's JSON fields (neither metadata nor the corrupt column)
    _json_arrow: pa.Schema
    _fields: list[tuple[str, Callable[[Any], Any]]]  # each JSON field's converter (json_rules)
    _records: Callable[[pa.Array, Iterable[int], list[Piece]], None]  # the per-record rules

    def _init_arrow(self, fields: list[StructField]) -> None:
        """pyarrow's parse options for the JSON ``fields`` and the plans of their maps.

        Maps are converted in Python from each record (pyarrow cannot parse maps), the rest by
        pyarrow: a top-level map whole, a struct holding maps (through structs only) parsed
        without them and rebuilt with them in place. A map inside an array, or a decimal of
        scale 38 outside maps (:func:`_scale_38`), sends every record through the per-record
        rules."""
        self._all_python = any(_map_in_array(f.dataType) or _scale_38(f.dataType) for f in fields)
        slots = [0]
        self._maps = [
            (f.name, _map_plan(f.dataType, conv, slots))
            for f, (_, conv) in zip(fields, self._fields, strict=True)
            if _has(f.dataType, (MapType,)) and not self._all_python
        ]
        self._slots = slots[0]
        parsed = [_without_maps(f) for f in fields if not isinstance(f.dataType, MapType)]
        arrow_fields = list(zip(parsed, to_arrow_schema(StructType(parsed), timezone="UTC"), strict=True))
        self._parsed = {f.name: (f.dataType, o.type) for f, o in arrow_fields}

        def parse_options(native: bool) -> pj.ParseOptions:
            return pj.ParseOptions(
                explicit_schema=pa.schema(
                    [pa.field(f.name, _parse_type(f.dataType, o.type, native)) for f, o in arrow_fields]
                ),
                unexpected_field_behavior="ignore",  # fields outside the schema are skipped
            )

        self._parse = parse_options(False)
        self._parse_native = parse_options(True)
        self._native = any(_has_ts(f.dataType) for f, _ in arrow_fields)
        self._native_tries = self._native_fallbacks = 0

    def _fast(
        self, values: pa.Array, lo: int, hi: int, pieces: list[Piece], exact: bool = False, native: bool | None = None
    ) -> None:
        """Parse records ``lo:hi`` with pyarrow, falling back as the module docstring says.

        The first attempt is multi-threaded. Once it fails, ranges are parsed as one block
        (``exact``), where pyarrow's "in row N" names the failing record exactly: the records
        before it are parsed again, it goes to the per-record rules, and parsing resumes after
        it. Errors without a row (a number that does not convert) re-parse sixteenths; in a
        native timestamp parse (``native``, see :data:`PYARROW_ONLY_TS`) they re-parse the range
        with timestamps as strings first.
        """
        if native is None:
            native = self._native and not (
                self._native_tries >= PATIENCE and 2 * self._native_fallbacks > self._native_tries
            )
            self._native_tries += native
        while lo < hi:
            part = values.slice(lo, hi - lo)
            try:
                buf = join_lines(part)
                if exact:
                    read = pj.ReadOptions(use_threads=False, block_size=len(buf) + 1)
                else:
                    longest = int(pc.max(pc.binary_length(part)).as_py() or 0)
                    read = pj.ReadOptions(use_threads=True, block_size=max(1 << 20, longest + 2, len(buf) // 8 + 1))
                table = pj.read_json(pa.BufferReader(buf), read, self._parse_native if native else self._parse)
                if table.num_rows != hi - lo:
                    raise pa.ArrowInvalid("row count")
                break
            except pa.ArrowInvalid as e:
                row = _ERROR_ROW.search(str(e)) if exact or native else None
                if native and row is None and ("timestamp" in str(e) or "out of range" in str(e)):
                    self._native_fallbacks += 1
                    native = False  # a timestamp pyarrow does not take: this range as strings
                    continue
                r = int(row[1]) if row and exact else -1
                if hi - lo <= _LEAF or 0 <= r < _LEAF:
                    take = hi if hi - lo <= _LEAF else lo + max(r + 1, _LEAF)
                    self._records(values, range(lo, min(take, hi)), pieces)
                    lo = min(take, hi)
                elif 0 < r < hi - lo:
                    self._fast(values, lo, lo + r, pieces, True, native)
                    self._records(values, [lo + r], pieces)
                    lo += r + 1
                else:
                    parts = min(_FANOUT, -(-(hi - lo) // _LEAF))
                    edges = np.linspace(lo, hi, parts + 1).astype(np.int64).tolist()
                    for a, b in zip(edges[:-1], edges[1:], strict=True):
                        self._fast(values, a, b, pieces, True, native)
                    return
        else:
            return
        bad = None
        if native:
            flagged = pc.match_substring_regex(part, PYARROW_ONLY_TS).to_numpy(zero_copy_only=False)
            bad = flagged if flagged.any() else None
        maps = self._map_columns(part, table) if self._maps else {}
        cols = []
        for f, o in zip(self._json.fields, self._json_arrow, strict=True):
            if f.name in maps:
                col, b = maps[f.name]
            else:
                col, b = _post(table.column(f.name).combine_chunks(), f.dataType, o.type)
            cols.append(col)
            bad = b if bad is None else (bad if b is None else bad | b)
        batch = pa.RecordBatch.from_arrays(cols, schema=self._json_arrow)
        if bad is None:
            pieces.append((np.arange(lo, hi, dtype=np.int64), batch, np.zeros(hi - lo, np.bool_)))
            return
        good = np.flatnonzero(~bad)
        pieces.append((good + lo, batch.take(pa.array(good)), np.zeros(len(good), np.bool_)))
        self._records(values, (np.flatnonzero(bad) + lo).tolist(), pieces)

    def _map_columns(self, part: pa.Array, table: pa.Table) -> dict[str, tuple[pa.Array, np.ndarray | None]]:
        """The columns holding maps of records pyarrow parsed: maps converted in Python from each
        record (one parse, values taken along each map's path), a struct holding maps rebuilt
        from pyarrow's column with the maps in place; a record whose map does not convert (or
        whose struct on a map's path is not an object) is left to the per-record rules."""
        n = len(part)
        bad = np.zeros(n, np.bool_)
        vals: list[list[Any]] = [[]] * self._slots
        for _, plan in self._maps:
            _plan_slots(plan, n, vals)
        for i, raw in enumerate(part.to_pylist()):
            try:
                doc, _ = jsondoc.raw_decode(DECODER, raw.decode("utf-8").strip(JSON_WS))
            except ValueError:
                bad[i] = True
                continue
            if type(doc) is not dict:
                bad[i] = True
                continue
            for name, plan in self._maps:
                v = doc.get(name)
                if v is not None and not _plan_fill(v, plan, i, vals):
                    bad[i] = True
        types = {f.name: f.type for f in self._json_arrow}
        out: dict[str, tuple[pa.Array, np.ndarray | None]] = {}
        for name, plan in self._maps:
            mask = bad
            arr = None
            if name in self._parsed:  # a struct holding maps: pyarrow parsed the rest of it
                t, o = self._parsed[name]
                arr, b = _post(table.column(name).combine_chunks(), t, o)
                if b is not None:
                    mask = bad | b
            out[name] = (_plan_build(plan, types[name], arr, vals), mask if mask.any() else None)
        return out

    def _python_pieces(self, values: pa.Array, pieces: list[Piece]) -> None:
        """The pure-Python path (pyarrow's reader and the per-record rules) over ``values``."""
        n = len(values)
        if self._all_python or not self._json.fields:
            self._records(values, range(n), pieces)
        else:
            # Records that do not start with "{" (blank, null, arrays, scalars, leading spaces)
            # go to the per-record rules, the runs between them to pyarrow. A newline inside a
            # record either breaks its parse or adds rows, which _fast notices.
            offsets = values.buffers()[1]
            starts = np.frombuffer(offsets, np.int64 if pa.types.is_large_binary(values.type) else np.int32)
            starts = starts[values.offset : values.offset + n + 1]
            buf = values.buffers()[2]
            data = np.frombuffer(buf, np.uint8) if buf is not None and buf.size else np.zeros(1, np.uint8)
            first = data[np.minimum(starts[:-1], len(data) - 1)]
            special = (starts[1:] == starts[:-1]) | (first != 0x7B)
            # pyarrow reads any depth; past Spark's limit a record is malformed (jsondoc).
            deep = np.flatnonzero((starts[1:] - starts[:-1] > 2 * jsondoc.MAX_DEPTH) & ~special)
            if len(deep):
                sub = values.take(pa.array(deep))
                brackets = pc.add(pc.count_substring(sub, "["), pc.count_substring(sub, "{"))
                special[deep[brackets.to_numpy(zero_copy_only=False) > jsondoc.MAX_DEPTH]] = True
            if values.null_count:
                special |= values.is_null().to_numpy(zero_copy_only=False)
            try:  # pyarrow's reader takes invalid UTF-8 inside strings; Python's rules do not
                values.cast(pa.string())
            except pa.ArrowInvalid:
                special |= np.array([not _is_utf8(v) for v in values.to_pylist()], np.bool_)
            edges = [0, *(np.flatnonzero(special[1:] != special[:-1]) + 1).tolist(), n]
            for lo, hi in zip(edges[:-1], edges[1:], strict=True):
                if special[lo]:
                    self._records(values, range(lo, hi), pieces)
                else:
                    self._fast(values, lo, hi, pieces)
