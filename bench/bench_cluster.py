#!/usr/bin/env python3
"""Spark cluster read benchmark: one executor against two, same data, same run.

    sudo .venv/bin/python bench/bench_cluster.py [--mib 128] [--rounds 3] [--fragment-mib 4] [--broker gazette]

Root is needed: the set-up is the cluster tier's (tests/cluster): a Spark standalone master here
and two workers, each in its own network namespace ("host") with one core and 1 GiB, executors on
a virtualenv with the project installed from a wheel (.cluster-python/, built on first use). An
embedded broker on the test network (with ``--broker gazette``: one real Gazette broker and
etcd, from ``.bin/``) holds a journal of ndjson click events in ZSTANDARD
fragments on a file store that every host mounts (the same directory: the shared-storage case,
``store.fileRoot``), so executors read fragments directly.

The same queries run on an application limited to one core (``spark.cores.max=1``: one executor
on one worker) and on one with two (an executor on each worker), interleaved, best of
``--rounds``:

  raw:   ``sum(length(value))`` over every message;
  typed: the same journal with a schema, ``groupBy(country).agg(sum(amount))``.

With ``--plan`` (and e.g. ``--fragment-mib 8``), only the typed query, on two executors,
planned two ways with ``maxPartitionBytes`` at its default: by the driver machine's cores (the
default) and with ``minPartitions=1`` (one partition packed up to ``maxPartitionBytes``):
whether both executors get work.

Printed: MB/s and the scaling ratio (one-executor time / two-executor time; 2.0 is linear), and
where the CPU went during the best round: seconds of CPU of each host's executor JVM and Python
workers (from /proc, process trees of the worker daemons), of the driver JVM, and of this
process (driver Python and broker).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests"))

SCHEMA = "event_id LONG, ts TIMESTAMP, user_id STRING, country STRING, page STRING, device STRING, duration_ms LONG, amount DOUBLE"


def comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def cpu_snapshot(cluster, driver_jvm: int | None) -> dict[str, float]:
    """CPU seconds so far: per host, its executor JVM(s) and Python processes; the driver JVM;
    this process. The worker daemons themselves are left out (they idle)."""
    from benchlib import process_cpu
    from cluster.standalone import process_tree

    out: dict[str, float] = {}
    for w in cluster.workers:
        for pid in process_tree(w.pid)[1:]:
            kind = "python" if comm(pid).startswith("python") else "executor JVM"
            key = f"{w.host} {kind}"
            out[key] = out.get(key, 0.0) + process_cpu(pid, children=True)
    if driver_jvm:
        out["driver JVM"] = process_cpu(driver_jvm, children=True)
    out["driver Python + broker"] = process_cpu(os.getpid(), children=True)
    return out


@contextlib.contextmanager
def journal_on(args, host: str, work: pathlib.Path) -> Iterator[tuple[str, str, int, int]]:
    """The bench journal, ``--mib`` of ndjson click events in ``--fragment-mib`` ZSTANDARD
    fragments on a file store, served on ``host`` by the embedded broker or by a real Gazette
    broker with etcd (started here, stopped by PID on exit). Yields the broker's address, the
    store's root, the end of the persisted fragments (the bench reads up to it) and their number."""
    from bench_read import make_lines
    from benchlib import append_lines, ndjson_spec
    from pyspark_gazette.client import Change, ClientConfig, JournalClient

    data = make_lines(args.mib << 20)
    if args.broker == "gazette":
        from realfragments import wait_persisted
        from realgazette import GazetteCluster

        # Gazette lists a fragment as persisted at the next listing of its store: every few seconds.
        spec = ndjson_spec("bench/events", args.fragment_mib << 20, refresh_seconds=5)
        with GazetteCluster(work / "gazette", brokers=1, host=host) as cluster:
            cluster.apply_specs([spec])
            with cluster.client() as client:
                append_lines(client, "bench/events", data)  # 1 MiB appends on line boundaries
                wait_persisted(client, ["bench/events"], timeout=600)
                persisted = [f for f in client.list_fragments("bench/events") if f.spec.mod_time]
                yield cluster.address, cluster.file_root, persisted[-1].spec.end, len(persisted)
        return
    from pyspark_gazette.broker import EmbeddedBroker

    store = str(work / "store")
    with EmbeddedBroker(str(work / "broker"), host=host, file_root=store) as broker:
        with JournalClient(ClientConfig(broker.address, file_root=store)) as client:
            client.apply([Change(0, upsert=ndjson_spec("bench/events", args.fragment_mib << 20))])
            append_lines(client, "bench/events", data)
            client.append("bench/events", b'{"event_id":-1}\n')  # rolls the last data fragment
            assert broker.wait_persisted(300)
            persisted = [f for f in client.list_fragments("bench/events") if f.spec.mod_time]
            yield broker.address, store, persisted[-1].spec.end, len(persisted)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mib", type=int, default=128, help="uncompressed MiB of ndjson (default %(default)s)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--fragment-mib", type=int, default=4, help="fragment length (and partition size)")
    p.add_argument(
        "--plan",
        action="store_true",
        help="instead: the typed query on two executors planned by the default (bytes per core) "
        "against minPartitions=1 (one packed partition), "
        "maxPartitionBytes left at its default",
    )
    p.add_argument(
        "--broker",
        choices=("embedded", "gazette"),
        default="embedded",
        help="the embedded broker, or one real Gazette broker with etcd (from .bin/, `make gazette`)",
    )
    p.add_argument("--save", default=None, help="also write the best times and CPU seconds to this JSON file")
    args = p.parse_args()
    from benchlib import require_rolled_fragment

    require_rolled_fragment(p, args)

    from cluster import netns, standalone

    reason = netns.unavailable_reason()
    if reason:
        print(reason, file=sys.stderr)
        return 2

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    python = standalone.executor_python()
    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-cluster-", dir=os.environ.get("BENCH_TMP", HERE)))
    net = netns.TestNetwork(["w1", "w2"])
    try:
        net.start()
        with journal_on(args, net.gateway, work) as (address, store, end, fragments):
            print(f"data: {end / 1e6:.1f} MB of ndjson in {fragments} persisted ZSTANDARD fragments ({args.broker})")
            ending = json.dumps({"bench/events": end})

            cluster = standalone.SparkStandalone(net, work / "spark", ["w1", "w2"]).start()
            os.environ["PYSPARK_PYTHON"] = python
            os.environ["SPARK_LOCAL_IP"] = net.gateway
            best: dict[tuple[str, int], float] = {}
            cpu: dict[tuple[str, int], dict[str, float]] = {}
            try:
                for rnd in range(args.rounds):
                    for cores in (2,) if args.plan else (1, 2):
                        spark = (
                            SparkSession.builder.master(cluster.master_url)
                            .appName(f"bench-cluster-{cores}")
                            .config("spark.driver.host", net.gateway)
                            .config("spark.driver.bindAddress", net.gateway)
                            .config("spark.pyspark.python", python)
                            .config("spark.executor.memory", "512m")
                            .config("spark.executor.cores", "1")
                            .config("spark.cores.max", str(cores))
                            .config("spark.ui.enabled", "false")
                            .config("spark.ui.showConsoleProgress", "false")
                            .config("spark.sql.session.timeZone", "UTC")
                            .config("spark.sql.shuffle.partitions", "2")
                            .getOrCreate()
                        )
                        spark.sparkContext.setLogLevel("ERROR")
                        tracker = spark.sparkContext._jsc.sc().statusTracker()
                        while len(tracker.getExecutorInfos()) < cores + 1:  # the driver's entry + executors
                            time.sleep(0.2)
                        jvm = spark.sparkContext._gateway.proc.pid if spark.sparkContext._gateway.proc else None

                        def gz(spark=spark, **opts):
                            r = (
                                spark.read.format("gazette")
                                .option("broker.address", address)
                                .option("store.fileRoot", str(store))
                                .option("endingOffsets", ending)
                            )
                            if not args.plan:
                                r = r.option("maxPartitionBytes", str(args.fragment_mib << 20))
                            for k, v in opts.items():
                                r = r.option(k, v)
                            return r

                        def typed(**opts):
                            df = gz(**opts).schema(SCHEMA).load("bench/events")
                            return df.groupBy("country").agg(F.sum("amount")).collect()

                        if args.plan:
                            for label, opts in (("by cores", {}), ("minPartitions=1", {"minPartitions": "1"})):
                                n = gz(**opts).schema(SCHEMA).load("bench/events").rdd.getNumPartitions()
                                print(f"plan {label}: {n} partition(s)")
                        cases = {
                            "raw": lambda: gz().load("bench/events").agg(F.sum(F.length("value"))).collect(),
                            "typed": lambda: (
                                gz()
                                .schema(SCHEMA)
                                .load("bench/events")
                                .groupBy("country")
                                .agg(F.sum("amount"))
                                .collect()
                            ),
                        }
                        if args.plan:
                            cases = {
                                "typed, by cores": lambda: typed(),
                                "typed, minPartitions=1": lambda: typed(minPartitions="1"),
                            }
                        next(iter(cases.values()))()  # warm-up: Python workers started, imports done
                        for name, fn in cases.items():
                            before = cpu_snapshot(cluster, jvm)
                            t = time.perf_counter()
                            fn()
                            elapsed = time.perf_counter() - t
                            after = cpu_snapshot(cluster, jvm)
                            print(f"round {rnd + 1} {name:5} {cores} executor(s): {elapsed:6.2f}s", flush=True)
                            if elapsed < best.get((name, cores), float("inf")):
                                best[(name, cores)] = elapsed
                                cpu[(name, cores)] = {k: after[k] - before.get(k, 0.0) for k in after}
                        spark.stop()
            finally:
                cluster.stop()
            print()
            if args.plan:
                t_cores, t_one = best[("typed, by cores", 2)], best[("typed, minPartitions=1", 2)]
                print(
                    f"two executors, typed: by cores {t_cores:.2f} s, minPartitions=1 {t_one:.2f} s "
                    f"(ratio {t_one / t_cores:.2f})"
                )
            else:
                print("| query | 1 executor MB/s | 2 executors MB/s | scaling (t1 / t2) |")
                print("|---|---|---|---|")
                for name in ("raw", "typed"):
                    t1, t2 = best[(name, 1)], best[(name, 2)]
                    print(f"| {name} | {end / t1 / 1e6:.1f} | {end / t2 / 1e6:.1f} | {t1 / t2:.2f} |")
            print()
            print("CPU seconds during the best round (wall time in the last column):")
            keys = sorted({k for c in cpu.values() for k in c})
            print("| query, executors | " + " | ".join(keys) + " | wall |")
            print("|---" * (len(keys) + 2) + "|")
            for (name, cores), c in sorted(cpu.items()):
                cells = " | ".join(f"{c.get(k, 0.0):.1f}" for k in keys)
                print(f"| {name}, {cores} | {cells} | {best[(name, cores)]:.1f} |")
            if args.save:
                pathlib.Path(args.save).write_text(
                    json.dumps(
                        {
                            "broker": args.broker,
                            "bytes": end,
                            "fragments": fragments,
                            "fragment_mib": args.fragment_mib,
                            "rounds": args.rounds,
                            "best": [{"query": q, "executors": c, "seconds": t} for (q, c), t in best.items()],
                            "cpu": [{"query": q, "executors": c, **v} for (q, c), v in cpu.items()],
                        },
                        indent=1,
                    )
                )
    finally:
        net.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
