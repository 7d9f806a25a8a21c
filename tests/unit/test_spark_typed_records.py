"""One hostile record is one malformed record, its value does not depend on the batch, and
FAILFAST names what is wrong: typed reads (C scanner on and off), inference, UUIDs, Flow."""

from __future__ import annotations

import json
import struct
import sys

import pyarrow as pa
import pytest
from pyspark.sql.types import DoubleType, FloatType, IntegerType, LongType, StringType, StructField, StructType

from pyspark_gazette.errors import MessageDecodeError, UUIDError
from pyspark_gazette.message import NDJSON, jsondoc
from pyspark_gazette.message.uuids import extract_uuid_json
from pyspark_gazette.native import NATIVE_ENV
from pyspark_gazette.spark.read.flow import _op
from pyspark_gazette.spark.read.infer import infer_values
from pyspark_gazette.spark.read.typed import TypedDecoder


def schema(*fields) -> StructType:
    return StructType([StructField(name, t) for name, t in fields])


def nested(levels: int, a: int = 1) -> bytes:
    """A record whose field ``x`` nests ``levels`` arrays: ``levels + 1`` levels in all."""
    return b'{"a":%d,"x":' % a + b"[" * levels + b"]" * levels + b"}"


@pytest.fixture(params=["C scanner", "pure Python"])
def native(request, monkeypatch):
    if request.param == "C scanner":
        pytest.importorskip("pyspark_gazette._jsonscan")
        monkeypatch.delenv(NATIVE_ENV, raising=False)
    else:
        monkeypatch.setenv(NATIVE_ENV, "0")
    return request.param


A = schema(("a", LongType()), ("_corrupt_record", StringType()))
# Beside the deep record: nothing, a record the per-record rules take, many plain records.
NEIGHBOURS = {"alone": [], "malformed": [b'{"a":"x"}'], "plain": [b'{"a":7}'] * 100}


@pytest.mark.parametrize("beside", NEIGHBOURS)
@pytest.mark.parametrize("levels", [999, 1000, 1500, 100_000])
def test_a_record_nested_past_sparks_limit_is_one_malformed_record(native, beside, levels):
    """Spark's reader takes 1,000 levels (the record's object included) and no more, even in a
    field it skips: the same here, whichever path the batch takes."""
    docs = [nested(levels), *NEIGHBOURS[beside]]
    deep = levels + 1 > jsondoc.MAX_DEPTH
    rows = TypedDecoder(A).decode(pa.array(docs, pa.binary()), {}).to_pylist()
    assert rows[0] == ({"a": None, "_corrupt_record": docs[0].decode()} if deep else {"a": 1, "_corrupt_record": None})
    dropped = TypedDecoder(A, mode="DROPMALFORMED").decode(pa.array(docs, pa.binary()), {})
    assert (dropped is None or dropped.num_rows < len(docs)) if deep else dropped.column("a")[0].as_py() == 1
    if deep:
        with pytest.raises(MessageDecodeError, match=r"at index 0 .*nested deeper than 1000 levels"):
            TypedDecoder(A, mode="FAILFAST").decode(pa.array(docs, pa.binary()), {})


