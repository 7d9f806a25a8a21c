#!/usr/bin/env python3
"""A long stream with steady appends: whether anything grows with the hours it runs.

    PYSPARK_PYTHON=$PWD/.venv/bin/python .venv/bin/python bench/scale_duration.py [--minutes 60]
        [--journals 4] [--rate 400] [--trigger 2] [--sample 20] [--broker embedded-process|gazette]

An embedded broker in a process of its own (``--broker gazette``: one real ``gazette serve``
v0.103.0 and etcd, from ``.bin/``) serves ``--journals`` ndjson journals with ZSTANDARD
fragments of 4 MiB; a feeder thread appends ``--rate`` click events a second, spread over the
journals, in ten appends a second. A local[2] Spark runs one stream over them all, as a
pipeline would: a typed read (schema), ``groupBy(country)`` with ``count`` and ``sum(amount)``,
update mode, a ``--trigger``-second processing-time trigger, a checkpoint on local disk and the
``noop`` sink. Every ``--sample`` seconds the bench records:

- each trigger's time (Spark's ``triggerExecution``, every batch by its id) and input rows;
- resident memory, threads and open files of the driver's JVM, of this process (the driver's
  Python), of the Python processes under the JVM (the data source's planner and the workers)
  and of the broker;
- the checkpoint's bytes and files.

At the end the feeder stops, the stream drains, and the rows the stream read must equal the
events appended (the bench fails otherwise). Each series is summarised as its median in the
first and last tenth of the run and a least-squares slope per hour; a flat run has last/first
near 1 and a slope near 0.
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
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "connector"))

import scalelib  # noqa: E402

CURVE = "duration"
SCHEMA = "event_id LONG, ts TIMESTAMP, user_id STRING, country STRING, page STRING, amount DOUBLE"
COUNTRIES = ("US", "DE", "FR", "BR", "IN", "JP", "GB", "CA")
PAGES = ("/", "/search", "/product", "/cart", "/checkout")


def events(first: int, n: int) -> bytes:
    """``n`` click events from id ``first``, ndjson."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return "".join(
        f'{{"event_id":{i},"ts":"{now}","user_id":"u{i * 7919 % 100003:06d}","country":"{COUNTRIES[i % 8]}",'
        f'"page":"{PAGES[i % 5]}","amount":{i % 10000 / 100}}}\n'
        for i in range(first, first + n)
    ).encode()


