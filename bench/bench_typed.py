"""Benchmark of typed JSON decoding (:class:`TypedDecoder`) against per-row ``json.loads``.

Run: ``.venv/bin/python bench/bench_typed.py [--rows 1000000] [--batch 65536] [--bad 0] [--spark]``

Every contender gets the same click-event ndjson lines (ids, strings, an ISO-8601 timestamp
string, doubles, a nested struct, an array) in the same run, as ``pa.BinaryArray`` batches of
``--batch`` messages like the executor read path hands them over, and reports rows/s and MB/s
(best of ``--repeat``). ``--bad N`` makes every Nth record malformed (a type mismatch) to price
the fallback. Where the C scanner is built, ``TypedDecoder`` also runs on the Python engines
(the scanner turned off, as the pure wheel reads), in the same run. With ``--spark``, ``spark.read.schema(s).json(file)`` on the same bytes
(written to a temp file, read into a no-op sink on local[1]) is timed too.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pyspark_gazette.native import NATIVE_ENV, extension
from pyspark_gazette.spark.read.typed import TypedDecoder

SCHEMA = StructType(
    [
        StructField("id", LongType()),
        StructField("user", StringType()),
        StructField("ts", TimestampType()),
        StructField("url", StringType()),
        StructField("price", DoubleType()),
        StructField("geo", StructType([StructField("country", StringType()), StructField("lat", DoubleType())])),
        StructField("tags", ArrayType(StringType())),
        StructField("_corrupt_record", StringType()),
    ]
)


def make_lines(n: int, bad_every: int) -> list[bytes]:
    out = []
    for i in range(n):
        doc = {
            "id": i,
            "user": f"user-{i % 10007}",
            "ts": f"2026-01-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:{(i * 7) % 60:02d}.{i % 1000:03d}Z",
            "url": f"https://example.com/p/{i % 5000}?ref=x",
            "price": (i % 10000) * 0.01,
            "geo": {"country": ["US", "DE", "FR", "JP"][i % 4], "lat": 10.5 + i % 7},
            "tags": ["a", "bb", "ccc"][: i % 4],
            "ignored": i % 3 == 0,
        }
        if bad_every and i % bad_every == bad_every - 1:
            doc["id"] = "not-a-number"
        out.append(json.dumps(doc, separators=(",", ":")).encode())
    return out


def batches(lines: list[bytes], size: int) -> list[pa.Array]:
    return [pa.array(lines[i : i + size], pa.binary()) for i in range(0, len(lines), size)]


def typed(parts: list[pa.Array]) -> int:
    dec = TypedDecoder(SCHEMA)
    return sum(b.num_rows for p in parts if (b := dec.decode(p, {})) is not None)


def typed_pure(parts: list[pa.Array]) -> int:
    """``typed`` on the Python engines (pyarrow's JSON reader and Spark's rules), as the pure
    wheel (``py3-none-any``, no C scanner) reads: the scanner turned off by its variable."""
    before = os.environ.get(NATIVE_ENV)
    os.environ[NATIVE_ENV] = "0"
    try:
        dec = TypedDecoder(SCHEMA)
    finally:
        if before is None:
            del os.environ[NATIVE_ENV]
        else:
            os.environ[NATIVE_ENV] = before
    return sum(b.num_rows for p in parts if (b := dec.decode(p, {})) is not None)


def per_record(parts: list[pa.Array]) -> int:
    dec = TypedDecoder(SCHEMA)
    n = 0
    for p in parts:
        pieces: list = []
        dec._records(p, range(len(p)), pieces)  # The fallback rules on every record.
        n += sum(len(x[0]) for x in pieces)
    return n


def json_loads(parts: list[pa.Array]) -> int:
    loads = json.loads
    return sum(len([loads(v) for v in p.to_pylist()]) for p in parts)


def run(name: str, fn, parts, rows: int, nbytes: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        got = fn(parts)
        best = min(best, time.perf_counter() - t)
    assert got == rows, (name, got, rows)
    print(f"{name:<28} {rows / best / 1e6:8.2f} M rows/s {nbytes / best / 1e6:9.1f} MB/s  ({best:.3f} s)")
    return best


def spark_json(lines: list[bytes], repeat: int) -> float:
    from benchlib import local_spark

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = local_spark(
        "local[1]", **{"spark.sql.session.timeZone": "UTC", "spark.sql.files.maxPartitionBytes": 1 << 30}
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "clicks.json")
        with open(path, "wb") as f:
            f.write(b"\n".join(lines) + b"\n")
        best = float("inf")
        for _ in range(repeat + 1):  # The first run warms the JVM up.
            t = time.perf_counter()
            spark.read.schema(SCHEMA).json(path).write.format("noop").mode("overwrite").save()
            best = min(best, time.perf_counter() - t)
    spark.stop()
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=65536)
    ap.add_argument("--bad", type=int, default=0, help="every Nth record malformed (0: none)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--spark", action="store_true", help="also time spark.read.json on local[1]")
    args = ap.parse_args()

    lines = make_lines(args.rows, args.bad)
    nbytes = sum(len(x) + 1 for x in lines)
    parts = batches(lines, args.batch)
    print(f"{args.rows} click events, {nbytes / 1e6:.1f} MB, batches of {args.batch}, bad every {args.bad or '-'}")
    base = run("json.loads per row", json_loads, parts, args.rows, nbytes, args.repeat)
    ours = run("TypedDecoder.decode", typed, parts, args.rows, nbytes, args.repeat)
    if extension() is not None:
        pure = run("  Python engines (pure wheel)", typed_pure, parts, args.rows, nbytes, args.repeat)
        print(f"C scanner vs the Python engines (what the pure wheel costs): {pure / ours:.1f}x")
    small = max(1, len(parts) // 10)
    sub_rows = sum(len(p) for p in parts[:small])
    run("per-record rules (fallback)", per_record, parts[:small], sub_rows, nbytes * sub_rows // args.rows, 1)
    print(f"TypedDecoder vs json.loads: {base / ours:.1f}x")
    if args.spark:
        s = spark_json(lines, args.repeat)
        print(
            f"{'spark.read.json local[1]':<28} {args.rows / s / 1e6:8.2f} M rows/s {nbytes / s / 1e6:9.1f} MB/s  ({s:.3f} s)"
        )
        print(f"TypedDecoder vs spark.read.json: {s / ours:.1f}x")


if __name__ == "__main__":
    main()
