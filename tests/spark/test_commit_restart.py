"""The broker restarted between a write's tasks and its commit on the driver.

The driver's clients on commit paths (the transactional write's acknowledgements, the sink's
check of what it committed) wait out a broker restart for ``broker.timeout``, as the tasks'
clients do. The commit is parked by the ``commit`` test hook
(:func:`pyspark_gazette.testing.rpc_hold`) once the tasks are done; the test then stops the
broker, releases the commit, keeps the broker down for longer than the few seconds after which
such a client used to give up, and starts it again on the same port, data and store.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter

import pytest
from test_faults_broker import Background, KillableBroker, create
from test_persisted_commits import head, stored_to
from test_stream_sink import multiset, stream, write_inputs

from pyspark_gazette import testing
from pyspark_gazette.client.conn import CONNECT_ATTEMPTS, backoff
from pyspark_gazette.message import NDJSON

pytestmark = pytest.mark.slow

#: How long the broker stays down: past the ~7 s of retries after which the driver's clients of
#: commit paths used to give up (CONNECT_ATTEMPTS attempts with Gazette's backoff).
DOWN = sum(backoff(i) for i in range(CONNECT_ATTEMPTS - 1)) + 3.0


@pytest.fixture
def restartable(tmp_path):
    b = KillableBroker(tmp_path)
    yield b
    b.stop()


def restart_when_the_commit_is_held(broker: KillableBroker, journal: str) -> Background:
    """Arm the commit hold of ``journal``; in the background, once a commit is held: stop the
    broker, release the commit, wait :data:`DOWN` seconds and start the broker again."""
    held, _ = testing.arm_hold("commit", journal)

    def run() -> float:
        deadline = time.monotonic() + 300
        while not os.path.exists(held):
            assert time.monotonic() < deadline, "no commit was held"
            time.sleep(0.05)
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGTERM)
        broker.proc.wait(60)
        broker.proc.stdout.close()
        stopped = time.monotonic()
        testing.release_hold("commit", journal)
        time.sleep(DOWN)  # the outage itself (no event to await: the commit is retrying)
        broker._start()
        return time.monotonic() - stopped

    return Background(run)


def test_transactional_acknowledgements_wait_out_a_restart(spark, restartable):
    journal = "restart/txn"
    with restartable.client() as client:
        create(client, journal)
    rows = [(i,) for i in range(400)]
    df = spark.createDataFrame(rows, "id long").repartition(2)
    restarter = restart_when_the_commit_is_held(restartable, journal)
    try:
        w = df.write.format("gazette").mode("append").option("broker.address", restartable.address)
        w.option("journal", journal).option("transactional", "true").save()
        assert restarter.result() >= DOWN
    finally:
        testing.disarm_hold("commit", journal)
    with restartable.client() as client:
        docs = [json.loads(p) for _, p in NDJSON.decode_all(client.read_all(journal))]
    acks = [d for d in docs if d["_meta"].get("ack")]
    assert len(acks) == 2  # one per task: the commit acknowledged both after the restart
    assert Counter(d["id"] for d in docs if "id" in d) == Counter(i for (i,) in rows)


def test_sink_persisted_check_waits_out_a_restart(spark, restartable, tmp_path):
    journal = "restart/sink"
    with restartable.client() as client:
        create(client, journal, flush_seconds=60, length=1024)
    folder, checkpoint = tmp_path / "in", tmp_path / "ck"
    folder.mkdir()
    expected = write_inputs(folder, 1, 60)
    q = (
        stream(spark, folder)
        .writeStream.format("gazette")
        .option("broker.address", restartable.address)
        .option("checkpointLocation", str(checkpoint))
        .option("journal", journal)
        .option("commitWhen", "persisted")
        .start()
    )
    try:
        q.processAllAvailable()
        restarter = restart_when_the_commit_is_held(restartable, journal)
        expected += write_inputs(folder, 1, 60, start=1)
        q.processAllAvailable()  # micro-batch 1, committed after the restart
        assert restarter.result() >= DOWN
        assert q.exception() is None and q.isActive
    finally:
        testing.disarm_hold("commit", journal)
        q.stop()
    with restartable.client() as client:
        got = [json.loads(p) for _, p in NDJSON.decode_all(client.read_all(journal))]
        assert stored_to(restartable.store_root, journal) >= head(client, journal)
    assert multiset(got) == multiset(expected)
