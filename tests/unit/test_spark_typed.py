"""TypedDecoder: JSON payloads to typed Arrow batches with Spark's JSON mode semantics."""

from __future__ import annotations

import datetime as dt
import json
import math
import struct
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from pyspark_gazette import native
from pyspark_gazette.errors import MessageDecodeError, OptionError
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


ALL = schema(
    ("bo", BooleanType()),
    ("by", ByteType()),
    ("sh", ShortType()),
    ("i", IntegerType()),
    ("l", LongType()),
    ("f", FloatType()),
    ("d", DoubleType()),
    ("s", StringType()),
    ("bin", BinaryType()),
    ("dt", DateType()),
    ("ts", TimestampType()),
    ("ntz", TimestampNTZType()),
    ("dec", DecimalType(10, 2)),
    ("st", StructType([StructField("x", IntegerType()), StructField("y", ArrayType(StringType()))])),
    ("arr", ArrayType(TimestampType())),
)

GOOD = {
    "bo": True,
    "by": -128,
    "sh": 32767,
    "i": -(2**31),
    "l": 2**63 - 1,
    "f": 1.5,
    "d": 2,
    "s": "héllo",
    "bin": "aGVsbG8=",
    "dt": "2024-02-29",
    "ts": "2024-01-02T03:04:05.123456+01:00",
    "ntz": "2024-01-02 03:04:05",
    "dec": 12.5,
    "st": {"x": 7, "y": ["a", None]},
    "arr": ["1970-01-01T00:00:00Z", None],
}
EXPECTED = {
    "bo": True,
    "by": -128,
    "sh": 32767,
    "i": -(2**31),
    "l": 2**63 - 1,
    "f": 1.5,
    "d": 2.0,
    "s": "héllo",
    "bin": b"hello",
    "dt": dt.date(2024, 2, 29),
    "ts": dt.datetime(2024, 1, 2, 2, 4, 5, 123456, tzinfo=UTC),
    "ntz": dt.datetime(2024, 1, 2, 3, 4, 5),
    "dec": Decimal("12.50"),
    "st": {"x": 7, "y": ["a", None]},
    "arr": [dt.datetime(1970, 1, 1, tzinfo=UTC), None],
}


def test_every_type_fast_path(monkeypatch):
    monkeypatch.setattr(TypedDecoder, "_records", lambda *a: pytest.fail("per-record path used"))
    dec, batch = decode(ALL, json.dumps(GOOD), json.dumps({k: None for k in GOOD}), "{}")
    rows = batch.to_pylist()
    assert rows[0] == EXPECTED
    assert rows[1] == rows[2] == {k: None for k in GOOD}
    assert dec.errors == 0


def test_every_type_per_record_path_agrees():
    # A newline inside the document sends it through the per-record rules.
    dec, batch = decode(ALL, json.dumps(GOOD, indent=1), json.dumps(GOOD))
    rows = batch.to_pylist()
    assert rows[0] == rows[1] == EXPECTED
    assert dec.errors == 0


@pytest.mark.parametrize(
    ("t", "doc", "want"),
    [
        (DoubleType(), "1", 1.0),
        (DoubleType(), '"Infinity"', math.inf),
        (DoubleType(), "1e400", math.inf),
        (FloatType(), "1e40", math.inf),
        (StringType(), "1.50", "1.50"),
        (StringType(), "true", "true"),
        (StringType(), '{"k": [1, 2.50]}', '{"k":[1,2.50]}'),
        (DecimalType(5, 2), "1.235", Decimal("1.24")),
        (DecimalType(5, 2), '"-1.5"', Decimal("-1.50")),
        (DecimalType(5, 2), "1e2", Decimal("100.00")),
        (TimestampType(), "1700000000", dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)),
        (TimestampType(), '"2024"', dt.datetime(2024, 1, 1, tzinfo=UTC)),
        (TimestampType(), '"2024-1-2 3:4:5.1234567"', dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)),
        (TimestampType(), '"2024-01-02T03:04:05+0130"', dt.datetime(2024, 1, 2, 1, 34, 5, tzinfo=UTC)),
        (TimestampType(), '"2024-01-02T03:04:05.Z"', dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
        (TimestampType(), '"2024-01-02 03:04:05 UTC"', dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
        (TimestampType(), '"2024-01-02T03:04:05-1:0"', dt.datetime(2024, 1, 2, 4, 4, 5, tzinfo=UTC)),
        (TimestampType(), '"2024-01-02T03:04"', dt.datetime(2024, 1, 2, 3, 4, tzinfo=UTC)),
        (DateType(), '"2024-1-2"', dt.date(2024, 1, 2)),
        (DateType(), '"2024-01-02T10:00"', dt.date(2024, 1, 2)),
        (DateType(), '"2024-03"', dt.date(2024, 3, 1)),
        (MapType(StringType(), LongType()), '{"a":1,"b":null}', [("a", 1), ("b", None)]),
    ],
)
def test_spark_coercions(t, doc, want):
    dec, batch = decode(schema(("v", t)), '{"v":' + doc + "}")
    assert batch.column(0).to_pylist() == [want]
    assert dec.errors == 0


@pytest.mark.parametrize(
    ("t", "doc"),
    [
        (LongType(), '"1"'),
        (LongType(), "1.0"),
        (LongType(), "9223372036854775808"),
        (IntegerType(), "2147483648"),
        (ByteType(), "128"),
        (BooleanType(), '"true"'),
        (BooleanType(), "1"),
        (DoubleType(), '"3"'),
        (DoubleType(), '""'),
        (DecimalType(5, 2), "1234.5"),
        (DecimalType(5, 2), '"abc"'),
        (BinaryType(), '"!!!"'),
        (DateType(), "19000"),
        (DateType(), '"2024-02-30"'),
        (TimestampType(), '"yesterday"'),
        (TimestampType(), "1.5"),
        (TimestampType(), '"2024-01-02T03:04Z"'),
        (TimestampType(), '"2024-01-02T03:04:05+19:00"'),
        (TimestampType(), '"2024-01-02T24:00:00"'),
        (DecimalType(5, 2), '" 1.5"'),
        (DecimalType(5, 2), '"1_0"'),
        (TimestampNTZType(), '"2024-01-02T03:04:05Z"'),
        (ArrayType(LongType()), '[1,"x"]'),
        (ArrayType(LongType()), "{}"),
        (StructType([StructField("x", LongType())]), "[1]"),
        (MapType(StringType(), LongType()), '{"a":"x"}'),
    ],
)
def test_type_mismatch_is_malformed(t, doc):
    s = schema(("k", LongType()), ("v", t), ("_corrupt_record", StringType()))
    line = '{"k":1,"v":' + doc + "}"
    dec, batch = decode(s, line, '{"k":2}')
    # Spark's partial results: the other fields keep their values.
    assert batch.to_pylist() == [
        {"k": 1, "v": None, "_corrupt_record": line},
        {"k": 2, "v": None, "_corrupt_record": None},
    ]
    assert dec.errors == 1


