#!/usr/bin/env python3
"""Planning a batch read of many small journals: each journal's write head asked of its primary
only (the cheapest plan), of every route member where the listing does not vouch for the
primary's answer (the default), and of every route member for every journal (the worst case:
every listing persisted only), same run, interleaved.

    .venv/bin/python bench/bench_plan_members.py [--journals 2000] [--rounds 5]
        [--broker embedded|gazette] [--brokers 3] [--replication 3]

Creates N ndjson journals with one appended message each, on the embedded broker in this process
(routes of one member) or, with ``--broker gazette``, on a real Gazette cluster (``--brokers``
``gazette serve`` processes and etcd from ``.bin/``, journals of ``--replication``), and times
the driver's planning (``GazetteBatchReader.partitions()``: List, ListFragments of every journal,
the write-head sweeps, packing), best of ``--rounds``. Prints each time and its ratio to
primary-only (1.0: no cost), and the load average.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--journals", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--broker", choices=("embedded", "gazette"), default="embedded")
    p.add_argument("--brokers", type=int, default=3)
    p.add_argument("--replication", type=int, default=3)
    args = p.parse_args()

    from benchlib import ndjson_spec
    from pyspark_gazette.client import Change, ClientConfig, JournalClient
    from pyspark_gazette.protocol import label_set
    from pyspark_gazette.spark.options import ReadOptions
    from pyspark_gazette.spark.read import plan
    from pyspark_gazette.spark.read.batch_scan import GazetteBatchReader
    from pyspark_gazette.spark.source import untyped_schema

    with tempfile.TemporaryDirectory(prefix="bench-plan-members-") as work:
        if args.broker == "gazette":
            from realgazette import GazetteCluster

            limit = f"--broker.limit={args.journals * args.replication // args.brokers + 64}"
            cluster = GazetteCluster(os.path.join(work, "gazette"), brokers=args.brokers, broker_args=[limit])
            replication = args.replication
        else:
            from pyspark_gazette.broker import EmbeddedBroker

            cluster = EmbeddedBroker(os.path.join(work, "broker"), file_root=os.path.join(work, "store"))
            replication = 1
        with cluster:
            store = cluster.file_root
            names = [f"many/j{i:05d}" for i in range(args.journals)]
            specs = []
            for name in names:
                spec = ndjson_spec(name, 1 << 20)
                spec.replication = replication
                spec.labels.CopyFrom(label_set({"content-type": "application/x-ndjson", "set": "many"}))
                specs.append(spec)
            with JournalClient(ClientConfig(cluster.address, file_root=store)) as client:
                if args.broker == "gazette":
                    cluster.apply_specs(specs, timeout=300)
                    cluster.wait_primaries(names, timeout=300)
                else:
                    client.apply_in_batches([Change(0, upsert=s) for s in specs])
                for name in names:
                    client.append(name, b'{"j": "%s"}\n' % name.encode())
            opts = ReadOptions.parse(
                {"broker.address": cluster.address, "store.fileRoot": store, "selector": "set=many"}
            )
            schema = untyped_schema(True, False)
            real = plan.spool_vouches
            modes = {
                "primary only": lambda listed, head: True,  # no member asked
                "default": real,  # members asked where the listing does not vouch
                "every member": lambda listed, head: False,  # the worst case: every journal asked
            }

            def timed(vouches) -> float:
                plan.spool_vouches = vouches
                try:
                    t = time.perf_counter()
                    assert GazetteBatchReader(opts, schema).partitions()
                    return time.perf_counter() - t
                finally:
                    plan.spool_vouches = real

            timed(real)  # warm-up
            times: dict[str, list[float]] = {k: [] for k in modes}
            for _ in range(args.rounds):
                for k, fn in modes.items():
                    times[k].append(timed(fn))
            best = {k: min(v) for k, v in times.items()}
            base = best["primary only"]
            print(
                f"{args.journals} journals on {args.broker}"
                f" ({args.brokers if args.broker == 'gazette' else 1} broker(s), replication {replication}):"
                f" planning best of {args.rounds}: "
                + ", ".join(f"{k} {v:.3f}s ({v / base:.2f}x)" for k, v in best.items())
                + f"; load average {os.getloadavg()}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
