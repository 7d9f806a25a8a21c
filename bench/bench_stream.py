#!/usr/bin/env python3
"""Structured Streaming benchmark: end-to-end latency and backlog catch-up.

    .venv/bin/python bench/bench_stream.py [--messages 200] [--backlog-mib 1024]

(1) Latency: a streaming query reads journal A and writes journal B (the exactly-once gazette
    sink) with a 0-interval trigger. A producer appends one message to A every 50 ms; a blocking
    reader on B notes when each message arrives. Reports p50 and p99 of append-to-visible time
    (goal: p50 under 1 s).
(2) Catch-up: a backlog of ``--backlog-mib`` MiB of ndjson in journal C (ZSTANDARD fragments,
    persisted) is read by a streaming query with ``Trigger.AvailableNow`` into the noop sink, and
    by a batch read of the same bytes into the noop sink, in the same run. Ratio = batch time /
    stream time (goal >= 0.9).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=200)
    p.add_argument("--interval", type=float, default=0.05, help="seconds between latency probes")
    p.add_argument("--backlog-mib", type=int, default=1024)
    p.add_argument("--fragment-mib", type=int, default=64)
    args = p.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.path.insert(0, HERE)
    from pyspark.sql import SparkSession

    from bench_read import make_lines
    from pyspark_gazette.broker import EmbeddedBroker
    from pyspark_gazette.client import Change, ClientConfig, JournalClient
    from pyspark_gazette.protocol import label_set, pb

    work = tempfile.mkdtemp(prefix="bench-stream-", dir=os.environ.get("BENCH_TMP", HERE))
    store = os.path.join(work, "store")
    try:
        with EmbeddedBroker(os.path.join(work, "broker"), file_root=store) as broker:
            client = JournalClient(ClientConfig(broker.address, file_root=store))

            def spec(name: str, length: int = 64 << 20) -> pb.JournalSpec:
                s = pb.JournalSpec(name=name, replication=1)
                s.labels.CopyFrom(label_set({"content-type": "application/x-ndjson"}))
                s.fragment.length = length
                s.fragment.compression_codec = pb.ZSTANDARD
                s.fragment.stores.append("file:///bench/")
                s.fragment.refresh_interval.seconds = 3600
                return s

            client.apply(
                [
                    Change(0, upsert=spec("bench/a")),
                    Change(0, upsert=spec("bench/b")),
                    Change(0, upsert=spec("bench/c", args.fragment_mib << 20)),
                ]
            )
            spark = (
                SparkSession.builder.master("local[2]")
                .config("spark.ui.enabled", "false")
                .config("spark.sql.shuffle.partitions", "2")
                .config("spark.driver.memory", "4g")
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("ERROR")

            def src(**opts):
                r = spark.readStream.format("gazette").option("broker.address", broker.address)
                r = r.option("store.fileRoot", store)
                for k, v in opts.items():
                    r = r.option(k, v)
                return r

            # (1) latency A -> B.
            query = (
                src(journals="bench/a")
                .load()
                .select("value")
                .writeStream.format("gazette")
                .option("broker.address", broker.address)
                .option("journal", "bench/b")
                .option("checkpointLocation", os.path.join(work, "ckpt-latency"))
                .trigger(processingTime="0 seconds")
                .start()
            )
            arrived: dict[int, float] = {}
            sent: dict[int, float] = {}
            done = threading.Event()

            def consume() -> None:
                buf = b""
                with client.retry_reader("bench/b", 0, block=True) as r:
                    while len(arrived) < args.messages:
                        data = r.read()
                        now = time.perf_counter()
                        buf += data
                        *lines, buf = buf.split(b"\n")
                        for line in lines:
                            arrived.setdefault(json.loads(line)["seq"], now)
                done.set()

            reader = threading.Thread(target=consume, daemon=True)
            reader.start()
            time.sleep(3)  # let the query start its first (empty) batches before probing
            for seq in range(args.messages):
                sent[seq] = time.perf_counter()
                client.append("bench/a", json.dumps({"seq": seq}).encode() + b"\n")
                time.sleep(args.interval)
            done.wait(120)
            query.stop()
            lat = sorted(arrived[s] - sent[s] for s in sent if s in arrived)
            p50 = statistics.median(lat)
            p99 = lat[min(len(lat) - 1, int(round(0.99 * (len(lat) - 1))))]
            print(
                f"(1) latency append->visible over {len(lat)}/{args.messages} messages: p50 {p50 * 1000:.0f} ms, "
                f"p99 {p99 * 1000:.0f} ms (goal p50 < 1000 ms: {'met' if p50 < 1 else 'MISSED'})"
            )

            # (2) catch-up of a backlog vs a batch read of the same bytes.
            data = make_lines(args.backlog_mib << 20)
            view, pos = memoryview(data), 0
            while pos < len(data):
                cut = data.find(b"\n", min(pos + (1 << 20), len(data) - 1)) + 1 or len(data)
                client.append("bench/c", view[pos:cut])
                pos = cut
            assert broker.wait_persisted(600)
            del data, view
            end = json.dumps({"bench/c": client.list_fragments("bench/c")[-1].spec.end})

            def batch() -> None:
                (
                    spark.read.format("gazette")
                    .option("broker.address", broker.address)
                    .option("store.fileRoot", store)
                    .option("endingOffsets", end)
                    .load("bench/c")
                    .write.format("noop")
                    .mode("overwrite")
                    .save()
                )

            def streamed(i: int) -> None:
                q = (
                    src(journals="bench/c", startingOffsets="earliest")
                    .load()
                    .writeStream.format("noop")
                    .option("checkpointLocation", os.path.join(work, f"ckpt-catchup-{i}"))
                    .trigger(availableNow=True)
                    .start()
                )
                q.awaitTermination()

            batch()  # warm-up
            t_batch, t_stream = [], []
            for i in range(2):
                t = time.perf_counter()
                batch()
                t_batch.append(time.perf_counter() - t)
                t = time.perf_counter()
                streamed(i)
                t_stream.append(time.perf_counter() - t)
            mb = args.backlog_mib * 1.048576
            ratio = min(t_batch) / min(t_stream)
            print(
                f"(2) catch-up of {mb:.0f} MB: stream {min(t_stream):.2f}s ({mb / min(t_stream):.0f} MB/s), "
                f"batch {min(t_batch):.2f}s ({mb / min(t_batch):.0f} MB/s); ratio {ratio:.2f} "
                f"(goal >= 0.9: {'met' if ratio >= 0.9 else 'MISSED'})  "
                f"[stream {', '.join(f'{x:.2f}' for x in t_stream)}; batch {', '.join(f'{x:.2f}' for x in t_batch)}]",
                flush=True,
            )
            spark.stop()
            client.close()
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
