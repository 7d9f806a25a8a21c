#!/usr/bin/env python3
"""Scale curve "bytes": batch-read throughput from 100 MB to 10 GB, one journal and 16 journals.

    .venv/bin/python bench/scale_bytes.py [--sizes 100M,316M,1G,3.16G,10G] [--journals 1,16] [--rounds 2]
        [--fragment-mib 16] [--baseline-max 1G] [--gazette-sizes 1G,max] [--fixed 1M]

Data: one block of about ``--fragment-mib`` MiB of ndjson click events (bench_read's events) is
made and compressed with ZSTANDARD once; that same compressed file is copied under every
fragment name (names differ by their begin and end offsets, the SHA-1 is the block's) straight
into the file store of an embedded broker, which lists them (``broker.refresh``). Every read
still decompresses and parses every byte. One journal holds the largest size; 16 journals each
hold 1/16 of it. A size is read as a prefix: ``endingOffsets`` at the first line end at or past
``size / journals`` bytes of each journal, so nothing is built twice. Reads use the defaults
(``maxPartitionBytes`` 128 MiB, partitions planned for the driver's cores).

Cases, on local[2], interleaved (every other round in reverse) and best of ``--rounds``, at each
size and for each layout (``--journals``):

* typed: a schema, ``groupBy(country).agg(count, sum(amount))``;
* raw: the ``value`` column, ``count(value), sum(length(value))``;
* at sizes up to ``--baseline-max``: the same bytes as one plain file, ``spark.read.schema(s).json``
  and ``spark.read.text`` (same queries), so the ratios are of the same run;
* at ``--gazette-sizes`` (``max`` = the largest size; ``none`` for none): the same reads through
  a real Gazette (v0.103.0, one broker; its file root holds hard links to the same fragment
  files). Persisted fragments are read by the executors straight from the store, so a broker
  only plans: its CPU is reported beside Spark's.

First, every case reads ``--fixed`` bytes (1 MB): what a query costs whatever it reads (Spark's
planning, code generation and task scheduling, our planning); the summary also gives each
series' MB per CPU second with that cost taken off, the part that should not depend on size.

Every answer is checked (rows and bytes are known from the block). Reported per case: seconds,
MB/s, MB/s per busy core (bytes / CPU seconds of the Spark JVM and its Python workers, polled
from /proc) and MB/s per core of wall time (bytes / seconds / 2), the broker's CPU (the embedded
broker's process; real Gazette's broker and etcd), the driver's planning time and partitions,
JVM garbage-collection time and memory. Writes
docs/scale/bytes.json and docs/scale/bytes.png. Real Gazette needs ``.bin/`` (or
``GAZETTE_BIN_DIR``); the data goes under ``$BENCH_TMP`` (default: bench/) and is removed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
CURVE = "bytes"
SCHEMA = "event_id LONG, ts TIMESTAMP, user_id STRING, country STRING, page STRING, device STRING, duration_ms LONG, amount DOUBLE"
CORES = 2
_UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def parse_size(text: str) -> int:
    """``100M``, ``3.16G``, ``10GB`` (decimal units) as bytes."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]?)B?\s*", text.upper())
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def label(n: float) -> str:
    return f"{n / 1e9:.3g} GB" if n >= 1e9 else f"{n / 1e6:.3g} MB"


class Block:
    """The one block of events every fragment holds, and where a prefix of a journal of such
    fragments ends at a line boundary."""

    def __init__(self, nbytes: int):
        from bench_read import make_lines
        from pyspark_gazette.fragments import compress_bytes
        from pyspark_gazette.protocol import pb

        self.data = make_lines(nbytes)
        self.size = len(self.data)
        self.lines = self.data.count(b"\n")
        self.sha1 = hashlib.sha1(self.data).hexdigest()
        self.compressed = compress_bytes(pb.ZSTANDARD, self.data)

    def prefix(self, wanted: int) -> tuple[int, int]:
        """(end offset, rows) of the journal prefix ending at the first line end at or past ``wanted``."""
        full, rest = divmod(max(wanted, 1), self.size)
        cut = self.data.find(b"\n", rest - 1) + 1 if rest else 0
        return full * self.size + cut, full * self.lines + self.data.count(b"\n", 0, cut)


