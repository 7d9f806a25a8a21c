"""TypedDecoder output is accepted by Spark and equals ``spark.read.json`` on the same lines."""

from __future__ import annotations

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
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

from required_tools import missing_tool

SCHEMA = StructType(
    [
        StructField("a", LongType()),
        StructField("s", StringType()),
        StructField("d", DoubleType()),
        StructField("b", BooleanType()),
        StructField("t", TimestampType()),
        StructField("st", StructType([StructField("x", IntegerType()), StructField("y", StringType())])),
        StructField("arr", ArrayType(LongType())),
        StructField("m", MapType(StringType(), LongType())),
        StructField("dt", DateType()),
        StructField("dec", DecimalType(10, 2)),
        StructField("bin", BinaryType()),
        StructField("ntz", TimestampNTZType()),
        StructField("i", IntegerType()),
        StructField("sh", ShortType()),
        StructField("f", FloatType()),
        StructField(
            "nm",
            StructType(
                [
                    StructField("m", MapType(StringType(), LongType())),
                    StructField("x", IntegerType()),
                    StructField(
                        "s",
                        StructType(
                            [
                                StructField("m2", MapType(StringType(), StringType())),
                                StructField("t", TimestampType()),
                            ]
                        ),
                    ),
                ]
            ),
        ),
        StructField("_corrupt_record", StringType()),
    ]
)

# Good and bad records mixed: type mismatches (partial results), syntax errors, non-objects,
# blank lines, exploded top-level arrays, trailing garbage, every type's coercions.
LINES = [
    '{"a":1,"s":"x","d":1.5,"b":true,"t":"2024-01-02T03:04:05Z","st":{"x":1,"y":"q"}}',
    '{"a":"abc","s":"y","d":2}',
    '{"a":1,"s":2,"d":"3","b":"true"}',
    '{"a":1.5}',
    '{"a":1,"s":{"k":[1,2.50,"z"]}}',
    '{"a":1,"s":"x"',
    '{"a":1} xyz',
    "[1,2]",
    '[{"a":5},{"a":6}]',
    "5",
    "null",
    "",
    "   ",
    '{"st":{"x":"bad","y":"ok"},"a":7}',
    '{"arr":[1,"x",3],"a":8}',
    '{"m":{"k1":1,"k2":"x"},"a":9}',
    '{"m":{"k1":1,"k2":null},"a":10}',
    '{"a":11,"a":12}',
    '{"t":"2024-1-2 3:4:5","a":13}',
    '{"t":"2024","a":14}',
    '{"t":1700000000,"a":15}',
    '{"t":"2024-01-02T03","a":16}',
    '{"t":"2024-01-02T03:04:05.123456789+01:00","a":17}',
    '{"dt":"2024-01-02","a":18}',
    '{"dt":"2024-01-02T05:00","a":19}',
    '{"dt":19000,"a":20}',
    '{"dec":1.235,"a":21}',
    '{"dec":"1.5","a":22}',
    '{"dec":123456789.0,"a":23}',
    '{"bin":"aGVsbG8=","a":24}',
    '{"bin":"!!!","a":25}',
    '{"d":"Infinity","a":26}',
    '{"a":"","d":"","a2":28}',
    '{"ntz":"2024-01-02T03:04:05","a":29}',
    '{"ntz":"2024-01-02T03:04:05Z","a":30}',
    '{"i":2147483648,"a":31}',
    '{"a":9223372036854775808}',
    '{"s":1.50,"a":32}',
    '{"s":true,"a":33}',
    '{"sh":70000,"a":36}',
    '{"f":1e40,"a":37}',
    '{"d":1e400,"a":38}',
    '{"t":"2024-01-02 03:04:05","a":39}',
    '{"t":"2024-02-30 03:04:05","a":40}',
    ' {"a":43}  ',
    '{"a":44,"s":"\\u00e9\\n"}',
    '{"dt":"2024-1-2","a":46}',
    '{"arr":null,"st":null,"m":null,"a":49}',
    '{"arr":[null,1],"a":50}',
    '{"st":[1],"a":51}',
    '{"a":52,"zz":{"deep":[1,{"x":2}]}}',
    '{"a":01}',
    '{"t":"2024-01-02T03:04Z","a":61}',
    '{"t":"2024-01-02T03:04:05.Z","a":62}',
    '{"t":"2024-01-02T03:04:05 +1:0","a":63}',
    '{"t":"2024-01-02 03:04:05 UTC","dt":"2024-01-02 junk","a":64}',
    '{"dec":" 1.5","a":65}',
    '{"dec":".5","a":66}',
    '{"dec":-0.005,"a":67}',
    '{"a":60,}',
    # Native timestamp parsing: forms pyarrow takes but Spark rejects, and common ones.
    '{"t":"2024-01-02T03Z","a":70}',
    '{"t":"2024-01-02 03:04+01:00","a":71}',
    '{"t":"2024-01-02T03:04:05+18:30","a":72}',
    '{"t":"2024-01-02T03:04:05-19:00","a":73}',
    '{"t":"2024-01-02T03:04:05+18:00","a":74}',
    '{"t":"2024-01-02","a":75}',
    '{"t":"2024-01-02T03:04:05.5-0130","a":76}',
    '{"t":"2024-01-02T03:04:05+01","a":77}',
    '{"t":"2024-01-02T03:04\\u002B01:00","a":78}',
    '{"a":79,"m":{},"extra":{"q":[1,"x",{"r":null}]}}',
    # Maps nested in structs (parsed beside pyarrow's columns, the struct rebuilt around them).
    '{"a":80,"nm":{"m":{"k":1,"l":null},"x":2,"s":{"m2":{"q":"r","n":3},"t":"2024-01-02T03:04:05Z"}}}',
    '{"a":81,"nm":{"x":3}}',
    '{"a":82,"nm":null}',
    '{"a":83,"nm":{"m":{"k":"bad"},"x":4,"s":{"t":"2024-01-02T03:04:05Z"}}}',
    '{"a":84,"nm":{"s":{"m2":{"o":{"b":[1]}},"zz":1}}}',
    '{"a":85,"nm":{"s":5,"x":1}}',
    '{"a":86,"nm":{"m":{},"s":{}}}',
    '{"a":87,"nm":{"m":[1],"x":5}}',
]


