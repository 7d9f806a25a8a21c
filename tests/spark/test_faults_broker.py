"""The broker killed (SIGKILL) and restarted during Spark reads and writes (issue #7).

The broker runs in a child process (``spawn_broker``) with a file store. It is started with the
hidden fault-injection hook ``--test-hold-dir``: once the test arms it, the first content of a
Read or an Append parks the RPC and drops a marker file. The test waits for that marker (the
RPC is then provably mid-stream), kills the broker with SIGKILL, and starts a new one on the same
data directory and the same port, so the address the query uses stays valid (gRPC binds it with
SO_REUSEADDR; ``spawn_broker(port=...)``). The query must then complete with exactly the data:
nothing lost, nothing twice, every journal line a whole message.

What is not tested here: a broker that never comes back. Readers and writers retry transport
errors without a bound (as Gazette's RetryReader and AppendService do), so such a query waits
rather than fails; see docs/reliability.md.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter

import pytest
from spark_helpers import events, ndjson

from pyspark_gazette.broker.main import spawn_broker
from pyspark_gazette.client import Change, ClientConfig, JournalClient
from pyspark_gazette.message import NDJSON

pytestmark = pytest.mark.slow


class KillableBroker:
    """A broker child process that can be held mid-RPC, SIGKILLed and restarted at one address."""

    def __init__(self, tmp_path):
        self.data_dir = str(tmp_path / "data")
        self.store_root = str(tmp_path / "store")
        self.hold_dir = tmp_path / "hold"
        self.hold_dir.mkdir()
        self._log = open(tmp_path / "broker.log", "ab")  # noqa: SIM115 - closed in stop()
        self.port = 0  # the broker picks it on first start; restarts reuse it
        self.proc: subprocess.Popen | None = None
        self.address = ""
        self.kills = 0
        self._start()

    def _start(self) -> None:
        args = ["--test-hold-dir", str(self.hold_dir)]
        self.proc, self.address = spawn_broker(
            self.data_dir, self.store_root, stderr=self._log, port=self.port, extra_args=args
        )
        self.port = int(self.address.rsplit(":", 1)[1])

    def arm(self) -> None:
        (self.hold_dir / "armed").touch()

    def wait_held(self, kind: str, action: Background | None = None, timeout: float = 180.0) -> list[str]:
        """Journals of the RPCs of ``kind`` ("read" or "append") parked so far; waits for one.
        An ``action`` that ends first (it failed before reaching the broker) is reported."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if action is not None and action.done():
                action.result()
                raise AssertionError(f"the Spark action ended before any {kind} RPC was held")
            held = sorted(p for p in os.listdir(self.hold_dir) if p.startswith(kind + "-"))
            if held:
                return [(self.hold_dir / p).read_text() for p in held]
            assert self.proc is not None and self.proc.poll() is None, "the broker died on its own"
            time.sleep(0.05)
        raise AssertionError(f"no {kind} RPC reached the broker within {timeout}s")

    def kill_and_restart(self) -> None:
        """SIGKILL mid-RPC, disarm the hook, start again on the same data dir and port."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self.proc.stdout.close()
        self.kills += 1
        (self.hold_dir / "armed").unlink()
        self._start()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()

    def client(self) -> JournalClient:
        return JournalClient(ClientConfig(self.address, file_root=self.store_root))


@pytest.fixture
def killable(tmp_path):
    b = KillableBroker(tmp_path)
    yield b
    b.stop()


def create(client, name, **kwargs):
    from journalspecs import make_spec

    client.apply([Change(0, upsert=make_spec(name, **kwargs))])


class Background:
    """Runs a blocking Spark action on a thread; ``result()`` returns its value or raises."""

    def __init__(self, fn):
        self._value: object = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._thread.start()

    def _run(self, fn) -> None:
        try:
            self._value = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            self._error = e

    def done(self) -> bool:
        return not self._thread.is_alive()

    def result(self, timeout: float = 300.0):
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the Spark action did not finish after the restart"
        if self._error is not None:
            raise self._error
        return self._value


def journal_lines(client, journal: str) -> list[bytes]:
    """Every line of the journal; each must be a whole JSON document."""
    content = client.read_all(journal)
    assert content.endswith(b"\n")
    lines = content.split(b"\n")[:-1]
    for line in lines:
        json.loads(line)  # raises on a torn or partial message
    return lines


# -- reads ------------------------------------------------------------------------------------


@pytest.mark.parametrize("direct", ["true", "false"], ids=["direct-and-proxied", "all-proxied"])
def test_batch_read_survives_a_kill_mid_read(spark, killable, direct):
    journal = "kill/read"
    with killable.client() as client:
        create(client, journal, length=1024, refresh_seconds=3600)
        for b in range(4):  # about 1.2 KB each: every append rolls the fragment before it
            client.append(journal, ndjson(events(30, 30 * b)))
        wait_persisted(client, journal, rolled=3)  # three direct fragments and a live tail
        expected = journal_messages(client, journal)
    df = (
        spark.read.format("gazette")
        .option("broker.address", killable.address)
        .option("store.fileRoot", killable.store_root)
        .option("directReads", direct)
        .load(journal)
    )
    killable.arm()
    action = Background(lambda: df.collect())
    held = killable.wait_held("read", action)
    assert held and set(held) == {journal}
    killable.kill_and_restart()
    rows = action.result()
    got = [(r.offset, r.value.encode()) for r in rows]
    assert len(got) == len(set(got))  # nothing twice
    assert sorted(got) == sorted(expected)  # nothing lost
    assert killable.kills == 1


def test_streaming_read_survives_a_kill_mid_batch(spark, killable, tmp_path):
    journal = "kill/stream"
    with killable.client() as client:
        create(client, journal)
        client.append(journal, ndjson(events(40)))
        q = (
            spark.readStream.format("gazette")
            .option("broker.address", killable.address)
            .option("store.fileRoot", killable.store_root)
            .option("startingOffsets", "earliest")
            .load(journal)
            .writeStream.format("memory")
            .queryName("kill_stream")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
        )
        killable.arm()
        query = q.start()
        try:
            assert killable.wait_held("read") == [journal]
            killable.kill_and_restart()
            query.processAllAvailable()
            with killable.client() as after:
                after.append(journal, ndjson(events(40, 40)))
            query.processAllAvailable()
        finally:
            query.stop()
    ids = [json.loads(r.value)["id"] for r in spark.sql("SELECT value FROM kill_stream").collect()]
    assert sorted(ids) == list(range(80)) and len(ids) == 80


# -- writes -----------------------------------------------------------------------------------


def test_batch_write_survives_a_kill_mid_append(spark, killable):
    journal = "kill/write"
    with killable.client() as client:
        create(client, journal)
    rows = [(i, f"name-{i}") for i in range(2000)]
    df = spark.createDataFrame(rows, "id long, name string").repartition(2)
    killable.arm()

    def kill_when_held() -> list[str]:
        held = killable.wait_held("append")
        killable.kill_and_restart()
        return held

    # The write runs on the test's thread (a DataFrameWriter called from another Python thread
    # did not find the short name in this PySpark); the kill comes from a helper thread.
    killer = Background(kill_when_held)
    writer = df.write.format("gazette").mode("append").option("broker.address", killable.address)
    writer.option("journal", journal).save()
    assert killer.result() == [journal]
    with killable.client() as client:
        lines = journal_lines(client, journal)  # the held append's bytes were never committed
    docs = Counter((d["id"], d["name"]) for d in map(json.loads, lines))
    assert docs == Counter(rows)  # every row exactly once


def test_streaming_sink_survives_a_kill_mid_append(spark, killable, tmp_path):
    from test_stream_sink import stream, write_inputs

    journal = "kill/sink"
    with killable.client() as client:
        create(client, journal)
    expected = write_inputs(tmp_path / "in", files=3, per_file=50)
    killable.arm()
    query = (
        stream(spark, tmp_path / "in")
        .writeStream.format("gazette")
        .option("broker.address", killable.address)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .option("journal", journal)
        .start()
    )
    try:
        assert killable.wait_held("append") == [journal]
        killable.kill_and_restart()
        query.processAllAvailable()
    finally:
        query.stop()
    with killable.client() as client:
        lines = journal_lines(client, journal)
        docs = [json.loads(p) for _, p in NDJSON.decode_all(client.read_all(journal))]
    assert len(lines) == len(expected)
    key = lambda d: json.dumps(d, sort_keys=True)  # noqa: E731
    assert Counter(map(key, docs)) == Counter(map(key, expected))


# -- helpers ----------------------------------------------------------------------------------


def wait_persisted(client, journal: str, rolled: int, timeout: float = 60.0) -> None:
    """Wait until the listing shows ``rolled`` persisted fragments before the live one."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        frags = [f.spec for f in client.list_fragments(journal)]
        if len(frags) == rolled + 1 and all(f.backing_store for f in frags[:-1]):
            return
        time.sleep(0.05)
    raise AssertionError(f"{journal}: fragments not persisted: {frags}")


def journal_messages(client, journal: str) -> list[tuple[int, bytes]]:
    """(offset, line) of every message of the journal."""
    out, pos = [], 0
    for line in client.read_all(journal).splitlines(keepends=True):
        out.append((pos, line.rstrip(b"\n")))
        pos += len(line)
    return out
