"""Shared helpers of the typed-read tests (tests/unit/test_spark_typed*.py, tests/fuzz): batches
of JSON documents, decoders on each engine, and values compared exactly."""

from __future__ import annotations

import datetime as dt
import struct

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StringType, StructField, StructType

from pyspark_gazette import native
from pyspark_gazette.errors import MessageDecodeError
from pyspark_gazette.spark.read.typed import TypedDecoder
from required_tools import missing_tool

UTC = dt.timezone.utc


def schema(*fields) -> StructType:
    return StructType([StructField(name, t) for name, t in fields])


def values(*docs, large=False) -> pa.Array:
    return pa.array(
        [d if isinstance(d, bytes) else d.encode() for d in docs], pa.large_binary() if large else pa.binary()
    )


def decode(s, *docs, **kw):
    dec = TypedDecoder(s, **kw)
    batch = dec.decode(values(*docs), {})
    if batch is not None:
        assert batch.schema.equals(to_arrow_schema(s, timezone="UTC"))
    return dec, batch


def require_scanner() -> None:
    """The C scanner must be built wherever tests run in CI (a skip fails there: tests/required_tools.py)."""
    if native.module is None:
        missing_tool("the C scanner pyspark_gazette._jsonscan is not installed (setup.py builds it with a C compiler)")


def exact(v):
    """Values compared exactly: floats by their bits (NaN, -0.0), everything else as is."""
    if isinstance(v, float):
        return ("float", struct.pack("<d", v))
    if isinstance(v, dict):
        return {k: exact(x) for k, x in v.items()}
    if isinstance(v, list):
        return [exact(x) for x in v]
    return v


def pair(s, mode="PERMISSIVE"):
    """A decoder on the C scanner and one on the pure-Python path, same options."""
    native, python = TypedDecoder(s, mode=mode), TypedDecoder(s, mode=mode)
    assert native._scan_plan is not None
    python._scan_plan = None
    return native, python


def numeric(t: pa.DataType) -> pa.DataType:
    """t with timestamps as int64 and dates as int32, at any depth."""
    if pa.types.is_timestamp(t):
        return pa.int64()
    if pa.types.is_date(t):
        return pa.int32()
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, numeric(f.type), f.nullable) for f in t])
    if pa.types.is_list(t):
        return pa.list_(pa.field(t.value_field.name, numeric(t.value_type), t.value_field.nullable))
    return t


def plain(batch):
    """A batch's values compared exactly: timestamps and dates as numbers (pyarrow's parser
    takes years Python's datetime cannot hold), floats by their bits."""
    return exact([c.cast(numeric(c.type)).to_pylist() for c in batch])


def run(dec, arr):
    try:
        return dec.decode(arr, {}), dec.errors
    except MessageDecodeError as e:
        return ("raised", e.index, str(e)), dec.errors


def assert_same(s, docs, modes=("PERMISSIVE", "DROPMALFORMED", "FAILFAST")):
    arr = pa.array(docs, pa.binary())
    for mode in modes:
        native, python = pair(s, mode)
        (a, ea), (b, eb) = run(native, arr), run(python, arr)
        if isinstance(a, pa.RecordBatch) and isinstance(b, pa.RecordBatch):
            a.validate(full=True)  # the scanner's buffers, at every depth
            assert a.schema.equals(b.schema)
            assert plain(a) == plain(b), mode
        else:
            assert a == b, mode
        assert ea == eb, mode
    return native


def scan_value(t, text: str):
    """The value of ``{"v": text}`` for a field of type t, and whether the scanner fell back."""
    native, python = pair(schema(("v", t), ("_corrupt_record", StringType())))
    doc = ('{"v":' + text + "}").encode("utf-8", "surrogatepass")
    a, b = native.decode(values(doc), {}), python.decode(values(doc), {})
    assert plain(a) == plain(b), text
    try:
        value = a.column(0).to_pylist()[0]
    except OverflowError:  # a year Python's datetime cannot hold (see plain)
        value = OverflowError
    return value, native._scan_fallbacks > 0


def no_per_record(monkeypatch):
    """Fail the test if any record takes the per-record rules."""
    monkeypatch.setattr(TypedDecoder, "_records", lambda *a: pytest.fail("per-record path used"))
