"""Timestamps and dates of typed reads: Spark's grammar (json_rules) on every engine.

One table of accepted and rejected strings goes through the per-record rules, pyarrow's reader
(zoned timestamps parsed by its ISO-8601 parser, and as strings) and the C scanner (``parse_ts``
in _native/scan.c); then the engines' own edges."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    DateType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from pyspark_gazette.spark.read import typed
from pyspark_gazette.spark.read.json_rules import Bad, converter
from pyspark_gazette.spark.read.typed import TypedDecoder
from typedjson import UTC, decode, no_per_record, pair, require_scanner, scan_value, schema, values


@pytest.fixture
def scanner():
    require_scanner()
    return typed


# -- one table, every engine ------------------------------------------------------------------

# (text, TimestampType, TimestampNTZType, DateType, the types the C scanner decides itself:
# t, n, d). A value is the expected one (UTC for a timestamp; None: malformed); the types not
# in the last column are deferred by the scanner to the pure-Python path.
TABLE = [
    # the common form
    ("2024-01-02T03:04:05Z", "2024-01-02 03:04:05", None, "2024-01-02", "td"),
    ("2024-01-02 03:04:05.123456+01:00", "2024-01-02 02:04:05.123456", None, "2024-01-02", "td"),
    ("2024-01-02T03:04:05.1234567-0130", "2024-01-02 04:34:05.123456", None, "2024-01-02", "td"),
    ("2024-01-02T03:04:05.5+0530", "2024-01-01 21:34:05.5", None, "2024-01-02", "td"),
    ("2024-01-02T03:04:05", "2024-01-02 03:04:05", "2024-01-02 03:04:05", "2024-01-02", "tnd"),
    ("2024-01-02T03:04:05.", "2024-01-02 03:04:05", "2024-01-02 03:04:05", "2024-01-02", "tnd"),
    ("2024-01-02", "2024-01-02 00:00:00", "2024-01-02 00:00:00", "2024-01-02", "tnd"),
    ("2024-01-02T03:04:05+18:00", "2024-01-01 09:04:05", None, "2024-01-02", "td"),
    ("2024-01-02T03:04:05-18:00", "2024-01-02 21:04:05", None, "2024-01-02", "td"),
    ("2024-02-29T23:59:59.999999Z", "2024-02-29 23:59:59.999999", None, "2024-02-29", "td"),
    ("0001-01-01T00:00:00Z", "0001-01-01 00:00:00", None, "0001-01-01", "td"),
    ("9999-12-31 23:59:59", "9999-12-31 23:59:59", "9999-12-31 23:59:59", "9999-12-31", "tnd"),
    # Spark's other forms: the per-record rules
    ("2024-1-2 3:4:5", "2024-01-02 03:04:05", "2024-01-02 03:04:05", "2024-01-02", ""),
    ("2024-01-02T03:04", "2024-01-02 03:04:00", "2024-01-02 03:04:00", "2024-01-02", "d"),
    ("2024-01-02T03", "2024-01-02 03:00:00", "2024-01-02 03:00:00", "2024-01-02", "d"),
    ("2024", "2024-01-01 00:00:00", "2024-01-01 00:00:00", "2024-01-01", ""),
    ("2024-01-02 03:04:05 UTC", "2024-01-02 03:04:05", None, "2024-01-02", "d"),
    ("2024-01-02T03:04:05 +01:00", "2024-01-02 02:04:05", None, "2024-01-02", "d"),
    ("2024-01-02T03:04:05-1:0", "2024-01-02 04:04:05", None, "2024-01-02", "d"),
    ("+2024-01-02T03:04:05Z", "2024-01-02 03:04:05", None, "2024-01-02", ""),
    (" 2024-01-02T03:04:05Z ", "2024-01-02 03:04:05", None, "2024-01-02", ""),
    # malformed
    ("2024-01-02T03:04Z", None, None, "2024-01-02", "d"),  # a zone needs seconds
    ("2024-01-02T03Z", None, None, "2024-01-02", "d"),
    ("2024-01-02T03:04:05+18:30", None, None, "2024-01-02", "d"),  # offsets up to 18:00
    ("2024-01-02T03:04:05+19:00", None, None, "2024-01-02", "d"),
    ("2024-01-02T03:04:05+01:60", None, None, "2024-01-02", "d"),
    ("2024-01-02T03:04:05+01:00:00", None, None, "2024-01-02", "d"),
    ("2024-01-02T03:04:05ZZ", None, None, "2024-01-02", "d"),
    ("2024-01-02T24:00:00", None, None, "2024-01-02", "d"),
    ("2024-01-02T03:60:00Z", None, None, "2024-01-02", "d"),
    ("2024-01-02T03:04:60", None, None, "2024-01-02", "d"),
    ("2024-02-30", None, None, None, ""),
    ("2023-02-29T00:00:00Z", None, None, None, ""),
    # year 0: pyarrow's parser and cast would take it; every engine calls it malformed (years 1-9999)
    ("0000-01-01T00:00:00Z", None, None, None, ""),
    ("0000-01-01", None, None, None, ""),
    ("12024-01-02", None, None, None, ""),
    ("2024-01-02X03:04:05", None, None, None, ""),
    ("yesterday", None, None, None, ""),
    ("", None, None, None, ""),
]
TYPES = {"t": TimestampType(), "n": TimestampNTZType(), "d": DateType()}


def number(want: str | None, kind: str) -> int | None:
    """The expected value as Arrow stores it: microseconds, or days for a date."""
    if want is None:
        return None
    if kind == "d":
        return (dt.date.fromisoformat(want) - dt.date(1970, 1, 1)).days
    delta = dt.datetime.fromisoformat(want) - dt.datetime(1970, 1, 1)
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def decoded(dec: TypedDecoder, text: str, kind: str) -> int | None:
    """The value a decoder gives ``{"v": text}`` as a number, None when the record is malformed."""
    batch = dec.decode(values(json.dumps({"v": text})), {})
    value = batch.column("v").cast(pa.int32() if kind == "d" else pa.int64()).to_pylist()[0]
    assert (value is None) == (batch.column("_corrupt_record").to_pylist()[0] is not None)
    return value


@pytest.mark.parametrize(("text", "ts", "ntz", "date", "scanned"), TABLE)
def test_every_engine_follows_the_one_grammar(text, ts, ntz, date, scanned):
    for kind, want in zip("tnd", (ts, ntz, date), strict=True):
        t = TYPES[kind]
        s = schema(("v", t), ("_corrupt_record", StringType()))
        expected = number(want, kind)
        try:
            rule = converter(t)(text)
        except Bad:
            rule = None
        assert rule == expected, ("per-record rules", kind)
        python = TypedDecoder(s)
        python._scan_plan = None
        assert decoded(python, text, kind) == expected, ("pyarrow", kind)
        if kind == "t":  # the timestamp as a string, converted after pyarrow's parse
            python._native = False
            assert decoded(python, text, kind) == expected, ("pyarrow, as strings", kind)
    require_scanner()
    for kind, want in zip("tnd", (ts, ntz, date), strict=True):
        native, _ = pair(schema(("v", TYPES[kind]), ("_corrupt_record", StringType())))
        assert decoded(native, text, kind) == number(want, kind), ("C scanner", kind)
        assert (native._scan_fallbacks == 0) == (kind in scanned), ("C scanner decides", kind)


# -- pyarrow's ISO-8601 parser on zoned timestamps (issue 24) -----------------------------------


TS_NATIVE = [
    ("2024-01-02T03:04:05Z", dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
    ("2024-01-02T03:04:05.5Z", dt.datetime(2024, 1, 2, 3, 4, 5, 500000, tzinfo=UTC)),
    ("2024-01-02 03:04:05.123456", dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)),
    ("2024-01-02T03:04:05+01:00", dt.datetime(2024, 1, 2, 2, 4, 5, tzinfo=UTC)),
    ("2024-01-02T03:04:05-0130", dt.datetime(2024, 1, 2, 4, 34, 5, tzinfo=UTC)),
    ("2024-01-02T03:04:05+18:00", dt.datetime(2024, 1, 1, 9, 4, 5, tzinfo=UTC)),
    ("2024-01-02T03:04", dt.datetime(2024, 1, 2, 3, 4, tzinfo=UTC)),
    ("2024-01-02T03", dt.datetime(2024, 1, 2, 3, tzinfo=UTC)),
    ("2024-01-02", dt.datetime(2024, 1, 2, tzinfo=UTC)),
]


def test_zoned_timestamps_parse_natively(monkeypatch):
    """ISO-8601 forms that pyarrow and Spark both take skip the string conversion, and agree
    with the per-record rules (Spark's)."""
    s = schema(("t", TimestampType()), ("st", StructType([StructField("t", TimestampType())])))
    docs = [json.dumps({"t": text, "st": {"t": text}}) for text, _ in TS_NATIVE if "+18" not in text]
    dec = TypedDecoder(s)
    assert dec._parse_native.explicit_schema.field("t").type == pa.timestamp("us", tz="UTC")
    no_per_record(monkeypatch)
    batch = dec.decode(values(*docs), {})
    want = [w for text, w in TS_NATIVE if "+18" not in text]
    assert batch.column("t").to_pylist() == want
    assert [r["t"] for r in batch.column("st").to_pylist()] == want
    assert dec._native_fallbacks == 0


def test_native_and_per_record_timestamps_agree():
    s = schema(("t", TimestampType()))
    dec = TypedDecoder(s)
    conv = dict(dec._fields)["t"]
    for text, want in TS_NATIVE:
        assert conv(text) == int((want - dt.datetime(1970, 1, 1, tzinfo=UTC)).total_seconds() * 1_000_000)
        _, batch = decode(s, json.dumps({"t": text}))
        assert batch.column(0).to_pylist() == [want], text


# pyarrow's ISO-8601 parser takes these; Spark does not (a zone needs seconds; offsets up to 18:00).
SPARK_REJECTS = [
    "2024-01-02T03:04Z",
    "2024-01-02T03Z",
    "2024-01-02 03:04+01:00",
    "2024-01-02T03+0100",
    "2024-01-02T03:04:05+18:30",
    "2024-01-02T03:04:05+19:00",
    "2024-01-02T03:04:05-23:59",
    "2024-01-02T03:04:05.5+20",
]


@pytest.mark.parametrize("text", SPARK_REJECTS)
def test_timestamps_pyarrow_takes_but_spark_rejects_are_malformed(text):
    s = schema(("k", LongType()), ("t", TimestampType()), ("_corrupt_record", StringType()))
    good = [json.dumps({"k": i, "t": "2024-01-02T00:00:00Z"}) for i in range(200)]
    line = json.dumps({"k": -1, "t": text})
    dec, batch = decode(s, *good[:100], line, *good[100:])
    row = batch.to_pylist()[100]
    assert row == {"k": -1, "t": None, "_corrupt_record": line}
    assert dec.errors == 1
    assert batch.column("t").null_count == 1


def test_escaped_timestamp_text_follows_spark():
    # "\u002B" is "+": the text is 2024-01-02T03:04+01:00 (no seconds): malformed for Spark.
    s = schema(("t", TimestampType()), ("_corrupt_record", StringType()))
    line = '{"t":"2024-01-02T03:04\\u002B01:00"}'
    dec, batch = decode(s, line, '{"t":"2024-01-02T03:04:05\\u002B01:00"}')
    assert batch.column("t").to_pylist() == [None, dt.datetime(2024, 1, 2, 2, 4, 5, tzinfo=UTC)]
    assert dec.errors == 1


def test_forms_only_spark_takes_fall_back_to_strings_and_stay_right():
    s = schema(("k", LongType()), ("t", TimestampType()))
    docs = [
        json.dumps({"k": i, "t": "2024-1-2 3:4:5" if i % 500 == 7 else "2024-01-02T03:04:05Z"}) for i in range(5000)
    ]
    dec, batch = decode(s, *docs)
    want = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert batch.column("t").to_pylist() == [want] * 5000
    assert batch.column("k").to_pylist() == list(range(5000))
    assert dec.errors == 0 and dec._native_fallbacks >= 1


def test_a_decoder_stops_trying_native_when_it_keeps_falling_back():
    s = schema(("t", TimestampType()))
    dec = TypedDecoder(s)
    odd = values(*[json.dumps({"t": f"2024-1-{1 + i % 28} 3:4:5"}) for i in range(100)])
    for _ in range(10):
        assert dec.decode(odd, {}).column(0).null_count == 0
    assert dec._native_fallbacks < 10  # gave up after _NATIVE_PATIENCE tries, still correct


# -- the C scanner's timestamps (issue 24) ------------------------------------------------------

TS_EDGES = [
    ("0001-01-01T00:00:00Z", dt.datetime(1, 1, 1, tzinfo=UTC)),
    ("9999-12-31T23:59:59.999999Z", dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)),
    ("1969-12-31T23:59:59.9999999Z", dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)),
    ("2024-02-29 12:00:00", dt.datetime(2024, 2, 29, 12, tzinfo=UTC)),
    ("2000-02-29T00:00:00.5", dt.datetime(2000, 2, 29, 0, 0, 0, 500000, tzinfo=UTC)),
    ("2024-01-02T03:04:05.Z", dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
    ("2024-01-02T03:04:05+18:00", dt.datetime(2024, 1, 1, 9, 4, 5, tzinfo=UTC)),
    ("2024-01-02T03:04:05-1800", dt.datetime(2024, 1, 2, 21, 4, 5, tzinfo=UTC)),
    ("2024-01-02T03:04:05.123-05:30", dt.datetime(2024, 1, 2, 8, 34, 5, 123000, tzinfo=UTC)),
    ("2024-12-31", dt.datetime(2024, 12, 31, tzinfo=UTC)),
]
# Spark takes these but the scanner leaves them to Python (or they are malformed there).
TS_LEFT = [
    "2024-1-2 3:4:5",
    "2024-01-02T03:04",
    "2024-01-02 03:04:05 UTC",
    "2024-01-02T03:04:05+1:00",
    "2024-01-02T03:04:05+18:01",
    "2024-01-02T03:04:05+19",
    "2023-02-29T00:00:00Z",
    "1900-02-29",
    "0000-01-01T00:00:00Z",
    "2024-01-02T24:00:00Z",
    "2024-01-02T03:60:00Z",
    "2024-01-02T03:04:60Z",
    " 2024-01-02T03:04:05Z",
    "2024-01-02T03:04:05Z ",
    "2024-01-02T03:04:05\\u005A",
    "+2024-01-02",
    "",
]


