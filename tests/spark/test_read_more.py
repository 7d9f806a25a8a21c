"""More batch-read behaviour: framings, metadata, data loss, read-committed, read paths, pruning."""

from __future__ import annotations

import json
import os

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from spark_helpers import fill, ndjson, reader

from pyspark_gazette.fragments import FragmentRef
from pyspark_gazette.protocol import pb


@pytest.mark.parametrize(
    "content_type,payloads",
    [
        ("text/plain", [b"plain line %d" % i for i in range(50)]),
        ("text/csv", [b'%d,"x, %d",y' % (i, i) for i in range(50)]),
        ("application/x-protobuf-fixed", [bytes([i]) * (i + 1) + b"\n\x00" for i in range(50)]),
    ],
)
def test_framings_from_the_content_type_label(spark, broker, client, create_journal, content_type, payloads):
    from pyspark_gazette.message import framing_for_content_type

    name = "fr/" + content_type.split("/")[1]
    create_journal(name, length=1024, content_type=content_type)
    framing = framing_for_content_type(content_type)
    for i in range(0, 50, 10):
        client.append(name, b"".join(framing.encode(p) for p in payloads[i : i + 10]))
    assert broker.wait_persisted(30)
    df = reader(spark, broker, journals=name).load()
    rows = sorted(df.collect(), key=lambda r: r.offset)
    got = [r.value if isinstance(r.value, (bytes, bytearray)) else r.value.encode() for r in rows]
    assert [bytes(v) for v in got] == payloads
    is_binary = content_type.endswith("protobuf-fixed")
    assert dict(df.dtypes)["value"] == ("binary" if is_binary else "string")


def test_metadata_columns(spark, broker, client, create_journal):
    from pyspark_gazette.message import Flags, TransactionalPublisher, set_uuid_at

    create_journal("meta/a", length=1024)
    pub = TransactionalPublisher()
    docs = []
    for i in range(3):
        doc = {"i": i, "pad": "x" * 400}  # > 1 KiB in all: the next append rolls the fragment
        set_uuid_at(doc, pub.committed())
        docs.append(doc)
    client.append("meta/a", ndjson(docs))
    client.append("meta/a", ndjson([{"i": 99}]))  # no UUID: nulls; this append rolls the first
    assert broker.wait_persisted(30)
    rows = sorted(
        reader(spark, broker, journals="meta/a", includeMetadata="true").load().collect(), key=lambda r: r.offset
    )
    assert [r.producer for r in rows[:3]] == [pub.producer.hex()] * 3
    assert [r.flags for r in rows[:3]] == [Flags.OUTSIDE_TXN] * 3
    clocks = [r.clock for r in rows[:3]]
    assert clocks == sorted(clocks) and len(set(clocks)) == 3
    assert rows[0].uuid == docs[0]["_meta"]["uuid"]
    assert rows[3].uuid is None and rows[3].clock is None
    assert rows[0].mod_time is not None and rows[3].mod_time is None  # persisted vs live tail


def _delete_first_fragment(client, broker, journal):
    first = client.list_fragments(journal)[0].spec
    ref = FragmentRef.from_proto(first)
    os.remove(os.path.join(broker.store_root, "store", ref.content_path))
    return ref


def test_deleted_fragment_with_fail_on_data_loss(spark, broker, client, create_journal):
    create_journal("loss/a", length=1024, refresh_seconds=3600)
    fill(client, broker, "loss/a", batches=4, per_batch=20)
    ref = _delete_first_fragment(client, broker, "loss/a")  # the broker still lists it
    with pytest.raises((PySparkException, Py4JJavaError)) as ei:
        reader(spark, broker, journals="loss/a").load().collect()
    text = str(ei.value)
    assert "loss/a" in text and ref.content_name in text and f"[{ref.begin}, {ref.end})" in text


def test_deleted_fragment_skipped_without_fail_on_data_loss(spark, broker, client, create_journal):
    create_journal("loss/b", length=1024, refresh_seconds=3600)
    expected = fill(client, broker, "loss/b", batches=4, per_batch=20)
    ref = _delete_first_fragment(client, broker, "loss/b")
    rows = reader(spark, broker, journals="loss/b", failOnDataLoss="false").load().collect()
    assert sorted(r.offset for r in rows) == [o for o, _ in expected if o >= ref.end]


def test_pruned_start_is_data_loss_at_planning(spark, broker, client, create_journal):
    create_journal("loss/c", length=1024)
    fill(client, broker, "loss/c", batches=3, per_batch=20)
    ref = _delete_first_fragment(client, broker, "loss/c")
    broker.refresh("loss/c")  # now the index no longer has it: the journal starts later
    start = json.dumps({"loss/c": 0})
    with pytest.raises((PySparkException, Py4JJavaError)) as ei:
        reader(spark, broker, journals="loss/c", startingOffsets=start).load().collect()
    assert "loss/c" in str(ei.value) and f"[0, {ref.end})" in str(ei.value)
    rows = reader(spark, broker, journals="loss/c", startingOffsets=start, failOnDataLoss="false").load().collect()
    assert min(r.offset for r in rows) == ref.end