def test_nested_partial_results():
    s = schema(
        ("st", StructType([StructField("x", LongType()), StructField("y", StringType())])),
        ("a", ArrayType(StructType([StructField("x", LongType())]))),
    )
    _, batch = decode(s, '{"st":{"x":"bad","y":"ok"},"a":[{"x":1},{"x":"no"}]}')
    assert batch.to_pylist() == [{"st": {"x": None, "y": "ok"}, "a": [{"x": 1}, {"x": None}]}]


def test_missing_extra_and_null_fields():
    s = schema(("a", LongType()), ("b", StringType()))
    _, batch = decode(s, '{"a":1,"zzz":{"deep":[1,{"x":2}]}}', '{"b":null}', '{"a":null,"b":"x"}')
    assert batch.to_pylist() == [{"a": 1, "b": None}, {"a": None, "b": None}, {"a": None, "b": "x"}]


def test_duplicate_keys_trailing_content_and_spacing():
    s = schema(("a", LongType()))
    dec, batch = decode(s, '{"a":1,"a":2}', '{"a":3} trailing', '  {"a":4}  ', '\t\r{\n"a":5}')
    assert batch.column(0).to_pylist() == [2, 3, 4, 5]
    assert dec.errors == 0


MALFORMED = ['{"a":1,"b":"x"', "[1,2]", "5", "null", '"str"', '{"a":"abc","b":"y"}', "\xff", '{"a":01}']


@pytest.mark.parametrize("with_column", [True, False])
def test_permissive(with_column):
    fields = [("a", LongType()), ("b", StringType())]
    s = schema(*fields, ("_corrupt_record", StringType())) if with_column else schema(*fields)
    docs = ['{"a":0,"b":"ok"}', *MALFORMED]
    dec = TypedDecoder(s)
    batch = dec.decode(values(*[d.encode("latin-1") for d in docs]), {})
    rows = batch.to_pylist()
    assert len(rows) == len(docs)
    assert rows[0]["a"] == 0
    assert rows[6]["b"] == "y"  # partial result of the type mismatch
    assert all(r["a"] is None for r in rows[1:])
    if with_column:
        assert [r["_corrupt_record"] for r in rows] == [None, *[d if d != "\xff" else "\ufffd" for d in MALFORMED]]
    assert dec.errors == len(MALFORMED)


def test_dropmalformed():
    s = schema(("a", LongType()), ("_corrupt_record", StringType()))
    dec, batch = decode(s, '{"a":1}', *MALFORMED, '{"a":2}', mode="DROPMALFORMED")
    assert batch.to_pylist() == [{"a": 1, "_corrupt_record": None}, {"a": 2, "_corrupt_record": None}]
    assert dec.errors == len(MALFORMED)


@pytest.mark.parametrize("bad", MALFORMED)
def test_failfast(bad):
    dec = TypedDecoder(schema(("a", LongType()), ("b", StringType())), mode="failfast")
    with pytest.raises(MessageDecodeError, match="index 2") as err:
        dec.decode(values('{"a":1}', '{"a":2}', bad.encode("latin-1"), '{"a":3}'), {})
    assert err.value.index == 2


def test_all_dropped_and_empty_is_none():
    s = schema(("a", LongType()))
    assert TypedDecoder(s, mode="DROPMALFORMED").decode(values("x", "[1]"), {}) is None
    assert TypedDecoder(s).decode(values("", "   "), {}) is None  # blank records make no row
    assert TypedDecoder(s).decode(values(), {}) is None
    assert TypedDecoder(s).decode(values("", ""), {}) is None


def test_reserved_metadata_placed_and_follows_rows():
    s = StructType(
        [
            StructField("_journal", StringType(), False),
            StructField("a", LongType()),
            StructField("_offset", LongType(), False),
            StructField("_mod_time", TimestampType()),
            StructField("_corrupt_record", StringType()),
        ]
    )
    reserved = {"_journal": "journal", "_offset": "offset", "_mod_time": "mod_time"}
    meta = {
        "journal": pa.array(["j/a", "j/b", "j/c", "j/d"]),
        "offset": pa.array([0, 10, 20, 30], pa.int64()),
        "mod_time": pa.array([0, 1, 2, 3], pa.timestamp("s", "UTC")),
    }
    docs = values('{"a":1}', "bad", '[{"a":2},{"a":3}]', "")
    batch = TypedDecoder(s, reserved=reserved).decode(docs, meta)
    assert batch.schema.equals(to_arrow_schema(s, timezone="UTC"))
    assert batch.column(0).to_pylist() == ["j/a", "j/b", "j/c", "j/c"]
    assert batch.column("_offset").to_pylist() == [0, 10, 20, 20]
    assert batch.column("a").to_pylist() == [1, None, 2, 3]
    assert batch.column("_mod_time").to_pylist()[1] == dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)
    dropped = TypedDecoder(s, reserved=reserved, mode="DROPMALFORMED").decode(docs, meta)
    assert dropped.column("_offset").to_pylist() == [0, 20, 20]


def test_options_validated():
    with pytest.raises(OptionError, match="mode"):
        TypedDecoder(schema(("a", LongType())), mode="LENIENT")
    with pytest.raises(OptionError, match="columnNameOfCorruptRecord"):
        TypedDecoder(schema(("a", LongType()), ("_corrupt_record", LongType())))
    with pytest.raises(OptionError, match="kind"):
        TypedDecoder(schema(("a", LongType())), reserved={"a": "nope"})
    with pytest.raises(OptionError, match="string keys"):
        TypedDecoder(schema(("m", MapType(LongType(), LongType()))))


def click(i: int) -> str:
    return json.dumps(
        {
            "id": i,
            "user": f"u{i % 1000}",
            "ts": f"2024-01-{1 + i % 28:02d}T{i % 24:02d}:00:00.{i % 1000:03d}Z",
            "price": i * 0.25,
            "geo": {"country": ["US", "DE"][i % 2], "lat": 1.5},
            "tags": ["a", "b"][: i % 3],
        }
    )


CLICK = schema(
    ("id", LongType()),
    ("user", StringType()),
    ("ts", TimestampType()),
    ("price", DoubleType()),
    ("geo", StructType([StructField("country", StringType()), StructField("lat", DoubleType())])),
    ("tags", ArrayType(StringType())),
    ("_corrupt_record", StringType()),
)


