"""Holes in a journal's fragment listing (client/settle.py): a fragment the store holds and no
broker lists yet (as after a failover) is read from the store at once, by batch and stream
planning; a hole Gazette itself treats as gone (the next fragment persisted more than 6 hours
ago) is data loss at once. And a list of broker addresses: planning, streams and sinks go on
when the first address is dead.

The store-only fragment is made on the embedded broker by moving a persisted fragment's file
aside, re-listing the store (the index drops it) and putting the file back: the store holds it,
the broker does not list it. A fragment whose upload is still in flight (a hole with a young
fragment after it): tests/spark/test_read_holes_age.py. A fragment file deleted from the store:
tests/spark/test_read_deleted_fragment.py.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from spark_helpers import events, fill, ndjson, reader

from pyspark_gazette import testing
from pyspark_gazette.fragments import FragmentRef


def _open_hole(client, broker, journal, *, back: bool = True):
    """Move the second fragment's file aside and re-list: the listing has a hole there. With
    ``back`` the file is put back at once: the store holds it, the broker does not list it."""
    mid = FragmentRef.from_proto(client.list_fragments(journal)[1].spec)
    path = os.path.join(broker.store_root, "store", mid.content_path)
    os.rename(path, path + ".aside")
    broker.refresh(journal)
    assert (mid.begin, mid.end) not in [(f.spec.begin, f.spec.end) for f in client.list_fragments(journal)]
    if back:
        os.rename(path + ".aside", path)
    return mid, path


def test_a_fragment_only_the_store_holds_is_read_from_it_at_once(spark, broker, client, create_journal):
    """Even with ``directReads=false``: no broker serves it yet."""
    journal = f"holes/batch-{uuid.uuid4().hex[:6]}"
    create_journal(journal, length=1024, refresh_seconds=3600)
    expected = fill(client, broker, journal, batches=8, per_batch=20)
    _open_hole(client, broker, journal)
    marker = testing.arm_settle_wait(journal)
    try:
        for direct in ("true", "false"):
            rows = reader(spark, broker, journals=journal, directReads=direct).load().collect()
            assert sorted(r.offset for r in rows) == [o for o, _ in expected], direct  # nothing skipped
        assert not os.path.exists(marker)  # and no wait
    finally:
        testing.disarm_settle_wait(journal)


@pytest.mark.parametrize("fail", [True, False])
def test_a_hole_gazette_would_jump_is_data_loss_at_once(spark, broker, client, create_journal, fail):
    journal = f"holes/gone-{int(fail)}-{uuid.uuid4().hex[:6]}"
    create_journal(journal, length=1024, refresh_seconds=3600)
    expected = fill(client, broker, journal, batches=8, per_batch=20)
    after = FragmentRef.from_proto(client.list_fragments(journal)[2].spec)
    week_ago = time.time() - 7 * 24 * 3600  # persisted long before: Gazette's reader jumps the hole
    os.utime(os.path.join(broker.store_root, "store", after.content_path), (week_ago, week_ago))
    mid, _ = _open_hole(client, broker, journal, back=False)
    marker = testing.arm_settle_wait(journal)
    try:
        r = reader(spark, broker, journals=journal, failOnDataLoss=str(fail).lower())
        if fail:
            with pytest.raises((PySparkException, Py4JJavaError)) as ei:
                r.load().collect()
            assert journal in str(ei.value) and f"[{mid.begin}, {mid.end})" in str(ei.value)
        else:
            rows = r.load().collect()
            assert sorted(x.offset for x in rows) == [o for o, _ in expected if not mid.begin <= o < mid.end]
        assert not os.path.exists(marker)  # reported at once, never waited on
    finally:
        testing.disarm_settle_wait(journal)


def test_a_stream_reads_a_fragment_only_the_store_holds_at_once(spark, broker, client, create_journal, tmp_path):
    journal = f"holes/stream-{uuid.uuid4().hex[:6]}"
    create_journal(journal, length=1024, refresh_seconds=3600)
    expected = fill(client, broker, journal, batches=8, per_batch=20)
    _open_hole(client, broker, journal)
    marker = testing.arm_settle_wait(journal)
    name = "holes_" + uuid.uuid4().hex[:6]
    try:
        df = (
            spark.readStream.format("gazette")
            .option("broker.address", broker.address)
            .option("store.fileRoot", broker.store_root)
            .option("journals", journal)
            .option("startingOffsets", "earliest")
            .load()
        )
        q = (
            df.writeStream.format("memory")
            .queryName(name)
            .option("checkpointLocation", str(tmp_path / name))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(400)
        assert q.exception() is None, q.exception()
        assert not os.path.exists(marker)  # never held at the hole
    finally:
        testing.disarm_settle_wait(journal)
    got = sorted(r.offset for r in spark.sql(f"SELECT offset FROM {name}").collect())
    assert got == [o for o, _ in expected]


def _dead_address() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    return f"http://127.0.0.1:{port}"


def test_a_dead_first_address_is_passed_over_by_batch_stream_and_sink(spark, broker, client, create_journal, tmp_path):
    src, dst = f"boot/src-{uuid.uuid4().hex[:6]}", f"boot/dst-{uuid.uuid4().hex[:6]}"
    create_journal(src)
    create_journal(dst)
    client.append(src, ndjson(events(30)))
    addresses = f"{_dead_address()},{broker.address}"
    rows = reader(spark, broker, journals=src).option("broker.address", addresses).load().collect()
    assert len(rows) == 30
    df = (
        spark.readStream.format("gazette")
        .option("broker.address", addresses)
        .option("store.fileRoot", broker.store_root)
        .option("journals", src)
        .option("startingOffsets", "earliest")
        .load()
    )
    q = (
        df.select("value")
        .writeStream.format("gazette")
        .option("broker.address", addresses)
        .option("journal", dst)
        .option("checkpointLocation", str(tmp_path / "boot"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(120)
    assert q.exception() is None
    assert sorted(client.read_all(dst).splitlines()) == sorted(ndjson(events(30)).splitlines())


@pytest.mark.both_brokers
def test_a_members_own_listing_is_read_past_its_first_page(broker, client, create_journal):
    """Settling asks each route member for its own listing (``do_not_proxy``): every page of it,
    here 2 fragments a page over 6 or 7 fragments (persisted ones and the open spool)."""
    from pyspark_gazette.client.settle import holes, member_listing

    journal = f"holes/pages-{uuid.uuid4().hex[:6]}"
    create_journal(journal, length=1024)
    fill(client, broker, journal, batches=7, per_batch=30)  # an append of 30 events rolls a fragment
    listed = client.list_fragments(journal)
    head = listed[-1].spec.end
    assert len(listed) >= 6
    route = client.conns.route(journal)
    assert route is not None and route.endpoints
    for endpoint in route.endpoints:  # every member has them all: nothing was lost
        own = member_listing(client.conns, journal, endpoint, page_limit=2)
        assert [(f.spec.begin, f.spec.end) for f in own] == [(f.spec.begin, f.spec.end) for f in listed], endpoint
        assert holes(own, head) == []
