#!/usr/bin/env python3
"""Structured Streaming benchmark: end-to-end latency and backlog catch-up.

    .venv/bin/python bench/bench_stream.py [--messages 200] [--backlog-mib 256] [--parts latency,catchup]
    .venv/bin/python bench/bench_stream.py --parts committed [--committed-mib 8,64] [--committed-batches 16]

(1) Latency: a streaming query reads journal A and writes journal B (the exactly-once gazette
    sink) with a 0-interval trigger. Once its first micro-batch is done (start-up, reported on
    its own), a producer appends one message to A every 50 ms and a blocking reader on B notes
    when each arrives. Reports p50 and p99 of append-to-visible time (goal: p50 under 1 s) and
    Spark's per-batch phases. Same-run baselines: Spark's floor per micro-batch, for
    ``rate-micro-batch -> noop`` (JVM only) and ``tick -> tick`` (the smallest Python source
    and sink, :mod:`stream_floor`); then our sink alone (``tick -> gazette``) and our source
    alone (``gazette -> noop``, fed one message per interval). A message waits for the running
    batch to end, then one batch: latency is 1-1.5 batch times.
(2) Catch-up: a backlog of ``--backlog-mib`` MiB of ndjson in journal C (ZSTANDARD fragments,
    persisted; a 16 MiB block of click events repeated) is read by a streaming query with
    ``Trigger.AvailableNow`` into the noop sink, and by a batch read of the same bytes into the
    noop sink, in the same run, best of ``--rounds``. Ratio = batch time / stream time (goal
    >= 0.9 for 1 GiB). The stream's time includes its query start-up (offset and commit logs,
    the Python planner process), which a batch read does not pay.
(3) Read-committed: for each size in ``--committed-mib``, a journal of click events with message
    UUIDs (4 producers taking turns: transactions of 50-400 messages, each ACK'd, one
    OUTSIDE_TXN message in 10, and one transaction left open across the whole journal) is read
    by an ``AvailableNow`` stream in ``--committed-batches`` micro-batches (``maxBytesPerTrigger``)
    into the noop sink, with ``readCommitted=true`` and without it, interleaved, best of
    ``--rounds``. Reports each stream's time per micro-batch (the sum of Spark's
    ``triggerExecution`` over batches, divided by their count: the planning of a read-committed
    batch includes the driver's state scan) and the ratio (goal: read-committed within 1.3x).
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


def say(text: str) -> None:
    print(text, flush=True)


def percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(round(q * (len(sorted_values) - 1))))]


def latency(spark, broker, client, store: str, work: str, args) -> None:  # type: ignore[no-untyped-def]
    from stream_floor import batch_medians, describe, run_floor, wait_first_batch

    query = (
        spark.readStream.format("gazette")
        .option("broker.address", broker.address)
        .option("store.fileRoot", store)
        .option("journals", "bench/a")
        .load()
        .select("value")
        .writeStream.format("gazette")
        .option("broker.address", broker.address)
        .option("journal", "bench/b")
        .option("checkpointLocation", os.path.join(work, "ckpt-latency"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    say(f"(1) start-up: first micro-batch done {wait_first_batch(query, 600):.1f} s after start()")
    # Warm the Python workers: each new worker imports our modules once (one message a batch).
    for seq in range(-args.warmup, 0):
        before = query.lastProgress["batchId"]
        client.append("bench/a", json.dumps({"seq": seq}).encode() + b"\n")
        deadline = time.monotonic() + 120
        while query.lastProgress["batchId"] == before and time.monotonic() < deadline:
            time.sleep(0.02)
    skip = len(query.recentProgress)
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
                    seq = json.loads(line)["seq"]
                    if seq >= 0:  # not a warm-up message
                        arrived.setdefault(seq, now)
        done.set()

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    for seq in range(args.messages):
        sent[seq] = time.perf_counter()
        client.append("bench/a", json.dumps({"seq": seq}).encode() + b"\n")
        time.sleep(args.interval)
    done.wait(300)
    query.stop()
    ours = batch_medians(query.recentProgress[skip:], skip=0)
    lat = sorted(arrived[s] - sent[s] for s in sent if s in arrived)
    p50, p99 = statistics.median(lat), percentile(lat, 0.99)
    say(
        f"(1) latency append->visible over {len(lat)}/{args.messages} messages: p50 {p50 * 1000:.0f} ms, "
        f"p99 {p99 * 1000:.0f} ms (goal p50 < 1000 ms: {'met' if p50 < 1 else 'MISSED'})"
    )
    say("    " + describe("gazette -> gazette", ours))
    ours_src = {"broker.address": broker.address, "store.fileRoot": store, "journals": "bench/a"}
    ours_sink = {"broker.address": broker.address, "journal": "bench/b2"}
    runs = [
        ("floor", "rate-micro-batch", "noop", None, None),
        ("floor", "tick", "tick", None, None),
        # Attribution: our sink alone after the Python source floor, our source alone into noop.
        ("sink alone", "tick", "gazette", None, ours_sink),
        ("source alone", "gazette", "noop", ours_src, None),
    ]
    for what, src, dst, src_opts, dst_opts in runs:
        stop = threading.Event()
        feeder = threading.Thread(target=feed, args=(client, stop, args.interval), daemon=True)
        if src == "gazette":
            feeder.start()
        try:
            m = run_floor(
                spark, src, dst, os.path.join(work, f"ckpt-{src}-{dst}"), args.floor_seconds, src_opts, dst_opts
            )
        except Exception as e:  # a loaded machine can fail a worker start; report it, go on
            say(f"    {what} {src} -> {dst}: failed: {str(e).splitlines()[0]}")
            continue
        finally:
            stop.set()
        say("    " + describe(f"{what} {src} -> {dst}", m))
        if m and ours:
            say(f"    our batch / this batch = {ours['triggerExecution'] / m['triggerExecution']:.2f}")


def feed(client, stop: threading.Event, interval: float) -> None:  # type: ignore[no-untyped-def]
    """Append one message to journal A every ``interval`` seconds until ``stop``."""
    seq = 0
    while not stop.wait(interval):
        client.append("bench/a", json.dumps({"seq": -1000 - seq}).encode() + b"\n")
        seq += 1


def catchup(spark, broker, client, store: str, work: str, args) -> None:  # type: ignore[no-untyped-def]
    from bench_read import make_lines

    block = make_lines(16 << 20)
    block = block[: block.rfind(b"\n", 0, 16 << 20) + 1]
    target = args.backlog_mib << 20
    t = time.perf_counter()
    total = 0
    while total < target:
        piece = block[: min(len(block), target - total)]
        piece = piece[: piece.rfind(b"\n") + 1]
        if not piece:
            break
        view, pos = memoryview(piece), 0
        while pos < len(piece):
            cut = piece.find(b"\n", min(pos + (1 << 20), len(piece) - 1)) + 1 or len(piece)
            client.append("bench/c", view[pos:cut])
            pos = cut
        total += len(piece)
    if not broker.wait_persisted(1800):
        raise RuntimeError("the backlog was not persisted within 30 minutes")
    end = client.list_fragments("bench/c")[-1].spec.end
    say(f"(2) backlog: {total / 1e6:.0f} MB appended and persisted in {time.perf_counter() - t:.1f} s")

    def batch() -> float:
        t = time.perf_counter()
        (
            spark.read.format("gazette")
            .option("broker.address", broker.address)
            .option("store.fileRoot", store)
            .option("endingOffsets", json.dumps({"bench/c": end}))
            .load("bench/c")
            .write.format("noop")
            .mode("overwrite")
            .save()
        )
        return time.perf_counter() - t

    def streamed(i: int) -> float:
        t = time.perf_counter()
        q = (
            spark.readStream.format("gazette")
            .option("broker.address", broker.address)
            .option("store.fileRoot", store)
            .option("journals", "bench/c")
            .option("startingOffsets", "earliest")
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", os.path.join(work, f"ckpt-catchup-{i}"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
        took = time.perf_counter() - t
        rows = sum(p["numInputRows"] for p in q.recentProgress)
        phases = {
            k: sum(p["durationMs"].get(k, 0) for p in q.recentProgress) / 1000 for k in ("addBatch", "triggerExecution")
        }
        say(
            f"    stream round {i}: {took:.2f} s, {len(q.recentProgress)} batch(es), {rows} rows; "
            f"addBatch {phases['addBatch']:.2f} s, in triggers {phases['triggerExecution']:.2f} s"
        )
        return took

    say(f"    warm-up batch read: {batch():.2f} s")
    t_batch, t_stream = [], []
    for i in range(args.rounds):
        t_batch.append(batch())
        say(f"    batch round {i}: {t_batch[-1]:.2f} s")
        t_stream.append(streamed(i))
    mb = total / 1e6
    ratio = min(t_batch) / min(t_stream)
    say(
        f"(2) catch-up of {mb:.0f} MB: stream {min(t_stream):.2f} s ({mb / min(t_stream):.0f} MB/s), "
        f"batch {min(t_batch):.2f} s ({mb / min(t_batch):.0f} MB/s); ratio {ratio:.2f} "
        f"(goal >= 0.9: {'met' if ratio >= 0.9 else 'MISSED'})"
    )


def committed_lines(target_bytes: int, seed: int = 5) -> bytes:
    """Click events with UUIDs: transactions of 4 producers in turn, some OUTSIDE_TXN messages,
    one transaction (producer 5) open from the first message to the last."""
    import random

    from bench_read import make_lines
    from pyspark_gazette.message import TransactionalPublisher

    rng = random.Random(seed)
    raw = make_lines(target_bytes).splitlines()
    pubs = [TransactionalPublisher() for _ in range(4)]
    long = TransactionalPublisher()
    out = [b'{"_meta":{"uuid":"' + str(long.uncommitted()).encode() + b'"},' + raw[0][1:]]
    i, p = 1, 0
    while i < len(raw) - 1:
        pub = pubs[p % 4]
        for _ in range(rng.randrange(50, 400)):
            if i >= len(raw) - 1:
                break
            u = pubs[(p + 1) % 4].committed() if rng.random() < 0.1 else pub.uncommitted()
            out.append(b'{"_meta":{"uuid":"' + str(u).encode() + b'"},' + raw[i][1:])
            i += 1
        out.append(b'{"_meta":{"uuid":"' + str(pub.ack()).encode() + b'"}}')
        p += 1
    out.append(b'{"_meta":{"uuid":"' + str(long.ack()).encode() + b'"},' + raw[-1][1:])
    return b"\n".join(out) + b"\n"


def committed(spark, broker, client, store: str, work: str, args) -> None:  # type: ignore[no-untyped-def]
    for mib in (int(x) for x in args.committed_mib.split(",")):
        committed_size(spark, broker, client, store, work, args, mib)


def committed_size(spark, broker, client, store: str, work: str, args, mib: int) -> None:  # type: ignore[no-untyped-def]
    from benchlib import best_of, ndjson_spec
    from pyspark_gazette.client import Change

    journal = f"bench/rc-{mib}"
    client.apply([Change(0, upsert=ndjson_spec(journal, 16 << 20))])
    data = committed_lines(mib << 20)
    pos = 0
    while pos < len(data):
        cut = data.find(b"\n", min(pos + (1 << 20), len(data) - 1)) + 1 or len(data)
        client.append(journal, data[pos:cut])
        pos = cut
    if not broker.wait_persisted(600):
        raise RuntimeError("the journal was not persisted within 10 minutes")
    per_trigger = str(len(data) // args.committed_batches + 1)
    stats: dict[str, tuple[int, float, int]] = {}
    phases: dict[str, dict[str, float]] = {}
    per_batch: dict[str, list[float]] = {}
    runs = iter(range(1000))

    def run(rc: bool) -> None:
        name = f"{'rc' if rc else 'plain'}-{mib}-{next(runs)}"
        q = (
            spark.readStream.format("gazette")
            .option("broker.address", broker.address)
            .option("store.fileRoot", store)
            .option("journals", journal)
            .option("startingOffsets", "earliest")
            .option("maxBytesPerTrigger", per_trigger)
            .option("readCommitted", str(rc).lower())
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", os.path.join(work, f"ckpt-{name}"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
        progress = [p for p in q.recentProgress if p["numInputRows"] or p["durationMs"].get("addBatch")]
        trig = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000
        rows = sum(p["numInputRows"] for p in progress)
        stats[name] = (len(progress), trig, rows)
        per_batch[name] = [p["durationMs"]["triggerExecution"] / 1000 for p in progress]
        phases[name] = {
            k: sum(p["durationMs"].get(k, 0) for p in progress) / 1000 for k in ("latestOffset", "addBatch")
        }

    run(True)  # warm-up of both paths (not counted)
    run(False)
    stats.clear()
    best, times = best_of(
        {"readCommitted": lambda: run(True), "plain": lambda: run(False)}, args.rounds, alternate=True
    )
    rc_name = min((k for k in stats if k.startswith("rc-")), key=lambda k: stats[k][1])
    pl_name = min((k for k in stats if k.startswith("plain-")), key=lambda k: stats[k][1])
    rc, pl = stats[rc_name], stats[pl_name]
    per_rc, per_pl = rc[1] / rc[0], pl[1] / pl[0]
    ratio = per_rc / per_pl
    say(
        f"(3) {len(data) / 1e6:.0f} MB journal, {rc[0]} / {pl[0]} micro-batches: read-committed "
        f"{per_rc * 1000:.0f} ms per batch ({rc[2]} rows, query {best['readCommitted']:.2f} s), plain "
        f"{per_pl * 1000:.0f} ms per batch ({pl[2]} rows, query {best['plain']:.2f} s); read-committed / plain "
        f"{ratio:.2f} (goal <= 1.3: {'met' if ratio <= 1.3 else 'MISSED'}); all query times "
        + "; ".join(f"{k} {', '.join(f'{x:.2f}' for x in v)}" for k, v in times.items())
        + f"; load average {os.getloadavg()}"
    )
    med_rc, med_pl = statistics.median(per_batch[rc_name]), statistics.median(per_batch[pl_name])
    say(
        f"    per batch (best runs): read-committed median {med_rc * 1000:.0f} ms, max {max(per_batch[rc_name]) * 1000:.0f} ms "
        f"(the batch holding the long transaction's ACK replays it from the journal's first message); plain median "
        f"{med_pl * 1000:.0f} ms, max {max(per_batch[pl_name]) * 1000:.0f} ms; median ratio {med_rc / med_pl:.2f}; "
        "read-committed batch times " + ", ".join(f"{x * 1000:.0f}" for x in per_batch[rc_name])
    )
    say(
        "    where the time goes (best runs, summed over batches): "
        + "; ".join(
            f"{what} latestOffset {phases[n]['latestOffset']:.2f} s, addBatch {phases[n]['addBatch']:.2f} s"
            for what, n in (("read-committed", rc_name), ("plain", pl_name))
        )
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parts", default="latency,catchup", help="comma-separated: latency, catchup, committed")
    p.add_argument("--messages", type=int, default=200)
    p.add_argument("--interval", type=float, default=0.05, help="seconds between latency probes")
    p.add_argument("--warmup", type=int, default=4, help="single-message batches before probing")
    p.add_argument("--floor-seconds", type=float, default=10.0, help="measuring window of each floor query")
    p.add_argument("--backlog-mib", type=int, default=256, help="the issue's goal is stated for 1024")
    p.add_argument("--fragment-mib", type=int, default=64)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--committed-mib", default="8,64", help="journal sizes of part (3), comma-separated")
    p.add_argument("--committed-batches", type=int, default=16, help="micro-batches per stream in part (3)")
    args = p.parse_args()
    parts = set(args.parts.split(","))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.path.insert(0, HERE)  # stream_floor, bench_read; the workers need stream_floor too
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, os.environ.get("PYTHONPATH")) if p)
    from benchlib import local_spark, ndjson_spec
    from pyspark_gazette.broker import EmbeddedBroker
    from pyspark_gazette.client import Change, ClientConfig, JournalClient
    from stream_floor import TickDataSource

    # Spark (a forked JVM) before the in-process broker's gRPC threads exist.
    spark = local_spark(**{"spark.sql.shuffle.partitions": 2, "spark.driver.memory": "4g"})
    spark.dataSource.register(TickDataSource)
    work = tempfile.mkdtemp(prefix="bench-stream-", dir=os.environ.get("BENCH_TMP", HERE))
    store = os.path.join(work, "store")
    try:
        with EmbeddedBroker(os.path.join(work, "broker"), file_root=store) as broker:
            client = JournalClient(ClientConfig(broker.address, file_root=store))

            client.apply(
                [
                    Change(0, upsert=ndjson_spec("bench/a", 64 << 20)),
                    Change(0, upsert=ndjson_spec("bench/b", 64 << 20)),
                    Change(0, upsert=ndjson_spec("bench/b2", 64 << 20)),
                    Change(0, upsert=ndjson_spec("bench/c", args.fragment_mib << 20)),
                ]
            )
            if "latency" in parts:
                latency(spark, broker, client, store, work, args)
            if "catchup" in parts:
                catchup(spark, broker, client, store, work, args)
            if "committed" in parts:
                committed(spark, broker, client, store, work, args)
            client.close()
        return 0
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