def test_large_batch_fast_path(monkeypatch):
    monkeypatch.setattr(TypedDecoder, "_records", lambda *a: pytest.fail("per-record path used"))
    n = 100_000
    dec, batch = decode(CLICK, *[click(i) for i in range(n)])
    assert batch.num_rows == n and dec.errors == 0
    assert batch.column("id").to_pylist()[-3:] == [n - 3, n - 2, n - 1]
    assert batch.slice(n - 1).to_pylist()[0]["ts"] == dt.datetime(2024, 1, 12, 15, 0, 0, 999000, tzinfo=UTC)


def test_large_batch_with_a_few_bad_records():
    n = 100_000
    docs = [click(i) for i in range(n)]
    bad = {17, 50_000, 99_999}
    for i in bad:
        docs[i] = '{"id":"x' if i != 50_000 else docs[i].replace('"price": ', '"price": "x", "p": ')
    dec, batch = decode(CLICK, *docs)
    assert batch.num_rows == n and dec.errors == len(bad)
    corrupt = batch.column("_corrupt_record").to_pylist()
    assert [i for i, c in enumerate(corrupt) if c is not None] == sorted(bad)
    ids = batch.column("id").to_pylist()
    assert ids[:17] == list(range(17)) and ids[17] is None and ids[50_000] == 50_000
    assert batch.column("user").to_pylist()[50_000] == "u0"  # partial result kept


def test_runs_of_per_record_documents_between_fast_runs():
    docs = [(" " if i % 7 < 3 else "") + f'{{"a":{i}}}' for i in range(1000)]
    docs[500] = '{"a":1}\n{"a":2}'  # A newline inside one message: still one row.
    dec, batch = decode(schema(("a", LongType())), *docs)
    assert batch.column(0).to_pylist() == [1 if i == 500 else i for i in range(1000)]
    assert dec.errors == 0


@pytest.mark.parametrize("bad_doc", ['{"id":"x"}', '{"id":1.5}', '{"id":', "[1]"])
@pytest.mark.parametrize("every", [2, 3, 97, 5000])
def test_fallback_finds_every_bad_record(bad_doc, every):
    n = 20_000
    docs = [bad_doc if i % every == 1 else click(i) for i in range(n)]
    dec, batch = decode(CLICK, *docs)
    assert batch.num_rows == n
    corrupt = batch.column("_corrupt_record").to_pylist()
    assert [i for i, c in enumerate(corrupt) if c is not None] == [i for i in range(n) if i % every == 1]
    assert batch.column("id").to_pylist() == [None if i % every == 1 else i for i in range(n)]
    assert dec.errors == len(range(1, n, every))


def test_large_binary_input():
    dec = TypedDecoder(schema(("a", LongType())))
    assert dec.decode(values('{"a":1}', '{"a":2}', large=True), {}).column(0).to_pylist() == [1, 2]


@settings(max_examples=100, deadline=None)
@given(docs=st.lists(st.binary(max_size=40) | st.sampled_from([b'{"a":1}', b'{"a":"x"}', b"{", b"[{}]"]), max_size=30))
def test_random_bytes(docs):
    s = schema(("a", LongType()), ("t", TimestampType()), ("_corrupt_record", StringType()))
    arr = pa.array(docs, pa.binary())
    for mode in ("PERMISSIVE", "DROPMALFORMED"):
        batch = TypedDecoder(s, mode=mode).decode(arr, {})
        assert batch is None or batch.schema.equals(to_arrow_schema(s, timezone="UTC"))
    try:
        TypedDecoder(s, mode="FAILFAST").decode(arr, {})
    except MessageDecodeError:
        pass


# -- native timestamps, fields outside the schema, maps (issue 24) ---------------------------


def no_per_record(monkeypatch):
    monkeypatch.setattr(TypedDecoder, "_records", lambda *a: pytest.fail("per-record path used"))


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


def test_fields_outside_the_schema_are_skipped(monkeypatch):
    """Extra fields, whatever their shape and even with types changing between records, are
    not materialised and never make a record malformed."""
    no_per_record(monkeypatch)
    s = schema(("a", LongType()), ("_corrupt_record", StringType()))
    docs = [
        '{"a":1,"x":1,"deep":{"k":[1,{"z":"q"}]}}',
        '{"x":"now a string","a":2,"deep":[true,null]}',
        '{"a":3,"x":{"y":[]},"deep":"text"}',
    ]
    dec, batch = decode(s, *docs)
    assert batch.to_pylist() == [{"a": i, "_corrupt_record": None} for i in (1, 2, 3)]
    assert dec.errors == 0


MAPS = schema(
    ("id", LongType()),
    ("m", MapType(StringType(), LongType())),
    ("tags", MapType(StringType(), ArrayType(StringType()))),
    ("_corrupt_record", StringType()),
)


def test_top_level_maps_do_not_send_records_through_the_per_record_path(monkeypatch):
    no_per_record(monkeypatch)
    docs = [json.dumps({"id": i, "m": {"a": i, "b": None}, "tags": {"t": ["x"] * (i % 3)}}) for i in range(3000)]
    docs[5] = '{"id":5}'
    dec, batch = decode(MAPS, *docs)
    rows = batch.to_pylist()
    assert rows[0] == {"id": 0, "m": [("a", 0), ("b", None)], "tags": [("t", [])], "_corrupt_record": None}
    assert rows[5] == {"id": 5, "m": None, "tags": None, "_corrupt_record": None}
    assert rows[2999]["m"] == [("a", 2999), ("b", None)]
    assert dec.errors == 0


def test_a_map_value_that_does_not_convert_is_malformed_with_partial_results():
    docs = ['{"id":1,"m":{"a":1}}', '{"id":2,"m":{"a":"x","b":2},"tags":{"t":["y"]}}', '{"id":3,"m":{}}']
    dec, batch = decode(MAPS, *docs)
    rows = batch.to_pylist()
    assert rows[0]["m"] == [("a", 1)] and rows[2]["m"] == []
    # Spark: a map with a bad value is null, the other fields keep their values.
    assert rows[1] == {"id": 2, "m": None, "tags": [("t", ["y"])], "_corrupt_record": docs[1]}
    assert dec.errors == 1


NESTED_MAPS = schema(
    ("id", LongType()),
    (
        "st",
        StructType(
            [
                StructField("m", MapType(StringType(), LongType())),
                StructField("x", IntegerType()),
                StructField(
                    "in",
                    StructType(
                        [
                            StructField("t", TimestampType()),
                            StructField("m2", MapType(StringType(), DateType())),
                            StructField("dec", DecimalType(5, 1)),
                        ]
                    ),
                ),
                StructField("only", StructType([StructField("m3", MapType(StringType(), StringType()))])),
            ]
        ),
    ),
    ("_corrupt_record", StringType()),
)


