"""Differential fuzzing of the C extension (``pyspark_gazette._jsonscan``) against the pure-Python
paths: the scanner of typed reads record by record, the joiner of JSON writes byte for byte.

The schema holds only types the scanner converts (decimals and maps would send every batch to
the pure-Python path, as the typed target's schema does), so every example goes through C; the
records mix plain ones, values of every JSON type, random and damaged bytes, and records nested
past both the scanner's depth and Spark's 1,000 levels. ``GAZETTE_FUZZ_NATIVE_EXAMPLES`` (default
400 a target, 10-30 s in all) bounds it; ``make fuzz-native`` runs the same
targets many more times against a build with AddressSanitizer and UBSan.
"""

from __future__ import annotations

import decimal
import json
import os

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DateType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from pyspark_gazette import native
from pyspark_gazette.errors import MessageDecodeError
from pyspark_gazette.native import NATIVE_ENV
from pyspark_gazette.spark.read.typed import TypedDecoder
from pyspark_gazette.spark.write.encode import json_lines
from required_tools import missing_tool
from typedjson import exact

NATIVE_EXAMPLES = int(os.environ.get("GAZETTE_FUZZ_NATIVE_EXAMPLES", "400"))
FUZZ_NATIVE = settings(
    max_examples=NATIVE_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None
)

SCANNED = StructType(
    [
        StructField("i", IntegerType()),
        StructField("l", LongType()),
        StructField("d", DoubleType()),
        StructField("f", FloatType()),
        StructField("b", BooleanType()),
        StructField("s", StringType()),
        StructField("ts", TimestampType()),
        StructField("ntz", TimestampNTZType()),
        StructField("day", DateType()),
        StructField("arr", ArrayType(LongType())),
        StructField(
            "st",
            StructType(
                [
                    StructField("x", LongType()),
                    StructField("y", StringType()),
                    StructField("z", ArrayType(DoubleType())),
                ]
            ),
        ),
        StructField("_corrupt_record", StringType()),
    ]
)
NAMES = [f.name for f in SCANNED.fields if f.name != "_corrupt_record"]

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.sampled_from(["x", "y", "z", "q"]), kids, max_size=4),
    max_leaves=10,
)
NUMBER_TEXT = st.sampled_from(
    ["-0", "-0.0", "7.313131710533413e+33", "3.4028235e38", "1e400", "-1e-400", "9223372036854775808", "1.5e-45"]
) | st.from_regex(r"-?(0|[1-9][0-9]{0,25})(\.[0-9]{1,20})?([eE][+-]?[0-9]{1,3})?", fullmatch=True)
TEXT_VALUES = st.sampled_from(
    ['"2024-01-02T03:04:05Z"', '"2024-01-02 03:04:05.123"', '"2024-02-30"', '"2024-1-2"', '"NaN"', '""', '"\\ud83d"']
)


@st.composite
def deep(draw) -> str:
    """A value nested around the scanner's depth or Spark's limit."""
    levels = draw(st.sampled_from([63, 64, 65, 998, 999, 1000, 1001, 3000]))
    open_, close = draw(st.sampled_from([("[", "]"), ('{"k":', "}")]))
    return open_ * levels + "1" + close * levels


@st.composite
def record(draw) -> bytes:
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(st.binary(max_size=40))
    if kind == 1:
        return json.dumps(draw(JSON)).encode()
    fields = draw(st.lists(st.sampled_from([*NAMES, "zz"]), max_size=6))
    parts = []
    for name in fields:
        choice = draw(st.integers(0, 5))
        if choice == 0:
            value = json.dumps(draw(JSON))
        elif choice == 1:
            value = draw(NUMBER_TEXT)
        elif choice == 2:
            value = draw(TEXT_VALUES)
        elif choice == 3:
            value = draw(deep())
        elif choice == 4:
            value = json.dumps(draw(st.dictionaries(st.sampled_from(["x", "y", "z"]), JSON, max_size=3)))
        else:
            value = json.dumps(draw(st.lists(st.integers() | st.floats() | st.none(), max_size=4)))
        parts.append(f'"{name}":{value}')
    text = ("{" + ",".join(parts) + "}").encode()
    if kind == 2 and text:  # damaged: one byte changed or the record cut
        at = draw(st.integers(0, len(text) - 1))
        text = text[:at] + draw(st.binary(min_size=0, max_size=1)) + text[at + 1 :] * draw(st.integers(0, 1))
    return text


def numbers(batch: pa.RecordBatch) -> list:
    """Timestamps and dates as numbers (pyarrow takes years Python's datetime cannot hold)."""
    cols = []
    for c in batch.columns:
        if pa.types.is_timestamp(c.type):
            c = c.cast(pa.int64())
        elif pa.types.is_date(c.type):
            c = c.cast(pa.int32())
        cols.append(exact(c.to_pylist()))
    return cols


