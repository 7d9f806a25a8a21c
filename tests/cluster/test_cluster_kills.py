"""A worker host dies mid-batch: SIGKILL of the worker, its executor and the executor's Python.

Each test holds one task at a chosen point, finds the worker whose process tree holds the task's
Python process, kills that tree by PID, and lets Spark reschedule the task on the surviving
executor. The output must hold every row exactly once. The killed worker is started again
afterwards and the application gets a new executor on it (what a cluster manager does).

* the exactly-once streaming sink, killed after partition 0 appended its rows of a micro-batch
  and before Spark saw the task finish (``task-end`` of the sink's hold hook);
* the same with a read-committed source: transactions, rolled-back and pending messages;
* a batch write with ``transactional=true``, killed while partition 0's task is appending;
* a batch read, killed while a task's broker Read is open (held after its first chunk).
"""

from __future__ import annotations

import json
import threading
from collections import Counter

import pytest

from pyspark_gazette.message import NDJSON, Envelope, Sequencer, TransactionalPublisher, extract_uuid_json, set_uuid_at
from pyspark_gazette.protocol.auth import APPEND, LIST, READ, mint_token
from pyspark_gazette.testing import STREAM_HOLD_ENV as HOLD_ENV

from .conftest import executor_hosts, wait_until
from .helpers import (
    BIG_READ,
    KEY,
    S3_KEYS,
    create,
    events,
    fill,
    journal_spec,
    ndjson,
    read_through_a_worker_kill,
    wait_persisted,
)

pytestmark = pytest.mark.slow

#: How long a held task may take to show up, and a killed query to finish on the survivor.
DEADLINE = 300


@pytest.fixture
def revive(cluster, spark, network):
    """After the test: start killed workers again and wait for an executor on every host."""
    yield
    for w in cluster.workers:
        if w.proc is None or w.proc.poll() is not None:
            w.start()
    wait_until(lambda: executor_hosts(spark) == set(network.addresses.values()), DEADLINE, "executors on both hosts")


def kill_holder(cluster, marker) -> str:
    """SIGKILL the worker whose tree holds the process that wrote ``marker``; return its host."""
    pid = int(marker.read_text())
    worker = cluster.worker_of(pid)
    killed = worker.kill()
    assert pid in killed and worker.pid in killed
    return worker.address