def per_record(s, *docs, **kw):
    """The same records, every one through the per-record rules (the path nested maps took)."""
    dec = TypedDecoder(s, **kw)
    dec._all_python = True
    return dec, dec.decode(values(*docs), {})


def nested_doc(i):
    return {
        "id": i,
        "st": {
            "x": i,
            "m": {"a": i, "b": None},
            "in": {"m2": {"d": "2024-01-02"}, "t": "2024-01-02T03:04:05Z", "dec": 1.5},
            "only": {"m3": {"k": "v"}},
            "zz": {"q": [1]},
        },
    }


def test_maps_nested_in_structs_take_the_fast_path(monkeypatch):
    no_per_record(monkeypatch)
    docs = [json.dumps(nested_doc(i)) for i in range(3000)]
    docs[1] = '{"id":1}'  # no struct
    docs[2] = '{"id":2,"st":null}'  # null struct
    docs[3] = '{"id":3,"st":{"x":3}}'  # struct without its maps
    docs[4] = '{"id":4,"st":{"m":null,"in":{},"only":{}}}'
    docs[5] = '{"id":5,"st":{"m":{},"in":null,"only":{"m3":{"a":1,"b":{"c":[true]}}}}}'
    docs[6] = '{"id":6,"st":{"only":{"m3":{"a":"x","a":"y"}}}}'  # duplicate keys: the last wins
    dec, batch = decode(NESTED_MAPS, *docs)
    rows = batch.to_pylist()
    assert rows[0] == {
        "id": 0,
        "st": {
            "m": [("a", 0), ("b", None)],
            "x": 0,
            "in": {
                "t": dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
                "m2": [("d", dt.date(2024, 1, 2))],
                "dec": Decimal("1.5"),
            },
            "only": {"m3": [("k", "v")]},
        },
        "_corrupt_record": None,
    }
    assert rows[1]["st"] is None and rows[2]["st"] is None
    assert rows[3]["st"] == {"m": None, "x": 3, "in": None, "only": None}
    assert rows[4]["st"] == {"m": None, "x": None, "in": {"t": None, "m2": None, "dec": None}, "only": {"m3": None}}
    assert rows[5]["st"] == {"m": [], "x": None, "in": None, "only": {"m3": [("a", "1"), ("b", '{"c":[true]}')]}}
    assert rows[6]["st"]["only"] == {"m3": [("a", "y")]}
    assert rows[2999]["st"]["m"] == [("a", 2999), ("b", None)]
    assert dec.errors == 0
    monkeypatch.undo()
    assert batch.equals(per_record(NESTED_MAPS, *docs)[1])


BAD_NESTED = [
    '{"id":1,"st":{"x":1,"m":{"a":"x","b":2},"in":{"dec":2}}}',  # a map value that does not convert
    '{"id":2,"st":{"x":2,"in":{"m2":{"d":"not a date"},"t":"2024-01-02T03:04:05Z"}}}',  # two levels down
    '{"id":3,"st":{"x":3,"only":5}}',  # a struct on the path that is not an object
    '{"id":4,"st":{"x":4,"m":[1]}}',  # a map that is not an object
    '{"id":5,"st":{"x":1,"m":{"a":1}},"st":{"x":5}}',  # duplicate struct key: the last wins
    '{"id":6,"st":{"x":6,"x":7,"m":{"a":1}}}',  # duplicate key inside the struct
]


@pytest.mark.parametrize("mode", ["PERMISSIVE", "DROPMALFORMED"])
def test_a_nested_map_that_does_not_convert_follows_the_per_record_rules(mode):
    good = [json.dumps(nested_doc(i)) for i in range(10, 200)]
    docs = [*good[:100], *BAD_NESTED, *good[100:]]
    dec, batch = decode(NESTED_MAPS, *docs, mode=mode)
    ref_dec, ref = per_record(NESTED_MAPS, *docs, mode=mode)
    assert batch.equals(ref)
    assert dec.errors == ref_dec.errors == 4
    rows = {r["id"]: r for r in batch.to_pylist()}
    if mode == "DROPMALFORMED":
        assert sorted(rows) == sorted([*range(10, 200), 5, 6])
    else:
        # Spark's partial results: the bad map is null, the rest of its structs keep their values.
        assert rows[1]["st"] == {"m": None, "x": 1, "in": {"t": None, "m2": None, "dec": Decimal("2.0")}, "only": None}
        assert rows[1]["_corrupt_record"] == BAD_NESTED[0]
        assert rows[2]["st"]["in"] == {"t": dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC), "m2": None, "dec": None}
        assert rows[3]["st"] == {"m": None, "x": 3, "in": None, "only": None}
        assert rows[4]["st"]["x"] == 4 and rows[4]["st"]["m"] is None
        assert [rows[i]["_corrupt_record"] for i in (2, 3, 4)] == BAD_NESTED[1:4]
    assert rows[5]["st"] == {"m": None, "x": 5, "in": None, "only": None} and rows[5]["_corrupt_record"] is None
    assert rows[6]["st"]["x"] == 7 and rows[6]["st"]["m"] == [("a", 1)]


def test_a_nested_map_that_does_not_convert_fails_fast():
    docs = [json.dumps(nested_doc(i)) for i in range(100)]
    docs[37] = BAD_NESTED[1]
    with pytest.raises(MessageDecodeError, match="index 37"):
        decode(NESTED_MAPS, *docs, mode="FAILFAST")


def test_maps_inside_arrays_still_follow_the_per_record_rules():
    s = schema(("arr", ArrayType(StructType([StructField("m", MapType(StringType(), LongType()))]))))
    dec, batch = decode(s, '{"arr":[{"m":{"a":1}}]}', '{"arr":[{"m":{"b":"x"}}]}')
    assert dec._all_python and dec.errors == 1
    assert batch.column(0).to_pylist()[0] == [{"m": [("a", 1)]}]


NESTED_VALUE = st.one_of(
    st.none(),
    st.integers(-5, 5),
    st.sampled_from(["x", "2024-01-02", "2024-01-02T03:04:05Z", 1.5, 1e400]),
    st.lists(st.integers(0, 2), max_size=2),
)
NESTED_MAP = st.one_of(NESTED_VALUE, st.dictionaries(st.sampled_from("abc"), NESTED_VALUE, max_size=3))
IN = st.one_of(
    NESTED_VALUE, st.fixed_dictionaries({}, optional={"t": NESTED_VALUE, "m2": NESTED_MAP, "dec": NESTED_VALUE})
)
ST = st.one_of(
    NESTED_VALUE,
    st.fixed_dictionaries(
        {},
        optional={
            "m": NESTED_MAP,
            "x": NESTED_VALUE,
            "in": IN,
            "only": st.one_of(NESTED_VALUE, st.fixed_dictionaries({}, optional={"m3": NESTED_MAP})),
        },
    ),
)


