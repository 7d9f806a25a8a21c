"""Pruning of batch reads (spark/read/batch_scan.py, plan.py): filter pushdown, timestamp and mod-time bounds."""

from __future__ import annotations

import json
import os

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from spark_helpers import fill, reader

from pyspark_gazette.fragments import FragmentRef


@pytest.mark.both_brokers
def test_filter_pushdown_prunes_journals_and_fragments(spark, broker, client, create_journal):
    create_journal("push/a", length=1024)
    create_journal("push/b", length=1024)
    expected = fill(client, broker, "push/a", batches=6, per_batch=40)
    fill(client, broker, "push/b", batches=3, per_batch=40)
    cutoff = expected[150][0]
    # Empty the file of every fragment the filters exclude: the query can only succeed if they
    # are pruned at planning, before any fragment is opened. (Emptied, not removed: Gazette
    # re-lists its stores every refresh_interval and would drop a removed file from its index.)
    gone = [FragmentRef.from_proto(f.spec) for f in client.list_fragments("push/b") if f.spec.mod_time]
    gone += [
        FragmentRef.from_proto(f.spec)
        for f in client.list_fragments("push/a")
        if f.spec.mod_time and f.spec.end <= cutoff
    ]
    assert len(gone) >= 4
    for ref in gone:
        os.truncate(os.path.join(broker.store_root, "store", ref.content_path), 0)
    query = f"journal = 'push/a' AND offset >= {cutoff}"
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        df = reader(spark, broker, selector="name:prefix=push/", filterPushdown="true").load().where(query)
        assert sorted(r.offset for r in df.collect()) == [o for o, _ in expected if o >= cutoff]
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")
    with pytest.raises((PySparkException, Py4JJavaError)):  # without pushdown the emptied files are read
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


def test_bounded_reads_open_only_the_fragments_they_need(broker, client, create_journal):
    """Counted in-process (no Spark): the executor read path over the planned partitions."""
    import datetime as dt

    from pyspark.sql.datasource import GreaterThanOrEqual, LessThanOrEqual

    from pyspark_gazette.spark.options import ReadOptions
    from pyspark_gazette.spark.read.batch_scan import GazetteBatchReader, GazettePushdownBatchReader, read_partition
    from pyspark_gazette.spark.read.segments import OPEN_COUNTER
    from pyspark_gazette.spark.source import untyped_schema

    create_journal("open/a", length=1024, refresh_seconds=3600)
    expected = fill(client, broker, "open/a", batches=6, per_batch=40)
    frags = [FragmentRef.from_proto(f.spec) for f in client.list_fragments("open/a") if f.spec.mod_time]
    assert len(frags) >= 5
    base = 1_800_000_000
    for i, ref in enumerate(frags):  # fragment i persisted at base + 100 * i
        os.utime(os.path.join(broker.store_root, "store", ref.content_path), (base + 100 * i, base + 100 * i))
    broker.refresh("open/a")
    schema = untyped_schema(True, True)

    def read(filters=(), **options):
        o = ReadOptions.parse(
            {
                "broker.address": broker.address,
                "store.fileRoot": broker.store_root,
                "journals": "open/a",
                # The schema has the metadata columns (its `timestamp` is the UUID clock only then).
                "includeMetadata": "true",
                **options,
            }
        )
        r = (GazettePushdownBatchReader if filters else GazetteBatchReader)(o, schema)
        if filters:
            list(r.pushFilters(list(filters)))
        before = (OPEN_COUNTER.fragments, OPEN_COUNTER.broker_reads)
        offsets = sorted(
            x for p in r.partitions() for b in read_partition(p, o, schema) for x in b["offset"].to_pylist()
        )
        return OPEN_COUNTER.fragments - before[0], OPEN_COUNTER.broker_reads - before[1], offsets

    in_frag = [[o for o, _ in expected if f.begin <= o < f.end] for f in frags]
    persisted_end = frags[-1].end
    # Everything persisted: every fragment once.
    assert read(endingOffsets=json.dumps({"open/a": persisted_end}))[:2] == (len(frags), 0)
    # A time window over fragment 2's persist time: fragment 2 alone.
    window = {"startingTimestamp": str((base + 150) * 1000), "endingTimestamp": str((base + 250) * 1000)}
    assert read(**window) == (1, 0, in_frag[2])
    # Offset bounds inside fragments 1 and 3: those two and the one between.
    bounds = {
        "startingOffsets": json.dumps({"open/a": frags[1].begin}),
        "endingOffsets": json.dumps({"open/a": frags[3].end}),
    }
    assert read(**bounds) == (3, 0, in_frag[1] + in_frag[2] + in_frag[3])
    # Pushed filters on the metadata columns: offset, then mod_time.
    pushed = [GreaterThanOrEqual(("offset",), frags[3].begin), LessThanOrEqual(("offset",), frags[3].end - 1)]
    opened, broker_reads, offsets = read(pushed, filterPushdown="true", includeMetadata="true")
    assert (opened, broker_reads) == (1, 0) and offsets == in_frag[3]
    at = dt.datetime.fromtimestamp(base + 400, dt.timezone.utc)
    pushed = [GreaterThanOrEqual(("mod_time",), at), LessThanOrEqual(("mod_time",), at)]
    opened, broker_reads, offsets = read(pushed, filterPushdown="true", includeMetadata="true")
    assert (opened, broker_reads) == (1, 0) and offsets == in_frag[4]