def outcome(dec: TypedDecoder, values: pa.Array):
    try:
        batch = dec.decode(values, {})
    except MessageDecodeError as e:
        return ("raised", e.index, str(e)), dec.errors
    if batch is None:
        return None, dec.errors
    batch.validate(full=True)
    return numbers(batch), dec.errors


@pytest.fixture
def scanner(monkeypatch):
    if native.module is None:
        missing_tool(
            "the C extension pyspark_gazette._jsonscan is not installed (setup.py builds it with a C compiler)"
        )
    monkeypatch.delenv(NATIVE_ENV, raising=False)


@FUZZ_NATIVE
@given(
    records=st.lists(record(), min_size=1, max_size=12),
    mode=st.sampled_from(["PERMISSIVE", "DROPMALFORMED", "FAILFAST"]),
)
def test_scanner_equals_the_pure_python_path(scanner, fuzz, records, mode):
    values = pa.array([r.replace(b"\n", b" ") for r in records], pa.binary())
    native, python = TypedDecoder(SCANNED, mode=mode), TypedDecoder(SCANNED, mode=mode)
    assert native._scan_plan is not None  # the schema reaches C
    python._scan_plan = None
    got = fuzz.run(f"native.scan[{mode}]", lambda: outcome(native, values))
    assert native._scan_batches == 1
    assert got == outcome(python, values)


COLUMN_TYPES = st.sampled_from(
    ["null", "decimal", "float64", "float32", "int", "string", "timestamp", "date", "struct"]
)
FLOATS = st.floats(width=64) | st.sampled_from([0.0, -0.0, 1e16, 1e-7, 123456789012345680.0, 5e-324])


@st.composite
def column(draw, n: int) -> pa.Array:
    kind = draw(COLUMN_TYPES)
    maybe = lambda s: st.none() | s  # noqa: E731
    if kind == "null":
        return pa.nulls(n)
    if kind == "decimal":
        p = draw(st.integers(1, 38))
        s = draw(st.integers(0, p))
        digits = st.integers(-(10**p) + 1, 10**p - 1).map(
            lambda i: decimal.Decimal(i).scaleb(-s, decimal.Context(prec=80))
        )
        return pa.array(draw(st.lists(maybe(digits), min_size=n, max_size=n)), pa.decimal128(p, s))
    if kind in ("float64", "float32"):
        width = 64 if kind == "float64" else 32
        vals = draw(st.lists(maybe(FLOATS if width == 64 else st.floats(width=32)), min_size=n, max_size=n))
        return pa.array(vals, pa.float64() if width == 64 else pa.float32())
    if kind == "int":
        return pa.array(draw(st.lists(maybe(st.integers(-(2**63), 2**63 - 1)), min_size=n, max_size=n)), pa.int64())
    if kind == "string":
        return pa.array(draw(st.lists(maybe(st.text(max_size=8)), min_size=n, max_size=n)), pa.string())
    if kind == "timestamp":
        micros = st.integers(-(2**62), 2**62)
        return pa.array(draw(st.lists(maybe(micros), min_size=n, max_size=n)), pa.int64()).cast(
            pa.timestamp("us", tz=draw(st.sampled_from([None, "UTC"])))
        )
    if kind == "date":
        return pa.array(
            draw(st.lists(maybe(st.integers(-(2**31), 2**31 - 1)), min_size=n, max_size=n)), pa.int32()
        ).cast(pa.date32())
    inner = draw(column(n))
    return pa.StructArray.from_arrays([inner, pa.nulls(n)], names=["v", "n"])


@FUZZ_NATIVE
@given(data=st.data(), n=st.integers(1, 6), start=st.integers(0, 2), width=st.integers(1, 4))
def test_joiner_equals_the_arrow_path(scanner, fuzz, monkeypatch, data, n, start, width):
    columns = [(f"c{k}", data.draw(column(n + start)).slice(start)) for k in range(width)]
    native = fuzz.run("native.join", lambda: json_lines(columns))
    monkeypatch.setenv(NATIVE_ENV, "0")
    arrow = json_lines(columns)
    monkeypatch.delenv(NATIVE_ENV)
    assert (bytes(native[0]), native[1].tolist()) == (bytes(arrow[0]), arrow[1].tolist())
    for line in bytes(native[0]).splitlines():
        json.loads(line)


def test_the_fuzz_schema_reaches_the_scanner_and_the_typed_target_does_not(scanner):
    """Why this target exists: decimals and maps keep the typed target's batches in Python."""
    from test_fuzz_text import TYPED

    assert TypedDecoder(SCANNED)._scan_plan is not None
    assert TypedDecoder(TYPED)._scan_plan is None
