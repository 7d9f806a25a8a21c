"""Estuary Flow collection reads (executor side, and the default schema on the driver).

A ``collection`` read (:mod:`~pyspark_gazette.spark.options.flow`) builds its record batches
with :class:`FlowOutputBuilder` instead of the plain
:class:`~pyspark_gazette.spark.read.arrow_output.OutputBuilder`:

- it drops ACK documents (they commit transactions; never data) and, unless
  ``collection.controlDocuments=true``, Flow's control documents (UUID flag CONTROL, 0x4);
- it drops the documents published before the journal's truncation clock (its
  ``estuary.dev/truncated-at`` label, carried by the partition): the read-committed sequencing
  before this builder saw them all, so the ACKs among them still commit transactions whose later
  documents are kept, as in Flow's shuffle;
- it fills the Flow columns of the query's schema: ``flow_published_at`` (the time of the
  document's UUID clock, as Flow's materializations project it), ``_meta/op`` (the document's
  change operation) and one column per logical partition field, decoded from the journal's
  ``<field>=<value>`` name segments (Flow builds them from the ``estuary.dev/field/<field>``
  labels) and cast to the column's type;
- every other column is built by the plain builder, from a schema without the Flow columns.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    BooleanType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pyspark_gazette.errors import OptionError
from pyspark_gazette.flow.documents import is_ack, is_control, meta_op
from pyspark_gazette.flow.labels import label_partitions, name_partitions
from pyspark_gazette.message import Framing, jsondoc
from pyspark_gazette.message.uuids import clock_to_micros
from pyspark_gazette.spark.options import ReadOptions
from pyspark_gazette.spark.read.arrow_output import OutputBuilder, is_untyped, uuid_parts
from pyspark_gazette.spark.read.segments import Messages

PUBLISHED_AT = "flow_published_at"
OP = "_meta/op"
FLOW_COLUMNS = (PUBLISHED_AT, OP)
_PARTITION_TYPES = (StringType, LongType, IntegerType, ShortType, BooleanType)


def partition_type(values: Iterable[Any]) -> DataType:
    """The Spark type of a partition field's column from its values across journals: LONG when
    every non-null value is an integer, BOOLEAN when every one is a boolean, else STRING."""
    seen = [v for v in values if v is not None]
    if seen and all(isinstance(v, bool) for v in seen):
        return BooleanType()
    if seen and all(isinstance(v, int) and not isinstance(v, bool) for v in seen):
        return LongType()
    return StringType()


def collection_schema(journal_labels: Iterable[Iterable[tuple[str, str]]], text_values: bool = True) -> StructType:
    """The default schema of a collection read: ``journal``, ``offset``, ``value``, one column per
    logical partition field (typed by :func:`partition_type`), ``flow_published_at``, ``_meta/op``."""
    values: dict[str, list[Any]] = {}
    for labels in journal_labels:
        for field, value in label_partitions(labels).items():
            values.setdefault(field, []).append(value)
    fields = [
        StructField("journal", StringType(), False),
        StructField("offset", LongType(), False),
        StructField("value", StringType(), True),
    ]
    fields += [StructField(f, partition_type(v), True) for f, v in sorted(values.items())]
    fields += [StructField(PUBLISHED_AT, TimestampType(), True), StructField(OP, StringType(), True)]
    return StructType(fields)


def with_flow_columns(documents: StructType, collection: StructType) -> StructType:
    """An inferred documents' schema followed by the Flow columns of ``collection`` (its default
    schema: logical partitions, ``flow_published_at``, ``_meta/op``) it does not already have."""
    have = {f.name for f in documents.fields}
    extra = [f for f in collection.fields[3:] if f.name not in have]  # after journal, offset, value
    return StructType([*documents.fields, *extra])


def _flags_and_clocks(msgs: Messages, framing: Framing, opts: ReadOptions) -> list[tuple[int, int] | None]:
    return [(p[2], p[1]) if p else None for p in uuid_parts(msgs.values, framing, opts.uuid_pointer, opts.uuid_field)]


def kept(part: tuple[int, int] | None, control_documents: bool, truncated_at: int) -> bool:
    """Whether a collection read returns a document of (UUID flags, clock) ``part``: not an ACK,
    not a control document unless ``collection.controlDocuments``, and not published before the
    journal's truncation clock (a document without a UUID has no clock, and is kept)."""
    if part is None:
        return True
    flags, clock = part
    if is_ack(flags) or (is_control(flags) and not control_documents):
        return False
    return clock >= truncated_at


def _partition_array(value: Any, dtype: pa.DataType, n: int, journal: str, column: str) -> pa.Array:
    if pa.types.is_string(dtype) and value is not None and not isinstance(value, str):
        value = json.dumps(value)
    try:
        return pa.array([value] * n, dtype)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        raise OptionError(
            "schema",
            f"column {column!r} is a logical partition of journal {journal!r} with value {value!r}, "
            f"which is not a {dtype}",
        ) from None


def output_builder(
    schema: StructType, opts: ReadOptions, framing: Framing, truncated_at: int = 0
) -> OutputBuilder | FlowOutputBuilder:
    """The builder of a partition's record batches: Flow's for a ``collection`` read (ACK and
    control documents, and those before the journal's truncation clock ``truncated_at``,
    dropped; Flow's columns filled), else the plain one."""
    if opts.collection:
        return FlowOutputBuilder(schema, opts, framing, truncated_at)
    return OutputBuilder(schema, opts, framing)


