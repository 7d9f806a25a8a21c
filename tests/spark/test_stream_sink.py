"""The exactly-once streaming sink: ``writeStream.format("gazette")`` into an embedded broker.

Input is a file stream (JSON files written before the query starts, one file per micro-batch
with ``maxFilesPerTrigger=1``) through a stateless transformation; the journal is read back
with the project's client. Re-runs are provoked for real: by a task that fails after it
appended (Spark retries it) and by deleting the checkpoint's commit-log entry of the last
batch (the restarted query executes that batch again).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter

import pytest

from pyspark_gazette.message import NDJSON

SCHEMA = "id long, name string"
TRANSFORM = ("id", "upper(name) as name", "id * 3 as triple")


def write_inputs(folder, files, per_file, start=0):
    """JSON files of ``per_file`` rows each; returns the transformed rows, as the sink writes them."""
    folder.mkdir(exist_ok=True)
    expected = []
    for f in range(start, start + files):
        rows = [{"id": f * per_file + i, "name": f"n{f}-{i}"} for i in range(per_file)]
        (folder / f"in-{f:04d}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
        expected += [{"id": r["id"], "name": r["name"].upper(), "triple": r["id"] * 3} for r in rows]
    return expected


def stream(spark, folder):
    return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(folder)).selectExpr(*TRANSFORM)


def sink(df, broker, checkpoint, journal, **options):
    w = (
        df.writeStream.format("gazette")
        .option("broker.address", broker.address)
        .option("checkpointLocation", str(checkpoint))
    )
    if journal:
        w = w.option("journal", journal)
    for k, v in options.items():
        w = w.option(k, v)
    return w


def journal_rows(client, journal):
    return [json.loads(p) for _, p in NDJSON.decode_all(client.read_all(journal))]


def multiset(rows):
    return Counter(json.dumps(r, sort_keys=True) for r in rows)


def registers(client, journal):
    """The journal's registers (a zero-byte append reports them)."""
    app = client.appender(journal)
    app.close()
    assert app.response is not None
    return {(lb.name, lb.value) for lb in app.response.registers.labels}


@pytest.mark.both_brokers
def test_processing_time_then_available_now(spark, broker, client, create_journal, tmp_path):
    create_journal("test/sink")
    folder, checkpoint = tmp_path / "in", tmp_path / "ck"
    expected = write_inputs(folder, 3, 40)
    q = sink(stream(spark, folder), broker, checkpoint, "test/sink").trigger(processingTime="200 milliseconds").start()
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    assert multiset(journal_rows(client, "test/sink")) == multiset(expected)
    # The same checkpoint, more files, an availableNow trigger.
    expected += write_inputs(folder, 2, 40, start=3)
    q = sink(stream(spark, folder), broker, checkpoint, "test/sink").trigger(availableNow=True).start()
    q.awaitTermination()
    assert multiset(journal_rows(client, "test/sink")) == multiset(expected)
    # One register per (query, partition), holding the last batch id that wrote.
    regs = registers(client, "test/sink")
    assert regs == {(f"gzsink/{q.id}/0", "4")}