@settings(max_examples=60, deadline=None)
@given(sts=st.lists(ST, min_size=1, max_size=8), mode=st.sampled_from(["PERMISSIVE", "DROPMALFORMED"]))
def test_nested_maps_fast_path_equals_the_per_record_rules(sts, mode):
    docs = [json.dumps({"id": i, "st": v}) for i, v in enumerate(sts)]
    dec, batch = decode(NESTED_MAPS, *docs, mode=mode)
    ref_dec, ref = per_record(NESTED_MAPS, *docs, mode=mode)
    assert (batch is None and ref is None) or batch.equals(ref)
    assert dec.errors == ref_dec.errors


@pytest.mark.parametrize("native", [True, False])
def test_invalid_utf8_inside_a_string_is_malformed(native):
    """pyarrow's reader passes invalid UTF-8 inside strings through (an invalid Arrow string);
    Spark's rules, and ours, make the record malformed."""
    s = schema(("v", StringType()), ("k", LongType()), ("_corrupt_record", StringType()))
    dec = TypedDecoder(s)
    if not native:
        dec._scan_plan = None
    batch = dec.decode(values(b'{"v":"ok","k":1}', b'{"v":"a\xff","k":2}', b'{"k\xfe":1,"k":3}'), {})
    batch.validate(full=True)
    assert batch.column("v").to_pylist() == ["ok", None, None]
    assert batch.column("k").to_pylist() == [1, None, None]
    assert batch.column("_corrupt_record").to_pylist() == [None, '{"v":"a\ufffd","k":2}', '{"k\ufffd":1,"k":3}']
    assert dec.errors == 2


def test_lone_surrogate_escapes_become_question_marks():
    """A string with an unpaired surrogate escape (which UTF-8 cannot hold) gets "?" for it, as
    Java's UTF-8 encoder writes it; it used to fail the whole batch."""
    s = schema(("v", StringType()), ("w", StringType()))
    _, batch = decode(s, '{"v":"a\\ud83dz","w":["\\udc00"]}', '{"v":"\\ud83d\\ude00"}')
    assert batch.to_pylist() == [{"v": "a?z", "w": '["?"]'}, {"v": "\U0001f600", "w": None}]


# -- the C scanner (_jsonscan) against the pure-Python path (issue 24) ------------------------

SCAN = schema(
    ("s", StringType()),
    ("l", LongType()),
    ("i", IntegerType()),
    ("sh", ShortType()),
    ("by", ByteType()),
    ("d", DoubleType()),
    ("f", FloatType()),
    ("bo", BooleanType()),
    ("ts", TimestampType()),
    ("ntz", TimestampNTZType()),
    ("dt", DateType()),
    ("_corrupt_record", StringType()),
)


@pytest.fixture
def scanner():
    """The C scanner must be built wherever tests run in CI (a skip fails there: tests/required_tools.py)."""
    from pyspark_gazette.spark.read import typed

    if native.module is None:
        missing_tool("the C scanner pyspark_gazette._jsonscan is not installed (setup.py builds it with a C compiler)")
    return typed


def pair(s, mode="PERMISSIVE"):
    """A decoder on the C scanner and one on the pure-Python path, same options."""
    native, python = TypedDecoder(s, mode=mode), TypedDecoder(s, mode=mode)
    assert native._scan_plan is not None
    python._scan_plan = None
    return native, python


def exact(v):
    """Values compared exactly: floats by their bits (NaN, -0.0), everything else as is."""
    if isinstance(v, float):
        return ("float", struct.pack("<d", v))
    if isinstance(v, dict):
        return {k: exact(x) for k, x in v.items()}
    if isinstance(v, list):
        return [exact(x) for x in v]
    return v


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


def test_the_switch_turns_the_scanner_off(scanner, monkeypatch):
    assert TypedDecoder(SCAN)._scan_plan is not None
    monkeypatch.setenv(scanner.NATIVE_ENV, "0")
    assert TypedDecoder(SCAN)._scan_plan is None
    # Types the scanner does not convert send the whole schema to the pure-Python path.
    monkeypatch.delenv(scanner.NATIVE_ENV)
    for t in (
        DecimalType(5, 2),
        BinaryType(),
        MapType(StringType(), LongType()),
        ArrayType(BinaryType()),
        StructType([StructField("m", MapType(StringType(), LongType()))]),
        StructType([StructField("a", LongType()), StructField("a", StringType())]),  # a name twice
        StructType(),
    ):
        assert TypedDecoder(schema(("a", LongType()), ("x", t)))._scan_plan is None
    # Structs and arrays of the scalars it converts, at any depth, are scanned.
    deep = StructType([StructField("a", ArrayType(StructType([StructField("t", ArrayType(DateType()))])))])
    assert TypedDecoder(schema(("a", LongType()), ("x", deep)))._scan_plan is not None


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


@pytest.mark.parametrize(
    ("text", "want", "fell_back"),
    [
        (r'"a\"b\\c\/d\b\f\n\r\t"', 'a"b\\c/d\b\f\n\r\t', False),
        (r'"\u00e9\u20ac\u0000"', "é€\x00", False),
        (r'"\ud83d\ude00 \uD83D\uDE00"', "\U0001f600 \U0001f600", False),
        ('"héllo €😀"', "héllo €😀", False),
        (r'"\ud83d"', None, True),  # a lone high surrogate: Python's rules
        (r'"\ude00x"', None, True),
        (r'"\ud83d\u0041"', None, True),
        (r'"\x"', None, True),
        (r'"\u12"', None, True),
        ('"tab\there"', None, True),  # a raw control character: malformed
        ("12", "12", True),  # non-string values: their JSON text, by Python's rules
    ],
)
def test_scanner_strings(scanner, text, want, fell_back):
    value, back = scan_value(StringType(), text)
    assert back == fell_back
    if not fell_back:
        assert value == want


