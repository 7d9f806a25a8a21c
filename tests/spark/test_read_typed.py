"""Typed reads: a user schema parses ndjson into columns, with Spark's JSON `mode` semantics."""

from __future__ import annotations

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from spark_helpers import reader

SCHEMA = "id LONG, country STRING, amount DOUBLE, ts TIMESTAMP, _corrupt_record STRING"
GOOD = [
    b'{"id":1,"country":"US","amount":1.5,"ts":"2026-01-01T00:00:00Z"}',
    b'{"id":2,"country":"DE","amount":2,"extra":true}',
    b'{"id":3,"country":null}',
]
BAD = [b'{"id":4,"country":"FR"', b'{"id":"not a number"}', b"[1,2,3]"]


@pytest.fixture
def mixed(broker, client, create_journal, tmp_path):
    create_journal("typed/a", length=1024)
    lines = [GOOD[0], BAD[0], GOOD[1], BAD[1], GOOD[2], BAD[2]]
    client.append("typed/a", b"\n".join(lines[:3]) + b"\n" + b"x" * 0)
    client.append("typed/a", b"\n".join(lines[3:]) + b"\n")
    path = tmp_path / "same.json"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return str(path)


def rows(df, cols):
    return sorted((tuple(r[c] for c in cols) for r in df.collect()), key=lambda t: [(x is None, str(x)) for x in t])


@pytest.mark.both_brokers
def test_permissive_matches_spark_json(spark, broker, mixed):
    ours = reader(spark, broker, journals="typed/a").schema(SCHEMA).load()
    theirs = spark.read.schema(SCHEMA).json(mixed)
    cols = ["id", "country", "amount", "ts", "_corrupt_record"]
    assert rows(ours, cols) == rows(theirs, cols)
    assert ours.where("_corrupt_record IS NOT NULL").count() == 3


def test_dropmalformed_matches_spark_json(spark, broker, mixed):
    schema = "id LONG, country STRING, amount DOUBLE, ts TIMESTAMP"
    ours = reader(spark, broker, journals="typed/a", mode="DROPMALFORMED").schema(schema).load()
    theirs = spark.read.schema(schema).option("mode", "DROPMALFORMED").json(mixed)
    assert rows(ours, ["id", "country"]) == rows(theirs, ["id", "country"]) == [(1, "US"), (2, "DE"), (3, None)]


@pytest.mark.both_brokers
def test_failfast_names_the_journal_and_offset(spark, broker, mixed):
    with pytest.raises((PySparkException, Py4JJavaError)) as ei:
        reader(spark, broker, journals="typed/a", mode="FAILFAST").schema(SCHEMA).load().collect()
    bad_offset = len(GOOD[0]) + 1  # BAD[0] is the second message
    assert "typed/a" in str(ei.value) and f"message at offset {bad_offset}" in str(ei.value)


@pytest.mark.both_brokers
def test_metadata_columns_in_a_typed_schema(spark, broker, client, create_journal):
    create_journal("typed/b")
    client.append("typed/b", b'{"journal":"in the document","offset":-5}\n')
    df = (
        reader(spark, broker, journals="typed/b")
        .schema("journal STRING, offset LONG, _journal STRING, _offset LONG")
        .load()
    )
    assert [tuple(r) for r in df.collect()] == [("in the document", -5, "typed/b", 0)]


def test_a_user_schema_needs_ndjson(spark, broker, client, create_journal):
    create_journal("typed/c", content_type="text/plain")
    client.append("typed/c", b"plain\n")
    with pytest.raises((PySparkException, Py4JJavaError)) as ei:
        reader(spark, broker, journals="typed/c").schema("a STRING").load().collect()
    assert "ndjson" in str(ei.value)


def test_infer_schema_reads_like_spark_json(spark, broker, mixed):
    ours = reader(spark, broker, journals="typed/a", inferSchema="true").load()
    theirs = spark.read.json(mixed)
    assert ours.schema == theirs.schema
    cols = theirs.columns
    assert rows(ours, cols) == rows(theirs, cols)


DEEP = b'{"id":9,"nest":' + b"[" * 1500 + b"]" * 1500 + b"}"


def test_a_record_nested_past_sparks_limit_is_one_corrupt_record(spark, broker, client, create_journal, tmp_path):
    """Nesting past Spark's 1,000 levels makes a record malformed there; here too, beside a
    record the per-record rules take, instead of failing the task."""
    create_journal("typed/deep")
    lines = [GOOD[0], DEEP, b'{"id":"x","country":"SE"}', GOOD[1]]
    client.append("typed/deep", b"\n".join(lines) + b"\n")
    path = tmp_path / "deep.json"
    path.write_bytes(b"\n".join(lines) + b"\n")
    ours = reader(spark, broker, journals="typed/deep").schema(SCHEMA).load()
    cols = ["id", "country", "amount", "_corrupt_record"]
    assert rows(ours, cols) == rows(spark.read.schema(SCHEMA).json(str(path)), cols)
    assert ours.where("_corrupt_record IS NOT NULL").count() == 2
    dropped = reader(spark, broker, journals="typed/deep", mode="DROPMALFORMED").schema(SCHEMA).load()
    assert rows(dropped, ["id"]) == [(1,), (2,)]


def test_failfast_names_the_field_its_type_and_the_value(spark, broker, client, create_journal):
    create_journal("typed/country")
    client.append("typed/country", b'{"id":1,"country":49}\n{"id":2,"country":"DE"}\n')
    with pytest.raises((PySparkException, Py4JJavaError)) as ei:
        reader(spark, broker, journals="typed/country", mode="FAILFAST").schema("id LONG, country INT").load().collect()
    offset = len(b'{"id":1,"country":49}\n')
    assert f"journal 'typed/country', message at offset {offset}" in str(ei.value)
    assert """field 'country' expects int, not "DE\"""" in str(ei.value)
