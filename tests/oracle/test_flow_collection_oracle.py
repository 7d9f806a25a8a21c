"""Estuary Flow collections read as Flow reads them, against Gazette's own code.

The Go peer publishes Flow-shaped documents with Gazette's ``message.Publisher`` (UUIDs at
``/_meta/uuid``, transactions committed by ACK documents, a transaction never committed) plus
Flow's CONTROL-flag documents (``_meta/backfillBegin`` / ``backfillComplete``, UUIDs built by
Gazette's ``BuildUUID`` with flag 0x4) into journals named and labelled as Flow names and labels
a collection's journals: two logical partitions (``region``) of which one is split in two key
ranges, next to decoys (another collection under the same name prefix, and this collection's
label on a journal outside its prefix). Gazette's ``ReadCommittedIter`` over the same journals,
less ACKs and CONTROL documents, is the oracle of what a ``collection`` read returns.
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid

import peer
import pytest

from pyspark_gazette.flow.labels import encode_value
from pyspark_gazette.message.uuids import clock_to_micros, get_clock

ACK_TXN, CONTROL = 0x2, 0x4


def flow_journal(target, collection: str, generation: str, region: str, pivot: str = "00", **extra) -> str:
    """Create one journal of ``collection`` as Flow names and labels it."""
    name = f"{collection}/{generation}/region={encode_value(region)}/pivot={pivot}"
    labels = {
        "estuary.dev/collection": extra.pop("label", collection),
        "estuary.dev/field/region": encode_value(region),
        "estuary.dev/key-begin": pivot if pivot != "00" else "00000000",
        "estuary.dev/key-end": extra.pop("key_end", "ffffffff"),
        "app.gazette.dev/managed-by": "estuary.dev/flow",
    }
    name = extra.pop("name", name)
    target.create(name, content_type="application/x-ndjson", length=2048, labels=labels, **extra)
    return name


def collection_fixture(target, tag: str, seed: int):
    collection = f"acme/{target.kind}/{tag}/orders"
    journals = [
        flow_journal(target, collection, "g1", "eu"),
        flow_journal(target, collection, "g1", "us", "00", key_end="7fffffff"),
        flow_journal(target, collection, "g1", "us", "80000000"),  # the split's second half
    ]
    # Decoys: another collection's journal under this one's name prefix, and this collection's
    # label on a journal outside its name prefix. Neither may be read.
    decoys = [
        flow_journal(target, collection, "g1", "ap", label=collection + "-v2"),
        flow_journal(target, collection, "g1", "eu", name=f"acme/{target.kind}/{tag}/elsewhere/region=eu/pivot=00"),
    ]
    peer.flow_publish(target.address, journals + decoys, seed=seed, rounds=70)
    return collection, journals


def oracle(target, journals: list[str], *, control: bool = False) -> list[dict]:
    """Gazette's ReadCommittedIter over the journals, less ACKs (and CONTROL documents)."""
    out = []
    for line in peer.read_committed(target.address, journals):
        if line["flags"] & ACK_TXN or (line["flags"] & CONTROL and not control):
            continue
        out.append(line)
    return sorted(out, key=lambda x: (x["journal"], x["offset"]))


def published_at(u: str) -> dt.datetime:
    micros = clock_to_micros(get_clock(uuid.UUID(u)))
    return dt.datetime.fromtimestamp(micros / 1e6, dt.timezone.utc)


def rows_of(df) -> list[tuple]:
    return sorted(
        (
            r.journal,
            r.offset,
            json.dumps(json.loads(r.value), sort_keys=True),
            r.region,
            r["_meta/op"],
            r.flow_published_at.astimezone(dt.timezone.utc),
        )
        for r in df.collect()
    )


def want_rows(lines: list[dict]) -> list[tuple]:
    return sorted(
        (
            x["journal"],
            x["offset"],
            json.dumps(x["doc"], sort_keys=True),
            x["journal"].split("region=")[1].split("/")[0],
            x["doc"]["_meta"].get("op"),
            published_at(x["uuid"]),
        )
        for x in lines
    )


def collection_reader(spark, target, collection: str, **options):
    r = spark.read.format("gazette").option("broker.address", target.address)
    r = r.option("store.fileRoot", target.store_root).option("collection", collection)
    for k, v in options.items():
        r = r.option(k, v)
    return r


