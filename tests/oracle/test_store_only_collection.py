"""A Flow collection read from its bucket alone (``store.url`` with ``collection``), against the
broker-planned read of the same journals and offsets, on the embedded broker and on real Gazette.

The Go peer publishes Flow-shaped documents (Gazette's ``message.Publisher``: transactions
committed by ACKs, one never committed, CONTROL documents) into journals named as Flow names a
collection's. Both reads end at the same offsets (each journal's persisted end, as its broker
lists it), so they must return the same rows: read committed, without ACKs and control
documents, with the logical partition column (from the journal names), ``flow_published_at`` and
``_meta/op``. The store read names an unreachable ``broker.address``.
"""

from __future__ import annotations

import json
import socket
import time
import uuid

import peer
from test_flow_collection_oracle import flow_journal, rows_of


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def persisted_ends(address: str, journals: list[str], timeout: float = 60) -> dict[str, int]:
    """Each journal's contiguous persisted end, once every journal has one (its broker's listing)."""
    from pyspark_gazette.client import ClientConfig, JournalClient

    deadline = time.monotonic() + timeout
    with JournalClient(ClientConfig(address)) as c:
        while True:
            ends = {}
            for j in journals:
                end = None
                for f in c.list_fragments(j):
                    if not f.spec.mod_time or (end is not None and f.spec.begin > end):
                        break
                    end = f.spec.end
                if end:
                    ends[j] = end
            if len(ends) == len(journals):
                return ends
            assert time.monotonic() < deadline, f"no persisted fragment yet in {set(journals) - set(ends)}"
            time.sleep(0.2)  # persistence is the brokers' own timer: nothing to wait on from here


def test_a_collection_from_its_bucket_equals_the_broker_read(spark, target):
    collection = f"acme/{target.kind}/store-{int(time.time() * 1000) % 10**8}/orders"
    journals = [
        flow_journal(target, collection, "g1", "eu"),
        flow_journal(target, collection, "g1", "us", "00", key_end="7fffffff"),
        flow_journal(target, collection, "g1", "us", "80000000"),
    ]
    # Outside the collection's name prefix: never read.
    decoy = flow_journal(
        target, collection, "g1", "eu", name=collection.rsplit("/", 1)[0] + "/elsewhere/region=eu/pivot=00"
    )
    peer.flow_publish(target.address, journals + [decoy], seed=11, rounds=120)
    # A second publish rolls the spools the first filled: their fragments are persisted.
    peer.flow_publish(target.address, journals + [decoy], seed=12, rounds=10)
    ends = persisted_ends(target.address, journals)
    offsets = json.dumps(ends)

    def read(**options):
        r = spark.read.format("gazette").option("store.fileRoot", target.store_root).option("collection", collection)
        r = r.option("endingOffsets", offsets)
        for k, v in options.items():
            r = r.option(k, v)
        return r

    via_broker = read(**{"broker.address": target.address}).load()
    from_store = read(**{"store.url": "file:///store/", "broker.address": f"http://127.0.0.1:{_closed_port()}"}).load()
    assert from_store.schema.simpleString() == via_broker.schema.simpleString(), (from_store.schema, via_broker.schema)
    assert from_store.columns == ["journal", "offset", "value", "region", "flow_published_at", "_meta/op"]
    got = rows_of(from_store)
    assert len(got) > 10 and got == rows_of(via_broker)
    assert {r[0] for r in got} <= set(journals)

    # Typed, with inferSchema, and with the control documents.
    typed = "id LONG, n LONG, region STRING, `_meta/op` STRING"
    a = read(**{"store.url": "file:///store/"}).schema(typed).load()
    b = read(**{"broker.address": target.address}).schema(typed).load()
    assert sorted(a.collect()) == sorted(b.collect())
    a = read(**{"store.url": "file:///store/", "inferSchema": "true"}).load()
    b = read(**{"broker.address": target.address, "inferSchema": "true"}).load()
    assert a.schema.simpleString() == b.schema.simpleString() and sorted(map(str, a.collect())) == sorted(
        map(str, b.collect())
    )
    control = {"collection.controlDocuments": "true"}
    a = read(**{"store.url": "file:///store/", **control}).load()
    b = read(**{"broker.address": target.address, **control}).load()
    assert rows_of(a) == rows_of(b) and len(rows_of(a)) > len(got)


def test_a_read_committed_stream_of_a_collection_from_its_bucket(spark, target, tmp_path):
    """A collection's stream from the store (read committed, its producer states in the offsets)
    returns what a batch read of the store returns up to the stream's last offsets."""
    from pyspark_gazette.spark.read.committed import offset_of

    collection = f"acme/{target.kind}/store-stream-{int(time.time() * 1000) % 10**8}/orders"
    journals = [flow_journal(target, collection, "g1", "eu"), flow_journal(target, collection, "g1", "us")]
    peer.flow_publish(target.address, journals, seed=21, rounds=120)
    peer.flow_publish(target.address, journals, seed=22, rounds=10)
    persisted_ends(target.address, journals)
    name = "store_stream_" + uuid.uuid4().hex[:8]
    q = (
        spark.readStream.format("gazette")
        .option("store.url", "file:///store/")
        .option("store.fileRoot", target.store_root)
        .option("collection", collection)
        .option("startingOffsets", "earliest")
        .option("maxBytesPerTrigger", "3k")
        .load()
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    assert q.exception() is None, q.exception()
    assert len(q.recentProgress) > 1  # several micro-batches: states carried across them
    end = json.loads(q.recentProgress[-1]["sources"][0]["endOffset"])
    ends = {j: offset_of(e) for j, e in end.items()}
    batch = (
        spark.read.format("gazette")
        .option("store.url", "file:///store/")
        .option("store.fileRoot", target.store_root)
        .option("collection", collection)
        .option("endingOffsets", json.dumps(ends))
        .load()
    )
    streamed = rows_of(spark.sql(f"SELECT * FROM {name}"))
    assert len(streamed) > 10 and streamed == rows_of(batch)
