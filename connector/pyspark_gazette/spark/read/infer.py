"""Schema inference for typed reads (``inferSchema=true``), as ``spark.read.json`` infers.

The driver plans the read as a batch read would, then samples messages from the planned
partitions: up to ``samplingBytes`` of messages in all, taken from the start of up to
:data:`SAMPLE_PARTS` partitions spread evenly over the plan (so a long journal is sampled at
several places, not only its first fragment). The sample is parsed by the typed path's parser
(pyarrow's JSON reader, inferring), and the Arrow types become Spark's:

* integers are ``LONG``, other numbers ``DOUBLE``, booleans ``BOOLEAN``, objects ``STRUCT`` s and
  arrays ``ARRAY`` s; strings are ``STRING`` (Spark infers no timestamps by default, so neither
  does this: a timestamp string stays a string), and a field that is only ever null is ``STRING``;
* fields are sorted by name, at every level, like Spark's inferred schemas.

When pyarrow refuses the sample (a field whose type changes between records, a malformed
record), the sample is inferred record by record in Python with Spark's merge rules instead:
``LONG`` and ``DOUBLE`` merge to ``DOUBLE``, structs merge their fields, any other conflict is
``STRING``; and if a record is malformed the corrupt record column
(``columnNameOfCorruptRecord``) is added, sorted among the fields, as Spark adds it.

A ``collection`` read infers its documents' schema the same way, from its journals, leaving out
ACK and (unless asked for) control documents, and those published before a journal's truncation
clock (its ``estuary.dev/truncated-at`` label): the sample is taken of the documents kept. The
Flow columns (logical partitions not already document fields, ``flow_published_at``,
``_meta/op``) follow the inferred fields.

Cost: one planning pass (the same listings a read takes) plus reading and parsing the sample;
see docs/benchmarks.md ("Schema inference").
"""

from __future__ import annotations

import json
from collections.abc import Generator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.json as pj
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DecimalType,
    DoubleType,
    LongType,
    NullType,
    StringType,
    StructField,
    StructType,
)

from pyspark_gazette.errors import OptionError
from pyspark_gazette.message import jsondoc
from pyspark_gazette.message.framing import NDJSON
from pyspark_gazette.spark.options import ReadOptions
from pyspark_gazette.spark.read.arrow_output import untyped_schema, uuid_parts
from pyspark_gazette.spark.read.batch_scan import GazetteBatchReader
from pyspark_gazette.spark.read.flow import kept
from pyspark_gazette.spark.read.pack import PackedPartition
from pyspark_gazette.spark.read.plan import GazettePartition
from pyspark_gazette.spark.read.segments import partition_messages

#: Partitions sampled, at most (spread evenly over the plan).
SAMPLE_PARTS = 8


def infer_schema(opts: ReadOptions) -> StructType:
    """The schema ``spark.read.json`` would infer for a sample of the journals ``opts`` reads."""
    raw = untyped_schema(False, False)
    parts = GazetteBatchReader(opts, raw).partitions()
    values = [v for v in sample(parts, opts) if v.strip()]
    return infer_values(values, opts.corrupt_column)


def _documents(values: pa.Array, opts: ReadOptions, truncated_at: int) -> list[bytes]:
    """A collection's messages less those its reads never return (by their UUID flags and clocks,
    :func:`~pyspark_gazette.spark.read.flow.kept`): ACK documents, control documents unless
    ``collection.controlDocuments`` asks for them, and those before ``truncated_at``."""
    parts = uuid_parts(values, NDJSON, opts.uuid_pointer, opts.uuid_field)
    return [
        value
        for value, part in zip(values.to_pylist(), parts, strict=True)
        if kept((part[2], part[1]) if part else None, opts.control_documents, truncated_at)
    ]