def run_stream(spark, df, broker, token, journal, checkpoint, hold: str):
    """Start ``df`` into ``journal`` through the sink (AvailableNow), ``hold`` set for its tasks."""
    sc = spark.sparkContext
    sc.setLocalProperty(HOLD_ENV, hold)  # the query's thread inherits it; its tasks see it
    try:
        q = (
            df.writeStream.format("gazette")
            .option("broker.address", broker.address)
            .option("broker.authToken", token)
            .option("journal", journal)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
    finally:
        sc.setLocalProperty(HOLD_ENV, None)
    return q


def finish(q, what: str) -> None:
    try:
        assert q.awaitTermination(DEADLINE), f"{what} did not finish after the kill"
        assert q.exception() is None, q.exception()
    finally:
        if q.isActive:
            q.stop()


def test_sink_exactly_once_when_a_worker_dies_after_appending(spark, cluster, broker, tmp_path, revive):
    with broker.client() as client:
        create(client, journal_spec("kill/src", broker.store("kill-src"), length=1024))
        create(client, journal_spec("kill/out", broker.store("kill-out")))
        rows = fill(client, "kill/src", batches=16, per_batch=30)
        size = sum(f.spec.end - f.spec.begin for f in client.list_fragments("kill/src"))
    token = mint_token(KEY, LIST | READ | APPEND, "name:prefix=kill/")
    df = (
        spark.readStream.format("gazette")
        .option("broker.address", broker.address)
        .option("broker.authToken", token)
        .options(**S3_KEYS)
        .option("journals", "kill/src")
        .option("startingOffsets", "earliest")
        .option("maxBytesPerTrigger", str(size // 3 + 1))  # three micro-batches
        .option("maxPartitionBytes", "3000")  # several tasks per batch: both executors write
        .load()
        .selectExpr("cast(get_json_object(value, '$.id') as long) AS id", "offset AS source_offset")
    )
    markers = tmp_path / "markers"
    markers.mkdir()
    q = run_stream(spark, df, broker, token, "kill/out", tmp_path / "ckpt", f"task-end:1:{markers}")
    try:
        wait_until(lambda: (markers / "task-end-1").exists(), DEADLINE, "partition 0 of batch 1 to append")
        kill_holder(cluster, markers / "task-end-1")
    finally:
        finish(q, "the stream")
    with broker.client() as client:
        out = [json.loads(p) for _, p in NDJSON.decode_all(client.read_all("kill/out"))]
    assert Counter(d["id"] for d in out) == Counter(r["id"] for r in rows)  # each row exactly once


def test_read_committed_stream_exactly_once_when_a_worker_dies(spark, cluster, broker, tmp_path, revive):
    """Committed transactions reach the sink once; rolled-back and pending messages never."""
    committed: list[str] = []
    with broker.client() as client:
        create(client, journal_spec("killrc/src", broker.store("killrc-src"), length=1024))
        create(client, journal_spec("killrc/out", broker.store("killrc-out")))
        # Producer 0 commits every round; producer 1 too, but rolls back every fourth round by
        # re-sending its previous ACK; producer 2 never commits.
        producers = [TransactionalPublisher() for _ in range(3)]
        last_ack: dict = {}
        for round_ in range(12):
            lines = []
            for p, pub in enumerate(producers):
                tags = [f"r{round_}-p{p}-{i}" for i in range(6)]
                for tag in tags:
                    doc: dict = {"v": tag}
                    set_uuid_at(doc, pub.uncommitted())
                    lines.append(doc)
                if p == 2:
                    continue
                if p == 1 and round_ % 4 == 3:
                    ack = last_ack[p]  # re-sent: the messages after it roll back
                else:
                    ack = last_ack[p] = pub.ack()
                    committed.extend(tags)
                doc = {}
                set_uuid_at(doc, ack)
                lines.append(doc)
            client.append("killrc/src", b"".join(json.dumps(d).encode() + b"\n" for d in lines))
        wait_persisted(client, "killrc/src")
        size = sum(f.spec.end - f.spec.begin for f in client.list_fragments("killrc/src"))
    token = mint_token(KEY, LIST | READ | APPEND, "name:prefix=killrc/")
    df = (
        spark.readStream.format("gazette")
        .option("broker.address", broker.address)
        .option("broker.authToken", token)
        .options(**S3_KEYS)
        .option("journals", "killrc/src")
        .option("startingOffsets", "earliest")
        .option("readCommitted", "true")
        .option("maxBytesPerTrigger", str(size // 3 + 1))
        .option("maxPartitionBytes", "3000")
        .load()
        .selectExpr("get_json_object(value, '$.v') AS v")
    )
    markers = tmp_path / "markers"
    markers.mkdir()
    q = run_stream(spark, df, broker, token, "killrc/out", tmp_path / "ckpt", f"task-end:1:{markers}")
    try:
        wait_until(lambda: (markers / "task-end-1").exists(), DEADLINE, "partition 0 of batch 1 to append")
        kill_holder(cluster, markers / "task-end-1")
    finally:
        finish(q, "the read-committed stream")
    with broker.client() as client:
        out = [json.loads(p)["v"] for _, p in NDJSON.decode_all(client.read_all("killrc/out"))]
    assert Counter(out) == Counter(committed)


def _hold_partition_zero(markers: str, after_rows: int):
    """A mapInArrow function: the first attempt of partition 0 passes ``after_rows`` rows on,
    then writes its PID to ``markers/held`` and blocks until killed."""

    def fn(batches):
        import os
        import threading

        from pyspark import TaskContext

        ctx = TaskContext.get()
        hold = ctx is not None and ctx.partitionId() == 0 and ctx.attemptNumber() == 0
        seen = 0
        for batch in batches:
            yield batch
            seen += batch.num_rows
            if hold and seen >= after_rows:
                with open(os.path.join(markers, f".held.{os.getpid()}"), "w") as f:
                    f.write(str(os.getpid()))
                os.rename(os.path.join(markers, f".held.{os.getpid()}"), os.path.join(markers, "held"))
                threading.Event().wait()

    return fn


def partition_zero_rows(client, journal: str) -> int:
    """Rows of partition 0 (ids below 2000) in ``journal``, committed or not."""
    return sum(1 for _, p in NDJSON.decode_all(client.read_all(journal)) if json.loads(p)["id"] < 2000)


def committed_docs(client, journal):
    """(read-committed documents without ACKs, every document) of ``journal``."""
    envs = []
    for offset, payload in NDJSON.decode_all(client.read_all(journal)):
        u = extract_uuid_json(payload, "/_meta/uuid")
        envs.append(Envelope.from_uuid(journal, offset, offset + len(payload) + 1, u, json.loads(payload)))
    seq = Sequencer(ring_size=len(envs) + 1)
    return [e.message for e in seq.sequence(envs, include_acks=False)], [e.message for e in envs]


def test_transactional_batch_write_when_a_worker_dies_mid_task(spark, cluster, broker, tmp_path, revive):
    rows = 8000  # 2000 per partition, ~250 bytes each
    journal = "killtx/out"
    with broker.client() as client:
        create(client, journal_spec(journal, broker.store("killtx"), length=16384))
    token = mint_token(KEY, LIST | APPEND, "name=" + journal)
    markers = tmp_path / "markers"
    markers.mkdir()
    schema = "id long, label string"
    df = (
        spark.range(0, rows, numPartitions=4)
        .selectExpr("id", "concat('row-', id, '-', repeat('x', 200)) AS label")
        # Past Python's 64 KiB output buffer: rows must reach the writer before the hold.
        .mapInArrow(_hold_partition_zero(str(markers), 1200), schema)
    )
    errors: list[BaseException] = []

    def killer() -> None:
        """Kill partition 0's host once its held attempt has appended rows; on failure cancel
        the write (the held task would never end)."""
        try:
            wait_until(lambda: (markers / "held").exists(), DEADLINE, "partition 0 to pass 1200 rows on")
            with broker.client() as client:
                # The held attempt's appends are in the journal before the kill (mid-task).
                wait_until(lambda: partition_zero_rows(client, journal), 120, "the held attempt's first appends")
            kill_holder(cluster, markers / "held")
        except BaseException as e:  # reported below
            errors.append(e)
            spark.sparkContext.cancelAllJobs()

    previous = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "200")  # rows reach the writer as they come
    thread = threading.Thread(target=killer, name="killer")
    thread.start()
    try:
        (
            df.write.format("gazette")
            .mode("append")
            .option("broker.address", broker.address)
            .option("broker.authToken", token)
            .option("journal", journal)
            .option("transactional", "true")
            .option("maxBatchBytes", "4096")
            .save()
        )
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", previous)
        thread.join()
        assert not errors, errors
    with broker.client() as client:
        got, raw = committed_docs(client, journal)
    assert sorted(d["id"] for d in got) == list(range(rows))  # exactly once for read-committed readers
    ids = [d["id"] for d in raw if not d["_meta"].get("ack")]
    assert len(ids) > rows and set(ids) == set(range(rows))  # the killed attempt's rows are there, uncommitted


def test_batch_read_when_a_worker_dies_mid_read(spark, cluster, broker, revive):
    journal = "killread/src"
    with broker.client() as client:
        create(client, journal_spec(journal, broker.store("killread")))
        client.append(journal, ndjson(events(BIG_READ)))
    token = mint_token(KEY, LIST | READ, "name=" + journal)
    df = (
        spark.read.format("gazette")
        .option("broker.address", broker.address)
        .option("broker.authToken", token)
        .options(**S3_KEYS)
        .option("directReads", "false")
        .load(journal)
    )
    rows = read_through_a_worker_kill(cluster, journal, df)
    assert sorted(json.loads(r.value)["id"] for r in rows) == list(range(BIG_READ))  # each row once