class FlowOutputBuilder:
    """Builds one partition's record batches for a ``collection`` read (see the module doc)."""

    def __init__(self, schema: StructType, opts: ReadOptions, framing: Framing, truncated_at: int = 0):
        from pyspark.sql.pandas.types import to_arrow_schema

        self.schema, self.opts, self.framing, self.truncated_at = schema, opts, framing, truncated_at
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        self._builders: dict[frozenset[str], tuple[Any, str]] = {}
        self._malformed = 0
        #: None: the reader hands this builder each piece as read (the Flow columns need the
        #: pieces' own messages), not pieces joined into parse units.
        self.typed_decoder = None

    @property
    def malformed(self) -> int:
        return self._malformed + sum(b.malformed for b, _ in self._builders.values())

    def _base(self, partition_columns: frozenset[str]) -> tuple[Any, str]:
        """The plain builder of the schema's other columns (plus an offset column to align by)."""
        hit = self._builders.get(partition_columns)
        if hit is None:
            rest = [f for f in self.schema.fields if f.name not in FLOW_COLUMNS and f.name not in partition_columns]
            probe = StructType(rest) if rest else StructType([StructField("offset", LongType(), False)])
            offset = "offset" if is_untyped(probe) else "_offset"
            if offset not in probe.names:
                probe = StructType([*probe.fields, StructField(offset, LongType(), False)])
            plain = dataclasses.replace(self.opts, collection=None)  # the plain builder, same options
            hit = self._builders[partition_columns] = (OutputBuilder(probe, plain, self.framing), offset)
        return hit

    def build(self, journal: str, msgs: Messages) -> pa.RecordBatch | None:
        parts = _flags_and_clocks(msgs, self.framing, self.opts)
        keep = [kept(p, self.opts.control_documents, self.truncated_at) for p in parts]
        if not any(keep):
            return None
        if not all(keep):
            mask = pa.array(keep, pa.bool_())
            msgs = Messages(pc.filter(msgs.offsets, mask), pc.filter(msgs.values, mask), msgs.mod_time, msgs.end)
            parts = [p for p, k in zip(parts, keep, strict=True) if k]
        partitions = {k: v for k, v in name_partitions(journal).items() if k in self.schema.names}
        builder, offset_col = self._base(frozenset(partitions))
        base = builder.build(journal, msgs)
        if base is None or base.num_rows == 0:
            return None
        n = base.num_rows
        rows: list[int] | None = None
        if n != len(msgs.offsets):  # rows were dropped (DROPMALFORMED): align by offset
            index = {o: i for i, o in enumerate(msgs.offsets.to_pylist())}
            rows = [index[o] for o in base.column(offset_col).to_pylist()]
        columns: dict[str, pa.Array] = {}
        for f in self.arrow_schema:
            if f.name in partitions:
                columns[f.name] = _partition_array(partitions[f.name], f.type, n, journal, f.name)
            elif f.name == PUBLISHED_AT:
                micros = [clock_to_micros(p[1]) if p and p[1] else None for p in parts]
                arr = pa.array(micros, pa.timestamp("us", tz="UTC"))
                columns[f.name] = (arr if rows is None else arr.take(pa.array(rows))).cast(f.type)
            elif f.name == OP:
                ops = [_op(raw) for raw in msgs.values.to_pylist()]
                arr = pa.array(ops, pa.string())
                columns[f.name] = arr if rows is None else arr.take(pa.array(rows))
            else:
                columns[f.name] = base.column(f.name)
        return pa.RecordBatch.from_arrays([columns[f.name] for f in self.arrow_schema], schema=self.arrow_schema)


def _op(raw: bytes | None) -> str | None:
    if not raw or b'"op"' not in raw:
        return None
    try:
        return meta_op(jsondoc.loads(raw))
    except ValueError:
        return None


# -- driver side: pruning journals by logical partition ------------------------------------------


def _same(column_value: Any, filter_value: Any) -> bool:
    """Whether a partition value equals a filter's value as the column shows it (a non-string
    value in a STRING column is its JSON text)."""
    if isinstance(filter_value, str) and column_value is not None and not isinstance(column_value, str):
        column_value = json.dumps(column_value)
    if isinstance(filter_value, bool) or isinstance(column_value, bool):
        return type(filter_value) is type(column_value) and filter_value == column_value
    return bool(column_value == filter_value)


@dataclasses.dataclass
class PartitionPredicate:
    """One pushed filter on a logical partition column: ``op`` is eq, in, null or notnull."""

    column: str
    op: str
    values: tuple[Any, ...] = ()

    def holds(self, partitions: dict[str, Any]) -> bool:
        if self.column not in partitions:
            return True  # not a partition of this journal: the filter is Spark's to check
        value = partitions[self.column]
        if self.op == "null":
            return value is None
        if self.op == "notnull":
            return value is not None
        return value is not None and any(_same(value, v) for v in self.values)


def predicate_of(f: Any, columns: set[str]) -> PartitionPredicate | None:
    """The partition predicate of a Spark filter on one of ``columns``, or None."""
    from pyspark.sql.datasource import EqualTo, In, IsNotNull, IsNull

    attribute: tuple[str, ...] = getattr(f, "attribute", ())
    col = attribute[0] if len(attribute) == 1 else None
    if col is None or col not in columns:
        return None
    if isinstance(f, EqualTo):
        return PartitionPredicate(col, "eq", (f.value,))
    if isinstance(f, In):
        return PartitionPredicate(col, "in", tuple(f.value))
    if isinstance(f, IsNull):
        return PartitionPredicate(col, "null")
    if isinstance(f, IsNotNull):
        return PartitionPredicate(col, "notnull")
    return None