def test_batch_read_of_a_collection_equals_gazettes_read_committed(spark, target):
    collection, journals = collection_fixture(target, "batch", seed=5)
    lines = oracle(target, journals)
    assert len(lines) > 30 and {x["journal"] for x in lines} == set(journals)
    df = collection_reader(spark, target, collection).load()
    assert df.columns == ["journal", "offset", "value", "region", "flow_published_at", "_meta/op"]
    assert rows_of(df) == want_rows(lines)

    # The control documents, on request: one backfillBegin and one backfillComplete per journal.
    with_control = oracle(target, journals, control=True)
    df = collection_reader(spark, target, collection, **{"collection.controlDocuments": "true"}).load()
    assert rows_of(df) == want_rows(with_control)
    control = [
        json.loads(r.value)["_meta"]
        for r in df.collect()
        if "backfillBegin" in r.value or "backfillComplete" in r.value
    ]
    assert sorted(k for m in control for k in m if k.startswith("backfill")) == sorted(
        ["backfillBegin"] * 3 + ["backfillComplete"] * 3
    )


def test_a_typed_read_types_partitions_and_documents(spark, target):
    collection, journals = collection_fixture(target, "typed", seed=6)
    lines = oracle(target, journals)
    df = collection_reader(spark, target, collection).schema("id LONG, n LONG, region STRING, `_meta/op` STRING").load()
    got = sorted((r.n, r.id, r.region, r["_meta/op"]) for r in df.collect())
    want = sorted((x["doc"]["n"], x["doc"]["id"], x["doc"]["region"], x["doc"]["_meta"]["op"]) for x in lines)
    assert got == want

    # inferSchema with collection: the documents' schema (no ACK or control document's fields),
    # then the Flow columns the documents do not have (region is a document field already).
    inferred = collection_reader(spark, target, collection, inferSchema="true").load()
    assert inferred.columns == ["_meta", "id", "n", "region", "flow_published_at", "_meta/op"]
    assert inferred.schema["_meta"].dataType.fieldNames() == ["op", "uuid"]
    assert (dict(inferred.dtypes)["n"], dict(inferred.dtypes)["flow_published_at"]) == ("bigint", "timestamp")
    assert sorted((r.n, r.id, r.region, r["_meta/op"]) for r in inferred.collect()) == want


def test_partition_filters_prune_journals_before_any_read(spark, target):
    from pyspark.sql.datasource import EqualTo

    from pyspark_gazette.spark.options import ReadOptions
    from pyspark_gazette.spark.read.batch_scan import FlowPushdownBatchReader
    from pyspark_gazette.spark.read.plan import GazettePartition

    collection, journals = collection_fixture(target, "prune", seed=7)
    opts = ReadOptions.parse(
        {
            "broker.address": target.address,
            "store.fileRoot": target.store_root,
            "collection": collection,
            "filterPushdown": "true",
        },
        env={},
    )
    from pyspark_gazette.spark.source import _collection_schema

    schema = _collection_schema(opts)
    reader = FlowPushdownBatchReader(opts, schema)
    assert list(reader.pushFilters([EqualTo(("region",), "us")])) == [EqualTo(("region",), "us")]
    planned = set()
    for part in reader.partitions():
        parts = getattr(part, "members", None) or [part]
        planned |= {p.journal for p in parts if isinstance(p, GazettePartition)}
    assert planned == {j for j in journals if "region=us" in j}

    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        df = collection_reader(spark, target, collection, filterPushdown="true").load().where("region = 'us'")
        assert rows_of(df) == want_rows([x for x in oracle(target, journals) if "region=us" in x["journal"]])
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")


def test_stream_of_a_collection_with_a_partition_selector_and_a_split_mid_stream(spark, target, tmp_path):
    collection, journals = collection_fixture(target, "stream", seed=8)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def run():
        r = spark.readStream.format("gazette").option("broker.address", target.address)
        r = r.option("store.fileRoot", target.store_root).option("collection", collection)
        r = r.option("collection.partitions", json.dumps({"include": {"region": ["us"]}}))
        r = r.option("startingOffsets", "earliest").option("maxBytesPerTrigger", "4k")

        def sink(batch, batch_id):
            batch.selectExpr(
                "journal", "offset", "value", "region", "`_meta/op` as op", "flow_published_at"
            ).write.mode("overwrite").parquet(str(out / str(batch_id)))

        q = r.load().writeStream.foreachBatch(sink).option("checkpointLocation", str(ckpt))
        q = q.trigger(availableNow=True).start()
        q.awaitTermination()

    def got():
        df = spark.read.parquet(str(out / "*"))
        return sorted(
            (
                r.journal,
                r.offset,
                json.dumps(json.loads(r.value), sort_keys=True),
                r.region,
                r.op,
                r.flow_published_at.astimezone(dt.timezone.utc),
            )
            for r in df.collect()
        )

    run()
    us = [j for j in journals if "region=us" in j]
    assert got() == want_rows(oracle(target, us))
    # Flow splits the eu partition mid-stream: a new journal of the collection appears (and eu
    # stays excluded), and another us journal is added by a split of its own.
    added = flow_journal(target, collection, "g1", "us", "c0000000")
    peer.flow_publish(target.address, [added], seed=9, rounds=20)
    run()
    assert got() == want_rows(oracle(target, [*us, added]))