@pytest.mark.both_brokers
def test_rerun_of_the_last_batch_does_not_duplicate(spark, broker, client, create_journal, tmp_path):
    create_journal("test/rerun")
    folder, checkpoint = tmp_path / "in", tmp_path / "ck"
    expected = write_inputs(folder, 3, 25)
    q = sink(stream(spark, folder), broker, checkpoint, "test/rerun").trigger(availableNow=True).start()
    q.awaitTermination()
    assert multiset(journal_rows(client, "test/rerun")) == multiset(expected)
    size = len(client.read_all("test/rerun"))
    # As if the driver died after the sink committed batch 2 but before the commit log did.
    for name in ("2", ".2.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    q = sink(stream(spark, folder), broker, checkpoint, "test/rerun").trigger(availableNow=True).start()
    q.awaitTermination()
    assert [p["batchId"] for p in q.recentProgress if p["numInputRows"]] == [2]  # it did run again
    assert (checkpoint / "commits" / "2").exists()
    assert len(client.read_all("test/rerun")) == size
    assert multiset(journal_rows(client, "test/rerun")) == multiset(expected)


@pytest.mark.both_brokers
def test_journal_column_routes_rows_with_a_register_per_journal(spark, broker, client, create_journal, tmp_path):
    create_journal("test/even")
    create_journal("test/odd")
    folder, checkpoint = tmp_path / "in", tmp_path / "ck"
    expected = write_inputs(folder, 2, 30)
    df = stream(spark, folder).selectExpr("*", "if(id % 2 = 0, 'test/even', 'test/odd') as journal")
    q = sink(df, broker, checkpoint, None).trigger(availableNow=True).start()
    q.awaitTermination()
    for journal, parity in (("test/even", 0), ("test/odd", 1)):
        rows = journal_rows(client, journal)
        assert multiset(rows) == multiset([r for r in expected if r["id"] % 2 == parity])
        assert registers(client, journal) == {(f"gzsink/{q.id}/0", "1")}


def test_empty_batches_append_nothing(spark, broker, client, create_journal, tmp_path):
    create_journal("test/empty")
    folder, checkpoint = tmp_path / "in", tmp_path / "ck"
    write_inputs(folder, 2, 10)
    df = stream(spark, folder).where("id < 0")
    sink(df, broker, checkpoint, "test/empty").trigger(availableNow=True).start().awaitTermination()
    assert client.read_all("test/empty") == b""
    assert registers(client, "test/empty") == set()


def test_transactional_is_refused(spark, broker, create_journal, tmp_path):
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    create_journal("test/txn")
    folder = tmp_path / "in"
    write_inputs(folder, 1, 1)
    with pytest.raises((PySparkException, Py4JJavaError)) as e:
        q = sink(stream(spark, folder), broker, tmp_path / "ck", "test/txn", transactional="true")
        q.trigger(availableNow=True).start().awaitTermination()
    assert "transactional" in str(e.value)


def test_complete_output_mode_is_refused(spark, broker, create_journal, tmp_path):
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    create_journal("test/complete")
    folder = tmp_path / "in"
    write_inputs(folder, 1, 3)
    counts = stream(spark, folder).groupBy("name").count()
    with pytest.raises((PySparkException, Py4JJavaError)) as e:
        q = sink(counts, broker, tmp_path / "ck", "test/complete").outputMode("complete")
        q.trigger(availableNow=True).start().awaitTermination()
    assert "append-only" in str(e.value)


def test_register_key_is_a_label_name():
    from pyspark_gazette.protocol.labels import validate_label
    from pyspark_gazette.spark.write.stream import FUTURE_WINDOW, register_guard, register_key

    qid = "4785962e-cfef-451e-b01b-87bb3b5c3f92"
    assert register_key(qid, 7) == f"gzsink/{qid}/7"
    odd = register_key("not a uuid: " + "x" * 80, 12345)
    validate_label(odd, "1")
    assert odd.endswith("/12345")
    check, union = register_guard(odd, 9)
    assert [(lb.name, lb.value) for lb in union.labels] == [(odd, "9")]
    assert sorted(int(lb.value) for lb in check.exclude.labels) == list(range(9, 9 + FUTURE_WINDOW + 1))
    assert not check.include.labels


RETRY_SCRIPT = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    address, folder, checkpoint = sys.argv[1:4]
    spark = (SparkSession.builder.master("local[2,4]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("WARN")  # the lost first attempts are logged
    df = (spark.readStream.schema("id long, name string").option("maxFilesPerTrigger", 1).json(folder)
          .selectExpr("id", "upper(name) as name", "id * 3 as triple"))
    q = (df.writeStream.format("gazette").option("broker.address", address).option("journal", "test/retry")
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    q.awaitTermination()
    spark.stop()
    """
)


@pytest.mark.slow
def test_task_retry_after_append_does_not_duplicate(broker, client, create_journal, tmp_path):
    """The first attempt of partition 0 of every batch fails after its append; Spark retries it."""
    from pyspark_gazette.spark.write.task import FAIL_ENV

    create_journal("test/retry")
    folder = tmp_path / "in"
    expected = write_inputs(folder, 3, 30)
    script = tmp_path / "retry.py"
    script.write_text(RETRY_SCRIPT)
    env = dict(os.environ, **{FAIL_ENV: "1", "PYSPARK_PYTHON": sys.executable})
    # local[2,4] lets a task fail up to 4 times; the shared session fixture never retries.
    done = subprocess.run(
        [sys.executable, str(script), broker.address, str(folder), str(tmp_path / "ck")],
        env=env,
        check=True,
        timeout=300,
        capture_output=True,
        text=True,
    )
    failed = {line.split(" (TID")[0] for line in done.stderr.splitlines() if "Lost task 0.0 in stage" in line}
    assert "injected failure after appending" in done.stderr
    assert len(failed) >= 3, done.stderr[-3000:]  # one first attempt per batch failed after appending
    assert multiset(journal_rows(client, "test/retry")) == multiset(expected)


def gazette_stream(spark, broker, journal):
    """A pass-through stream from a journal, as the user wrote it (journal, offset, value columns)."""
    return (
        spark.readStream.format("gazette")
        .option("broker.address", broker.address)
        .option("startingOffsets", "earliest")
        .load(journal)
    )


@pytest.mark.both_brokers
def test_pass_through_stream_writes_to_the_option_journal_not_its_source(
    spark, broker, client, create_journal, tmp_path
):
    """readStream from clicks, writeStream with journal=checkouts: rows land in checkouts only
    (the source's journal column used to win and append every row back to clicks)."""
    create_journal("test/clicks")
    create_journal("test/checkouts")
    sent = [{"n": i} for i in range(50)]
    client.append("test/clicks", b"".join(json.dumps(r).encode() + b"\n" for r in sent))
    q = sink(gazette_stream(spark, broker, "test/clicks"), broker, tmp_path / "ck", "test/checkouts")
    q.trigger(availableNow=True).start().awaitTermination()
    assert multiset(journal_rows(client, "test/checkouts")) == multiset(sent)
    assert multiset(journal_rows(client, "test/clicks")) == multiset(sent)  # the source is untouched


def test_stream_into_its_own_source_is_refused(spark, broker, client, create_journal, tmp_path):
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    create_journal("test/clicks")
    client.append("test/clicks", b'{"n": 1}\n{"n": 2}\n')
    with pytest.raises((PySparkException, Py4JJavaError)) as e:
        q = sink(gazette_stream(spark, broker, "test/clicks"), broker, tmp_path / "ck", "test/clicks")
        q.trigger(availableNow=True).start().awaitTermination()
    assert "comes from a gazette read of 'test/clicks', the journal this write appends to" in str(e.value)
    assert "allowWriteToSource=true" in str(e.value)
    assert len(journal_rows(client, "test/clicks")) == 2
