"""A fragment file deleted from the store: reported or skipped at once, on every store kind.

The embedded broker persists a journal to a file, S3 (moto), GCS (fake-gcs-server) or Azure
(Azurite) store; one persisted fragment's file is deleted from the store and the broker re-lists
it, so its listing has a hole that no route member and no store holds. Such a hole is lost only
once the fragment after it is older than ``holeAgeThreshold`` (before, it may be an upload still
in flight: tests/spark/test_read_holes_age.py); these reads set it to ``0s``, so the hole is
judged lost at once. Every read whose range touches the hole fails naming the journal and the
offsets (``failOnDataLoss=true``) or returns every other row (``false``); a read whose range
starts after the hole returns its rows. None of them waits for the hole: planning never arms
the wait (testing.arm_settle_wait's marker stays absent). ``broker.timeout`` bounds a wait that
should not happen, so a regression fails here rather than hanging.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from spark_helpers import fill

from pyspark_gazette import testing
from pyspark_gazette.fragments import FragmentRef, FragmentStore

#: A bound for a wait that should not happen (the default, 300 s, per read).
TIMEOUT = "45s"
#: The hole is judged lost whatever the age of the fragment after it.
AGED = {"holeAgeThreshold": "0s"}


@dataclass
class Deleted:
    broker: Any
    client: Any
    journal: str
    expected: list  # (offset, line) of every message appended
    hole: FragmentRef  # the deleted fragment
    options: dict[str, str] = field(default_factory=dict)  # what the driver and executors need
    marker: str = ""

    def outside(self, start: int = 0) -> list[int]:
        return [o for o, _ in self.expected if o >= start and not self.hole.begin <= o < self.hole.end]


def _store(request, tmp_path, kind: str) -> tuple[str, dict, dict]:
    """(store URL, the broker's storage options, the read options) of ``kind``."""
    if kind == "file":
        return "file:///store/", {}, {"store.fileRoot": str(tmp_path / "root")}
    if kind == "s3":
        server, bucket = request.getfixturevalue("s3_server"), request.getfixturevalue("s3_bucket")
        keys = {"store.s3.accessKeyId": "testing", "store.s3.secretAccessKey": "testing"}
        return f"s3://{bucket}/gz/?endpoint={server}&region=us-east-1", {}, keys
    if kind == "gcs":
        endpoint, bucket = request.getfixturevalue("gcs_server"), request.getfixturevalue("gcs_bucket")
        return f"gs://{bucket}/gz/", {"gs.endpoint_url": endpoint}, {"store.gcs.endpoint": endpoint}
    import store_emulators

    endpoint, container = request.getfixturevalue("azurite_server"), request.getfixturevalue("azure_container")
    connection = store_emulators.azurite_connection_string(endpoint)
    return (
        f"azure://{container}/gz/",
        {"azure.connection_string": connection},
        {"store.azure.connectionString": connection},
    )


@pytest.fixture(params=["file", "s3", "gcs", "azure"])
def deleted(request, tmp_path):
    from journalspecs import make_spec
    from pyspark_gazette.broker import EmbeddedBroker
    from pyspark_gazette.client import Change, JournalClient

    kind = request.param
    url, broker_options, read_options = _store(request, tmp_path, kind)
    root = str(tmp_path / "root")
    with (
        EmbeddedBroker(str(tmp_path / "b"), file_root=root, storage_options=broker_options) as broker,
        JournalClient(broker.address) as client,
    ):
        journal = f"shop/orders-{kind}-{uuid.uuid4().hex[:6]}"
        # An hour between store listings: nothing but this test's refresh re-lists the store.
        client.apply([Change(0, upsert=make_spec(journal, store=url, length=1024, refresh_seconds=3600))])
        expected = fill(client, broker, journal, batches=8, per_batch=20)
        hole = _middle(client.list_fragments(journal))
        FragmentStore(url, file_root=root, storage_options=broker_options).delete(hole)
        broker.refresh(journal)
        listed = [(f.spec.begin, f.spec.end) for f in client.list_fragments(journal)]
        assert (hole.begin, hole.end) not in listed and listed[-1][1] == broker_head(client, journal)
        marker = testing.arm_settle_wait(journal)
        try:
            options = {"broker.address": broker.address, "broker.timeout": TIMEOUT, **AGED, **read_options}
            yield Deleted(broker, client, journal, expected, hole, options, marker)
        finally:
            testing.disarm_settle_wait(journal)


def _middle(listed) -> FragmentRef:
    """A persisted fragment after the first whose next fragment is persisted too: deleted, it
    leaves a hole that the age of the fragment after it judges (one before the open spool is
    never judged lost: an upload may still be in flight there, as Gazette's readers see it)."""
    for i in range(1, len(listed) - 1):
        if listed[i].spec.mod_time and listed[i + 1].spec.mod_time:
            return FragmentRef.from_proto(listed[i].spec)
    raise AssertionError(
        f"no persisted fragment between persisted ones in {[(f.spec.begin, f.spec.end) for f in listed]}"
    )


def broker_head(client, journal: str) -> int:
    from pyspark_gazette.client.heads import write_head

    return write_head(client.conns, journal)


def _batch(spark, d: Deleted, **options):
    r = spark.read.format("gazette")
    for k, v in {**d.options, "journals": d.journal, **options}.items():
        r = r.option(k, v)
    return r.load()


def _stream(spark, d: Deleted, tmp_path, **options):
    """An AvailableNow stream of the journal into a memory table: (its exception, its offsets)."""
    r = spark.readStream.format("gazette")
    for k, v in {**d.options, "journals": d.journal, "startingOffsets": "earliest", **options}.items():
        if v is not None:
            r = r.option(k, v)
    name = "deleted_" + uuid.uuid4().hex[:8]
    q = (
        r.load()
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / name))
        .trigger(availableNow=True)
        .start()
    )
    try:
        q.awaitTermination(300)
    except PySparkException:
        pass  # the query's failure: q.exception()
    finally:
        q.stop()
    error = q.exception()
    rows = sorted(r.offset for r in spark.sql(f"SELECT offset FROM {name}").collect()) if error is None else None
    return error, rows