@pytest.mark.both_brokers
def test_a_timestamp_window_is_planned_from_listings_of_its_range(broker, client, create_journal, monkeypatch):
    """A ``startingTimestamp`` read lists only its range (ListFragments' mod-time filters and page
    token: plan.window_snapshot) and plans exactly what a whole listing plans, persist times out
    of offset order included. Counted in-process (no Spark)."""
    from pyspark_gazette.spark.options import ReadOptions
    from pyspark_gazette.spark.read import plan as plan_module

    create_journal("win/a", length=1024, refresh_seconds=1)
    fill(client, broker, "win/a", batches=9, per_batch=40)
    frags = [FragmentRef.from_proto(f.spec) for f in client.list_fragments("win/a") if f.spec.mod_time]
    assert len(frags) >= 8
    base = 1_800_000_000
    times = [base + 100 * i for i in range(len(frags))]
    times[3], times[4] = times[4], times[3]  # fragments 3 and 4 persisted out of offset order
    for ref, t in zip(frags, times, strict=True):
        os.utime(os.path.join(broker.store_root, "store", ref.content_path), (t, t))
    broker.refresh("win/a")
    (info,) = client.list_journals("name=win/a")
    real = plan_module.window_snapshot
    used: list[bool] = []

    def recorded(*args):
        snap = real(*args)
        used.append(snap is not None)
        return snap

    def planned(whole: bool, window: tuple[int | None, int | None]):
        options = {"broker.address": broker.address, "store.fileRoot": broker.store_root, "journals": "win/a"}
        for key, at in zip(("startingTimestamp", "endingTimestamp"), window, strict=True):
            if at is not None:
                options[key] = str((base + at) * 1000)
        monkeypatch.setattr(plan_module, "window_snapshot", (lambda *a: None) if whole else recorded)
        return plan_module.plan(client, [info], ReadOptions.parse(options))

    windows = {  # (startingTimestamp, endingTimestamp) after base, seconds: whether a range is listed
        (150, 250): True,  # fragment 2
        (0, 50): True,  # fragment 0
        (250, 350): True,  # from fragment 3 (persisted at 400) to fragment 4 (at 300)
        (100, 700): True,
        (350, None): True,  # to the write head
        (-100, None): True,  # everything
        (450, 460): False,  # nothing persisted in the window after its start: a whole listing
        (100_000, None): False,  # nothing persisted after it: a whole listing
    }
    for window, ranged in windows.items():
        used.clear()
        assert planned(False, window) == planned(True, window), window
        assert used == [ranged], window
