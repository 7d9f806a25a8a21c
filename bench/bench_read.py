#!/usr/bin/env python3
"""Spark batch-read benchmark: the gazette source against Spark's own file sources, same bytes.

    .venv/bin/python bench/bench_read.py [--mib 192] [--rounds 3] [--fragments 10000]

One run builds a journal of ndjson click events (ZSTANDARD fragments persisted to a local file
store by an embedded broker) and writes the same uncompressed bytes to a local file, then times,
interleaved and best of ``--rounds``, on a local[2] Spark:

  (a) raw reads: ``spark.read.format("gazette")`` ``value`` column vs ``spark.read.text(file)``
      (the same aggregate over every row), goal ratio >= 1.0;
  (b) typed reads: the gazette source with a schema vs ``spark.read.schema(s).json(file)``,
      goal ratio >= 1.5; and the same read with the C JSON scanner off in its Python workers
      (``gazette_purepython``, bench/floors.py), same session;
  (c) direct fragment reads vs the same read forced through the broker Read RPC
      (``directReads=false``), goal ratio >= 3;
  (f) same-run floors: the ``arrowfloor`` source of bench/floors.py yielding, batch for batch,
      exactly the Arrow batches our reader produces for each of its partitions (made by running
      our reader in this process first), raw (the three untyped columns) and typed (the
      schema); ours / floor is how close we are to what Spark allows any Python data source,
      goals >= 0.95 raw and >= 0.9 typed; also the raw floor with every 8 batches joined into
      one (does Spark care about batch size?);
  (t) with (f): the typed decode alone in this process (no Spark) against pyarrow's JSON reader
      parsing the same batches straight into the schema: how much of the typed cost is the
      parse itself;
  (s) a user schema of untyped columns (``value STRING``: raw, no JSON parsing, one column) vs
      the default three columns;
  (p) driver planning of a journal of ``--fragments`` fragments (files written straight into
      the store and picked up by the broker's store listing), goal < 2 s;
  (n) with (b): a schema of 2 of the fields (same query shape) vs the full schema, goal >= 1.5x;
  (g) with (b): the typed read again with its workers' garbage collector left alone
      (``gazette_unfrozen``: ``PYSPARK_GAZETTE_FREEZE_IMPORTS=0``, so pyspark's daemon collects
      every imported object after each task; see pyspark_gazette.spark.worker_gc), same session;
  (z) with (b): the typed read with parse units (``PYSPARK_GAZETTE_TYPED_PARSE_BYTES``, also the
      Arrow batches Spark receives) of 1, 4 and 32 MiB against the default 8, same session;
  (m) peak RSS of each Python worker during one typed read (b) and one raw read (a), sampled
      from /proc every 20 ms (workers reused between queries are re-measured from their RSS at
      the query's start), goal: typed within 2x of raw.

``--shape`` picks the records: ``clicks`` (8 flat fields incl. a timestamp string, the default)
or ``nested`` (a timestamp with milliseconds and an offset, a struct, an array of strings and a
field outside the schema). ``--cases`` picks the groups (default ``abcfsp``). With ``--jfr FILE``, one more raw read
(a) after the timed rounds is recorded with JDK Flight Recorder (bench/jfr_top.py summarises it).

Ratios are baseline time / our time: above 1 means ours is faster.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA = "event_id LONG, ts TIMESTAMP, user_id STRING, country STRING, page STRING, device STRING, duration_ms LONG, amount DOUBLE"
NESTED_SCHEMA = (
    "event_id LONG, user_id STRING, ts TIMESTAMP, url STRING, amount DOUBLE, "
    "geo STRUCT<country: STRING, lat: DOUBLE>, tags ARRAY<STRING>"
)
#: (n): 2 of the fields, per shape.
TWO_FIELDS = "country STRING, amount DOUBLE"
NESTED_TWO_FIELDS = "user_id STRING, amount DOUBLE"


def make_nested_lines(target_bytes: int) -> bytes:
    rng = random.Random(7)
    parts, size, i = [], 0, 0
    while size < target_bytes:
        doc = {
            "event_id": i,
            "user_id": f"user-{rng.randrange(10007)}",
            "ts": f"2026-01-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:{(i * 7) % 60:02d}.{i % 1000:03d}+01:00",
            "url": f"https://example.com/p/{rng.randrange(5000)}?ref=x",
            "amount": round(rng.random() * 100, 2),
            "geo": {"country": ["US", "DE", "FR", "JP"][i % 4], "lat": 10.5 + i % 7},
            "tags": ["a", "bb", "ccc"][: i % 4],
            "ignored": {"k": i % 3 == 0},
        }
        line = json.dumps(doc, separators=(",", ":")).encode() + b"\n"
        parts.append(line)
        size += len(line)
        i += 1
    return b"".join(parts)


class RssSampler:
    """Peak RSS growth of each Spark Python worker (``pyspark.daemon`` children) while active."""

    def __init__(self) -> None:
        import threading

        self.peak: dict[int, int] = {}
        self.start: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _workers() -> dict[int, int]:
        out = {}
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read()
                if b"pyspark.daemon" not in cmd and b"pyspark.worker" not in cmd:
                    continue
                with open(f"/proc/{pid}/status") as f:
                    rss = next(int(x.split()[1]) for x in f if x.startswith("VmRSS:"))
                out[int(pid)] = rss << 10
            except (OSError, StopIteration):
                continue
        return out

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            for pid, rss in self._workers().items():
                self.start.setdefault(pid, rss)
                self.peak[pid] = max(self.peak.get(pid, 0), rss)

    def __enter__(self):
        self.start = self._workers()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def max_peak(self) -> int:
        return max(self.peak.values(), default=0)


class CpuMeter:
    """CPU seconds (user + system) a query costs Spark: the driver JVM (local mode: also the
    executor) and its Python workers (its descendant processes), from /proc, and this process (the driver's Python, the embedded broker). On a shared machine wall time
    measures the neighbours; CPU time measures the work."""

    def __init__(self, jvm_pid: int) -> None:
        self.jvm = jvm_pid
        self.tick = os.sysconf("SC_CLK_TCK")

    def _spark(self) -> dict[int, int]:
        """utime + stime of the JVM and of its descendants (its Python workers), by pid."""
        parent, ticks = {}, {}
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                parent[int(pid)] = int(fields[1])
                ticks[int(pid)] = int(fields[11]) + int(fields[12])
            except (OSError, IndexError, ValueError):
                continue
        out = {}
        for pid, t in ticks.items():
            p, hops = pid, 0
            while p > 1 and p != self.jvm and hops < 8:  # the JVM's own children (daemons) and theirs
                p, hops = parent.get(p, 0), hops + 1
            if p == self.jvm:
                out[pid] = t
        return out

    def measure(self, fn) -> tuple[float, float, float]:  # type: ignore[no-untyped-def]
        """Run fn; CPU seconds of the JVM, of the Python workers, of this process."""
        before, own = self._spark(), time.process_time()
        fn()
        after, own = self._spark(), time.process_time() - own
        jvm = after.get(self.jvm, 0) - before.get(self.jvm, 0)
        workers = sum(t - before.get(pid, 0) for pid, t in after.items() if pid != self.jvm)
        return jvm / self.tick, workers / self.tick, own


def make_lines(target_bytes: int) -> bytes:
    rng = random.Random(7)
    countries = ["US", "DE", "FR", "BR", "IN", "JP", "GB", "CA"]
    pages = ["/", "/search", "/product", "/cart", "/checkout"]
    parts, size, i = [], 0, 0
    while size < target_bytes:
        doc = {
            "event_id": i,
            "ts": f"2026-01-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:{(i * 7) % 60:02d}Z",
            "user_id": f"u{rng.randrange(100000):06d}",
            "country": countries[i % len(countries)],
            "page": pages[rng.randrange(len(pages))],
            "device": "mobile" if i % 3 else "desktop",
            "duration_ms": rng.randrange(10, 60000),
            "amount": round(rng.random() * 100, 2),
        }
        line = json.dumps(doc, separators=(",", ":")).encode() + b"\n"
        parts.append(line)
        size += len(line)
        i += 1
    return b"".join(parts)


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def report(ratios) -> None:
    print(f"\nratios (baseline time / ours; goal in brackets); load average {os.getloadavg()}:")
    for name, ratio, goal in ratios:
        print(f"  {name:40s} {ratio:5.2f}  [>= {goal}]  {'met' if ratio >= goal else 'MISSED'}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mib", type=int, default=192, help="uncompressed MiB of ndjson (default %(default)s)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--fragments", type=int, default=10_000, help="fragments of the planning journal")
    p.add_argument("--fragment-mib", type=int, default=16, help="fragment length of the data journal")
    p.add_argument("--cases", default="abcfsp", help="groups to run (default %(default)s)")
    p.add_argument("--jfr", help="record one more raw read (a) with JFR into this file")
    p.add_argument("--codec", default="ZSTANDARD", help="fragment codec of the data journal (default %(default)s)")
    p.add_argument("--shape", default="clicks", choices=("clicks", "nested"), help="record shape (default %(default)s)")
    args = p.parse_args()
    from benchlib import require_rolled_fragment

    require_rolled_fragment(p, args)
    nested = args.shape == "nested"
    schema_ddl = NESTED_SCHEMA if nested else SCHEMA
    two_ddl = NESTED_TWO_FIELDS if nested else TWO_FIELDS
    key = "user_id" if nested else "country"

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # The floors' classes must be importable by the Python workers.
    os.environ["PYTHONPATH"] = os.pathsep.join(x for x in (HERE, os.environ.get("PYTHONPATH")) if x)
    from pyspark.sql import functions as F

    from benchlib import append_lines, best_of, jfr_recording, local_spark, ndjson_spec, same_answers
    from pyspark_gazette.broker import EmbeddedBroker
    from pyspark_gazette.client import Change, ClientConfig, JournalClient
    from pyspark_gazette.protocol import pb

    work = tempfile.mkdtemp(prefix="bench-read-", dir=os.environ.get("BENCH_TMP", HERE))
    try:
        data = (make_nested_lines if nested else make_lines)(args.mib << 20)
        flat = os.path.join(work, "events.json")
        store = os.path.join(work, "store")
        with EmbeddedBroker(os.path.join(work, "broker"), file_root=store) as broker:
            client = JournalClient(ClientConfig(broker.address, file_root=store))

            client.apply(
                [
                    Change(0, upsert=ndjson_spec("bench/events", args.fragment_mib << 20, codec=args.codec)),
                    Change(0, upsert=ndjson_spec("bench/many", 1024)),
                ]
            )
            t = time.perf_counter()
            append_lines(client, "bench/events", data)  # 1 MiB appends on line boundaries
            client.append("bench/events", b'{"event_id":-1}\n')  # rolls the last data fragment
            assert broker.wait_persisted(300)
            load_s = time.perf_counter() - t
            frags = client.list_fragments("bench/events")
            persisted = [f for f in frags if f.spec.mod_time]
            # Both sides read exactly the persisted bytes [0, end): the baseline file holds them.
            data = data[: persisted[-1].spec.end]
            with open(flat, "wb") as f:
                f.write(data)
            print(
                f"data: {len(data) / 1e6:.1f} MB of ndjson in {len(persisted)} persisted {args.codec} fragments "
                f"(+{len(frags) - len(persisted)} live), loaded in {load_s:.1f}s"
            )

            spark = local_spark(
                **{
                    "spark.sql.session.timeZone": "UTC",
                    "spark.driver.memory": "4g",
                    "spark.ui.showConsoleProgress": "false",
                    "spark.sql.files.maxPartitionBytes": args.fragment_mib << 20,
                }
            )

            def gz(**opts):
                r = (
                    spark.read.format("gazette")
                    .option("broker.address", broker.address)
                    .option("store.fileRoot", store)
                )
                r = r.option("maxPartitionBytes", str(args.fragment_mib << 20))
                for k, v in opts.items():
                    r = r.option(k, v)
                return r

            end = json.dumps({"bench/events": persisted[-1].spec.end})
            import floors
            from pyspark_gazette.spark.options import ReadOptions
            from pyspark_gazette.spark.read.batch_scan import GazetteBatchReader, read_partition
            from pyspark_gazette.spark.read.partition_reader import TYPED_PARSE_BYTES, read_batches
            from pyspark_gazette.spark.source import untyped_schema

            floors.register(spark)
            pure = floors.register_pure_python(spark)  # the same source, C JSON scanner off
            unfrozen = floors.register_unfrozen(spark)  # the same source, its workers' collector left alone
            units = floors.register_parse_units(spark) if "z" in args.cases else {}

            def gz_pure(**opts):
                r = gz(**opts)
                return r.format(pure)

            def gz_unfrozen(**opts):
                return gz(**opts).format(unfrozen)

            def read_opts(**extra):
                return ReadOptions.parse(
                    {
                        "broker.address": broker.address,
                        "journals": "bench/events",
                        "store.fileRoot": store,
                        "endingOffsets": end,
                        "maxPartitionBytes": str(args.fragment_mib << 20),
                        **extra,
                    }
                )

            def floor_dir(name, schema, combine=1):
                """Our reader's batches of every partition, in this process, into IPC files."""
                o = read_opts()
                parts = GazetteBatchReader(o, schema).partitions()
                path = os.path.join(work, name)
                rows, batches = floors.dump_partitions(
                    path, (read_partition(p, o, schema) for p in parts), combine=combine
                )
                print(f"floor {name}: {rows} rows in {batches} batches, {len(parts)} partitions")
                return path

            def floor(path, schema):
                return spark.read.format("arrowfloor").option("path", path).option("schema", schema.json()).load()

            raw_schema = untyped_schema(True, False)
            typed_schema = gz().schema(schema_ddl).load("bench/events").schema
            if "f" in args.cases:
                raw_dir = floor_dir("floor-raw", raw_schema)
                raw8_dir = floor_dir("floor-raw-x8", raw_schema, combine=8)
                typed_dir = floor_dir("floor-typed", typed_schema)

            def typed_query(reader):  # type: ignore[no-untyped-def]
                """(b)'s typed aggregate over our source (with or without the C scanner)."""
                return (
                    reader.schema(schema_ddl)
                    .load("bench/events")
                    .agg(F.sum("amount"), F.countDistinct(key), F.max("ts"))
                    .collect()
                )

            cases = {
                "a: gazette value": lambda: (
                    gz(endingOffsets=end).load("bench/events").agg(F.sum(F.length("value"))).collect()
                ),
                "a: spark.read.text": lambda: spark.read.text(flat).agg(F.sum(F.length("value"))).collect(),
                "b: gazette typed": lambda: typed_query(gz(endingOffsets=end)),
                "b: gazette typed, no C": lambda: typed_query(gz_pure(endingOffsets=end)),
                "g: gazette typed, unfrozen": lambda: typed_query(gz_unfrozen(endingOffsets=end)),
                **{
                    f"z: typed, {mib} MiB units": (lambda name=name: typed_query(gz(endingOffsets=end).format(name)))
                    for mib, name in units.items()
                },
                "b: spark.read.json": lambda: (
                    spark.read.schema(schema_ddl)
                    .json(flat)
                    .agg(F.sum("amount"), F.countDistinct(key), F.max("ts"))
                    .collect()
                ),
                "b: gazette typed, same query": lambda: (
                    gz(endingOffsets=end)
                    .schema(schema_ddl)
                    .load("bench/events")
                    .agg(F.sum("amount"), F.countDistinct(key))
                    .collect()
                ),
                "n: gazette typed, 2 fields": lambda: (
                    gz(endingOffsets=end)
                    .schema(two_ddl)
                    .load("bench/events")
                    .agg(F.sum("amount"), F.countDistinct(key))
                    .collect()
                ),
                "c: direct reads": lambda: gz(endingOffsets=end).load("bench/events").agg(F.count("value")).collect(),
                "c: through broker": lambda: (
                    gz(endingOffsets=end, directReads="false").load("bench/events").agg(F.count("value")).collect()
                ),
                "f: floor raw": lambda: floor(raw_dir, raw_schema).agg(F.sum(F.length("value"))).collect(),
                "f: floor raw x8 batch": lambda: floor(raw8_dir, raw_schema).agg(F.sum(F.length("value"))).collect(),
                "f: floor typed": lambda: (
                    floor(typed_dir, typed_schema).agg(F.sum("amount"), F.countDistinct(key), F.max("ts")).collect()
                ),
                "s: gazette value only": lambda: (
                    gz(endingOffsets=end)
                    .schema("value STRING")
                    .load("bench/events")
                    .agg(F.sum(F.length("value")))
                    .collect()
                ),
            }
            groups = set(args.cases) | ({"a"} if "f" in args.cases or "s" in args.cases else set())
            groups |= {"b"} if "f" in args.cases or "n" in args.cases or "m" in args.cases else set()
            groups |= {"a"} if "m" in args.cases else set()
            groups |= {"b"} if "g" in args.cases or "z" in args.cases else set()
            cases = {
                k: v
                for k, v in cases.items()
                if k[0] in groups and (k != "b: gazette typed, same query" or "n" in groups)
            }
            # Same answers first (and a warm-up of every path).
            if "a" in groups:
                assert cases["a: gazette value"]()[0][0] == cases["a: spark.read.text"]()[0][0]
            if "b" in groups:
                typed = [tuple(r) for r in cases["b: gazette typed"]()]
                assert same_answers(typed, [tuple(r) for r in cases["b: spark.read.json"]()])
                assert same_answers(typed, [tuple(r) for r in cases["b: gazette typed, no C"]()])
            if "g" in groups:
                assert same_answers([tuple(r) for r in cases["g: gazette typed, unfrozen"]()], typed)
            for name in (k for k in cases if k.startswith("z: ")):
                assert same_answers([tuple(r) for r in cases[name]()], typed)
            if "c" in groups:
                assert cases["c: direct reads"]()[0][0] == cases["c: through broker"]()[0][0]
            if "f" in groups:
                raw_total = cases["a: gazette value"]()[0][0]
                assert cases["f: floor raw"]()[0][0] == raw_total == cases["f: floor raw x8 batch"]()[0][0]
                assert same_answers([tuple(r) for r in cases["f: floor typed"]()], typed)
            if "s" in groups:
                assert cases["s: gazette value only"]()[0][0] == cases["a: gazette value"]()[0][0]
            if "n" in groups:
                assert same_answers(cases["n: gazette typed, 2 fields"](), cases["b: gazette typed, same query"]())
            rss = {}
            if "m" in args.cases:  # peak worker RSS: one raw read, one typed read
                for name in ("a: gazette value", "b: gazette typed", "b: gazette typed, no C"):
                    with RssSampler() as sampler:
                        cases[name]()
                    rss[name] = sampler.max_peak()
            meter = CpuMeter(int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()))
            cpu: dict[str, list[tuple[float, float, float]]] = {k: [] for k in cases}

            def metered(name, fn):  # type: ignore[no-untyped-def]
                return lambda: cpu[name].append(meter.measure(fn))

            best, rounds = best_of({k: metered(k, v) for k, v in cases.items()}, args.rounds)
            if args.jfr and "a" in groups:
                with jfr_recording(spark, args.jfr):
                    cases["a: gazette value"]()
            mb = len(data) / 1e6
            print(f"\nbest of {args.rounds} rounds on local[2] (all rounds in brackets)")
            for name, s in best.items():
                print(f"  {name:22s} {s:7.2f}s  {mb / s:8.1f} MB/s   [{', '.join(f'{x:.2f}' for x in rounds[name])}]")
            print("\n  CPU seconds per query, best of the rounds: the JVM + Python workers + this process")
            cpu_best = {k: min(sum(x) for x in v) for k, v in cpu.items() if v}
            for name, v in cpu.items():
                if v:
                    jvm, workers, own = min(v, key=sum)
                    print(f"  {name:22s} {jvm:6.2f} + {workers:5.2f} + {own:5.2f} = {jvm + workers + own:6.2f} CPU-s")
            if "z" in groups:
                default_mib = TYPED_PARSE_BYTES >> 20  # this process's environment is the workers'
                sweep = {default_mib: (best["b: gazette typed"], cpu_best["b: gazette typed"])}
                sweep |= {m: (best[f"z: typed, {m} MiB units"], cpu_best[f"z: typed, {m} MiB units"]) for m in units}
                print(
                    "  (z) typed read by parse unit (= Arrow batch to Spark): "
                    + ", ".join(f"{m} MiB {w:.2f} s / {c:.2f} CPU-s" for m, (w, c) in sorted(sweep.items()))
                )
            if "g" in groups:
                print(
                    "  (g') CPU seconds of the typed read, imports frozen vs collected after every task: "
                    f"{cpu_best['b: gazette typed']:.2f} vs {cpu_best['g: gazette typed, unfrozen']:.2f}"
                )
            if "b" in groups and "f" in args.cases:
                print(
                    "  (f'') typed vs the typed floor in CPU seconds: "
                    f"{cpu_best['f: floor typed'] / cpu_best['b: gazette typed']:.2f} with the C scanner, "
                    f"{cpu_best['f: floor typed'] / cpu_best['b: gazette typed, no C']:.2f} without; raw vs the raw "
                    f"floor {cpu_best['f: floor raw'] / cpu_best['a: gazette value']:.2f}; typed vs spark.read.json "
                    f"{cpu_best['b: spark.read.json'] / cpu_best['b: gazette typed']:.2f}"
                )
            wanted = [
                ("a", "a: raw value reads vs spark.read.text", "a: spark.read.text", "a: gazette value", 1.0),
                ("b", "b: typed reads vs spark.read.json", "b: spark.read.json", "b: gazette typed", 1.5),
                ("c", "c: direct vs through the broker", "c: through broker", "c: direct reads", 3.0),
                ("f", "f: raw reads vs the raw floor", "f: floor raw", "a: gazette value", 0.95),
                ("f", "f: typed reads vs the typed floor", "f: floor typed", "b: gazette typed", 0.9),
                ("f", "f: typed, no C scanner, vs the floor", "f: floor typed", "b: gazette typed, no C", 0.9),
                ("b", "b: typed, C scanner vs without", "b: gazette typed, no C", "b: gazette typed", 1.0),
                ("g", "g: typed, frozen vs collected", "g: gazette typed, unfrozen", "b: gazette typed", 1.0),
                ("f", "f: floor, 8x batches vs floor", "f: floor raw", "f: floor raw x8 batch", 1.0),
                ("s", "s: value only vs three columns", "a: gazette value", "s: gazette value only", 1.0),
                (
                    "n",
                    "n: 2 of the fields vs all of them",
                    "b: gazette typed, same query",
                    "n: gazette typed, 2 fields",
                    1.5,
                ),
            ]
            ratios = [(name, best[base] / best[ours], goal) for g, name, base, ours, goal in wanted if g in args.cases]
            if "b" in groups and "f" in args.cases:
                print(f"  (b') typed vs spark.read.json: {best['b: spark.read.json'] / best['b: gazette typed']:.2f}")
                print(
                    "  (b') typed, no C scanner, vs spark.read.json: "
                    f"{best['b: spark.read.json'] / best['b: gazette typed, no C']:.2f}"
                )
            if rss:
                raw_rss, typed_rss = rss["a: gazette value"], rss["b: gazette typed"]
                print(
                    f"\n  (m) peak Python worker RSS: raw read {raw_rss / 2**20:.0f} MiB, typed read "
                    f"{typed_rss / 2**20:.0f} MiB ({typed_rss / raw_rss:.2f}x raw; goal <= 2), without the C "
                    f"scanner {rss['b: gazette typed, no C'] / 2**20:.0f} MiB"
                )
                ratios.append(("m: raw RSS / typed RSS (>= 0.5: within 2x)", raw_rss / typed_rss, 0.5))

            # (c') the executor read path alone (no Spark), direct vs through the broker: what the
            # direct path buys where Spark's own per-row work is not the bottleneck.
            def source_only(direct: bool) -> float:
                o = ReadOptions.parse(
                    {
                        "broker.address": broker.address,
                        "journals": "bench/events",
                        "store.fileRoot": store,
                        "endingOffsets": end,
                        "directReads": str(direct).lower(),
                        "maxPartitionBytes": str(args.fragment_mib << 20),
                    }
                )
                schema = untyped_schema(True, False)
                parts = GazetteBatchReader(o, schema).partitions()
                return timed(lambda: [b.num_rows for p in parts for b in read_batches(p, o, schema)])

            # (t) the typed decode alone, one process: ours against pyarrow's JSON reader parsing
            # the same batches straight into the output schema (the least any Arrow-native JSON
            # parse costs here), to separate the parse itself from our conversions.
            if "f" in args.cases:
                import io

                import pyarrow as pa
                import pyarrow.compute as pc
                import pyarrow.json as pj

                from pyspark_gazette.native import NATIVE_ENV
                from pyspark_gazette.spark.read.typed import TypedDecoder

                o = read_opts()
                values = [
                    b.column("value").cast(pa.binary())
                    for p in GazetteBatchReader(o, raw_schema).partitions()
                    for b in read_partition(p, o, raw_schema)
                ]
                decoder = TypedDecoder(typed_schema)
                pure_decoder = TypedDecoder(typed_schema)
                pure_decoder._scan_plan = None
                bare_opts = pj.ParseOptions(explicit_schema=decoder.out_schema, unexpected_field_behavior="ignore")

                def bare() -> int:
                    rows = 0
                    for v in values:
                        text = pc.binary_join_element_wise(v, b"\n", b"").buffers()[2]
                        rows += pj.read_json(io.BytesIO(text), parse_options=bare_opts).num_rows
                    return rows

                def ours() -> int:
                    return sum(decoder.decode(v, {}).num_rows for v in values)

                def ours_pure() -> int:
                    return sum(pure_decoder.decode(v, {}).num_rows for v in values)

                assert bare() == ours() == ours_pure()
                t_bare = min(timed(bare) for _ in range(args.rounds))
                t_ours = min(timed(ours) for _ in range(args.rounds))
                t_pure = min(timed(ours_pure) for _ in range(args.rounds))
                print(
                    f"\n  (t) typed decode alone, one process: ours {mb / t_ours:.0f} MB/s "
                    f"(C scanner {'on' if decoder._scan_plan else 'not used for this schema'}), "
                    f"without the C scanner {mb / t_pure:.0f} MB/s, "
                    f"pyarrow.json into the schema {mb / t_bare:.0f} MB/s"
                )
                ratios.append(("t: typed decode vs bare pyarrow.json", t_bare / t_ours, 0.9))

                # (t') what one core spends on our side of a typed read, CPU seconds of this
                # process for every partition: the raw read (fragments, decompression, framing,
                # the value column) and the typed read (the same plus the parse), with and
                # without the C scanner. Spark's side (Arrow to rows, the query) is the floor's.
                def cpu(fn) -> float:
                    t = time.process_time()
                    fn()
                    return time.process_time() - t

                parts = GazetteBatchReader(o, raw_schema).partitions()

                def source(schema) -> int:
                    return sum(b.num_rows for p in parts for b in read_partition(p, o, schema))

                t_src_raw = min(cpu(lambda: source(raw_schema)) for _ in range(args.rounds))
                t_src_typed = min(cpu(lambda: source(typed_schema)) for _ in range(args.rounds))
                saved = os.environ.get(NATIVE_ENV)
                os.environ[NATIVE_ENV] = "0"
                try:
                    t_src_pure = min(cpu(lambda: source(typed_schema)) for _ in range(args.rounds))
                finally:
                    os.environ.pop(NATIVE_ENV)
                    if saved is not None:
                        os.environ[NATIVE_ENV] = saved
                print(
                    f"  (t') our source alone, CPU seconds in one process: raw {t_src_raw:.2f}, typed "
                    f"{t_src_typed:.2f} (C scanner), typed without it {t_src_pure:.2f}; the typed floor in Spark "
                    f"took {best['f: floor typed']:.2f} s of wall time on 2 cores"
                )
            if "c" in args.cases:
                src = {k: min(source_only(k == "direct") for _ in range(args.rounds)) for k in ("direct", "broker")}
                print(
                    f"\n  (c') source only, one process: direct {mb / src['direct']:.0f} MB/s, "
                    f"through the broker {mb / src['broker']:.0f} MB/s"
                )
                ratios.append(("c': source only, direct vs broker", src["broker"] / src["direct"], 3.0))
            if "p" not in args.cases:
                spark.stop()
                client.close()
                report(ratios)
                return 0

            # (p) planning a journal of many fragments, written straight into the store.
            from pyspark_gazette.fragments import FragmentRef, FragmentStore, compress_bytes

            fs = FragmentStore("file:///bench/", file_root=store)
            import hashlib

            line = b'{"x":1}\n'
            body = compress_bytes(pb.ZSTANDARD, line)
            digest = hashlib.sha1(line).hexdigest()
            for i in range(args.fragments):
                ref = FragmentRef("bench/many", i * len(line), (i + 1) * len(line), digest, pb.ZSTANDARD)
                path = os.path.join(store, "bench", ref.content_path)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    f.write(body)
            broker.refresh("bench/many")
            n = len(client.list_fragments("bench/many"))
            assert n == args.fragments, n
            opts = ReadOptions.parse(
                {"broker.address": broker.address, "journals": "bench/many", "store.fileRoot": store}
            )
            plan_times = []
            for _ in range(args.rounds):
                r = GazetteBatchReader(opts, untyped_schema(True, False))
                plan_times.append(timed(r.partitions))
            parts = GazetteBatchReader(opts, untyped_schema(True, False)).partitions()
            spark_plan = timed(lambda: gz().load("bench/many").rdd.getNumPartitions())
            print(
                f"\n  (p) planning {n} fragments: {min(plan_times):.2f}s best [{', '.join(f'{x:.2f}' for x in plan_times)}], "
                f"{len(parts)} partitions; through Spark (DataFrame to RDD) {spark_plan:.2f}s; goal < 2 s"
            )
            del fs
            spark.stop()
            client.close()
        report(ratios)
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