@pytest.mark.parametrize("bad", [b"\xff", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc3"])
@pytest.mark.parametrize("where", ["value", "key", "skipped", "trailing"])
def test_scanner_invalid_utf8_is_left_to_python(scanner, bad, where):
    s = schema(("v", StringType()), ("_corrupt_record", StringType()))
    doc = {
        "value": b'{"v":"a' + bad + b'"}',
        "key": b'{"k' + bad + b'":1,"v":"a"}',
        "skipped": b'{"x":["' + bad + b'"],"v":"a"}',
        "trailing": b'{"v":"a"} ' + bad,
    }[where]
    native = assert_same(s, [b'{"v":"ok"}', doc])
    assert native._scan_fallbacks == 1


INT_EDGES = [
    (LongType(), 2**63 - 1, 2**63),
    (LongType(), -(2**63), -(2**63) - 1),
    (IntegerType(), 2**31 - 1, 2**31),
    (IntegerType(), -(2**31), -(2**31) - 1),
    (ShortType(), 2**15 - 1, 2**15),
    (ShortType(), -(2**15), -(2**15) - 1),
    (ByteType(), 127, 128),
    (ByteType(), -128, -129),
]


@pytest.mark.parametrize(("t", "edge", "over"), INT_EDGES)
def test_scanner_integer_bounds(scanner, t, edge, over):
    assert scan_value(t, str(edge)) == (edge, False)
    assert scan_value(t, str(over)) == (None, True)
    assert scan_value(t, "-0") == (0, False)
    for text in ("1.0", "1e2", "01", '"1"', "true", "99999999999999999999999"):
        assert scan_value(t, text)[0] is None


@pytest.mark.parametrize(
    "text",
    [
        "0.1",
        "-0.0",
        "2.2250738585072014e-308",
        "4.9e-324",
        "2e-324",
        "1.7976931348623157e308",
        "1e400",
        "-1e400",
        "9007199254740993",  # 2^53 + 1: rounds to even
        "9007199254740993.0",
        "123456789012345678901234567890",
        "0.30000000000000004",
        "1.00000000000000011102230246251565404236316680908203125",  # a halfway case
        "3.4028234663852886e38",
        "1e-46",
        "0.000001",
        "12345678.9e-3",
        "1E+2",
    ],
)
@pytest.mark.parametrize("t", [DoubleType(), FloatType()])
def test_scanner_numbers_round_like_python(scanner, t, text):
    value, back = scan_value(t, text)
    assert back == (isinstance(t, FloatType) and abs(float(text)) > 3.4028234663852886e38)
    if not back:
        want = float(text) if isinstance(t, DoubleType) else struct.unpack("<f", struct.pack("<f", float(text)))[0]
        assert struct.pack("<d", value) == struct.pack("<d", want)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("1.00000005960464477539062500000000001", 1.0000001192092896),  # just above a midpoint
        ("1.000000059604644775390625", 1.0),  # the midpoint: to even
        ("3.4028235e38", 3.4028234663852886e38),
        ("7.006492321624086e-46", 1.401298464324817e-45),
    ],
)
def test_scanner_float32_rounds_the_text_once(scanner, text, want):
    """Float fields round the text to float32 once, as pyarrow's reader does (the Python rules'
    text -> double -> float32 differs at float32 midpoints, which the scanner leaves to them)."""
    assert scan_value(FloatType(), text)[0] == want


@pytest.mark.parametrize("text", ['"NaN"', '"Infinity"', "NaN", "-Infinity", '"1.5"', "1.", ".5", "-", "1e"])
def test_scanner_numbers_outside_the_common_case_are_left_to_python(scanner, text):
    assert scan_value(DoubleType(), text)[1]


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


def test_scanner_records_follow_the_docstring(scanner):
    s = schema(("a", LongType()), ("b", StringType()), ("_corrupt_record", StringType()))
    docs = [
        b'{"a":1,"a":2,"b":"x","b":null}',  # duplicates: the last value
        b'{"b":"y","a":3} trailing [',  # content after the value is ignored
        b'  \t{ "a" : 4 , "zz" : {"q":[1,{"r":null}],"s":"\\u00e9"} }  ',
        b"",  # blank: no row
        b" \r\n",
        b"{}",
        b'[{"a":5}]',  # a top-level array: Python's rules
        b'{"a":6',
        b'{"a":7,}',
        b'{"a":"8"}',
    ]
    native = assert_same(s, docs)
    assert native._scan_fallbacks == 4
    rows = TypedDecoder(s).decode(values(*docs), {}).to_pylist()
    assert [(r["a"], r["b"]) for r in rows[:4]] == [(2, None), (3, "y"), (4, None), (None, None)]


def test_scanner_keys(scanner):
    """Keys match field names exactly (prefixes, longer names, UTF-8, the order changing between
    records); an escaped key, or a field name a raw key cannot spell, is left to Python."""
    s = schema(
        ("a", LongType()),
        ("ab", LongType()),
        ("a_long_field_name", LongType()),
        ("é", LongType()),
        ('q"t', LongType()),
        ("_corrupt_record", StringType()),
    )
    docs = [
        b'{"a":1,"ab":2,"a_long_field_name":3,"\xc3\xa9":4}',
        b'{"\xc3\xa9":5,"a_long_field_nam":0,"abc":0,"ab":6,"a":7}',
        b'{"a_long_field_name_":0,"A":0,"a_long_field_name":8}',
        b'{"\\u0061":9}',
        b'{"q\\"t":10}',
    ]
    native = assert_same(s, docs)
    assert native._scan_fallbacks == 2
    rows = [
        [r[k] for k in ("a", "ab", "a_long_field_name", "é", 'q"t')]
        for r in native.decode(values(*docs), {}).to_pylist()
    ]
    assert rows == [
        [1, 2, 3, 4, None],
        [7, 6, None, 5, None],
        [None, None, 8, None, None],
        [9, None, None, None, None],
        [None, None, None, None, 10],
    ]


def test_scanner_null_records_and_sliced_input(scanner):
    s = schema(("a", LongType()))
    arr = pa.array([b'{"a":0}', None, b'{"a":2}', b'{"a":3}', None, b'{"a":5}'], pa.binary())
    for part in (arr, arr.slice(1), arr.slice(2, 3), pa.array(arr.to_pylist(), pa.large_binary()).slice(1, 4)):
        native, python = pair(s)
        assert native.decode(part, {}).equals(python.decode(part, {}))


def test_scanner_failfast_names_the_record_in_the_whole_batch(scanner):
    native, _ = pair(schema(("a", LongType())), mode="FAILFAST")
    with pytest.raises(MessageDecodeError, match="index 3") as err:
        native.decode(values('{"a":1}', '{"a":2}', '{"a":9223372036854775807}', '{"a":"x"}', '{"a":"y"}'), {})
    assert err.value.index == 3


def test_scanner_gives_up_when_most_records_fall_back(scanner):
    native, _ = pair(schema(("t", TimestampType())))
    odd = values(*[json.dumps({"t": f"2024-1-{1 + i % 28} 3:4:5"}) for i in range(50)])
    for _ in range(8):
        assert native.decode(odd, {}).column(0).null_count == 0
    assert native._scan_batches == 4  # _NATIVE_PATIENCE batches, then the pure-Python path only