class Feeder(threading.Thread):
    """Appends ``rate`` events a second over ``names``, ten appends a second, until stopped."""

    def __init__(self, client, names: list[str], rate: int):  # type: ignore[no-untyped-def]
        super().__init__(daemon=True, name="feeder")
        self.client, self.names, self.rate = client, names, rate
        self.appended = 0
        self.errors = 0
        self.stop = threading.Event()

    def run(self) -> None:
        per_tick = max(1, self.rate // 10)
        start, tick = time.monotonic(), 0
        while not self.stop.is_set():
            name = self.names[tick % len(self.names)]
            try:
                self.client.append(name, events(self.appended, per_tick))
                self.appended += per_tick
            except Exception as e:  # noqa: BLE001 - counted and reported; the stream's check fails if rows were lost
                self.errors += 1
                print(f"append to {name} failed: {e}", file=sys.stderr)
            tick += 1
            self.stop.wait(max(0.0, start + tick / 10 - time.monotonic()))


def python_children(jvm: int) -> list[int]:
    return [p for p in scalelib.children(jvm) if "python" in scalelib.cmdline(p)]


def gazette_pids(cluster) -> list[int]:  # type: ignore[no-untyped-def]
    """The PIDs of a RealGazette's brokers."""
    return [b.proc.pid for b in cluster.cluster.brokers if b.proc is not None]


def heap_after_gc_mib(spark) -> float:  # type: ignore[no-untyped-def]
    """The driver JVM's heap in use right after its last collection (every heap pool's
    ``CollectionUsage``), MiB: unlike RSS, it grows only with objects the JVM keeps."""
    used = 0
    factory = spark.sparkContext._jvm.java.lang.management.ManagementFactory
    for pool in factory.getMemoryPoolMXBeans():
        if str(pool.getType()) == "Heap memory" and pool.getCollectionUsage() is not None:
            used += pool.getCollectionUsage().getUsed()
    return used / (1 << 20)


def sample(t0: float, jvm: int, broker_pids: list[int], checkpoint: str, spark=None) -> dict:  # type: ignore[no-untyped-def]
    kids = python_children(jvm)
    ck_bytes, ck_files = scalelib.dir_bytes(checkpoint)
    me = os.getpid()
    return {
        "t": round(time.monotonic() - t0, 1),
        "jvm_rss": round(scalelib.rss_mib(jvm), 1),
        **({"jvm_heap_after_gc": round(heap_after_gc_mib(spark), 1)} if spark is not None else {}),
        "jvm_threads": scalelib.threads(jvm),
        "jvm_files": scalelib.open_files(jvm),
        "driver_py_rss": round(scalelib.rss_mib(me), 1),
        "driver_py_threads": scalelib.threads(me),
        "driver_py_files": scalelib.open_files(me),
        "workers": len(kids),
        "workers_rss": round(sum(scalelib.rss_mib(p) for p in kids), 1),
        "workers_threads": sum(scalelib.threads(p) for p in kids),
        "workers_files": sum(scalelib.open_files(p) for p in kids),
        "broker_rss": round(sum(scalelib.rss_mib(p) for p in broker_pids), 1),
        "broker_threads": sum(scalelib.threads(p) for p in broker_pids),
        "broker_files": sum(scalelib.open_files(p) for p in broker_pids),
        "checkpoint_bytes": ck_bytes,
        "checkpoint_files": ck_files,
        "load": os.getloadavg()[0],
    }


def progress(p: dict, t0: float) -> dict:
    """One batch's progress report, as kept."""
    return {
        "t": round(time.monotonic() - t0, 1),
        "batch": p["batchId"],
        "trigger_ms": p["durationMs"].get("triggerExecution", 0),
        "rows": p["numInputRows"],
    }


def slope_per_hour(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over xs (seconds), per hour."""
    if len(xs) < 2:
        return 0.0
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return 0.0 if var == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var * 3600


def summarise(xs: list[float], ys: list[float]) -> dict:
    """Median of the first and last tenth, their ratio, and the slope per hour."""
    k = max(1, len(ys) // 10)
    first, last = statistics.median(ys[:k]), statistics.median(ys[-k:])
    return {
        "first": round(first, 2),
        "last": round(last, 2),
        "last_over_first": round(last / first, 3) if first else None,
        "slope_per_hour": round(slope_per_hour(xs, ys), 3),
    }


SERIES = (
    ("trigger_ms", "trigger time (ms)"),
    ("jvm_rss", "driver JVM RSS (MiB)"),
    ("jvm_heap_after_gc", "driver JVM heap after its last collection (MiB)"),
    ("driver_py_rss", "driver Python RSS (MiB)"),
    ("workers_rss", "Python under the JVM, RSS (MiB)"),
    ("broker_rss", "broker RSS (MiB)"),
    ("jvm_threads", "driver JVM threads"),
    ("jvm_files", "driver JVM open files"),
    ("workers_files", "Python under the JVM, open files"),
    ("workers_threads", "Python under the JVM, threads"),
    ("broker_files", "broker open files"),
    ("checkpoint_bytes", "checkpoint bytes"),
    ("checkpoint_files", "checkpoint files"),
)


def run(args) -> dict:  # type: ignore[no-untyped-def]
    from benchlib import EmbeddedProcess, RealGazette, local_spark, ndjson_spec
    from pyspark_gazette.client import ClientConfig, JournalClient

    base = tempfile.mkdtemp(prefix="scale-duration-", dir=args.tmp)
    store = os.path.join(base, "store")
    os.makedirs(store)
    checkpoint = os.path.join(base, "checkpoint")
    names = [f"scale/d{i:02d}" for i in range(args.journals)]
    cluster = RealGazette(base, 1, args.journals) if args.broker == "gazette" else EmbeddedProcess(base, store)
    try:
        with cluster as broker:
            broker_pids = gazette_pids(broker) if args.broker == "gazette" else [broker.proc.pid]
            client = JournalClient(ClientConfig(broker.address, file_root=broker.store))
            broker.apply(client, [ndjson_spec(n, 4 << 20, refresh_seconds=60) for n in names])
            spark = local_spark(**{"spark.sql.shuffle.partitions": 2})
            jvm = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
            from pyspark.sql import functions as F

            df = (
                spark.readStream.format("gazette")
                .option("broker.address", broker.address)
                .option("store.fileRoot", broker.store)
                .option("journal", ",".join(names))
                .option("startingOffsets", "earliest")
                .schema(SCHEMA)
                .load()
            )
            agg = df.groupBy("country").agg(F.count("*").alias("n"), F.sum("amount").alias("amount"))
            feeder = Feeder(client, names, args.rate)
            feeder.start()
            query = (
                agg.writeStream.format("noop")
                .outputMode("update")
                .option("checkpointLocation", checkpoint)
                .trigger(processingTime=f"{args.trigger} seconds")
                .start()
            )
            t0 = time.monotonic()
            batches: dict[int, dict] = {}
            samples: list[dict] = []
            deadline = t0 + args.minutes * 60
            with scalelib.LoadSampler(every=10) as load:
                try:
                    while time.monotonic() < deadline:
                        if query.exception() is not None:
                            raise SystemExit(f"the stream failed: {query.exception()}")
                        for p in query.recentProgress:
                            if p["batchId"] not in batches and p.get("numInputRows", 0) > 0:
                                batches[p["batchId"]] = progress(p, t0)
                        samples.append(sample(t0, jvm, broker_pids, checkpoint, spark))
                        s = samples[-1]
                        print(
                            f"{s['t']:7.0f}s batches {len(batches):5d} appended {feeder.appended:9d}"
                            f" jvm {s['jvm_rss']:.0f} MiB/{s['jvm_threads']} thr/{s['jvm_files']} fd"
                            f" py-workers {s['workers']}x {s['workers_rss']:.0f} MiB/{s['workers_files']} fd"
                            f" broker {s['broker_rss']:.0f} MiB  ckpt {s['checkpoint_bytes'] / 1e6:.2f} MB"
                            f" load {s['load']:.1f}",
                            flush=True,
                        )
                        time.sleep(min(args.sample, max(0.0, deadline - time.monotonic())))
                finally:
                    feeder.stop.set()
                    feeder.join()
                # Drained: every appended event in some batch, within two minutes.
                drain = time.monotonic() + 120
                while True:
                    for p in query.recentProgress:
                        if p["batchId"] not in batches and p.get("numInputRows", 0) > 0:
                            batches[p["batchId"]] = progress(p, t0)
                    if sum(b["rows"] for b in batches.values()) >= feeder.appended or time.monotonic() > drain:
                        break
                    time.sleep(0.5)
                query.stop()
            spark.stop()
            # The rows the stream read: every batch's input rows (each sample sees the last 100
            # progress reports, far more than the triggers between two samples).
            seen = sum(b["rows"] for b in batches.values())
            if seen != feeder.appended or feeder.errors:
                raise SystemExit(
                    f"appended {feeder.appended} events ({feeder.errors} failed appends), the stream read {seen}"
                )
            return {
                "broker": args.broker,
                "minutes": args.minutes,
                "journals": args.journals,
                "rate": args.rate,
                "trigger_s": args.trigger,
                "appended": feeder.appended,
                "stream_rows_sampled": seen,
                "batches_sampled": len(batches),
                "batches": sorted(batches.values(), key=lambda b: b["batch"]),
                "samples": samples,
                "load_sampler": load,
            }
    finally:
        shutil.rmtree(base, ignore_errors=True)


#: Seconds at the start of a run left out of the growth summary: Spark's checkpoint fills its
#: retention (the last 100 batches), the JVM sizes its heap, the broker its buffers.
WARMUP = 600


def windows(record: dict, minutes: float = 5) -> list[dict]:
    """Per ``minutes`` window: the median trigger time, the mean load average and the samples."""
    out = []
    span = minutes * 60
    end = max((x["t"] for x in record["samples"]), default=0)
    t = 0.0
    while t <= end:
        trig = [x["trigger_ms"] for x in record["batches"] if t <= x["t"] < t + span]
        samp = [x for x in record["samples"] if t <= x["t"] < t + span]
        if trig and samp:
            out.append(
                {
                    "t": t,
                    "trigger_ms": statistics.median(trig),
                    "load": statistics.fmean(x["load"] for x in samp),
                }
            )
        t += span
    return out


def summary(record: dict) -> dict:
    """Each series after the warm-up (:data:`WARMUP`, a sixth of shorter runs): its median in the
    first and last tenth and its slope per hour; and how the trigger time followed the load
    (correlation of 5-minute medians with the load average)."""
    warmup = min(WARMUP, record["minutes"] * 10)
    out: dict = {"warmup_s": warmup}
    b = [x for x in record["batches"] if x["t"] >= warmup] or record["batches"]
    out["trigger_ms"] = summarise([x["t"] for x in b], [x["trigger_ms"] for x in b])
    s = [x for x in record["samples"] if x["t"] >= warmup] or record["samples"]
    for key, _label in SERIES[1:]:
        if all(key in x for x in s):
            out[key] = summarise([x["t"] for x in s], [x[key] for x in s])
    w = windows(record)
    if len(w) > 2:
        out["trigger_vs_load"] = {
            "correlation": round(statistics.correlation([x["load"] for x in w], [x["trigger_ms"] for x in w]), 2),
            "windows": [{k: round(v, 1) for k, v in x.items()} for x in w],
        }
    return out


def draw(record: dict) -> None:
    fig, (ax_t, ax_m, ax_f, ax_c) = scalelib.figure(
        f"A {record['minutes']}-minute stream, {record['rate']} events/s over {record['journals']} journals,"
        f" {record['trigger_s']} s trigger ({record['broker']} broker)",
        record,
        panels=4,
        width=4.6,
    )
    b = record["batches"]
    ax_t.plot([x["t"] / 60 for x in b], [x["trigger_ms"] for x in b], ".", ms=2, alpha=0.5)
    ax_t.set_xlabel("minutes")
    ax_t.set_ylabel("trigger time (ms)")
    ax_t.set_ylim(bottom=0)
    w = windows(record)
    ax_t.plot([x["t"] / 60 + 2.5 for x in w], [x["trigger_ms"] for x in w], "-", color="C0", label="5-minute median")
    load_ax = ax_t.twinx()
    load_ax.plot([x["t"] / 60 for x in record["samples"]], [x["load"] for x in record["samples"]], color="C3", lw=0.8)
    load_ax.set_ylabel("load average (red)", fontsize=8, color="C3")
    load_ax.set_ylim(bottom=0)
    ax_t.legend(fontsize=7, loc="upper left")
    s = record["samples"]
    mins = [x["t"] / 60 for x in s]
    for key, label in (
        ("jvm_rss", "driver JVM"),
        ("driver_py_rss", "driver Python"),
        ("workers_rss", "Python under JVM"),
        ("broker_rss", "broker"),
        ("jvm_heap_after_gc", "driver JVM heap after GC"),
    ):
        if all(key in x for x in s):
            ax_m.plot(mins, [x[key] for x in s], label=label)
    ax_m.set_xlabel("minutes")
    ax_m.set_ylabel("resident memory (MiB)")
    ax_m.set_ylim(bottom=0)
    ax_m.legend(fontsize=7)
    for key, label in (
        ("jvm_threads", "JVM threads"),
        ("jvm_files", "JVM open files"),
        ("workers_files", "Python workers' files"),
        ("broker_files", "broker open files"),
    ):
        ax_f.plot(mins, [x[key] for x in s], label=label)
    ax_f.set_xlabel("minutes")
    ax_f.set_ylabel("count")
    ax_f.set_ylim(bottom=0)
    ax_f.legend(fontsize=7)
    ax_c.plot(mins, [x["checkpoint_bytes"] / 1e6 for x in s])
    ax_c.set_xlabel("minutes")
    ax_c.set_ylabel("checkpoint (MB)")
    ax_c.set_ylim(bottom=0)
    scalelib.finish(fig, CURVE)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=60)
    p.add_argument("--journals", type=int, default=4)
    p.add_argument("--rate", type=int, default=400, help="events a second, over all journals")
    p.add_argument("--trigger", type=float, default=2, help="processing-time trigger, seconds")
    p.add_argument("--sample", type=float, default=20, help="seconds between samples")
    p.add_argument("--broker", choices=("embedded-process", "gazette"), default="embedded-process")
    p.add_argument("--tmp", default=None, help="directory for the broker, store and checkpoint")
    args = p.parse_args()
    result = run(args)
    load = result.pop("load_sampler")
    result["summary"] = summary(result)
    print(json.dumps(result["summary"], indent=1))
    print(
        f"appended {result['appended']} events; the journals hold them all; {result['batches_sampled']} batches sampled"
    )
    record_path = scalelib.save(CURVE, result, load)
    draw(json.loads(record_path.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
