"""TypedDecoder's C scanner (_jsonscan) against its pure-Python path: the same batches, errors and
FAILFAST indices, value by value and on generated records."""

from __future__ import annotations

import json
import struct

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
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

from pyspark_gazette.errors import MessageDecodeError
from pyspark_gazette.spark.read import typed
from pyspark_gazette.spark.read.typed import TypedDecoder
from typedjson import assert_same, pair, require_scanner, scan_value, schema, values

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
    require_scanner()
    return typed


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
    require_scanner()
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
    require_scanner()
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
