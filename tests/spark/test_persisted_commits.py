"""``commitWhen=persisted`` on the embedded broker with a file store: a batch write reports
success, and the sink commits a micro-batch, only once the fragment store holds what they
appended; a micro-batch found lost is re-run appending exactly its lost partitions once.

The loss itself (every replica of a real Gazette journal dying before persisting) is in
tests/oracle/test_sink_hole_gazette.py; the embedded broker never loses an acknowledged append.
"""

from __future__ import annotations

import json
import pathlib

import pytest
from test_stream_sink import journal_rows, multiset, registers, sink, stream, write_inputs

from pyspark_gazette.spark.write import persisted


def store_spans(store_root, journal) -> list[tuple[int, int]]:
    """(begin, end) of the fragment files of the journal in the file store."""
    folder = pathlib.Path(store_root, "store", journal)  # make_spec: file:///store/
    if not folder.is_dir():
        return []
    spans = []
    for p in folder.iterdir():
        parts = p.name.split("-")
        if p.name.startswith(".") or len(parts) < 3:
            continue  # a persist's temporary file
        spans.append((int(parts[0], 16), int(parts[1], 16)))
    return sorted(spans)


def stored_to(store_root, journal) -> int:
    """The end of the fragment files covering the journal from offset 0 without a gap."""
    pos = 0
    for begin, end in store_spans(store_root, journal):
        if begin <= pos:
            pos = max(pos, end)
    return pos


def head(client, journal) -> int:
    app = client.appender(journal)
    return app.close().end


def test_batch_write_reports_success_once_persisted(spark, broker, client, create_journal):
    create_journal("persist/batch", flush_seconds=60, length=1024)
    rows = [(i, f"n{i}") for i in range(500)]
    df = spark.createDataFrame(rows, "id long, name string").repartition(2)
    w = df.write.format("gazette").mode("append").option("broker.address", broker.address)
    for round_ in range(2):
        w.option("journal", "persist/batch").option("commitWhen", "persisted").save()
        end = head(client, "persist/batch")
        assert end > 0 and stored_to(broker.store_root, "persist/batch") >= end, (round_, end)
    got = journal_rows(client, "persist/batch")
    assert multiset(got) == multiset([{"id": i, "name": n} for i, n in rows] * 2)


def test_transactional_batch_write_waits_for_its_acknowledgements_too(spark, broker, client, create_journal):
    create_journal("persist/txn", flush_seconds=60, length=1024)
    df = spark.createDataFrame([(i,) for i in range(100)], "id long").repartition(2)
    w = df.write.format("gazette").mode("append").option("broker.address", broker.address)
    w.option("journal", "persist/txn").option("transactional", "true").option("commitWhen", "persisted").save()
    end = head(client, "persist/txn")
    assert stored_to(broker.store_root, "persist/txn") >= end
    assert sum(1 for r in journal_rows(client, "persist/txn") if r.get("_meta", {}).get("ack")) == 2  # one ACK per task


@pytest.mark.parametrize(
    ("spec", "missing"),
    [({"flush_seconds": 0}, "no flush_interval"), ({"store": "", "flush_seconds": 60}, "no fragment store")],
)
def test_a_journal_that_does_not_persist_on_a_timer_is_refused_at_planning(
    spark, broker, create_journal, spec, missing
):
    create_journal("persist/never", **spec)
    df = spark.createDataFrame([(1,)], "id long")
    w = df.write.format("gazette").mode("append").option("broker.address", broker.address)
    with pytest.raises(Exception) as e:
        w.option("journal", "persist/never").option("commitWhen", "persisted").save()
    text = str(e.value)
    assert "commitWhen" in text and "'persist/never'" in text and missing in text, text


def test_journal_column_target_that_does_not_persist_fails_the_task(spark, broker, create_journal):
    create_journal("persist/col", flush_seconds=0)
    df = spark.createDataFrame([(1, "persist/col")], "id long, journal string")
    w = df.write.format("gazette").mode("append").option("broker.address", broker.address)
    with pytest.raises(Exception) as e:
        w.option("commitWhen", "persisted").save()
    assert "commitWhen" in str(e.value) and "'persist/col'" in str(e.value)


