"""Typed decoding of ndjson message payloads into Arrow columns, as Spark's JSON source would.

:class:`TypedDecoder` turns a ``BinaryArray`` of JSON documents into a ``RecordBatch`` of the
user's schema (exactly ``to_arrow_schema(schema, timezone="UTC")``, which Spark checks), with
the ``mode`` semantics of ``spark.read.schema(s).json(path)``:

* PERMISSIVE: a malformed record keeps the fields that did convert (Spark's partial results,
  nested structs included; an array or map with a bad element is null), the others are null,
  and the raw text goes to the corrupt column when the schema has it.
* DROPMALFORMED: malformed records are dropped. FAILFAST: the first one raises
  :class:`~pyspark_gazette.errors.MessageDecodeError` naming its index in the batch.

C scanner (:mod:`.typed_native`): where the optional extension ``pyspark_gazette._jsonscan`` is
built (setup.py, ``_native/scan.c``) and every JSON field of the schema is a string, integer
(long, int, short, byte), double, float, boolean, timestamp, timestamp without zone or date, or
a struct or array of those (at any depth up to 8 levels; struct field names unique), the batch
is first scanned in C, straight from the array's buffers into Arrow buffers. It takes a record
only when certain of Spark's value by Spark's rules (:mod:`.json_rules`): an object whose values
for the schema's fields are strings (escapes, surrogate pairs, UTF-8 checked), JSON integers in
range, numbers (correctly rounded; Float once from the text, as pyarrow's reader), booleans,
nulls; timestamps as integer epoch seconds or strings of the common form (:mod:`.json_rules`:
zones only on zoned timestamps), dates as ``yyyy-mm-dd`` optionally followed by ``T`` or a space
and anything; structs as objects or null (fields matched by exact name, missing ones null, an
empty object a struct of nulls), arrays as arrays or null (null elements kept); other fields
skipped (any JSON, checked, never built). Every other record (another JSON type for a field, a
struct or array given as anything else, an element or struct field that does not convert, a
struct or array key given twice in one object, malformed JSON, an overflow, another timestamp
form, escapes in keys, a lone surrogate, ``NaN``, a top-level array, invalid UTF-8 anywhere in
it, ...) goes, with its index, to the pure-Python path as a sub-batch, so the modes, partial
results and the corrupt column stay the same. Schemas with any other type (maps, decimals,
binary, at any depth) take the pure-Python path for the whole batch; so do decoders whose
batches mostly fell back, after four batches. ``PYSPARK_GAZETTE_NATIVE_JSON=0`` (read by each
decoder) turns the scanner off.

Pure-Python path (:mod:`.typed_arrow`): pyarrow's JSON reader over the batch with an explicit
schema of the JSON fields, its values checked and converted vectorised; records it cannot be
trusted with take the per-record rules (:mod:`.json_rules`), which follow Spark's rules and are
the reference of the other two engines. The engines hand records on as :mod:`.typed_native`
states once (a record's row, no row, or deferred to the next engine).

The modules: this one (the decoder, its modes, the per-record loop and the assembly of the
pieces), :mod:`.json_rules` (Spark's value rules and the timestamp grammar), :mod:`.typed_arrow`
(the pyarrow engine), :mod:`.typed_native` (the C scanner's engine and the engines' protocol).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StringType, StructType

from pyspark_gazette.errors import MessageDecodeError, OptionError
from pyspark_gazette.message import jsondoc
from pyspark_gazette.native import NATIVE_ENV  # noqa: F401  (named here too)
from pyspark_gazette.spark.read.json_rules import DECODER, JSON_WS, converter, excerpt, struct_values, why_malformed
from pyspark_gazette.spark.read.typed_arrow import ArrowPath
from pyspark_gazette.spark.read.typed_native import NativePath, Piece, native_available  # noqa: F401  (named here too)

MODES = ("PERMISSIVE", "DROPMALFORMED", "FAILFAST")
RESERVED_KINDS = frozenset({"journal", "offset", "uuid", "producer", "clock", "flags", "mod_time", "timestamp"})


class TypedDecoder(ArrowPath, NativePath):
    """JSON message payloads to typed Arrow batches; see the module docstring for semantics."""

    def __init__(
        self,
        schema: StructType,
        *,
        mode: str = "PERMISSIVE",
        corrupt_column: str = "_corrupt_record",
        reserved: Mapping[str, str] = {},  # noqa: B006 - read only
    ):
        self.mode = mode.upper()
        if self.mode not in MODES:
            raise OptionError("mode", f"must be one of {', '.join(MODES)}, not {mode!r}")
        for name, kind in reserved.items():
            if kind not in RESERVED_KINDS:
                raise OptionError("schema", f"column {name!r}: unknown metadata kind {kind!r}")
        self.schema = schema
        self.out_schema = to_arrow_schema(schema, timezone="UTC")
        self.reserved = dict(reserved)
        names = set(schema.fieldNames())
        self.corrupt_column = corrupt_column if corrupt_column in names else None
        if self.corrupt_column and not isinstance(schema[corrupt_column].dataType, StringType):
            raise OptionError("columnNameOfCorruptRecord", f"column {corrupt_column!r} must be a string column")
        fields = [f for f in schema.fields if f.name not in self.reserved and f.name != self.corrupt_column]
        self._json = StructType(fields)
        self._json_arrow = to_arrow_schema(self._json, timezone="UTC")
        self._fields = [(f.name, converter(f.dataType)) for f in fields]
        self.errors = 0
        self._init_arrow(fields)
        self._init_scan(fields, len(names) == len(schema.fields))

    # -- per record --------------------------------------------------------------------------

    def _records(self, values: pa.Array, indices: Iterable[int], pieces: list[Piece]) -> None:
        """The per-record rules (:mod:`.json_rules`) over the records at ``indices``, as one
        piece: the last engine, which defers nothing."""
        rows: list[dict | None] = []
        src: list[int] = []
        corrupt: list[bool] = []
        for i in indices:
            raw = values[i].as_py()
            for row, bad in self._record(raw):
                if bad:
                    self._malformed(i, raw)
                rows.append(row)
                src.append(i)
                corrupt.append(bad)
        if rows:
            cols = [
                pa.array([None if r is None else r[name] for r in rows], f.type)
                for (name, _), f in zip(self._fields, self._json_arrow, strict=True)
            ]
            batch = pa.RecordBatch.from_arrays(cols, schema=self._json_arrow)
            pieces.append((np.array(src, np.int64), batch, np.array(corrupt, np.bool_)))

    def _record(self, raw: bytes | None) -> list[tuple[dict | None, bool]]:
        if raw is None:
            return []
        try:
            text = raw.decode("utf-8").strip(JSON_WS)
            if not text:
                return []
            doc, _ = jsondoc.raw_decode(DECODER, text)  # Like Spark, ignores what follows the value.
        except ValueError:
            return [(None, True)]
        if jsondoc.maybe_deep(text, 100):  # converting recurses as deep as the record nests
            with jsondoc.room():
                return self._rows(doc)
        return self._rows(doc)

    def _rows(self, doc: Any) -> list[tuple[dict | None, bool]]:
        if type(doc) is dict:
            return [struct_values(doc, self._fields)]
        if type(doc) is list and all(type(d) is dict for d in doc):
            return [struct_values(d, self._fields) for d in doc]
        return [(None, True)]

    def _malformed(self, index: int, raw: bytes | None) -> None:
        self.errors += 1
        if self.mode == "FAILFAST":
            if self._index_map is not None:
                index = int(self._index_map[index])
            text = (raw or b"").decode("utf-8", "replace")
            why = why_malformed(raw, self._json)
            err = MessageDecodeError(
                f"malformed JSON record at index {index} (mode FAILFAST): {why}: {excerpt(text)!r}"
            )
            err.index = index  # type: ignore[attr-defined]
            raise err

    # -- batches -----------------------------------------------------------------------------

    def decode(self, values: pa.Array, metadata: Mapping[str, pa.Array]) -> pa.RecordBatch | None:
        """Decode one batch of JSON documents; ``metadata`` holds the reserved kinds' arrays."""
        n = len(values)
        if n == 0:
            return None
        if pa.types.is_large_binary(values.type) and pc.sum(pc.binary_length(values)).as_py() < 2**31 - 1:
            values = values.cast(pa.binary())
        pieces: list[Piece] = []
        if self._use_scan():
            self._scan(values, pieces)
        else:
            self._python_pieces(values, pieces)
        return self._assemble(values, metadata, pieces)

    def _assemble(
        self, values: pa.Array, metadata: Mapping[str, pa.Array], pieces: list[Piece]
    ) -> pa.RecordBatch | None:
        if not pieces:
            return None
        src = np.concatenate([p[0] for p in pieces])
        corrupt = np.concatenate([p[2] for p in pieces])
        if len(pieces) == 1:
            batch = pieces[0][1]
        else:
            batch = pa.Table.from_batches([p[1] for p in pieces], schema=self._json_arrow).combine_chunks()
            batch = batch.to_batches()[0] if batch.num_rows else pa.RecordBatch.from_pylist([], self._json_arrow)
        order: np.ndarray | None = None
        if len(src) > 1 and bool(np.any(src[1:] < src[:-1])):
            order = np.argsort(src, kind="stable")
        if self.mode == "DROPMALFORMED" and corrupt.any():
            keep = np.flatnonzero(~corrupt)
            order = keep if order is None else order[~corrupt[order]]
        if order is not None:
            src, corrupt = src[order], corrupt[order]
            batch = batch.take(pa.array(order))
        if len(src) == 0:
            return None
        identity = len(src) == len(values) and bool(np.all(src == np.arange(len(src))))
        take = None if identity else pa.array(src)
        cols = []
        for f in self.out_schema:
            if f.name in self.reserved:
                kind = self.reserved[f.name]
                if kind not in metadata:
                    raise KeyError(f"metadata for column {f.name!r} ({kind}) was not given")
                col = metadata[kind] if take is None else metadata[kind].take(take)
                cols.append(col.cast(f.type))
            elif f.name == self.corrupt_column:
                cols.append(self._corrupt_text(values, src, corrupt))
            else:
                cols.append(batch.column(f.name))
        return pa.RecordBatch.from_arrays(cols, schema=self.out_schema)

    @staticmethod
    def _corrupt_text(values: pa.Array, src: np.ndarray, corrupt: np.ndarray) -> pa.Array:
        if not corrupt.any():
            return pa.nulls(len(src), pa.string())
        raw = values.take(pa.array(src[corrupt]))
        try:
            text = raw.cast(pa.string())
        except pa.ArrowInvalid:  # Not UTF-8: replacement characters, as a Java decoder would.
            text = pa.array([None if b is None else b.decode("utf-8", "replace") for b in raw.to_pylist()], pa.string())
        idx = np.full(len(src), -1, np.int64)
        idx[corrupt] = np.arange(int(corrupt.sum()))
        return text.take(pa.array(idx, mask=~corrupt))
