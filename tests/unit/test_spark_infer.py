"""Schema inference of typed reads (spark/read/infer.py) on given documents, without a broker."""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from pyspark_gazette.spark.read.infer import infer_values


def docs(*texts: str) -> list[bytes]:
    return [t.encode() for t in texts]


def test_types_sorted_fields_and_timestamps_as_strings():
    got = infer_values(docs('{"z":1,"b":"x","ts":"2024-01-02T03:04:05Z","a":{"y":true,"x":[1.5]}}', '{"n":null}'))
    assert got == StructType(
        [
            StructField("a", StructType([StructField("x", ArrayType(DoubleType())), StructField("y", BooleanType())])),
            StructField("b", StringType()),
            StructField("n", StringType()),
            StructField("ts", StringType()),
            StructField("z", LongType()),
        ]
    )


def test_conflicts_merge_like_spark():
    # pyarrow refuses these samples; the record-by-record rules give Spark's answer.
    got = infer_values(docs('{"a":1,"b":1,"c":{"x":1}}', '{"a":2.5,"b":"s","c":{"y":[1]}}'))
    assert got == StructType(
        [
            StructField("a", DoubleType()),
            StructField("b", StringType()),
            StructField("c", StructType([StructField("x", LongType()), StructField("y", ArrayType(LongType()))])),
        ]
    )


def test_malformed_records_add_the_corrupt_column():
    got = infer_values(docs('{"a":1}', '{"a":', "[1,2]"), "_bad")
    assert got == StructType([StructField("_bad", StringType()), StructField("a", LongType())])  # sorted, as Spark
    assert infer_values([]) == StructType([])
