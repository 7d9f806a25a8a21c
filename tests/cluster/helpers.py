"""Journals, data and options shared by the cluster tests and bench/bench_cluster.py."""

from __future__ import annotations

import base64
import json
import time

#: The worker hosts of the test network.
HOSTS = ["w1", "w2"]
#: The brokers' --auth-keys (base64); tokens are minted with it.
KEY = base64.b64encode(b"cluster-tier-signing-key").decode()
#: Static S3 keys moto accepts; executors get them only through these options.
S3_KEYS = {"store.s3.accessKeyId": "cluster-test", "store.s3.secretAccessKey": "cluster-test-secret"}


def events(n: int, start: int = 0) -> list[dict]:
    return [{"id": i, "country": ["US", "DE", "FR"][i % 3], "amount": i * 0.5} for i in range(start, start + n)]


def ndjson(rows: list[dict]) -> bytes:
    return b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in rows)


def journal_spec(name: str, store: str, *, length: int = 1 << 20, codec: str = "ZSTANDARD", refresh_seconds: int = 1):
    from journalspecs import make_spec

    return make_spec(name, store=store, length=length, codec=codec, refresh_seconds=refresh_seconds)


def create(client, spec) -> None:
    from pyspark_gazette.client import Change

    client.apply([Change(expect_mod_revision=0, upsert=spec)])


def wait_persisted(client, journal: str, timeout: float = 120) -> list:
    """Wait until every fragment of ``journal`` but the open one has a backing store; return them."""
    end = time.monotonic() + timeout
    while True:
        frags = client.list_fragments(journal)
        if all(f.spec.backing_store for f in frags[:-1]):
            return frags
        if time.monotonic() > end:
            raise AssertionError(f"{journal}: fragments not persisted after {timeout:.0f}s")
        time.sleep(0.1)


def fill(client, journal: str, batches: int, per_batch: int, start: int = 0) -> list[dict]:
    """Append ``batches`` appends of ``per_batch`` events each; with small fragments every
    append rolls the previous fragment. Waits until they are persisted; returns the events."""
    rows: list[dict] = []
    for b in range(batches):
        chunk = events(per_batch, start + b * per_batch)
        client.append(journal, ndjson(chunk))
        rows.extend(chunk)
    wait_persisted(client, journal)
    return rows


#: Events appended as one piece (about 4 MB): one task's broker Read of them streams many chunks,
#: so a read held after its first chunk has its RPC open when its worker dies.
BIG_READ = 100_000


def read_through_a_worker_kill(cluster, journal: str, df, deadline: float = 300) -> list:
    """Collect ``df`` (a batch read of ``journal`` through the brokers) while the worker whose
    task is reading ``journal`` dies mid-Read: the task's read is held after its first chunk
    (testing.read_hold, whose marker names its PID and offsets), its worker's process tree is
    SIGKILLed, and Spark runs the task again on the surviving executor. Returns the rows."""
    import os
    import threading

    from pyspark_gazette import testing

    held, _ = testing.arm_read_hold(journal)
    out: dict = {}

    def run() -> None:
        try:
            out["rows"] = df.collect()
        except BaseException as e:  # noqa: BLE001 - reported below
            out["error"] = e

    thread = threading.Thread(target=run, name="reader", daemon=True)
    thread.start()
    try:
        end = time.monotonic() + deadline
        while not os.path.exists(held):
            assert thread.is_alive(), out.get("error", "the read ended without a broker read of " + journal)
            assert time.monotonic() < end, f"no task read {journal} through a broker"
            time.sleep(0.05)
        pid, offset, seg_end, _ = open(held).read().split()
        assert int(offset) < int(seg_end)  # the task's Read RPC is mid-segment
        worker = cluster.worker_of(int(pid))
        assert int(pid) in worker.kill()
        thread.join(deadline)
        assert not thread.is_alive(), "the read did not finish after the worker died"
    finally:
        testing.disarm_read_hold(journal)
    assert "error" not in out, out["error"]
    return out["rows"]