# The top-level fields the C scanner converts (typed.py): this schema takes it where it is built.
FLAT = StructType(
    [f for f in SCHEMA.fields if not isinstance(f.dataType, (StructType, ArrayType, MapType, DecimalType, BinaryType))]
)


# Structs and arrays of those, at a few depths, beside them: this schema takes the scanner too.
SCANNED = StructType(
    [f for f in SCHEMA.fields if f.name not in ("m", "dec", "bin", "nm")]
    + [
        StructField("tags", ArrayType(StringType())),
        StructField(
            "geo",
            StructType(
                [
                    StructField("country", StringType()),
                    StructField("lat", DoubleType()),
                    StructField("in", StructType([StructField("b", BooleanType()), StructField("d", DateType())])),
                ]
            ),
        ),
        StructField("objs", ArrayType(StructType([StructField("i", LongType()), StructField("ts", TimestampType())]))),
    ]
)
# Records for SCANNED: taken by the scanner (null and empty structs and arrays, null elements,
# names in another case, duplicate scalar keys, fields outside the schema) and left to the
# pure-Python path (a struct or array of another JSON type, elements and fields that do not
# convert, a struct or array given twice).
NESTED_LINES = [
    '{"a":90,"tags":["x",null,"y"],"geo":{"country":"US","lat":1.5,"in":{"b":true,"d":"2024-01-02"}},'
    '"objs":[{"i":1,"ts":"2024-01-02T03:04:05Z"},null,{}]}',
    '{"a":91,"tags":[],"geo":{},"objs":[]}',
    '{"a":92,"tags":null,"geo":null,"objs":null}',
    '{"a":93,"geo":{"COUNTRY":"x","country":"y","country":"z"},"tags":["a"],"st":{"x":1,"y":"q"},"arr":[1,null,3]}',
    '{"a":94,"geo":{"in":null,"lat":-0.5,"extra":{"q":[1]}},"objs":[{"I":2,"i":3}],"Tags":["no"]}',
    '{"a":95,"tags":"x"}',
    '{"a":96,"geo":"x"}',
    '{"a":97,"tags":["a",1]}',
    '{"a":98,"geo":{"lat":"north","country":"q"}}',
    '{"a":99,"objs":[{"i":"1"},{"i":2}]}',
    '{"a":100,"geo":{"country":"x"},"geo":null}',
    '{"a":101,"tags":["a"],"tags":["b"]}',
    '{"a":102,"objs":[1]}',
    '{"a":103,"geo":{"in":{"b":true},"in":{"d":"2024-01-03"}}}',
]


