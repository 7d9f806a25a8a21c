"""OutputBuilder: which user schemas read raw (no JSON parsing) and what they yield."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pyarrow as pa
import pytest
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType, TimestampType

from pyspark_gazette.message import LINES, NDJSON
from pyspark_gazette.spark.options import ReadOptions
from pyspark_gazette.spark.read.arrow_output import OutputBuilder, is_untyped
from pyspark_gazette.spark.read.segments import Messages

OPTS = ReadOptions.parse({"broker.address": "http://127.0.0.1:1", "journals": "bench/events"})
# Not all JSON, and none with a "value" field: a JSON parse of these would give nulls or errors.
VALUES = [b'{"value_not": 1}', b"plain text", b'{"n": 2}']


def _messages(mod_time: int = 1_800_000_000) -> Messages:
    return Messages(pa.array([10, 27, 38], pa.int64()), pa.array(VALUES, pa.binary()), mod_time)


_TYPES = {"STRING": StringType, "BINARY": BinaryType, "LONG": LongType, "TIMESTAMP": TimestampType}


def _schema(ddl: str) -> StructType:
    """``"name TYPE, ..."`` without a Spark session (Spark's DDL parser needs one)."""
    pairs = [part.split() for part in ddl.split(",")]
    return StructType([StructField(name, _TYPES[kind]()) for name, kind in pairs])


@pytest.mark.parametrize(
    "ddl, expected",
    [
        ("value STRING", {"value": [v.decode() for v in VALUES]}),
        ("offset LONG, value BINARY", {"offset": [10, 27, 38], "value": VALUES}),
        ("value STRING, journal STRING", {"value": [v.decode() for v in VALUES], "journal": ["a/b"] * 3}),
        ("journal STRING, offset LONG", {"journal": ["a/b"] * 3, "offset": [10, 27, 38]}),
        (
            "mod_time TIMESTAMP, value STRING",
            {
                "mod_time": [dt.datetime.fromtimestamp(1_800_000_000, dt.timezone.utc)] * 3,
                "value": [v.decode() for v in VALUES],
            },
        ),
    ],
)
@pytest.mark.parametrize("framing", [NDJSON, LINES], ids=str)
def test_subset_of_the_untyped_columns_reads_raw(ddl, expected, framing):
    schema = _schema(ddl)
    assert is_untyped(schema)
    builder = OutputBuilder(schema, OPTS, framing)
    assert builder.typed_decoder is None
    batch = builder.build("a/b", _messages())
    assert batch.schema.names == list(expected)
    got = batch.to_pydict()
    if "mod_time" in got:
        got["mod_time"] = [t.astimezone(dt.timezone.utc) for t in got["mod_time"]]
    assert got == expected


@pytest.mark.parametrize(
    "ddl",
    [
        "value LONG",  # not an untyped column type: the document's "value" field
        "value STRING, n LONG",  # a document field beside it
        "_offset LONG, value STRING",  # typed metadata naming
    ],
)
def test_other_schemas_stay_typed(ddl):
    schema = _schema(ddl)
    assert not is_untyped(schema)
    assert OutputBuilder(schema, OPTS, NDJSON).typed_decoder is not None


def test_default_untyped_schemas_still_raw():
    from pyspark_gazette.spark.source import untyped_schema

    for text in (True, False):
        for meta in (True, False):
            schema = untyped_schema(text, meta)
            assert is_untyped(schema, meta)
            opts = dataclasses.replace(OPTS, include_metadata=meta)
            batch = OutputBuilder(schema, opts, NDJSON).build("a/b", _messages())
            assert batch.schema.names == schema.names


def test_timestamp_column_is_the_uuid_clock():
    """includeMetadata's ``timestamp``: each message's UUID clock as a UTC timestamp (null without
    a UUID); typed reads name it ``_timestamp``, and only with includeMetadata."""
    from pyspark_gazette.message import build_uuid, clock_from_unix
    from pyspark_gazette.spark.source import untyped_schema

    producer = bytes.fromhex("010203040506")
    times = [(1_800_000_000, 123_456_000), (1_800_000_001, 0)]
    docs = [
        b'{"_meta": {"uuid": "%s"}, "n": %d}' % (str(build_uuid(producer, clock_from_unix(*t), 0)).encode(), i)
        for i, t in enumerate(times)
    ] + [b'{"n": 9}']
    msgs = Messages(pa.array([0, 80, 160], pa.int64()), pa.array(docs, pa.binary()), 0)
    want = [
        dt.datetime(2027, 1, 15, 8, 0, 0, 123456, dt.timezone.utc),
        dt.datetime(2027, 1, 15, 8, 0, 1, 0, dt.timezone.utc),
        None,
    ]
    opts = dataclasses.replace(OPTS, include_metadata=True)
    got = OutputBuilder(untyped_schema(True, True), opts, NDJSON).build("a/b", msgs).to_pydict()["timestamp"]
    assert [t.astimezone(dt.timezone.utc) if t else None for t in got] == want
    typed = StructType([StructField("n", LongType()), StructField("_timestamp", TimestampType())])
    got = OutputBuilder(typed, opts, NDJSON).build("a/b", msgs).to_pydict()
    assert got["n"] == [0, 1, 9]
    assert [t.astimezone(dt.timezone.utc) if t else None for t in got["_timestamp"]] == want
    # Without includeMetadata a "_timestamp" column is the document's own field.
    got = OutputBuilder(typed, OPTS, NDJSON).build("a/b", msgs).to_pydict()
    assert got["_timestamp"] == [None, None, None]
