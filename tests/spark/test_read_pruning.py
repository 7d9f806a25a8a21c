"""Pruning of batch reads (spark/read/batch.py, plan.py): filter pushdown, timestamp and mod-time bounds."""

from __future__ import annotations

import os

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from spark_helpers import fill, reader

from pyspark_gazette.fragments import FragmentRef


def test_filter_pushdown_prunes_journals_and_fragments(spark, broker, client, create_journal):
    create_journal("push/a", length=1024, refresh_seconds=3600)
    create_journal("push/b", length=1024, refresh_seconds=3600)
    expected = fill(client, broker, "push/a", batches=6, per_batch=40)
    fill(client, broker, "push/b", batches=3, per_batch=40)
    cutoff = expected[150][0]
    # Remove the files of every fragment the filters exclude: the query can only succeed if
    # they are pruned at planning, before any fragment is opened.
    gone = [FragmentRef.from_proto(f.spec) for f in client.list_fragments("push/b") if f.spec.mod_time]
    gone += [
        FragmentRef.from_proto(f.spec)
        for f in client.list_fragments("push/a")
        if f.spec.mod_time and f.spec.end <= cutoff
    ]
    assert len(gone) >= 4
    for ref in gone:
        os.remove(os.path.join(broker.store_root, "store", ref.content_path))
    query = f"journal = 'push/a' AND offset >= {cutoff}"
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        df = reader(spark, broker, selector="name:prefix=push/", filterPushdown="true").load().where(query)
        assert sorted(r.offset for r in df.collect()) == [o for o, _ in expected if o >= cutoff]
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")
    with pytest.raises((PySparkException, Py4JJavaError)):  # without pushdown the missing files are read
        reader(spark, broker, selector="name:prefix=push/").load().where(query).collect()


def test_timestamp_bounds_use_fragment_mod_times(spark, broker, client, create_journal):
    create_journal("ts/a", length=1024)
    expected = fill(client, broker, "ts/a", batches=5, per_batch=40)
    frags = [FragmentRef.from_proto(f.spec) for f in client.list_fragments("ts/a") if f.spec.mod_time]
    base = 1_800_000_000
    for i, ref in enumerate(frags):  # fragment i persisted at base + 100 * i
        os.utime(os.path.join(broker.store_root, "store", ref.content_path), (base + 100 * i, base + 100 * i))
    broker.refresh("ts/a")
    df = reader(
        spark,
        broker,
        journals="ts/a",
        startingTimestamp=str((base + 100) * 1000),
        endingTimestamp=str((base + 250) * 1000),
    ).load()
    assert sorted(r.offset for r in df.collect()) == [o for o, _ in expected if frags[1].begin <= o < frags[2].end]


def test_mod_time_pushdown_prunes_fragments(spark, broker, client, create_journal):
    create_journal("push/ts", length=1024, refresh_seconds=3600)
    expected = fill(client, broker, "push/ts", batches=5, per_batch=40)
    frags = [FragmentRef.from_proto(f.spec) for f in client.list_fragments("push/ts") if f.spec.mod_time]
    base = 1_800_000_000
    for i, ref in enumerate(frags):
        path = os.path.join(broker.store_root, "store", ref.content_path)
        os.utime(path, (base + 100 * i, base + 100 * i))
    broker.refresh("push/ts")
    # Files of fragments older than the bound are removed: only pruning lets the query succeed.
    for ref in frags[:2]:
        os.remove(os.path.join(broker.store_root, "store", ref.content_path))
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        df = reader(spark, broker, journals="push/ts", includeMetadata="true", filterPushdown="true").load()
        got = df.where(f"mod_time >= timestamp_seconds({base + 200})").collect()
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")
    assert sorted(r.offset for r in got) == [o for o, _ in expected if frags[2].begin <= o < frags[-1].end]