def write_journal(store: str, name: str, block: Block, fragments: int, source: str) -> None:
    """``fragments`` copies of the compressed block under their fragment names, persisted a second apart."""
    from pyspark_gazette.fragments import FragmentRef
    from pyspark_gazette.protocol import pb

    first = int(time.time()) - 86_400
    for i in range(fragments):
        ref = FragmentRef(name, i * block.size, (i + 1) * block.size, block.sha1, pb.ZSTANDARD)
        path = os.path.join(store, "bench", ref.content_path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        shutil.copyfile(source, path)
        os.utime(path, (first + i, first + i))


def link_tree(src: str, dst: str) -> None:
    """Hard links of every file under ``src`` at the same place under ``dst`` (no extra disk)."""
    for base, _dirs, names in os.walk(src):
        out = os.path.join(dst, os.path.relpath(base, src))
        os.makedirs(out, exist_ok=True)
        for n in names:
            os.link(os.path.join(base, n), os.path.join(out, n))


class SparkCpu:
    """CPU seconds of the Spark JVM and of its descendants (the Python daemon and its workers)
    during a block, from /proc, polled every ``every`` seconds: PySpark's daemon ignores SIGCHLD,
    so a worker that exits is counted nowhere once it is gone; polling keeps each process's
    last reading (a worker exiting mid-query loses at most its last interval). A child the JVM
    started itself and waited for is counted in the JVM's waited-for children instead. ``own`` is
    the poller's own CPU (this process's, to be taken off the embedded broker's)."""

    def __init__(self, jvm: int, every: float = 0.1):
        import threading

        self.jvm, self.every = jvm, every
        self.base: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.parent: dict[int, int] = {}
        self.alive: set[int] = set()
        self.own = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="spark-cpu")

    def _read(self) -> dict[int, float]:
        from scalelib import children

        tick = os.sysconf("SC_CLK_TCK")
        out = {}
        for p in [self.jvm, *children(self.jvm)]:
            try:
                with open(f"/proc/{p}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            self.parent[p] = int(fields[1])
            # utime + stime, and for the JVM also its waited-for children's
            out[p] = sum(int(x) for x in fields[11 : 15 if p == self.jvm else 13]) / tick
        self.alive = set(out)
        return out

    def _run(self) -> None:
        t = time.thread_time()
        while not self._stop.wait(self.every):
            self.last.update(self._read())
        self.own = time.thread_time() - t

    def __enter__(self) -> SparkCpu:
        self.base = self._read()
        self.last = dict(self.base)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.last.update(self._read())

    def split(self) -> tuple[float, float]:
        """CPU seconds of the JVM, of its descendants."""
        jvm = self.last[self.jvm] - self.base[self.jvm]
        rest = sum(
            v - self.base.get(p, 0.0)
            for p, v in self.last.items()
            if p != self.jvm and (p in self.alive or self.parent.get(p) != self.jvm)
        )
        return jvm, rest


def worker_rss(jvm: int) -> float:
    from scalelib import children, rss_mib

    return max((rss_mib(p) for p in children(jvm)), default=0.0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="100M,316M,1G,3.16G,10G", help="bytes read (default %(default)s)")
    p.add_argument("--journals", default="1,16", help="layouts: journals the bytes are spread over")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--fragment-mib", type=int, default=16, help="uncompressed fragment (block) size")
    p.add_argument("--baseline-max", type=parse_size, default=parse_size("1G"), help="largest size of the baseline")
    p.add_argument("--gazette-sizes", default="1G,max", help="sizes also read through real Gazette, or none")
    p.add_argument("--fixed", default="1M", help="a small read every way: the per-query fixed cost (none: skip)")
    args = p.parse_args()
    sizes = sorted({parse_size(s) for s in args.sizes.split(",")})
    layouts = [int(j) for j in args.journals.split(",")]
    gazette_sizes: set[int] = set()
    if args.gazette_sizes != "none":
        gazette_sizes = {sizes[-1] if s == "max" else parse_size(s) for s in args.gazette_sizes.split(",")}
        gazette_sizes &= set(sizes)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the cleanup below runs
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import functions as F

    from benchlib import Embedded, RealGazette, local_spark, ndjson_spec, process_cpu
    from pyspark_gazette.client import ClientConfig, JournalClient
    from pyspark_gazette.spark.options import ReadOptions
    from pyspark_gazette.spark.read.batch_scan import GazetteBatchReader
    from pyspark_gazette.spark.source import untyped_schema
    from scalelib import LoadSampler, dir_bytes, peak_rss_mib, rss_mib, save

    if gazette_sizes:
        import realgazette

        if realgazette.missing():
            p.error(f"real Gazette is not installed ({realgazette.HOW_TO_GET}); or pass --gazette-sizes none")

    work = tempfile.mkdtemp(prefix="scale-bytes-", dir=os.environ.get("BENCH_TMP", HERE))
    spark = cluster = None
    try:
        t0 = time.perf_counter()
        block = Block(args.fragment_mib << 20)
        source = os.path.join(work, "block.zst")
        with open(source, "wb") as f:
            f.write(block.compressed)
        store = os.path.join(work, "store")
        names = {j: [f"bytes/{j}x/j{i:02d}" for i in range(j)] for j in layouts}
        small = [] if args.fixed == "none" else [parse_size(args.fixed)]
        ends = {(j, s): [block.prefix(s // j)] * j for j in layouts for s in [*small, *sizes]}
        with Embedded(work, store) as broker:
            client = JournalClient(ClientConfig(broker.address, file_root=store))
            specs = [ndjson_spec(n, block.size) for j in layouts for n in names[j]]
            broker.apply(client, specs)
            for j in layouts:
                count = -(-ends[(j, sizes[-1])][0][0] // block.size)
                for n in names[j]:
                    write_journal(store, n, block, count, source)
                    broker.refresh(n)
                    assert len(client.list_fragments(n)) == count, n
            disk, files = dir_bytes(store)
            build_s = time.perf_counter() - t0
            print(
                f"block: {block.size / 1e6:.1f} MB, {block.lines} events, ZSTANDARD {len(block.compressed) / 1e6:.2f} MB "
                f"({block.size / len(block.compressed):.1f}x); store: {files} fragments, {disk / 1e9:.2f} GB on disk, "
                f"built in {build_s:.0f} s"
            )
            brokers = {"embedded": (broker.address, store, [os.getpid()])}
            if gazette_sizes:
                cluster = RealGazette(work, brokers=1, journals=len(specs))
                cluster.__enter__()
                link_tree(os.path.join(store, "bench"), os.path.join(cluster.store, "bench"))
                cluster.apply(client, specs)
                with JournalClient(ClientConfig(cluster.address, file_root=cluster.store)) as real:
                    deadline = time.monotonic() + 300
                    for j in layouts:
                        count = -(-ends[(j, sizes[-1])][0][0] // block.size)
                        for n in names[j]:
                            while len([f for f in real.list_fragments(n) if f.spec.mod_time]) < count:
                                assert time.monotonic() < deadline, f"real Gazette did not list {n}'s fragments"
                                time.sleep(0.5)
                brokers["real Gazette"] = (cluster.address, cluster.store, cluster.cluster.pids)

            spark = local_spark(
                **{
                    "spark.sql.session.timeZone": "UTC",
                    "spark.driver.memory": "4g",
                    "spark.ui.showConsoleProgress": "false",
                }
            )
            jvm_handle = spark.sparkContext._jvm
            jvm = int(jvm_handle.java.lang.ProcessHandle.current().pid())
            beans = jvm_handle.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()

            def gc_ms() -> int:
                return sum(int(b.getCollectionTime()) for b in beans)

            def options(where: str, j: int, size: int) -> dict[str, str]:
                address, root, _ = brokers[where]
                bounds = {n: e for n, (e, _rows) in zip(names[j], ends[(j, size)], strict=True)}
                return {
                    "broker.address": address,
                    "store.fileRoot": root,
                    "journals": ",".join(names[j]),
                    "endingOffsets": json.dumps(bounds),
                }

            def ours(kind: str, opts: dict[str, str]):
                def run():
                    r = spark.read.format("gazette")
                    for k, v in opts.items():
                        r = r.option(k, v)
                    if kind == "typed":
                        df = r.schema(SCHEMA).load().groupBy("country")
                        return sorted(tuple(x) for x in df.agg(F.count("*"), F.sum("amount")).collect())
                    return tuple(r.load().agg(F.count("value"), F.sum(F.length("value"))).collect()[0])

                return run

            def baseline(kind: str, path: str):
                def run():
                    if kind == "typed":
                        df = spark.read.schema(SCHEMA).json(path).groupBy("country")
                        return sorted(tuple(x) for x in df.agg(F.count("*"), F.sum("amount")).collect())
                    return tuple(spark.read.text(path).agg(F.count("value"), F.sum(F.length("value"))).collect()[0])

                return run

            def check(case: dict[str, Any], answer) -> None:  # type: ignore[no-untyped-def]
                rows = case["rows"]
                if case["kind"] == "raw":  # every byte is a line's content or its newline
                    assert answer == (rows, case["bytes"] - rows), (case["name"], answer)
                else:
                    assert sum(r[1] for r in answer) == rows, (case["name"], answer)
                    if case.get("typed_answer") is not None:
                        from benchlib import same_answers

                        assert same_answers(answer, case["typed_answer"]), (case["name"], answer)

            # Warm-up (Python workers started, classes loaded, the JVM's code compiled): the
            # smallest size, once each way, and the baselines over one block.
            for j in layouts:
                for where in brokers:
                    for kind in ("typed", "raw"):
                        ours(kind, options(where, j, sizes[0]))()
            warm = os.path.join(work, "warm.json")
            with open(warm, "wb") as f:
                f.write(block.data)
            for kind in ("typed", "raw"):
                baseline(kind, warm)()
            os.remove(warm)

            def measure(size: int, fixed: bool = False) -> list[dict[str, Any]]:
                """Every case at ``size``, interleaved rounds; ``fixed``: the per-query fixed-cost read."""
                cases: list[dict[str, Any]] = []
                for j in layouts:
                    for where in brokers:
                        if where != "embedded" and size not in gazette_sizes and not fixed:
                            continue
                        opts = options(where, j, size)
                        schema = untyped_schema(True, False)
                        t = time.perf_counter()
                        parts = GazetteBatchReader(ReadOptions.parse(opts), schema).partitions()
                        plan_s = time.perf_counter() - t
                        nbytes = sum(e for e, _ in ends[(j, size)])
                        rows = sum(r for _, r in ends[(j, size)])
                        for kind in ("typed", "raw"):
                            cases.append(
                                {
                                    "name": f"{kind}, {j} journal{'s' if j > 1 else ''}, {where}",
                                    "kind": kind,
                                    "journals": j,
                                    "source": where,
                                    "size": size,
                                    "bytes": nbytes,
                                    "rows": rows,
                                    "partitions": len(parts),
                                    "plan_s": round(plan_s, 3),
                                    "fn": ours(kind, opts),
                                }
                            )
                export = None
                if size <= args.baseline_max or fixed:
                    export = os.path.join(work, "export.json")
                    nbytes, rows = ends[(layouts[0], size)][0]
                    with open(export, "wb") as f:
                        for _ in range(nbytes // block.size):
                            f.write(block.data)
                        f.write(block.data[: nbytes % block.size])
                    for kind, what in (("typed", "spark.read.json"), ("raw", "spark.read.text")):
                        cases.append(
                            {
                                "name": f"{kind}, {what} (file)",
                                "kind": kind,
                                "journals": 0,
                                "source": what,
                                "size": size,
                                "bytes": nbytes,
                                "rows": rows,
                                "fn": baseline(kind, export),
                            }
                        )
                for case in cases:
                    case["runs"] = []
                for r in range(args.rounds):
                    for case in reversed(cases) if r % 2 else cases:
                        others = brokers.get(case["source"], (None, None, []))[2]
                        broker0, gc0 = sum(process_cpu(q) for q in others), gc_ms()
                        with SparkCpu(jvm) as meter:
                            t = time.perf_counter()
                            answer = case["fn"]()
                            wall = time.perf_counter() - t
                        broker1, gc1 = sum(process_cpu(q) for q in others), gc_ms()
                        if os.getpid() in others:  # the embedded broker shares this process with the poller
                            broker1 -= meter.own
                        cpu_jvm, cpu_workers = meter.split()
                        check(case, answer)
                        if case["kind"] == "typed" and case["journals"] == 0:
                            for c in cases:  # ours at the same bytes must agree with spark.read.json
                                if c["kind"] == "typed" and c["journals"] == layouts[0]:
                                    c["typed_answer"] = answer
                        case["runs"].append(
                            {
                                "wall_s": round(wall, 3),
                                "cpu_jvm_s": round(cpu_jvm, 2),
                                "cpu_workers_s": round(cpu_workers, 2),
                                "cpu_broker_s": round(broker1 - broker0, 3),
                                "gc_s": round((gc1 - gc0) / 1000, 2),
                                "jvm_rss_mib": round(rss_mib(jvm)),
                                "worker_rss_mib": round(worker_rss(jvm)),
                            }
                        )
                if export:
                    os.remove(export)
                for case in cases:
                    case.pop("fn")
                    case.pop("typed_answer", None)
                    best = min(case["runs"], key=lambda x: x["wall_s"])
                    cpu = min(x["cpu_jvm_s"] + x["cpu_workers_s"] for x in case["runs"])
                    case["best_s"] = best["wall_s"]
                    case["spark_cpu_s"] = round(cpu, 2)
                    case["mb_s"] = round(case["bytes"] / 1e6 / best["wall_s"], 1)
                    case["mb_s_per_cpu_s"] = round(case["bytes"] / 1e6 / cpu, 1) if cpu else None
                    case["mb_s_per_core_wall"] = round(case["bytes"] / 1e6 / best["wall_s"] / CORES, 1)
                    print(
                        f"{label(size):>9s}  {case['name']:36s} {best['wall_s']:7.2f} s  {case['mb_s']:7.1f} MB/s  "
                        f"per CPU-s {case['mb_s_per_cpu_s'] or 0:6.1f}  per core (wall) {case['mb_s_per_core_wall']:6.1f}  "
                        f"CPU {cpu:6.2f} s  broker CPU {min(x['cpu_broker_s'] for x in case['runs']):5.2f} s  "
                        f"GC {best['gc_s']:.2f} s  parts {case.get('partitions', '-')}  plan {case.get('plan_s', '-')}"
                    )
                sys.stdout.flush()
                return cases

            with LoadSampler() as load:
                fixed = measure(parse_size(args.fixed), fixed=True) if args.fixed != "none" else []
                points = [case for size in sizes for case in measure(size)]
            jvm_peak = peak_rss_mib(jvm)
            spark.stop()
            spark = None
            client.close()
        spreads = summarize(points, fixed)
        try:  # typed reads take the pure-Python parse without the C scanner: say which was measured
            import pyspark_gazette._jsonscan  # noqa: F401

            scanner = True
        except ImportError:
            scanner = False
            print("note: the C JSON scanner (pyspark_gazette._jsonscan) is not built: typed reads were pure Python")
        from realgazette import GAZETTE_VERSION

        save(
            CURVE,
            {
                "sizes": sizes,
                "layouts": layouts,
                "rounds": args.rounds,
                "cores": CORES,
                "block": {
                    "bytes": block.size,
                    "events": block.lines,
                    "zstd_bytes": len(block.compressed),
                },
                "store": {"bytes_on_disk": disk, "fragments": files, "build_s": round(build_s, 1)},
                "gazette_version": GAZETTE_VERSION if gazette_sizes else None,
                "c_scanner": scanner,
                "jvm_peak_rss_mib": round(jvm_peak),
                "spread": spreads,
                "points": points,
                "fixed": fixed,
            },
            load,
        )
        draw(load_saved())
        return 0
    finally:
        if spark is not None:
            spark.stop()
        if cluster is not None:
            cluster.__exit__(None, None, None)
        shutil.rmtree(work, ignore_errors=True)


def load_saved() -> dict[str, Any]:
    from scalelib import load_record

    return load_record(CURVE)


def series(record: dict[str, Any]) -> dict[tuple[str, int, str], list[dict[str, Any]]]:
    """Points by (kind, journals, source), in size order."""
    out: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for pt in sorted(record["points"], key=lambda x: x["size"]):
        out.setdefault((pt["kind"], pt["journals"], pt["source"]), []).append(pt)
    return out


def summarize(points: list[dict[str, Any]], fixed: list[dict[str, Any]]) -> dict[str, Any]:
    """Per series of the embedded broker: the spread of MB/s per busy core over the sizes
    ((max - min) / max), the issue's "within 10%", also with the fixed cost of a query (the
    CPU of the ``--fixed`` read of the same series) taken off; and each size's ratios to the baseline."""
    spreads: dict[str, Any] = {}
    small = {(p["kind"], p["journals"], p["source"]): p for p in fixed}
    if fixed:
        print(f"\nper-query fixed cost, CPU-s of a {label(fixed[0]['bytes'])} read (JVM + Python workers):")
        for p in fixed:
            print(f"  {p['name']:36s} {p['spark_cpu_s']:5.2f}")
    for p in points:
        f = small.get((p["kind"], p["journals"], p["source"]))
        if f and p["spark_cpu_s"] > f["spark_cpu_s"]:
            p["mb_per_marginal_cpu_s"] = round(
                (p["bytes"] - f["bytes"]) / 1e6 / (p["spark_cpu_s"] - f["spark_cpu_s"]), 1
            )
    print("\nspread over the sizes of MB/s per CPU-s (per core of wall time), goal within 10%:")
    for (kind, j, source), pts in series({"points": points}).items():
        if source != "embedded" or len(pts) < 2:
            continue
        cpu = [p["mb_s_per_cpu_s"] for p in pts if p["mb_s_per_cpu_s"]]
        wall = [p["mb_s_per_core_wall"] for p in pts]
        s_cpu = (max(cpu) - min(cpu)) / max(cpu)
        s_wall = (max(wall) - min(wall)) / max(wall)
        marginal = [p["mb_per_marginal_cpu_s"] for p in pts if p.get("mb_per_marginal_cpu_s")]
        s_marg = (max(marginal) - min(marginal)) / max(marginal) if len(marginal) == len(pts) else None
        spreads[f"{kind}, {j} journals"] = {
            "cpu": round(s_cpu, 3),
            "wall": round(s_wall, 3),
            "marginal_cpu": None if s_marg is None else round(s_marg, 3),
        }
        print(
            f"  {kind}, {j:2d} journals: {s_cpu:5.1%} ({s_wall:5.1%})  {'within' if s_cpu <= 0.1 else 'OUTSIDE'}"
            + (
                ""
                if s_marg is None
                else f"; fixed cost taken off {s_marg:5.1%}: " + ", ".join(f"{m:.0f}" for m in marginal) + " MB/CPU-s"
            )
        )
    base = {(p["kind"], p["size"]): p for p in points if p["journals"] == 0}
    if base:
        print(
            "ratios to the same run's spark.read.json / spark.read.text (their time / ours; CPU-s ratio in brackets):"
        )
    for p in points:
        b = base.get((p["kind"], p["size"]))
        if b and p["journals"]:
            p["vs_baseline"] = round(b["best_s"] / p["best_s"], 2)
            p["vs_baseline_cpu"] = round(b["spark_cpu_s"] / p["spark_cpu_s"], 2)
            print(f"  {label(p['size']):>9s} {p['name']:36s} {p['vs_baseline']:5.2f} ({p['vs_baseline_cpu']:.2f})")
    return spreads


def draw(record: dict[str, Any]) -> None:
    """docs/scale/bytes.png: MB/s per busy core (left) and MB/s of wall time (right) against bytes read."""
    from matplotlib import ticker

    from scalelib import figure, finish

    fig, (left, right) = figure(
        f"Batch reads against bytes read, local[{record.get('cores', CORES)}]", record, panels=2
    )
    colors = {"typed": "tab:blue", "raw": "tab:orange"}
    for (kind, j, source), pts in series(record).items():
        x = [p["bytes"] / 1e9 for p in pts]
        if source == "embedded":
            style = {"marker": "o", "linestyle": "-" if j == 1 else "--", "label": f"{kind}, {j} journal(s)"}
        elif source == "real Gazette":
            style = {
                "marker": "*" if j == 1 else "X",
                "markersize": 11,
                "linestyle": ":",
                "label": f"{kind}, {j} journal(s), real Gazette",
            }
        else:
            style = {"marker": "s", "linestyle": "none", "fillstyle": "none", "label": source}
        left.plot(x, [p["mb_s_per_cpu_s"] for p in pts], color=colors[kind], **style)
        right.plot(x, [p["mb_s"] for p in pts], color=colors[kind], **style)
    for ax, ylabel in (
        (left, "MB/s per busy core (bytes / CPU-s of JVM + Python workers)"),
        (right, "MB/s (wall time)"),
    ):
        ax.set_xscale("log")
        ax.set_xticks(sorted({p["size"] / 1e9 for p in record["points"]}))
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:.3g}"))
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())
        ax.set_xlabel("bytes read (GB of ndjson; ticks at the sizes read)")
        ax.set_ylabel(ylabel, fontsize=8)
        ax.set_ylim(bottom=0)
        ax.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=6, loc="lower right", ncol=2)
    finish(fig, CURVE)


if __name__ == "__main__":
    sys.exit(main())
