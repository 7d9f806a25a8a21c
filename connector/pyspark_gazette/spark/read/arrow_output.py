"""Arrow batches in the query's schema, from decoded messages (executor side).

Untyped reads (no user schema) produce ``journal``, ``offset``, ``value`` and, with
``includeMetadata``, ``uuid``, ``producer``, ``clock``, ``flags``, ``mod_time`` and ``timestamp``
(the UUID clock as a time: when the message's publisher stamped it). Typed reads
(a user schema, ndjson framing) parse each document into the schema's columns
(:class:`~pyspark_gazette.spark.read.typed.TypedDecoder`); their metadata columns are the same names
with a leading underscore (``_journal``, ``_offset``, ``_uuid``, ...), filled from the message,
not the document.

Read-committed filtering (Gazette's sequencer over a partition's messages) is
:mod:`~pyspark_gazette.spark.read.committed`.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType, TimestampType

from pyspark_gazette.errors import MessageDecodeError, OptionError, UUIDError
from pyspark_gazette.message import Framing, build_uuid, clock_to_micros, document_framings, parse_uuid
from pyspark_gazette.spark.options import ReadOptions
from pyspark_gazette.spark.read.segments import Messages
from pyspark_gazette.spark.read.typed import TypedDecoder

UNTYPED = ("journal", "offset", "value")
METADATA = ("uuid", "producer", "clock", "flags", "mod_time", "timestamp")


#: Spark types each untyped column may have in a user schema for the read to stay raw.
_RAW_TYPES: dict[str, tuple[type, ...]] = {
    "journal": (StringType,),
    "offset": (LongType,),
    "value": (StringType, BinaryType),
    "uuid": (StringType,),
    "producer": (StringType,),
    "clock": (LongType,),
    "flags": (IntegerType,),
    "mod_time": (TimestampType,),
    "timestamp": (TimestampType,),
}


#: Metadata columns that are only metadata with ``includeMetadata`` (added after users' documents
#: may already have had a field of that name, which a schema without the option still parses).
OPT_IN = frozenset({"timestamp"})


def is_untyped(schema: StructType, include_metadata: bool = False) -> bool:
    """True when every column is an untyped column (``journal``, ``offset``, ``value`` or a
    metadata column) of its untyped type, in any order and any subset: such a schema (the
    default one, or a user's ``value STRING``, ``offset LONG, value BINARY``, ...) reads raw,
    without JSON parsing, and yields only its columns. ``timestamp`` counts only with
    ``include_metadata``."""
    return bool(schema.fields) and all(
        isinstance(f.dataType, _RAW_TYPES.get(f.name, ())) and (include_metadata or f.name not in OPT_IN)
        for f in schema.fields
    )


#: Metadata columns of untyped reads with includeMetadata (typed reads prefix them with "_").
METADATA_COLUMNS = (
    ("uuid", StringType()),
    ("producer", StringType()),
    ("clock", LongType()),
    ("flags", IntegerType()),
    ("mod_time", TimestampType()),
    ("timestamp", TimestampType()),
)


def untyped_schema(text_values: bool, include_metadata: bool) -> StructType:
    """``journal``, ``offset``, ``value`` (+ metadata): the schema when none is given."""
    fields = [
        StructField("journal", StringType(), False),
        StructField("offset", LongType(), False),
        StructField("value", StringType() if text_values else BinaryType(), True),
    ]
    if include_metadata:
        fields += [StructField(name, dtype, True) for name, dtype in METADATA_COLUMNS]
    return StructType(fields)


class OutputBuilder:
    """Builds the record batches of one partition (a ``collection`` read's builder is
    :class:`~pyspark_gazette.spark.read.flow.FlowOutputBuilder`: see
    :func:`~pyspark_gazette.spark.read.flow.output_builder`)."""

    def __init__(self, schema: StructType, opts: ReadOptions, framing: Framing):
        from pyspark.sql.pandas.types import to_arrow_schema

        self.schema = schema
        self.opts = opts
        self.framing = framing
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        self.untyped = is_untyped(schema, opts.include_metadata)
        if self.untyped:
            self.metadata = [n for n in schema.names if n in METADATA]
            value = self.arrow_schema.field("value").type if "value" in schema.names else pa.binary()
            self.text = pa.types.is_string(value) or pa.types.is_large_string(value)
            self.typed_decoder = None
        else:
            if not framing.json_documents:
                raise OptionError(
                    "schema", f"a user schema needs {document_framings()} framing; this journal's framing is {framing}"
                )
            reserved = {
                f"_{k}": k
                for k in ("journal", "offset", *METADATA)
                if f"_{k}" in schema.names and (opts.include_metadata or k not in OPT_IN)
            }
            self.metadata = [k for k in reserved.values() if k in METADATA]
            self.reserved = reserved
            self.typed_decoder = TypedDecoder(
                schema, mode=opts.mode, corrupt_column=opts.corrupt_column, reserved=reserved
            )

    @property
    def malformed(self) -> int:
        return self.typed_decoder.errors if self.typed_decoder is not None else 0

    def build(self, journal: str, msgs: Messages) -> pa.RecordBatch | None:
        n = len(msgs.offsets)
        if n == 0:
            return None
        meta = (
            metadata_columns(msgs, self.metadata, self.framing, self.opts.uuid_pointer, self.opts.uuid_field)
            if self.metadata
            else {}
        )
        if self.typed_decoder is not None:
            meta["journal"] = pa.repeat(pa.scalar(journal, pa.string()), n)
            meta["offset"] = msgs.offsets
            try:
                return self.typed_decoder.decode(msgs.values, meta)
            except Exception as e:
                if isinstance(e, MessageDecodeError):
                    index = getattr(e, "index", None)
                    if index is not None and 0 <= index < len(msgs.offsets):
                        where = f"message at offset {msgs.offsets[index].as_py()}"
                    else:
                        where = f"messages from offset {msgs.offsets[0].as_py()}"
                    raise MessageDecodeError(f"journal {journal!r}, {where}: {e}") from e
                raise
        values = msgs.values
        if self.text:
            values = values.view(pa.large_string() if pa.types.is_large_binary(values.type) else pa.string())
        columns = {"offset": msgs.offsets, "value": values, **meta}
        if "journal" in self.arrow_schema.names:
            columns["journal"] = pa.repeat(pa.scalar(journal, pa.string()), n)
        arrays = [
            columns[f.name].cast(f.type) if columns[f.name].type != f.type else columns[f.name]
            for f in self.arrow_schema
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow_schema)


def uuid_parts(
    values: pa.Array, framing: Framing, pointer: str, uuid_field: int = 0
) -> list[tuple[bytes, int, int] | None]:
    """(producer, clock, flags) of each message's Gazette UUID, or None where it has none."""
    out: list[tuple[bytes, int, int] | None] = []
    for raw in values.to_pylist():
        u: Any = None
        try:
            u = framing.uuid_of(raw, pointer, uuid_field)
            out.append(parse_uuid(u) if u else None)
        except (UUIDError, ValueError):
            out.append(None)
    return out


def metadata_columns(
    msgs: Messages, names: list[str], framing: Framing, pointer: str, uuid_field: int = 0
) -> dict[str, pa.Array]:
    out: dict[str, pa.Array] = {}
    n = len(msgs.offsets)
    if any(k in names for k in ("uuid", "producer", "clock", "flags", "timestamp")):
        parts = uuid_parts(msgs.values, framing, pointer, uuid_field)
        out["uuid"] = pa.array([str(build_uuid(*p)) if p else None for p in parts], pa.string())
        out["producer"] = pa.array([p[0].hex() if p else None for p in parts], pa.string())
        out["clock"] = pa.array([p[1] if p else None for p in parts], pa.int64())
        out["flags"] = pa.array([p[2] if p else None for p in parts], pa.int32())
        out["timestamp"] = pa.array(
            [clock_to_micros(p[1]) if p and p[1] else None for p in parts], pa.timestamp("us", tz="UTC")
        )
    if "mod_time" in names:
        ts = msgs.mod_time * 1_000_000 if msgs.mod_time else None
        out["mod_time"] = pa.array([ts] * n, pa.timestamp("us", tz="UTC"))
    return {k: v for k, v in out.items() if k in names}