def stream_to_json(spark, target, collection, out, ckpt, **options):
    """An availableNow stream of ``collection`` from the start, each micro-batch's journal,
    offset and value written as JSON under ``out/<batch id>``."""
    r = spark.readStream.format("gazette").option("broker.address", target.address)
    r = r.option("store.fileRoot", target.store_root).option("collection", collection)
    r = r.option("startingOffsets", "earliest")
    for k, v in options.items():
        r = r.option(k, v)

    def sink(batch, batch_id):
        batch.select("journal", "offset", "value").write.mode("overwrite").json(str(out / str(batch_id)))

    q = r.load().writeStream.foreachBatch(sink).option("checkpointLocation", str(ckpt))
    q.trigger(availableNow=True).start().awaitTermination()


def streamed_json(out):
    """What :func:`stream_to_json` wrote: sorted (journal, offset, canonical document JSON)."""
    rows = [json.loads(line) for f in sorted(out.glob("*/part-*.json")) for line in f.read_text().splitlines()]
    return sorted((r["journal"], r["offset"], json.dumps(json.loads(r["value"]), sort_keys=True)) for r in rows)


def test_a_journal_deleted_and_recreated_mid_stream(spark, target, tmp_path):
    """Rule: a journal whose write head is below the stream's offset in it was deleted and
    re-created. The query fails saying so; with failOnDataLoss=false it reads the new journal from
    its start. (Re-created on another store, as its old fragments would otherwise restore its
    old write head.)"""
    from pyspark_gazette.client import Change, ClientConfig, JournalClient

    collection = f"acme/{target.kind}/recreated/orders"
    journal = flow_journal(target, collection, "g1", "eu")
    peer.flow_publish(target.address, [journal], seed=10, rounds=60)
    first = oracle(target, [journal])
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def run(**options):
        stream_to_json(spark, target, collection, out, ckpt, **options)

    def got():
        return streamed_json(out)

    def want(lines):
        return sorted((x["journal"], x["offset"], json.dumps(x["doc"], sort_keys=True)) for x in lines)

    run()
    assert got() == want(first)
    with JournalClient(ClientConfig(target.address)) as c:
        c.apply([Change(expect_mod_revision=-1, delete=journal)])
    flow_journal(target, collection, "g1", "eu", store="file:///recreated/")
    peer.flow_publish(target.address, [journal], seed=11, rounds=6, control=False)
    second = oracle(target, [journal])
    assert second and max(x["offset"] for x in second) < max(x["offset"] for x in first)
    with pytest.raises(Exception, match="deleted and re-created"):
        run()
    run(failOnDataLoss="false")
    assert got() == sorted(want(first) + want(second))


def test_a_journal_recreated_past_the_streams_offset_is_known_by_its_creation_revision(spark, target, tmp_path):
    """Rule: a journal listed with another Etcd creation revision than the one the stream read it
    at was deleted and re-created, even where the new journal's write head has already passed the
    stream's offset, which offsets alone cannot tell (every broker here reports creation
    revisions). The query fails saying so; with failOnDataLoss=false it reads the new journal from
    its start, all of it."""
    from pyspark_gazette.client import Change, ClientConfig, JournalClient
    from pyspark_gazette.client.heads import write_head

    collection = f"acme/{target.kind}/renewed/orders"
    journal = flow_journal(target, collection, "g1", "eu")
    peer.flow_publish(target.address, [journal], seed=13, rounds=10)
    first = oracle(target, [journal])
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def run(**options):
        stream_to_json(spark, target, collection, out, ckpt, **options)

    def want(lines):
        return sorted((x["journal"], x["offset"], json.dumps(x["doc"], sort_keys=True)) for x in lines)

    run()
    assert streamed_json(out) == want(first)
    with JournalClient(ClientConfig(target.address)) as c:
        old = c.get_journal(journal)
        read_to = write_head(c.conns, journal)
        c.apply([Change(expect_mod_revision=old.mod_revision, delete=journal)])
    flow_journal(target, collection, "g1", "eu", store="file:///renewed/")
    peer.flow_publish(target.address, [journal], seed=14, rounds=40, control=False)
    second = oracle(target, [journal])
    with JournalClient(ClientConfig(target.address)) as c:
        assert c.get_journal(journal).create_revision > old.create_revision > 0
        assert write_head(c.conns, journal) > read_to  # past the stream's offset in the old journal
    with pytest.raises(Exception, match=f"created at Etcd revision [0-9]+, not {old.create_revision} .* re-created"):
        run()
    run(failOnDataLoss="false")
    assert streamed_json(out) == sorted(want(first) + want(second))


