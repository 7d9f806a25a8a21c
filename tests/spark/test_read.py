"""spark.read.format("gazette") on a local[2] Spark, against the embedded broker and a real Gazette
cluster (``both_brokers``)."""

from __future__ import annotations

import json

import pytest
from spark_helpers import events, fill, ndjson, reader

from pyspark_gazette.protocol import pb

pytestmark = pytest.mark.both_brokers


def test_short_name_is_found_without_registration(spark, broker, client, create_journal):
    create_journal("read/auto", length=1024)
    client.append("read/auto", b'{"a":1}\n')
    rows = reader(spark, broker).load("read/auto").collect()
    assert [(r.journal, r.offset, r.value) for r in rows] == [("read/auto", 0, '{"a":1}')]


@pytest.mark.parametrize("codec", [pb.NONE, pb.GZIP, pb.ZSTANDARD, pb.SNAPPY])
def test_persisted_fragments_and_live_tail(spark, broker, client, create_journal, codec):
    create_journal("read/mixed", length=1024, codec=codec)
    expected = fill(client, broker, "read/mixed", batches=6, per_batch=40)
    frags = client.list_fragments("read/mixed")
    assert sum(1 for f in frags if f.spec.mod_time) == 5 and frags[-1].spec.mod_time == 0
    df = reader(spark, broker, journals="read/mixed", maxPartitionBytes="4k").load()
    assert df.schema.names == ["journal", "offset", "value"]
    got = sorted((r.offset, r.value.encode()) for r in df.collect())
    assert got == expected
    assert df.rdd.getNumPartitions() >= 3  # fragments coalesced up to 4 KiB, the tail apart


def test_each_action_sees_the_journal_as_of_that_action(spark, broker, client, create_journal):
    """The same DataFrame's count() after more appends counts them (Spark plans a DataFrame's
    partitions once; its tail is read on to the write head when it runs), as Kafka's batch source
    resolves latest per query."""
    create_journal("read/fresh", length=1024)
    expected = fill(client, broker, "read/fresh", batches=3, per_batch=10)  # persisted + live tail
    df = reader(spark, broker, journals="read/fresh").load()
    assert df.count() == len(expected)
    client.append("read/fresh", ndjson(events(5, 1000)))
    assert df.count() == len(expected) + 5
    fill(client, broker, "read/fresh", batches=2, per_batch=7)  # rolls and persists past the plan
    rows = df.collect()
    assert len(rows) == len(expected) + 5 + 14
    assert len({r.offset for r in rows}) == len(rows)  # every message once
    # A SQL view over the same options, queried twice.
    df.createOrReplaceTempView("read_fresh")
    before = spark.sql("SELECT count(*) AS n FROM read_fresh").first().n
    client.append("read/fresh", ndjson(events(2, 2000)))
    assert spark.sql("SELECT count(*) AS n FROM read_fresh").first().n == before + 2


def test_explicit_ending_offsets_stay_exact(spark, broker, client, create_journal):
    create_journal("read/exact", length=1024)
    expected = fill(client, broker, "read/exact", batches=2, per_batch=10)
    end = expected[-1][0] + len(expected[-1][1]) + 1
    df = reader(spark, broker, journals="read/exact", endingOffsets=json.dumps({"read/exact": end})).load()
    assert df.count() == len(expected)
    client.append("read/exact", ndjson(events(5, 1000)))
    assert df.count() == len(expected)


def test_an_empty_journal_counts_its_first_appends(spark, broker, client, create_journal):
    create_journal("read/empty")
    df = reader(spark, broker, journals="read/empty").load()
    assert df.count() == 0
    client.append("read/empty", ndjson(events(4)))
    assert sorted(json.loads(r.value)["id"] for r in df.collect()) == [0, 1, 2, 3]


def test_selector_chooses_journals(spark, broker, client, create_journal):
    for name, team in (("sel/a", "red"), ("sel/b", "red"), ("sel/c", "blue")):
        create_journal(name, labels={"team": team})
        client.append(name, ndjson(events(3)))
    rows = reader(spark, broker, selector="team=red").load().select("journal").distinct().collect()
    assert sorted(r.journal for r in rows) == ["sel/a", "sel/b"]


