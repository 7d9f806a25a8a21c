"""TypedDecoder: JSON payloads to typed Arrow batches with Spark's JSON mode semantics."""

from __future__ import annotations

import datetime as dt
import json
import math
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

from pyspark_gazette.errors import MessageDecodeError, OptionError
from pyspark_gazette.spark.read.typed import TypedDecoder
from typedjson import UTC, decode, no_per_record, schema, values

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
        (DecimalType(38, 0), "12345", Decimal("12345")),  # a bound of 10^38 no decimal128 holds
        (DecimalType(38, 0), "9" * 38, Decimal("9" * 38)),  # past the default context's 28 digits
        (DecimalType(38, 0), "-" + "9" * 37 + ".5", Decimal("-1" + "0" * 37)),
        (DecimalType(38, 38), "0.5", Decimal("0.5" + "0" * 37)),
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
        (DecimalType(5, 2), "999.995"),  # rounds past the precision
        (DecimalType(38, 0), "1" + "0" * 38),
        (DecimalType(38, 38), "0." + "9" * 38 + "5"),
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


# -- fields outside the schema, maps (issue 24) ---------------------------------------------


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