@pytest.mark.parametrize(
    ("schema", "extra"),
    [(SCHEMA, []), (FLAT, []), (SCANNED, NESTED_LINES)],
    ids=["every type", "C scanner types", "C scanner structs and arrays"],
)
def test_decoder_batches_equal_spark_json(spark, tmp_path, schema, extra):
    from pyspark.sql.datasource import DataSource, DataSourceReader

    from pyspark_gazette import native
    from pyspark_gazette.spark.read import typed

    if schema is not SCHEMA and native.module is None:
        missing_tool("the C scanner pyspark_gazette._jsonscan is not installed (setup.py builds it with a C compiler)")
    assert (typed.TypedDecoder(schema)._scan_plan is not None) == (schema is not SCHEMA)
    lines = (LINES + extra) * 3
    path = tmp_path / "in.json"
    path.write_text("\n".join(lines) + "\n")
    expected = spark.read.schema(schema).json(str(path)).collect()

    class TypedReader(DataSourceReader):
        def __init__(self, schema):
            self.schema = schema

        def read(self, partition):
            import pyarrow as pa

            from pyspark_gazette.spark.read.typed import TypedDecoder

            dec = TypedDecoder(self.schema)
            yield dec.decode(pa.array([x.encode() for x in lines], pa.binary()), {})

    class TypedSource(DataSource):
        @classmethod
        def name(cls):
            return "typed_test"

        def schema(self):
            return schema

        def reader(self, schema):
            return TypedReader(schema)

    spark.dataSource.register(TypedSource)
    got = spark.read.format("typed_test").load().collect()
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g == e


INFER_LINES = [
    '{"id":1,"name":"a","score":1.5,"tags":["x"],"geo":{"lat":1.5,"cc":"US"},"ts":"2024-01-02T03:04:05Z"}',
    '{"id":2,"name":null,"score":2,"tags":[],"geo":{"cc":"DE","zip":123},"flag":true}',
    '{"id":"three","score":null,"nested":{"b":[{"y":1},{"x":2.5}]}}',
    '{"id":4,"only_null":null}',
    '{"broken":',
]


def test_inferred_schema_equals_spark_json(spark, tmp_path):
    from pyspark_gazette.spark.read.infer import infer_values

    for lines in (INFER_LINES, INFER_LINES[:2], INFER_LINES[:4]):
        path = tmp_path / f"infer{len(lines)}.json"
        path.write_text("\n".join(lines) + "\n")
        assert infer_values([x.encode() for x in lines]) == spark.read.json(str(path)).schema, len(lines)


EDGE_SCHEMA = StructType(
    [
        StructField("a", LongType()),
        StructField("f", FloatType()),
        StructField("d", DoubleType()),
        StructField("_corrupt_record", StringType()),
    ]
)
EDGE_LINES = [
    '{"a":1,"f":7.313131710533413e+33,"d":-0}',
    '{"a":2,"f":-0,"d":-0.0}',
    '{"a":3,"f":-0e0,"d":-0}',
    '{"a":4,"f":340282356779733661637539395458142568447,"d":1e400}',
    '{"a":5,"f":3.4028235e38,"d":16777217}',
    '{"a":6,"x":' + "[" * 999 + "]" * 999 + "}",
    '{"a":7,"x":' + "[" * 1000 + "]" * 1000 + "}",
    '{"a":8,"x":{"y":' + "[" * 2000 + "]" * 2000 + "}}",
    '{"a":9,"f":1' + "0" * 400 + ',"d":-1' + "0" * 400 + "}",  # integers past the double range
]