def test_offset_bounds_return_messages_beginning_in_range(spark, broker, client, create_journal):
    create_journal("read/bounds", length=1024)
    expected = fill(client, broker, "read/bounds", batches=4, per_batch=30)
    offsets = [o for o, _ in expected]
    start, end = offsets[17], offsets[95] + 3  # end falls inside message 95
    df = reader(
        spark,
        broker,
        journals="read/bounds",
        startingOffsets=json.dumps({"read/bounds": start}),
        endingOffsets=json.dumps({"read/bounds": end}),
    ).load()
    got = sorted(r.offset for r in df.collect())
    assert got == offsets[17:96]  # message 95 begins before the end: returned whole
    # A start inside a message skips to the next one; adjacent ranges return each message once.
    mid = offsets[40] + 2
    a = reader(spark, broker, journals="read/bounds", endingOffsets=json.dumps({"read/bounds": mid})).load()
    b = reader(spark, broker, journals="read/bounds", startingOffsets=json.dumps({"read/bounds": mid})).load()
    assert sorted(r.offset for r in a.collect()) + sorted(r.offset for r in b.collect()) == offsets


def test_bad_options_fail_at_planning_naming_the_option(spark, broker, client, create_journal):
    create_journal("read/opts")
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    cases = {
        "startingOffsets": ("startingOffsets", "soon"),
        "maxPartitionBytes": ("maxPartitionBytes", "-1"),
        "bogusOption": ("bogusOption", "1"),
        "framing": ("framing", "xml"),
    }
    for name, (key, value) in cases.items():
        with pytest.raises((PySparkException, Py4JJavaError)) as ei:
            reader(spark, broker, journals="read/opts", **{key: value}).load().collect()
        assert name.lower() in str(ei.value).lower(), name
    with pytest.raises((PySparkException, Py4JJavaError)) as ei:
        reader(spark, broker, journals="read/missing").load().collect()
    assert "read/missing" in str(ei.value)


def test_registrable_by_class(spark, broker, client, create_journal):
    from pyspark_gazette import DefaultSource, GazetteDataSource

    assert DefaultSource is GazetteDataSource and GazetteDataSource.name() == "gazette"
    spark.dataSource.register(GazetteDataSource)
    create_journal("read/byclass")
    client.append("read/byclass", b'{"b":2}\n')
    assert [r.value for r in reader(spark, broker).load("read/byclass").collect()] == ['{"b":2}']


def test_timestamp_column_filters_by_message_time(spark, broker, client, create_journal):
    """includeMetadata's timestamp is each message's UUID clock: a filter on it picks messages by
    when they were published, which startingTimestamp (fragment persist times) cannot."""
    import datetime as dt

    from pyspark_gazette.message import build_uuid, clock_from_unix

    create_journal("read/times")
    producer = bytes.fromhex("010203040506")
    base = 1_800_000_000
    docs = [
        {"_meta": {"uuid": str(build_uuid(producer, clock_from_unix(base + i * 60), 0))}, "id": i} for i in range(10)
    ]
    client.append("read/times", ndjson(docs))
    df = reader(spark, broker, journals="read/times", includeMetadata="true").load()
    assert dict(df.dtypes)["timestamp"] == "timestamp"
    cut = dt.datetime.fromtimestamp(base + 5 * 60, dt.timezone.utc)
    rows = df.where(df.timestamp >= cut).collect()
    assert sorted(json.loads(r.value)["id"] for r in rows) == [5, 6, 7, 8, 9]
    typed = reader(spark, broker, journals="read/times", includeMetadata="true").schema("id LONG, _timestamp TIMESTAMP")
    got = {r.id: r._timestamp for r in typed.load().collect()}
    assert got[3].replace(tzinfo=dt.timezone.utc) == dt.datetime.fromtimestamp(base + 180, dt.timezone.utc)
