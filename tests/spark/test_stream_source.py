"""spark.readStream.format("gazette"): micro-batches over journals on a local[2] Spark."""

from __future__ import annotations

import json
import os
import uuid

import pytest
from spark_helpers import events, fill, ndjson

from pyspark_gazette.fragments import FragmentRef
from pyspark_gazette.spark.read.committed import offset_of


def stream(spark, broker, **options):
    r = spark.readStream.format("gazette").option("broker.address", broker.address)
    r = r.option("store.fileRoot", broker.store_root)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def run_available_now(df, tmp_path, name=None):
    name = name or "q" + uuid.uuid4().hex[:8]
    q = (
        df.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / ("ckpt-" + name)))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    assert q.exception() is None, q.exception()
    return name, q


@pytest.mark.both_brokers
def test_available_now_reads_the_backlog_through_a_transformation(spark, broker, client, create_journal, tmp_path):
    create_journal("st/a", length=1024)
    expected = fill(client, broker, "st/a", batches=5, per_batch=40)
    df = stream(spark, broker, journals="st/a", startingOffsets="earliest")
    out = df.selectExpr("offset", "get_json_object(value, '$.id') AS id")
    name, _ = run_available_now(out, tmp_path)
    got = spark.sql(f"SELECT offset, id FROM {name}").collect()
    assert sorted(r.offset for r in got) == [o for o, _ in expected]
    assert sorted(int(r.id) for r in got) == list(range(200))


def test_latest_is_the_default_and_processing_time_picks_up_new_appends(
    spark, broker, client, create_journal, tmp_path
):
    create_journal("st/b")
    client.append("st/b", ndjson(events(10)))  # before the query: not read (startingOffsets=latest)
    df = stream(spark, broker, journals="st/b")
    q = (
        df.writeStream.format("memory")
        .queryName("st_b")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        q.processAllAvailable()
        client.append("st/b", ndjson(events(7, 100)))
        q.processAllAvailable()
        client.append("st/b", ndjson(events(3, 200)))
        q.processAllAvailable()
    finally:
        q.stop()
    ids = sorted(json.loads(r.value)["id"] for r in spark.sql("SELECT value FROM st_b").collect())
    assert ids == list(range(100, 107)) + list(range(200, 203))


@pytest.mark.both_brokers
def test_max_bytes_per_trigger_limits_each_batch(spark, broker, client, create_journal, tmp_path):
    create_journal("st/c", length=1024)
    create_journal("st/small", length=1024)
    expected = fill(client, broker, "st/c", batches=6, per_batch=40)
    small = fill(client, broker, "st/small", batches=1, per_batch=3)
    total = expected[-1][0] + len(expected[-1][1]) + 1
    limit = 2048
    df = stream(spark, broker, selector="name:prefix=st/", startingOffsets="earliest", maxBytesPerTrigger=str(limit))
    name, q = run_available_now(df, tmp_path)
    progress = [p for p in q.recentProgress if p["numInputRows"] > 0]
    assert len(progress) >= total // limit  # the backlog took several micro-batches
    for p in progress:
        (source,) = p["sources"]
        start = (json.loads(source["startOffset"]) if source["startOffset"] else None) or {}
        end = json.loads(source["endOffset"])
        assert sum(offset_of(end[j]) - offset_of(start.get(j, 0)) for j in end) <= limit
    rows = spark.sql(f"SELECT journal, offset FROM {name}").collect()
    assert sorted(r.offset for r in rows if r.journal == "st/c") == [o for o, _ in expected]
    assert sorted(r.offset for r in rows if r.journal == "st/small") == [o for o, _ in small]
    # The small journal was served in the first batch, not starved by the big one.
    first_end = json.loads(progress[0]["sources"][0]["endOffset"])
    assert offset_of(first_end["st/small"]) == small[-1][0] + len(small[-1][1]) + 1


@pytest.mark.both_brokers
def test_new_journals_matching_the_selector_are_read_from_their_start(spark, broker, client, create_journal, tmp_path):
    create_journal("new/a")
    client.append("new/a", ndjson(events(2)))
    df = stream(spark, broker, selector="name:prefix=new/", startingOffsets="earliest")
    q = df.writeStream.format("memory").queryName("new_j").option("checkpointLocation", str(tmp_path / "c")).start()
    try:
        q.processAllAvailable()
        create_journal("new/b")
        client.append("new/b", ndjson(events(4)))
        q.processAllAvailable()
    finally:
        q.stop()
    rows = spark.sql("SELECT journal FROM new_j").collect()
    assert sorted(r.journal for r in rows) == ["new/a"] * 2 + ["new/b"] * 4


@pytest.mark.parametrize("fail", [True, False])
def test_deleted_content_obeys_fail_on_data_loss(spark, broker, client, create_journal, tmp_path, fail):
    journal = f"loss/s{int(fail)}"
    create_journal(journal, length=1024, refresh_seconds=3600)
    expected = fill(client, broker, journal, batches=4, per_batch=40)
    first = FragmentRef.from_proto(client.list_fragments(journal)[0].spec)
    os.remove(os.path.join(broker.store_root, "store", first.content_path))
    df = stream(spark, broker, journals=journal, startingOffsets="earliest", failOnDataLoss=str(fail).lower())
    name = "loss" + str(int(fail))
    q = (
        df.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / name))
        .trigger(availableNow=True)
        .start()
    )
    if fail:
        with pytest.raises(Exception) as ei:
            q.awaitTermination()
        assert journal in str(ei.value) and first.content_name in str(ei.value)
    else:
        q.awaitTermination()
        got = sorted(r.offset for r in spark.sql(f"SELECT offset FROM {name}").collect())
        assert got == [o for o, _ in expected if o >= first.end]