@pytest.mark.parametrize("native", ["1", "0"], ids=["C scanner", "pure Python"])
@pytest.mark.parametrize("beside", ["alone", "malformed", "plain"])
def test_edge_values_equal_spark_json_whatever_the_batch(spark, tmp_path, monkeypatch, native, beside):
    """Each line decoded alone, beside a malformed record (the per-record rules), and among
    plain records (pyarrow's reader, the scanner) equals ``spark.read.json`` of that line:
    float32 midpoints, -0, nesting past Spark's 1,000 levels."""

    import pyarrow as pa

    from pyspark_gazette.native import NATIVE_ENV
    from pyspark_gazette.spark.read.typed import TypedDecoder
    from typedjson import exact

    if native == "1":
        pytest.importorskip("pyspark_gazette._jsonscan")
    monkeypatch.setenv(NATIVE_ENV, native)
    path = tmp_path / "edge.json"
    path.write_text("\n".join(EDGE_LINES) + "\n")
    expected = [r.asDict() for r in spark.read.schema(EDGE_SCHEMA).json(str(path)).collect()]
    others = {"alone": [], "malformed": [b'{"a":"x"}'], "plain": [b'{"a":0,"f":1.5,"d":2.5}'] * 100}[beside]

    for line, want in zip(EDGE_LINES, expected, strict=True):
        batch = TypedDecoder(EDGE_SCHEMA).decode(pa.array([line.encode(), *others], pa.binary()), {})
        assert exact(batch.to_pylist()[0]) == exact(want), line[:60]


DECIMAL_SCHEMA = StructType(
    [
        StructField("k", LongType()),
        StructField("a", DecimalType(38, 0)),
        StructField("b", DecimalType(38, 2)),
        StructField("c", DecimalType(38, 38)),
        StructField("e", DecimalType(5, 2)),
        StructField("_corrupt_record", StringType()),
    ]
)
_NINES = "9" * 38
DECIMAL_VALUES = {
    "a": ["12345", '"12345"', _NINES, "-" + _NINES, "1" + "0" * 38, "0.5", "-2.5", "1e37", "1E38", '"1e2"'],
    "b": ["12345", "1.005", "9" * 36 + ".994", "9" * 36 + ".995", "-0.001", '"-1.5"', "9" * 37, "2" + "0" * 36],
    "c": ["0.5", "0." + _NINES, "0." + _NINES + "5", "-0." + "0" * 37 + "5", "1", "0", "2995", "9", "-2"],
    "e": ["999.99", "999.994", "999.995", "-999.995", "0.005", '"12.345"'],
}
DECIMAL_LINES = [
    f'{{"k":{i},"{field}":{value}}}'
    for i, (field, value) in enumerate((f, v) for f, values in DECIMAL_VALUES.items() for v in values)
]


@pytest.mark.parametrize("native", ["1", "0"], ids=["C scanner on", "pure Python"])
@pytest.mark.parametrize("beside", ["alone", "malformed", "plain", "together"])
def test_decimals_at_the_edges_of_their_precision_equal_spark_json(spark, tmp_path, monkeypatch, native, beside):
    """``DECIMAL(38, s)`` (whose bound, 10^(38-s), no 38-digit decimal holds), values of 38
    digits, values that round past the precision (malformed, as in Spark), numbers that scaled
    up pass 128 bits (pyarrow's reader wraps them: 2995 as ``DECIMAL(38, 38)``): each line decoded
    alone, beside a malformed record, among plain records, and all in one batch, equals
    ``spark.read.json`` of it; none raises."""
    import pyarrow as pa

    from pyspark_gazette.native import NATIVE_ENV
    from pyspark_gazette.spark.read.typed import TypedDecoder

    monkeypatch.setenv(NATIVE_ENV, native)
    path = tmp_path / "decimals.json"
    path.write_text("\n".join(DECIMAL_LINES) + "\n")
    expected = [r.asDict() for r in spark.read.schema(DECIMAL_SCHEMA).json(str(path)).collect()]
    assert expected[0]["a"] == 12345  # the single record of the report
    if beside == "together":
        batch = TypedDecoder(DECIMAL_SCHEMA).decode(pa.array([x.encode() for x in DECIMAL_LINES], pa.binary()), {})
        assert batch.to_pylist() == expected
        return
    others = {"alone": [], "malformed": [b'{"k":"x"}'], "plain": [b'{"k":0,"a":1,"b":2.5,"c":0.25,"e":1}'] * 100}[
        beside
    ]
    for line, want in zip(DECIMAL_LINES, expected, strict=True):
        batch = TypedDecoder(DECIMAL_SCHEMA).decode(pa.array([line.encode(), *others], pa.binary()), {})
        assert batch.to_pylist()[0] == want, line