def _names_the_hole(text: str, d: Deleted) -> bool:
    return d.journal in text and f"offsets [{d.hole.begin}, {d.hole.end})" in text


def test_a_deleted_fragment_is_reported_at_once_by_batch_reads(spark, deleted):
    d = deleted
    with pytest.raises((PySparkException, Py4JJavaError)) as ei:
        _batch(spark, d).collect()
    assert _names_the_hole(str(ei.value), d) and "DataLossError" in str(ei.value), str(ei.value)[:2000]
    assert not os.path.exists(d.marker)  # reported without waiting on the hole


def test_a_deleted_fragment_is_skipped_exactly_by_batch_reads(spark, deleted):
    d = deleted
    rows = _batch(spark, d, failOnDataLoss="false").collect()
    assert sorted(r.offset for r in rows) == d.outside()
    # A read that starts after the hole returns its rows, with or without failOnDataLoss.
    after = json.dumps({d.journal: d.hole.end})
    assert sorted(r.offset for r in _batch(spark, d, startingOffsets=after).collect()) == d.outside(d.hole.end)
    assert not os.path.exists(d.marker)  # no read waited on the hole


def test_a_deleted_fragment_fails_or_is_skipped_by_streams(spark, deleted, tmp_path):
    d = deleted
    error, _ = _stream(spark, d, tmp_path)
    assert error is not None and _names_the_hole(str(error), d), error
    error, rows = _stream(spark, d, tmp_path, failOnDataLoss="false")
    assert error is None and rows == d.outside(), error
    after = json.dumps({d.journal: d.hole.end})
    error, rows = _stream(spark, d, tmp_path, startingOffsets=after)
    assert error is None and rows == d.outside(d.hole.end), error
    assert not os.path.exists(d.marker)  # no plan waited on the hole


@pytest.mark.parametrize("deleted", ["file"], indirect=True)
def test_a_stream_starting_at_a_timestamp_after_the_hole_never_waits_for_it(spark, deleted, tmp_path):
    """``startingTimestamp`` past the hole: the stream starts at the first fragment persisted at
    or after it (the fragments' times are set so that is the one right after the hole)."""
    d = deleted
    now = time.time()
    for f in d.client.list_fragments(d.journal):  # before the hole: an hour ago; after it: now
        ref = FragmentRef.from_proto(f.spec)
        if ref.is_persisted:
            t = now - 3600 if ref.end <= d.hole.begin else now
            path = os.path.join(d.options["store.fileRoot"], "store", ref.content_path)
            os.utime(path, (t, t))
    d.broker.refresh(d.journal)
    bound = int((now - 60) * 1000)
    error, rows = _stream(spark, d, tmp_path, startingOffsets=None, startingTimestamp=str(bound))
    assert error is None and rows == d.outside(d.hole.end), error
    assert not os.path.exists(d.marker)  # neither the start nor the batch waited on the hole


@pytest.mark.parametrize("broker", ["gazette"], indirect=True)
def test_a_fragment_deleted_under_real_gazette_is_reported_and_skipped_at_once(
    spark, broker, client, create_journal, tmp_path
):
    """The same on a real Gazette v0.103.0 cluster persisting to a file store: its brokers
    re-list the store every second and drop the deleted fragment from their listings."""
    journal = f"shop/orders-gazette-{uuid.uuid4().hex[:6]}"
    create_journal(journal, length=1024)
    expected = fill(client, broker, journal, batches=8, per_batch=20)
    hole = _middle(client.list_fragments(journal))
    os.unlink(os.path.join(broker.store_root, "store", hole.content_path))
    broker.refresh(journal)  # waits until Gazette's listing changed
    assert (hole.begin, hole.end) not in [(f.spec.begin, f.spec.end) for f in client.list_fragments(journal)]
    marker = testing.arm_settle_wait(journal)
    try:
        options = {
            "broker.address": broker.address,
            "broker.timeout": TIMEOUT,
            "store.fileRoot": broker.store_root,
            **AGED,
        }
        d = Deleted(broker, client, journal, expected, hole, options, marker)
        with pytest.raises((PySparkException, Py4JJavaError)) as ei:
            _batch(spark, d).collect()
        assert _names_the_hole(str(ei.value), d), str(ei.value)[:2000]
        assert sorted(r.offset for r in _batch(spark, d, failOnDataLoss="false").collect()) == d.outside()
        error, rows = _stream(spark, d, tmp_path, failOnDataLoss="false")
        assert error is None and rows == d.outside(), error
        assert not os.path.exists(marker)  # no read waited on the hole
    finally:
        testing.disarm_settle_wait(journal)