# Records for the differential test: values of every JSON type and of the field's, forms at the
# edges, extra fields, duplicate keys, spacing, trailing content, and damage.
JSON_ANY = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=4), kids, max_size=3),
    max_leaves=6,
)
NUMBER_TEXT = st.builds(
    lambda sign, i, f, e: sign + i + f + e,
    st.sampled_from(["", "-"]),
    st.sampled_from(["0", "1", "01", "9007199254740993", "123456789012345678901234"]) | st.integers(0, 10**20).map(str),
    st.sampled_from(["", ".", ".0", ".5", ".000001", ".30000000000000004"]),
    st.sampled_from(["", "e5", "E-5", "e+400", "e-400", "e", "e308"]),
)
TS_TEXT = st.builds(
    lambda y, mo, d, sep, h, mi, s, f, z: f"{y}-{mo}-{d}" + ("" if sep is None else f"{sep}{h}:{mi}:{s}{f}{z}"),
    st.sampled_from(["2024", "0001", "9999", "0000", "1969", "2000", "1900", "+2024", "24"]),
    st.sampled_from(["01", "02", "12", "13", "00", "1"]),
    st.sampled_from(["01", "28", "29", "30", "31", "32", "1"]),
    st.sampled_from([None, "T", " ", "t"]),
    st.sampled_from(["00", "23", "24", "3"]),
    st.sampled_from(["00", "59", "60"]),
    st.sampled_from(["00", "59", "60", "5"]),
    st.sampled_from(["", ".", ".5", ".123456", ".1234567"]),
    st.sampled_from(["", "Z", "+01:00", "-0530", "+18:00", "-18:00", "+18:01", "+1:00", "+19", " UTC", "z", "+0100x"]),
)


def value_text(kind, weight=4):
    plain = {
        "s": st.text(max_size=6),
        "bo": st.booleans(),
        "l": st.sampled_from([2**63 - 1, -(2**63), 2**63, 7]) | st.integers(-(2**65), 2**65),
        "i": st.sampled_from([2**31 - 1, -(2**31), 2**31]) | st.integers(-(2**33), 2**33),
        "sh": st.integers(-(2**16), 2**16),
        "by": st.integers(-300, 300),
        "d": st.floats(allow_nan=False, allow_infinity=False),
        "f": st.floats(allow_nan=False, allow_infinity=False),
        "ts": TS_TEXT | st.integers(-(2**44), 2**44),
        "ntz": TS_TEXT,
        "dt": TS_TEXT | st.sampled_from(["2024-01-02Tjunk", "2024-01-02 x", "2024-1-2", "2024-01"]),
    }[kind]
    as_json = (plain | JSON_ANY).flatmap(lambda v: st.sampled_from([json.dumps(v), json.dumps(v, ensure_ascii=False)]))
    raw = NUMBER_TEXT | st.sampled_from(['"\\ud800"', '"\\udc00x"', '"a\\u00e9\\ud83d\\ude00"', "NaN", '"NaN"', "nul"])
    valid = plain.map(json.dumps)  # mostly the field's own type, so most records take the scanner
    extra = [st.just('"\\"\\\\\\/\\b\\t\\u0041"')] if kind == "s" else []
    return st.one_of(*[valid] * weight, as_json, raw, *extra)


VALUE_TEXT = {k: value_text(k) for k in SCAN.fieldNames()[:-1]} | {"x": JSON_ANY.map(json.dumps)}


@st.composite
def scan_record(draw) -> bytes:
    keys = draw(st.lists(st.sampled_from([*SCAN.fieldNames()[:-1], "x", "s", "ts"]), max_size=6))
    pairs = []
    for k in keys:
        text = draw(VALUE_TEXT[k])
        pairs.append(json.dumps(k) + draw(st.sampled_from([":", " : "])) + text)
    doc = "{" + draw(st.sampled_from([",", ", "])).join(pairs) + "}"
    doc = draw(st.sampled_from(["", " ", "\t"])) + doc + draw(st.sampled_from(["", " ", "\n", " x", "{"]))
    raw = doc.encode("utf-8", "surrogatepass")
    kind = draw(st.integers(0, 9))
    if kind == 0:  # damage
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.sampled_from([b"", b"\xff", b"\xc3", b'"', b"}", b"\\", b"\x01"])) + raw[at + 1 :]
    elif kind == 1:
        raw = draw(st.sampled_from([b"", b"  ", b"[" + raw + b"]", b"5", b"null", raw + raw]))
    return raw


@settings(max_examples=60, deadline=None)
@given(docs=st.lists(scan_record(), min_size=1, max_size=12))
def test_scanner_equals_the_pure_python_path(docs):
    """The differential property: whatever the records, the C scanner's batches (and errors, and
    FAILFAST's record index) equal the pure-Python path's, in every mode."""
    if native.module is None:
        missing_tool("the C scanner pyspark_gazette._jsonscan is not installed (setup.py builds it with a C compiler)")
    assert_same(SCAN, docs)


# -- the C scanner on structs and arrays (issue 24) -------------------------------------------


def fields_of(*fields) -> StructType:
    return StructType([StructField(name, t) for name, t in fields])


# bench_read's nested shape, and structs and arrays at other depths around every scalar kind.
NESTED = schema(
    ("l", LongType()),
    ("geo", fields_of(("country", StringType()), ("lat", DoubleType()), ("ts", TimestampType()))),
    ("tags", ArrayType(StringType())),
    (
        "deep",
        fields_of(("in", fields_of(("b", BooleanType()), ("d", DateType()))), ("ns", ArrayType(TimestampNTZType()))),
    ),
    ("nums", ArrayType(FloatType())),
    ("objs", ArrayType(fields_of(("i", IntegerType()), ("by", ByteType()), ("sh", ShortType())))),
    ("grid", ArrayType(ArrayType(LongType()))),
    ("_corrupt_record", StringType()),
)