def test_the_query_recovers_from_a_broker_restart(spark, tmp_path):
    import socket

    from journalspecs import make_spec
    from pyspark_gazette.broker import EmbeddedBroker
    from pyspark_gazette.client import Change, ClientConfig, JournalClient

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = str(tmp_path / "store")
    kwargs = dict(port=port, file_root=store)
    broker = EmbeddedBroker(str(tmp_path / "b"), **kwargs).start()
    broker.store_root = store
    try:
        with JournalClient(ClientConfig(broker.address, file_root=store)) as client:
            client.apply([Change(0, upsert=make_spec("restart/s"))])
            client.append("restart/s", ndjson(events(5)))
            df = stream(spark, broker, journals="restart/s", startingOffsets="earliest")
            q = (
                df.writeStream.format("memory")
                .queryName("rs")
                .option("checkpointLocation", str(tmp_path / "c"))
                .start()
            )
            try:
                q.processAllAvailable()
                broker.stop()
                broker = EmbeddedBroker(str(tmp_path / "b"), **kwargs).start()
                broker.store_root = store
                client.append("restart/s", ndjson(events(5, 5)))
                q.processAllAvailable()
            finally:
                q.stop()
        ids = sorted(json.loads(r.value)["id"] for r in spark.sql("SELECT value FROM rs").collect())
        assert ids == list(range(10))
    finally:
        broker.stop()


def test_min_bytes_per_trigger_without_max_trigger_delay_waits(spark, broker, client, create_journal, tmp_path):
    """minBytesPerTrigger alone: less than the minimum waiting holds the micro-batch back (the
    default maxTriggerDelay of 15m applies) instead of failing with a TypeError ('15m' vs a float)."""
    create_journal("st/min")
    client.append("st/min", ndjson(events(3)))
    df = stream(spark, broker, journals="st/min", startingOffsets="earliest", minBytesPerTrigger="1m")
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "0")
    try:
        q = (
            df.writeStream.format("memory")
            .queryName("st_min")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(processingTime="50 milliseconds")
            .start()
        )
        try:
            # Wait (for termination, which a failure is) until several triggers have run.
            for _ in range(1200):
                if q.awaitTermination(0.1) or len(q.recentProgress) >= 3:
                    break
            assert q.exception() is None, q.exception()
            assert len(q.recentProgress) >= 3
            assert sum(p["numInputRows"] for p in q.recentProgress) == 0
        finally:
            q.stop()
    finally:
        spark.conf.unset("spark.sql.streaming.noDataProgressEventInterval")