def suspend(target, journal: str) -> int:
    """Suspend ``journal`` as ``gazctl journals suspend --force`` does (an empty append with
    SUSPEND_NOW, answered SUSPENDED); returns the level the broker gave it: PARTIAL for a journal
    with fragments, FULL for one whose fragment index is empty."""
    from pyspark_gazette.client import ClientConfig, JournalClient
    from pyspark_gazette.errors import SuspendedError
    from pyspark_gazette.protocol import pb

    with JournalClient(ClientConfig(target.address)) as c:
        with pytest.raises(SuspendedError):
            c.appender(journal, suspend=pb.AppendRequest.SUSPEND_NOW).close()
        return c.get_journal(journal).spec.suspend.level


def test_a_collection_with_suspended_journals_reads_all_committed_documents(spark, target):
    """Rule: a partially suspended journal (fragments left, one broker serving it) is read like
    any other; a fully suspended one (Gazette does that only to an empty fragment index) has no
    content: it is planned as empty at its resumption offset, asked of no broker, and never fails
    the read."""
    from pyspark_gazette.protocol import pb

    collection = f"acme/{target.kind}/suspended/orders"
    eu, ap = flow_journal(target, collection, "g1", "eu"), flow_journal(target, collection, "g1", "ap")
    us = flow_journal(target, collection, "g1", "us")  # never written
    peer.flow_publish(target.address, [eu, ap], seed=12, rounds=8)
    assert suspend(target, eu) == pb.JournalSpec.Suspend.PARTIAL
    assert suspend(target, us) == pb.JournalSpec.Suspend.FULL
    lines = oracle(target, [eu, ap])
    assert {x["journal"] for x in lines} == {eu, ap}
    assert rows_of(collection_reader(spark, target, collection).load()) == want_rows(lines)


def test_a_stream_across_a_suspension_and_resumption(spark, target, tmp_path):
    """A stream keeps suspended journals: it reads what a partially suspended one holds, nothing
    of a fully suspended one (and does not fail), then what is appended once appends resume
    them, each document once."""
    from pyspark_gazette.protocol import pb

    collection = f"acme/{target.kind}/resumed/orders"
    eu, us = flow_journal(target, collection, "g1", "eu"), flow_journal(target, collection, "g1", "us")
    peer.flow_publish(target.address, [eu], seed=13, rounds=8)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def run(**options):
        stream_to_json(spark, target, collection, out, ckpt, **options)

    def got():
        return streamed_json(out)

    def want(journals):
        return sorted(
            (x["journal"], x["offset"], json.dumps(x["doc"], sort_keys=True)) for x in oracle(target, journals)
        )

    # Suspended before the stream's first batch: the partially suspended journal is read, the
    # fully suspended one yields nothing and fails nothing.
    assert suspend(target, eu) == pb.JournalSpec.Suspend.PARTIAL
    assert suspend(target, us) == pb.JournalSpec.Suspend.FULL
    run()
    assert got() == want([eu])
    peer.flow_publish(target.address, [eu, us], seed=14, rounds=4)  # appends resume both
    run()
    assert got() == want([eu, us])