def test_scanner_structs_and_arrays(scanner):
    """Values the scanner writes itself (null struct vs struct of nulls, null and missing fields,
    null elements, empty arrays, fields outside the schema, names matched case-sensitively,
    keys in any order) and records it leaves to the pure-Python path: a struct that is not an
    object, an array that is not an array, an element or field that does not convert (a partial
    struct in PERMISSIVE), a struct or array given twice."""
    s = schema(
        ("geo", fields_of(("c", StringType()), ("lat", DoubleType()), ("in", fields_of(("b", BooleanType()))))),
        ("tags", ArrayType(StringType())),
        ("objs", ArrayType(fields_of(("i", LongType())))),
        ("_corrupt_record", StringType()),
    )
    taken = [
        b'{"geo":{"c":"x","lat":1.5,"in":{"b":true}},"tags":["a",null,"\\u00e9"],"objs":[{"i":1},null,{}]}',
        b'{"geo":null,"tags":[],"objs":[]}',
        b'{"geo":{},"tags":null}',
        b'{"geo":{"in":null,"C":"no","x":{"c":"skipped"},"c":"a","c":"b"}}',
        b'{"GEO":{"c":"x"},"objs":[{"I":1,"i":null}], "tags" : [ "s" , null ] }',
        b'{"objs":[{"i":2},{"i":3,"i":4}],"tags":["t"],"geo":{"lat":-0.5,"in":{}}}',
    ]
    left = [
        b'{"geo":"x"}',
        b'{"geo":[{"c":"x"}]}',
        b'{"tags":"a"}',
        b'{"tags":{"0":"a"}}',
        b'{"tags":["a",1]}',
        b'{"objs":[{"i":"1"}]}',
        b'{"objs":[1]}',
        b'{"geo":{"c":"x","lat":"north"}}',
        b'{"geo":{"in":{"b":1}}}',
        b'{"geo":{"c":"x"},"geo":null}',
        b'{"tags":["a"],"tags":["b"]}',
        b'{"geo":{"in":{"b":true},"in":{}}}',
        b'{"tags":["a",]}',
    ]
    native = assert_same(s, taken + left)
    assert native._scan_fallbacks == len(left)
    rows = native.decode(values(*taken), {}).to_pylist()
    assert native._scan_fallbacks == len(left)  # the taken ones all took the scanner
    assert [(r["geo"], r["tags"], r["objs"]) for r in rows] == [
        ({"c": "x", "lat": 1.5, "in": {"b": True}}, ["a", None, "é"], [{"i": 1}, None, {"i": None}]),
        (None, [], []),
        ({"c": None, "lat": None, "in": None}, None, None),
        ({"c": "b", "lat": None, "in": None}, None, None),
        (None, ["s", None], [{"i": None}]),
        ({"c": None, "lat": -0.5, "in": {"b": None}}, ["t"], [{"i": 2}, {"i": 4}]),
    ]


SCALAR_KIND = {
    StringType: "s",
    LongType: "l",
    IntegerType: "i",
    ShortType: "sh",
    ByteType: "by",
    DoubleType: "d",
    FloatType: "f",
    BooleanType: "bo",
    TimestampType: "ts",
    TimestampNTZType: "ntz",
    DateType: "dt",
}
# Inside structs and arrays mostly the field's own type: one value the scanner is unsure of
# sends the whole record to the pure-Python path.
NESTED_SCALAR = {k: value_text(k, weight=24) for k in SCALAR_KIND.values()}
OTHER_JSON = st.sampled_from(["null", "[]", "{}", '"x"', "1", "true", "[{}]", '{"a":[1]}', "[null]"])


@st.composite
def json_of(draw, t) -> str:
    """JSON text for a field of type t: mostly of its type, with spacing, null and missing
    fields, fields outside the schema, names in another case, duplicate keys, other JSON."""
    if isinstance(t, (StructType, ArrayType)) and draw(st.integers(0, 15)) == 7:
        return draw(OTHER_JSON)
    sep = draw(st.sampled_from([",", ", ", " , "]))
    if isinstance(t, StructType):
        names = t.fieldNames()
        keys = draw(st.lists(st.sampled_from([*names, "x", names[0].upper()]), max_size=5, unique=True))
        if keys and draw(st.integers(0, 7)) == 3:
            keys.append(draw(st.sampled_from(keys)))
        types = {f.name: f.dataType for f in t.fields}
        pairs = [
            json.dumps(k) + draw(st.sampled_from([":", " : "])) + draw(json_of(types[k]) if k in types else OTHER_JSON)
            for k in keys
        ]
        return "{" + sep.join(pairs) + "}"
    if isinstance(t, ArrayType):
        return "[" + sep.join(draw(st.lists(json_of(t.elementType) | st.just("null"), max_size=4))) + "]"
    return draw(NESTED_SCALAR[SCALAR_KIND[type(t)]])


@st.composite
def nested_record(draw) -> bytes:
    types = {f.name: f.dataType for f in NESTED.fields[:-1]}
    keys = draw(st.lists(st.sampled_from([*types, "x"]), max_size=8, unique=True))
    if keys and draw(st.integers(0, 7)) == 3:
        keys.append(draw(st.sampled_from(keys)))
    pairs = [json.dumps(k) + ":" + draw(json_of(types[k]) if k in types else VALUE_TEXT["x"]) for k in keys]
    raw = ("{" + ",".join(pairs) + "}" + draw(st.sampled_from(["", " ", " x"]))).encode("utf-8", "surrogatepass")
    if draw(st.integers(0, 11)) == 5:  # damage (not 0: hypothesis favours it)
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.sampled_from([b"", b"\xff", b'"', b"}", b"]", b",", b"\\"])) + raw[at + 1 :]
    return raw


@settings(max_examples=30, deadline=None)
@given(docs=st.lists(nested_record(), min_size=1, max_size=8))
def test_scanner_equals_the_pure_python_path_nested(docs):
    """The differential property on structs and arrays (NESTED): the scanner's batches, errors
    and FAILFAST index equal the pure-Python path's in every mode."""
    if native.module is None:
        missing_tool("the C scanner pyspark_gazette._jsonscan is not installed (setup.py builds it with a C compiler)")
    assert_same(NESTED, docs)


def test_scanner_long_arrays_and_records_that_fall_back_after_them(scanner):
    """Array columns grow past their first allocation (one slot a record), and a record that
    falls back at its end leaves no element of its arrays behind."""
    s = schema(("a", LongType()), ("t", ArrayType(StringType())), ("o", ArrayType(fields_of(("i", LongType())))))
    docs = []
    for r in range(24):
        tags = [f"tag{r}-{k}" if k % 5 else None for k in range(40 + r)]
        objs = [{"i": k} if k % 3 else {} for k in range(12)]
        doc = json.dumps({"a": r, "t": tags, "o": objs})
        docs.append(doc[:-1] + ',"o":[{"i":7}]}' if r % 7 == 3 else doc)  # given twice: Python's
    assert_same(s, [d.encode() for d in docs])
    native, _ = pair(s)
    rows = native.decode(values(*docs), {}).to_pylist()
    assert native._scan_fallbacks == len([r for r in range(24) if r % 7 == 3])
    assert rows[5]["t"][:3] == [None, "tag5-1", "tag5-2"] and len(rows[5]["t"]) == 45
    assert rows[3]["o"] == [{"i": 7}] and rows[23]["o"][:3] == [{"i": None}, {"i": 1}, {"i": 2}]