def test_batch_write_whose_store_cannot_be_written_fails_naming_the_offsets(spark, broker, client, create_journal):
    # The journal's store directory is a regular file: every persist fails (and is retried), so
    # the appends stay acknowledged and unpersisted.
    blocker = pathlib.Path(broker.store_root, "held", "persist/held")
    blocker.parent.mkdir(parents=True)
    blocker.write_bytes(b"")
    create_journal("persist/held", store="file:///held/", flush_seconds=60, length=1024)
    df = spark.createDataFrame([(i,) for i in range(50)], "id long").coalesce(1)
    w = df.write.format("gazette").mode("append").option("broker.address", broker.address)
    with pytest.raises(Exception) as e:
        w.option("journal", "persist/held").option("commitWhen", "persisted").option("broker.timeout", "3s").save()
    end = head(client, "persist/held")
    text = str(e.value)
    assert "'persist/held'" in text and f"0-{end}" in text and "not persist" in text, text
    assert len(journal_rows(client, "persist/held")) == 50  # acknowledged: the rows stay


def test_sink_commits_each_micro_batch_once_persisted(spark, broker, client, create_journal, tmp_path):
    create_journal("persist/sink", flush_seconds=60, length=1024)
    folder, checkpoint = tmp_path / "in", tmp_path / "ck"
    folder.mkdir()
    expected = []
    q = sink(stream(spark, folder), broker, checkpoint, "persist/sink", commitWhen="persisted").start()
    try:
        for f in range(3):
            expected += write_inputs(folder, 1, 60, start=f)
            q.processAllAvailable()  # the micro-batch is committed
            end = head(client, "persist/sink")
            assert end > 0 and stored_to(broker.store_root, "persist/sink") >= end, (f, end)
    finally:
        q.stop()
    # Started again from its checkpoint: the next batches, nothing twice.
    expected += write_inputs(folder, 2, 60, start=3)
    q = sink(stream(spark, folder), broker, checkpoint, "persist/sink", commitWhen="persisted")
    q.trigger(availableNow=True).start().awaitTermination()
    assert multiset(journal_rows(client, "persist/sink")) == multiset(expected)
    assert stored_to(broker.store_root, "persist/sink") >= head(client, "persist/sink")


def test_rerun_after_a_loss_appends_exactly_the_lost_partitions(spark, broker, client, create_journal, tmp_path):
    """The re-run of a micro-batch the persisted check found partly lost: as if partition 1's
    append of batch 0 had been lost (the record its failed commit writes), the re-run appends
    partition 1's rows again and not partition 0's; a second re-run appends nothing."""
    from test_stream_sink import SCHEMA, TRANSFORM

    journal = "persist/rerun"
    create_journal(journal, flush_seconds=60, length=1024)
    folder, checkpoint = tmp_path / "in", tmp_path / "ck"
    expected = write_inputs(folder, 1, 40)

    def run():
        df = stream(spark, folder).repartition(2, "id")
        q = sink(df, broker, checkpoint, journal, commitWhen="persisted").trigger(availableNow=True).start()
        q.awaitTermination()
        return q

    def rerun_batch_0():
        for name in ("0", ".0.crc"):
            (checkpoint / "commits" / name).unlink(missing_ok=True)
        run()

    q = run()
    assert multiset(journal_rows(client, journal)) == multiset(expected)
    assert registers(client, journal) == {(f"gzsink/{q.id}/0", "0"), (f"gzsink/{q.id}/1", "0")}
    size = len(client.read_all(journal))
    static = spark.read.schema(SCHEMA).json(str(folder)).selectExpr(*TRANSFORM).repartition(2, "id")
    part1 = [
        json.loads(r.doc)
        for r in static.selectExpr("to_json(struct(*)) as doc", "spark_partition_id() as p").collect()
        if r.p == 1
    ]
    assert part1 and len(part1) < len(expected)

    persisted.save_record(str(checkpoint), 0, persisted.Record(persisted={journal: {0}}, lost={journal: {1: 1}}))
    rerun_batch_0()
    again = ndjson_rows(client.read_all(journal)[size:])
    assert multiset(again) == multiset(part1)  # partition 1's rows once more, not partition 0's
    assert registers(client, journal) == {(f"gzsink/{q.id}/0", "0"), (f"gzsink/{q.id}/1", "0.1")}
    size = len(client.read_all(journal))
    rerun_batch_0()
    assert len(client.read_all(journal)) == size  # the register value 0.1 refuses a third append


def ndjson_rows(data: bytes) -> list[dict]:
    return [json.loads(line) for line in data.splitlines() if line]
