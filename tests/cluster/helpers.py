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
