"""The C scanner's engine of typed reads, and the protocol every engine follows.

The engines of :class:`~pyspark_gazette.spark.read.typed.TypedDecoder`, fastest first: the C
scanner (``_jsonscan.scan``, ``_native/scan.c``; this module), pyarrow's JSON reader
(:mod:`.typed_arrow`) and the per-record rules (:mod:`.json_rules`, the reference). Each one
takes only the records it is certain of by Spark's rules and *defers* every other record to the
next one; none decides a record another would decide differently. What an engine decides is a
:data:`Piece`; the decoder puts the pieces back in the batch's order (``TypedDecoder._assemble``).

The one statement of the protocol is the scanner's status byte per record (``ROW_OK``,
``ROW_NONE``, ``ROW_FALLBACK`` in scan.c), named here :data:`ROW`, :data:`NO_ROW` and
:data:`DEFER`: deferred records go to the pyarrow engine as a sub-batch, whose own deferred
records (a mask, ``bad``) go to the per-record rules. An engine that keeps deferring most of its
records is given up by its decoder after :data:`PATIENCE` tries.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from pyspark_gazette.native import SCAN_KINDS, extension
from pyspark_gazette.native import module as _jsonscan  # None without the C scanner: the pure-Python path

#: A record's status from the scanner: a row written, no row (a null or blank record), or
#: deferred to the next engine (the values of ``ROW_OK``, ``ROW_NONE``, ``ROW_FALLBACK`` in
#: _native/scan.c).
ROW, NO_ROW, DEFER = 0, 1, 2
#: What an engine decided: the records' indices in the batch, their rows (the schema's JSON
#: fields), and which of them are malformed (their rows null, the corrupt column their text).
Piece = tuple[np.ndarray, pa.RecordBatch, np.ndarray]
#: After this many batches (blocks, for pyarrow's timestamp parse) a decoder stops trying an
#: engine if most of what it was given was deferred.
PATIENCE = 4

#: The scalar types the C scanner converts (its kinds: native.SCAN_KINDS), and structs and
#: arrays of them (SCAN_STRUCT, SCAN_LIST); a schema with any other type among its JSON fields
#: takes the pure-Python path for the whole batch.
NATIVE_KINDS: dict[type, int] = {
    t: SCAN_KINDS[name]
    for t, name in (
        (StringType, "string"),
        (LongType, "long"),
        (IntegerType, "int"),
        (ShortType, "short"),
        (ByteType, "byte"),
        (DoubleType, "double"),
        (FloatType, "float"),
        (BooleanType, "bool"),
        (TimestampType, "timestamp"),
        (TimestampNTZType, "ntz"),
        (DateType, "date"),
    )
}
SCAN_STRUCT, SCAN_LIST = SCAN_KINDS["struct"], SCAN_KINDS["list"]
# Nesting of structs and arrays the scanner is given (_native/scan.c takes up to 16).
SCAN_DEPTH = 8


def scan_item(name: str, t: DataType, depth: int = 0) -> tuple | None:
    """The C scanner's plan of a field (or an array's element), None if it cannot take it:
    another type, a struct without fields or with a name twice, nesting past SCAN_DEPTH."""
    kind = NATIVE_KINDS.get(type(t))
    if kind is not None:
        return (name.encode("utf-8"), kind)
    if depth >= SCAN_DEPTH:
        return None
    if isinstance(t, StructType):
        names = t.fieldNames()
        kids = [scan_item(f.name, f.dataType, depth + 1) for f in t.fields]
        if not kids or len(set(names)) != len(names) or None in kids:
            return None
        return (name.encode("utf-8"), SCAN_STRUCT, kids)
    if isinstance(t, ArrayType):
        elem = scan_item("", t.elementType, depth + 1)
        return None if elem is None else (name.encode("utf-8"), SCAN_LIST, [elem])
    return None


def scan_array(t: pa.DataType, col: tuple) -> pa.Array:
    """An Arrow array of type t from the scanner's buffers of one column (see _native/scan.c)."""
    length, valid, data, offsets, nulls, kids = col
    bufs = [pa.py_buffer(valid) if nulls else None]
    if offsets is not None:
        bufs.append(pa.py_buffer(offsets))
    if data is not None:
        bufs.append(pa.py_buffer(data))
    children = None
    if pa.types.is_struct(t):
        children = [scan_array(t.field(i).type, k) for i, k in enumerate(kids)]
    elif pa.types.is_list(t):
        children = [scan_array(t.value_type, kids[0])]
    return pa.Array.from_buffers(t, length, bufs, null_count=nulls, children=children)


def native_available() -> bool:
    """Whether the C scanner is built and not turned off by :data:`~pyspark_gazette.native.NATIVE_ENV`."""
    return extension() is not None


class NativePath:
    """The C scanner's part of :class:`~pyspark_gazette.spark.read.typed.TypedDecoder`: the
    state below is set by the decoder's ``__init__``; deferred records go to its pure-Python
    path (:class:`~pyspark_gazette.spark.read.typed_arrow.ArrowPath`)."""

    _json_arrow: pa.Schema
    _scan_plan: list[tuple] | None  # scan_item of every JSON field, or None: not scanned
    _scan_rows: int
    _scan_fallbacks: int  # records deferred, of _scan_rows
    _scan_batches: int
    _index_map: np.ndarray | None  # indices of a sub-batch in the batch decoded

    _python_pieces: Callable[[pa.Array, list[Piece]], None]  # typed_arrow.ArrowPath's

    def _init_scan(self, fields: list[StructField], unique: bool) -> None:
        """The scanner's plan: every JSON field a scalar it converts, or structs and arrays of
        them; names unique at every level (``unique``: the schema's own)."""
        items = [scan_item(f.name, f.dataType) for f in fields]
        plan = [i for i in items if i is not None]
        self._scan_plan = None
        if native_available() and plan and len(plan) == len(fields) and unique:
            self._scan_plan = plan
        self._scan_rows = self._scan_fallbacks = self._scan_batches = 0
        self._index_map = None

    def _use_scan(self) -> bool:
        """The C scanner, unless most records of the last batches fell back from it."""
        if self._scan_plan is None:
            return False
        return self._scan_batches < PATIENCE or 2 * self._scan_fallbacks <= self._scan_rows

    def _scan(self, values: pa.Array, pieces: list[Piece]) -> None:
        """Records the C scanner is certain of become one piece; the others (DEFER) are
        decoded by the pure-Python path as a sub-batch, their indices mapped back."""
        assert _jsonscan is not None and self._scan_plan is not None
        n = len(values)
        bufs = values.buffers()
        status, rows, cols = _jsonscan.scan(
            self._scan_plan,
            bufs[0] if values.null_count else None,
            bufs[1],
            bufs[2],
            values.offset,
            n,
            pa.types.is_large_binary(values.type),
        )
        st = np.frombuffer(status, np.uint8)
        if rows:
            arrays = [scan_array(f.type, col) for f, col in zip(self._json_arrow, cols, strict=True)]
            batch = pa.RecordBatch.from_arrays(arrays, schema=self._json_arrow)
            pieces.append((np.flatnonzero(st == ROW), batch, np.zeros(rows, np.bool_)))
        back = np.flatnonzero(st == DEFER)
        self._scan_batches += 1
        self._scan_rows += n
        self._scan_fallbacks += len(back)
        if len(back):
            sub: list[Piece] = []
            self._index_map = back
            try:
                self._python_pieces(values.take(pa.array(back)), sub)
            finally:
                self._index_map = None
            pieces.extend((back[src], batch, corrupt) for src, batch, corrupt in sub)