def test_a_record_within_the_limit_parses_from_a_deep_stack():
    """Python's decoder stops near the recursion limit less the caller's frames; a record
    Spark takes parses wherever it is called from."""

    def down(frames: int):
        return jsondoc.loads(nested(998)) if frames == 0 else down(frames - 1)

    assert down(sys.getrecursionlimit() // 2)["a"] == 1
    with pytest.raises(jsondoc.NestingError):
        jsondoc.loads(nested(1000))
    assert jsondoc.depth(b'{"s":"[[[[","x":[{}]}') == 3


def test_inference_takes_a_deep_record_as_corrupt():
    assert infer_values([b'{"a":1}', nested(1500)]) == schema(("_corrupt_record", StringType()), ("a", LongType()))


def test_uuids_flow_ops_and_documents_of_a_deep_record_are_malformed():
    with pytest.raises(UUIDError, match="nested deeper"):
        extract_uuid_json(b'{"x":' + b"[" * 5000 + b"]" * 5000 + b"}")
    assert _op(b'{"_meta":{"op":"c"},"x":' + b"[" * 5000 + b"]" * 5000 + b"}") is None
    with pytest.raises(MessageDecodeError, match="offset 42.*nested deeper"):
        NDJSON.decode_message(nested(5000), 42)


F = schema(("f", FloatType()), ("d", DoubleType()), ("_corrupt_record", StringType()))
BESIDE_NUMBERS = {"alone": [], "malformed": [b'{"f":"x"}'], "plain": [b'{"f":1.5,"d":2.5}'] * 100}


def bits(v):
    return None if v is None else struct.pack("<d", v)


@pytest.mark.parametrize("beside", BESIDE_NUMBERS)
@pytest.mark.parametrize(
    ("doc", "f", "d"),
    [
        ('{"f":7.313131710533413e+33,"d":-0}', 7.313131401048404e33, 0.0),  # a float32 midpoint as a double
        ('{"f":-0,"d":-0.0}', 0.0, -0.0),  # the integer -0 is 0.0; -0.0 keeps its sign
        ('{"f":-0e0,"d":-0}', -0.0, 0.0),
        ('{"f":340282356779733661637539395458142568447,"d":1}', 3.4028234663852886e38, 1.0),  # just below the tie
        ('{"f":3.4028236e38,"d":1e400}', float("inf"), float("inf")),
        ('{"f":1' + "0" * 400 + ',"d":-1' + "0" * 400 + "}", float("inf"), -float("inf")),  # past a double
    ],
)
def test_float_and_double_values_do_not_depend_on_the_batch(native, beside, doc, f, d):
    """pyarrow's reader, the per-record rules and the scanner give one value per text: the
    text rounded once to float32, the JSON integer -0 as 0.0 (tests/spark checks Spark's)."""
    docs = [doc.encode(), *BESIDE_NUMBERS[beside]]
    row = TypedDecoder(F).decode(pa.array(docs, pa.binary()), {}).to_pylist()[0]
    assert (bits(row["f"]), bits(row["d"]), row["_corrupt_record"]) == (bits(f), bits(d), None)


@pytest.mark.parametrize(
    ("fields", "doc", "why"),
    [
        ((("country", IntegerType()),), {"country": "DE"}, """field 'country' expects int, not "DE\""""),
        (
            (("g", schema(("xs", LongType()))),),
            {"g": {"xs": 1.5}},
            "field 'g.xs' expects bigint, not 1.5",
        ),
        ((("a", IntegerType()),), [1], "a JSON list, not an object"),
    ],
)
def test_failfast_names_the_field_its_type_and_the_value(native, fields, doc, why):
    raw = json.dumps(doc, separators=(",", ":")).encode()
    dec = TypedDecoder(schema(*fields), mode="FAILFAST")
    with pytest.raises(MessageDecodeError) as e:
        dec.decode(pa.array([b'{"zz":1}', raw], pa.binary()), {})
    assert str(e.value) == f"malformed JSON record at index 1 (mode FAILFAST): {why}: {raw.decode()!r}"
    assert e.value.index == 1


@pytest.mark.parametrize("levels", [500, 998, 999])
def test_a_string_field_holds_a_deep_value_spark_takes(native, levels):
    """Spark keeps a nested value of a string field as JSON text; converting it recurses as
    deep as it nests, wherever the decoder is called from."""
    doc = b'{"s":' + b"[" * levels + b"1" + b"]" * levels + b"}"
    dec = TypedDecoder(schema(("s", StringType()), ("_corrupt_record", StringType())))
    rows = dec.decode(pa.array([doc, b'{"s":"x"}'], pa.binary()), {}).to_pylist()
    assert rows == [{"s": doc[5:-1].decode(), "_corrupt_record": None}, {"s": "x", "_corrupt_record": None}]


def test_room_raises_the_limit_once_and_restores_it():
    limit = sys.getrecursionlimit()
    with jsondoc.room():
        raised = sys.getrecursionlimit()
        with jsondoc.room():
            assert sys.getrecursionlimit() == raised > limit
        assert sys.getrecursionlimit() == raised
    assert sys.getrecursionlimit() == limit