def sample(parts: Sequence[InputPartition], opts: ReadOptions) -> list[bytes]:
    """Messages from the start of up to :data:`SAMPLE_PARTS` evenly spread partitions, about
    ``samplingBytes`` in all."""
    if not parts:
        return []
    k = min(len(parts), SAMPLE_PARTS)
    chosen = [parts[(i * len(parts)) // k] for i in range(k)]
    share = max(1, opts.sampling_bytes // k)
    out: list[bytes] = []
    for part in chosen:
        taken = 0
        gen = _messages(part, opts)
        try:
            for values, truncated_at in gen:
                for v in _documents(values, opts, truncated_at) if opts.collection else values.to_pylist():
                    out.append(v)
                    taken += len(v) + 1
                    if taken >= share:
                        break
                if taken >= share:
                    break
        finally:
            gen.close()
    return out


def _messages(part: InputPartition, opts: ReadOptions) -> Generator[Any, None, None]:
    members: tuple[GazettePartition, ...] = (
        part.members if isinstance(part, PackedPartition) else (part,) if isinstance(part, GazettePartition) else ()
    )
    for member in members:
        if member.framing != NDJSON:  # inference reads JSON documents
            raise OptionError(
                "inferSchema", f"needs ndjson journals; journal {member.journal!r} is framed as {member.framing}"
            )
        for msgs in partition_messages(member, opts):
            yield msgs.values, member.truncated_at


def infer_values(values: list[bytes], corrupt_column: str = "_corrupt_record") -> StructType:
    """Spark's inferred schema of these JSON documents (see the module docstring)."""
    if not values:
        return StructType([])
    if any(jsondoc.too_deep(v) for v in values):  # pyarrow reads any depth; Spark's limit is malformed
        return _infer_python(values, corrupt_column)
    buf = b"\n".join(values) + b"\n"
    try:
        table = pj.read_json(pa.BufferReader(buf), pj.ReadOptions(use_threads=False, block_size=len(buf) + 1))
    except pa.ArrowInvalid:
        return _infer_python(values, corrupt_column)
    return _sorted(StructType([StructField(f.name, _from_arrow(f.type)) for f in table.schema]))


def _from_arrow(t: pa.DataType) -> DataType:
    if pa.types.is_integer(t):
        return LongType()
    if pa.types.is_floating(t):
        return DoubleType()
    if pa.types.is_boolean(t):
        return BooleanType()
    if pa.types.is_struct(t):
        return StructType([StructField(f.name, _from_arrow(f.type)) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return ArrayType(_from_arrow(t.value_type))
    return StringType()  # strings, timestamps (Spark infers none by default), nulls


def _sorted(t: DataType) -> Any:
    if isinstance(t, StructType):
        return StructType([StructField(f.name, _sorted(f.dataType)) for f in sorted(t.fields, key=lambda f: f.name)])
    if isinstance(t, ArrayType):
        return ArrayType(_sorted(t.elementType))
    return t


# -- record by record (Spark's merge rules) --------------------------------------------------


def _infer_python(values: list[bytes], corrupt_column: str) -> StructType:
    with jsondoc.room():  # the rules recurse as deep as a record nests (up to Spark's limit)
        return _infer_records(values, corrupt_column)


def _infer_records(values: list[bytes], corrupt_column: str) -> StructType:
    merged: DataType = NullType()
    corrupt = False
    decoder = json.JSONDecoder()
    for raw in values:
        try:
            doc, _ = jsondoc.raw_decode(decoder, raw.decode("utf-8").strip(" \t\r\n"))
        except ValueError:
            corrupt = True
            continue
        docs = doc if type(doc) is list and all(type(d) is dict for d in doc) else [doc]
        for d in docs:
            if type(d) is not dict:
                corrupt = True
                continue
            merged = _merge(merged, _type_of(d))
    fields = list(merged.fields) if isinstance(merged, StructType) else []
    out = StructType([StructField(f.name, _finish(f.dataType)) for f in fields])
    if corrupt and corrupt_column not in out.fieldNames():
        out = out.add(StructField(corrupt_column, StringType()))
    return _sorted(out)  # the corrupt column too, as Spark sorts it


def _type_of(v: Any) -> DataType:
    if v is None:
        return NullType()
    if type(v) is bool:
        return BooleanType()
    if type(v) is int:
        if -(2**63) <= v < 2**63:
            return LongType()
        return DecimalType(38, 0) if len(str(abs(v))) <= 38 else DoubleType()
    if type(v) is float:
        return DoubleType()
    if type(v) is str:
        return StringType()
    if type(v) is list:
        elem: DataType = NullType()
        for x in v:
            elem = _merge(elem, _type_of(x))
        return ArrayType(elem)
    return StructType([StructField(k, _type_of(x)) for k, x in v.items()])


def _merge(a: DataType, b: DataType) -> DataType:
    if isinstance(a, NullType):
        return b
    if isinstance(b, NullType) or a == b:
        return a
    numeric = (LongType, DoubleType, DecimalType)
    if isinstance(a, numeric) and isinstance(b, numeric):
        return DoubleType()
    if isinstance(a, StructType) and isinstance(b, StructType):
        fields = {f.name: f.dataType for f in a.fields}
        for f in b.fields:
            fields[f.name] = _merge(fields[f.name], f.dataType) if f.name in fields else f.dataType
        return StructType([StructField(k, t) for k, t in fields.items()])
    if isinstance(a, ArrayType) and isinstance(b, ArrayType):
        return ArrayType(_merge(a.elementType, b.elementType))
    return StringType()


def _finish(t: DataType) -> DataType:
    """Nulls that never met a value become strings, as in Spark."""
    if isinstance(t, NullType):
        return StringType()
    if isinstance(t, StructType):
        return StructType([StructField(f.name, _finish(f.dataType)) for f in t.fields])
    if isinstance(t, ArrayType):
        return ArrayType(_finish(t.elementType))
    return t