def label_journal(target, journal: str, name: str, value: str) -> None:
    """Set label ``name=value`` on ``journal``'s spec with an Apply (as Flow labels a journal when a
    backfill begins), and wait until the listing shows it."""
    from pyspark_gazette.client import Change, ClientConfig, JournalClient
    from pyspark_gazette.protocol import pb

    with JournalClient(ClientConfig(target.address)) as c:
        info = c.get_journal(journal)
        spec = pb.JournalSpec()
        spec.CopyFrom(info.spec)
        labels = [lb for lb in spec.labels.labels if lb.name != name] + [pb.Label(name=name, value=value)]
        del spec.labels.labels[:]
        spec.labels.labels.extend(sorted(labels, key=lambda lb: (lb.name, lb.value)))
        c.apply([Change(expect_mod_revision=info.mod_revision, upsert=spec)])
        deadline = time.monotonic() + 30
        while c.get_journal(journal).label(name) != value:  # a broker's listing follows Etcd's watch
            assert time.monotonic() < deadline, f"label {name} of {journal} not listed after 30 s"
            time.sleep(0.05)


def test_a_truncated_at_label_drops_the_documents_published_before_it(spark, target, tmp_path):
    """Rule (Flow's shuffle): a collection read returns a journal's documents whose UUID clock is
    at or after its ``estuary.dev/truncated-at`` label, and none before; transactions are still
    sequenced over the whole journal, so ACKs after the label commit documents after it. A journal
    without the label is read whole. Batch, stream and inferSchema alike; a malformed value fails
    the read naming the journal, the label and the value."""
    from pyspark_gazette.client import ClientConfig, JournalClient
    from pyspark_gazette.flow.labels import TRUNCATED_AT
    from pyspark_gazette.message import build_uuid
    from pyspark_gazette.message.uuids import clock_now

    collection = f"acme/{target.kind}/truncated/orders"
    eu = flow_journal(target, collection, "g1", "eu")
    us = flow_journal(target, collection, "g1", "us", "00", key_end="7fffffff")
    split = flow_journal(target, collection, "g1", "us", "80000000")
    # A document of a shape no later document has (a "legacy" field), published first: only a
    # read that keeps documents before the label sees it (and infers the field).
    legacy = {"_meta": {"uuid": str(build_uuid(bytes([1, 9, 9, 9, 9, 9]), clock_now(), 0)), "op": "c"}}
    legacy.update(id=-1, n=-1, region="eu", legacy=True)
    with JournalClient(ClientConfig(target.address)) as c:
        c.append(eu, json.dumps(legacy).encode() + b"\n")
    peer.flow_publish(target.address, [eu, us, split], seed=15, rounds=50)

    def clock(line: dict) -> int:
        return get_clock(uuid.UUID(line["uuid"]))

    # Each labelled journal is cut at one of its own documents' clock (kept: clock >= label), in
    # the middle of its transactions; the split's journal has no label.
    lines = oracle(target, [eu, us, split])
    cuts = {}
    for journal, at in ((eu, 2), (us, 3)):
        mine = [x for x in lines if x["journal"] == journal]
        cuts[journal] = sorted(clock(x) for x in mine)[len(mine) // at]
        label_journal(target, journal, TRUNCATED_AT, f"{cuts[journal]:016x}")
    kept = [x for x in lines if clock(x) >= cuts.get(x["journal"], 0)]
    dropped = [x for x in lines if x not in kept]
    assert {x["journal"] for x in dropped} == {eu, us} and {x["journal"] for x in kept} == {eu, us, split}
    assert any(x["doc"].get("legacy") for x in dropped)
    assert any(x["flags"] & 0x1 for x in kept if x["journal"] in cuts)  # CONTINUE_TXN, committed by later ACKs

    # Batch.
    assert rows_of(collection_reader(spark, target, collection).load()) == want_rows(kept)

    # Stream (read committed from the start of each journal).
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    stream_to_json(spark, target, collection, out, ckpt)
    assert streamed_json(out) == sorted((x["journal"], x["offset"], json.dumps(x["doc"], sort_keys=True)) for x in kept)

    # inferSchema: the sample has no document before the labels.
    inferred = collection_reader(spark, target, collection, inferSchema="true").load()
    assert inferred.columns == ["_meta", "id", "n", "region", "flow_published_at", "_meta/op"]
    got = sorted((r.n, r.id, r.region, r["_meta/op"]) for r in inferred.collect())
    assert got == sorted((x["doc"]["n"], x["doc"]["id"], x["doc"]["region"], x["doc"]["_meta"]["op"]) for x in kept)

    # A value that is not 16 lowercase hex digits fails the read, naming journal, label and value.
    label_journal(target, split, TRUNCATED_AT, "2026-11-28")
    with pytest.raises(Exception, match=f"journal '{split}' has label estuary.dev/truncated-at='2026-11-28'"):
        collection_reader(spark, target, collection).load().collect()
