"""Helpers shared by the Spark read tests."""

from __future__ import annotations

import json


def events(n: int, start: int = 0) -> list[dict]:
    return [{"id": i, "country": ["US", "DE", "FR"][i % 3], "amount": i * 0.5} for i in range(start, start + n)]


def ndjson(rows: list[dict]) -> bytes:
    return b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in rows)


def fill(client, broker, journal: str, batches: int, per_batch: int) -> list[tuple[int, bytes]]:
    """Append ``batches`` appends; with 1 KiB fragments each append rolls the previous one, so all
    but the last are persisted. Returns (offset, line) of every message."""
    out = []
    for b in range(batches):
        data = ndjson(events(per_batch, b * per_batch))
        commit = client.append(journal, data)
        pos = commit.begin
        for line in data.splitlines(keepends=True):
            out.append((pos, line.rstrip(b"\n")))
            pos += len(line)
    assert broker.wait_persisted(30)
    return out


def reader(spark, broker, **options):
    r = (
        spark.read.format("gazette")
        .option("broker.address", broker.address)
        .option("store.fileRoot", broker.store_root)
    )
    for k, v in options.items():
        r = r.option(k, v)
    return r
