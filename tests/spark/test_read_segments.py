"""Batch reads of segments (spark/read/segments.py): read paths (store, broker, signed URLs, S3), data loss, read-committed."""

from __future__ import annotations

import json
import os

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from spark_helpers import fill, ndjson, reader

from pyspark_gazette.fragments import FragmentRef
from pyspark_gazette.protocol import pb


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