def test_read_committed_hides_uncommitted_rolled_back_duplicates_and_acks(spark, broker, client, create_journal):
    from pyspark_gazette.message import Flags, TransactionalPublisher, build_uuid, set_uuid_at

    create_journal("rc/a", length=1024)
    a, b = TransactionalPublisher(), TransactionalPublisher()

    def doc(value, u):
        d = {"v": value}
        set_uuid_at(d, u)
        return d

    committed_a = [doc(f"a{i}", a.uncommitted()) for i in range(3)]
    pending_b = [doc(f"b{i}", b.uncommitted()) for i in range(2)]  # never acknowledged
    ack_a = doc("ack", a.ack())
    dup = dict(committed_a[0])  # a re-sent copy after the ACK: a duplicate
    plain = {"v": "outside"}  # no UUID: always committed
    late = doc("late-a", a.uncommitted())
    rollback = doc("rb", build_uuid(a.producer, a.clock - 160 * 100, Flags.ACK_TXN))  # an older ACK: rolls back late
    for part in ([*committed_a[:2]], [*pending_b, committed_a[2]], [ack_a, dup], [plain, late], [rollback]):
        client.append("rc/a", ndjson(part))  # each append rolls the fragment before it
    assert broker.wait_persisted(30)
    plain_rows = reader(spark, broker, journals="rc/a").load().count()
    rows = reader(spark, broker, journals="rc/a", readCommitted="true").load().collect()
    values = sorted(json.loads(r.value)["v"] for r in rows)
    assert values == ["a0", "a1", "a2", "outside"]
    assert plain_rows == 10


@pytest.mark.parametrize("opts", [{"directReads": "false"}, {"signedUrls": "true"}])
def test_broker_only_and_signed_url_reads_agree(spark, broker, client, create_journal, opts):
    create_journal("paths/a", length=1024, codec=pb.GZIP)
    expected = fill(client, broker, "paths/a", batches=5, per_batch=25)
    rows = reader(spark, broker, journals="paths/a", **opts).load().collect()
    assert sorted((r.offset, r.value.encode()) for r in rows) == expected


def test_direct_reads_from_s3_on_moto(spark, tmp_path, s3_server, s3_bucket):
    from journalspecs import make_spec
    from pyspark_gazette.broker import EmbeddedBroker
    from pyspark_gazette.client import Change, JournalClient

    store = f"s3://{s3_bucket}/gz/?endpoint={s3_server}&region=us-east-1"
    with EmbeddedBroker(str(tmp_path / "b")) as broker, JournalClient(broker.address) as client:
        client.apply([Change(0, upsert=make_spec("s3/a", store=store, length=1024))])
        broker.store_root = str(tmp_path)
        expected = fill(client, broker, "s3/a", batches=4, per_batch=25)
        df = (
            spark.read.format("gazette")
            .option("broker.address", broker.address)
            .option("store.s3.endpoint", s3_server)
            .option("store.s3.accessKeyId", "testing")
            .option("store.s3.secretAccessKey", "testing")
            .load("s3/a")
        )
        assert sorted((r.offset, r.value.encode()) for r in df.collect()) == expected
        assert "testing" not in df._jdf.queryExecution().toString()


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


def test_user_schema_of_untyped_columns_reads_raw(spark, broker, client, create_journal):
    create_journal("subset/a", length=1024)
    expected = fill(client, broker, "subset/a", batches=3, per_batch=20)
    df = reader(spark, broker, journals="subset/a").schema("value STRING").load()
    assert df.columns == ["value"]
    assert sorted(r.value for r in df.collect()) == sorted(line.decode() for _, line in expected)
    df = reader(spark, broker, journals="subset/a").schema("offset LONG, value BINARY").load()
    assert df.columns == ["offset", "value"]
    assert sorted((r.offset, bytes(r.value)) for r in df.collect()) == expected


def test_bounded_reads_open_only_the_fragments_they_need(broker, client, create_journal):
    """Counted in-process (no Spark): the executor read path over the planned partitions."""
    import datetime as dt

    from pyspark.sql.datasource import GreaterThanOrEqual, LessThanOrEqual

    from pyspark_gazette.spark.batch import GazetteBatchReader, GazettePushdownBatchReader, read_partition
    from pyspark_gazette.spark.options import ReadOptions
    from pyspark_gazette.spark.read import OPEN_COUNTER
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
            {"broker.address": broker.address, "store.fileRoot": broker.store_root, "journals": "open/a", **options}
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