@pytest.mark.parametrize(("text", "want"), TS_EDGES)
def test_scanner_timestamps_at_the_edges(scanner, text, want):
    assert scan_value(TimestampType(), json.dumps(text)) == (want, False)
    ntz, back = scan_value(TimestampNTZType(), json.dumps(text))
    zoned = text.endswith("Z") or "+" in text or text.count("-") > 2
    assert back == zoned
    if not zoned:
        assert ntz == want.replace(tzinfo=None)
    assert scan_value(DateType(), json.dumps(text)) == (dt.date.fromisoformat(text[:10]), False)


@pytest.mark.parametrize("text", TS_LEFT)
def test_scanner_leaves_other_timestamp_forms_to_python(scanner, text):
    assert scan_value(TimestampType(), json.dumps(text))[1]


@pytest.mark.parametrize(
    ("text", "want", "fell_back"),
    [
        ("0", dt.datetime(1970, 1, 1, tzinfo=UTC), False),
        ("-86400", dt.datetime(1969, 12, 31, tzinfo=UTC), False),
        ("9223372036854", None, False),  # Spark's bound; the datetime is beyond Python's range
        ("9223372036855", None, True),
        ("1.5", None, True),
    ],
)
def test_scanner_epoch_seconds(scanner, text, want, fell_back):
    native, python = pair(schema(("v", TimestampType())))
    doc = values('{"v":' + text + "}")
    a, b = native.decode(doc, {}), python.decode(doc, {})
    assert a.column(0).cast(pa.int64()).equals(b.column(0).cast(pa.int64()))
    assert (native._scan_fallbacks > 0) == fell_back
    if want is not None:
        assert a.column(0).to_pylist() == [want]
