#!/usr/bin/env python3
"""A backfill from the bucket alone (``store.url``) against the same read planned through the broker, same run.

    .venv/bin/python bench/bench_store_read.py [--mib 1024] [--journals 8] [--rounds 3] [--fragment-mib 16]

One run appends ``--mib`` MiB of ndjson click events, spread over ``--journals`` journals, through
an embedded broker persisting ZSTANDARD fragments to a local file store, then times on a local[2]
Spark, interleaved (alternating order) and best of ``--rounds``:

  (a) a backfill: ``count()`` and ``sum(length(value))`` over every persisted byte, planned through
      the broker (``broker.address``, ending at each journal's persisted end) and planned from the
      store alone (``store.url``): ratio broker-planned time / store-planned time (>= 1: the store
      read is no slower);
  (p) the driver's planning alone, both ways.

Both reads cover the same offsets and must give the same answer (checked).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mib", type=int, default=1024, help="uncompressed MiB of ndjson in all (default %(default)s)")
    p.add_argument("--journals", type=int, default=8, help="journals the data is spread over (default %(default)s)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--fragment-mib", type=int, default=16, help="fragment length (default %(default)s)")
    args = p.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import functions as F

    from bench_read import make_lines
    from benchlib import append_lines, best_of, local_spark, ndjson_spec
    from pyspark_gazette.broker import EmbeddedBroker
    from pyspark_gazette.client import Change, ClientConfig, JournalClient
    from pyspark_gazette.spark.options import ReadOptions
    from pyspark_gazette.spark.read.batch_scan import GazetteBatchReader
    from pyspark_gazette.spark.source import untyped_schema

    work = tempfile.mkdtemp(prefix="bench-store-read-", dir=os.environ.get("BENCH_TMP", HERE))
    try:
        store = os.path.join(work, "store")
        names = [f"backfill/j{i:03d}" for i in range(args.journals)]
        with EmbeddedBroker(os.path.join(work, "broker"), file_root=store) as broker:
            client = JournalClient(ClientConfig(broker.address, file_root=store))
            client.apply([Change(0, upsert=ndjson_spec(n, args.fragment_mib << 20)) for n in names])
            t = time.perf_counter()
            share = (args.mib << 20) // args.journals
            for n in names:
                append_lines(client, n, make_lines(share))
                client.append(n, b'{"event_id":-1}\n')  # rolls the last data fragment
            assert broker.wait_persisted(600)
            ends = {}
            for n in names:
                persisted = [f.spec for f in client.list_fragments(n) if f.spec.mod_time]
                ends[n] = persisted[-1].end
            total = sum(ends.values())
            print(
                f"data: {total / 1e6:.0f} MB of ndjson in {args.journals} journals of {args.fragment_mib} MiB "
                f"ZSTANDARD fragments, loaded in {time.perf_counter() - t:.0f}s; load average {os.getloadavg()}"
            )
            spark = local_spark(**{"spark.ui.showConsoleProgress": "false", "spark.driver.memory": "4g"})
            via_broker = {
                "broker.address": broker.address,
                "store.fileRoot": store,
                "journals": ",".join(names),
                "endingOffsets": json.dumps(ends),
            }
            alone = {"store.url": "file:///bench/", "store.fileRoot": store, "journals": ",".join(names)}
            alone["framing"] = "ndjson"

            def query(options: dict[str, str]):
                def run():
                    r = spark.read.format("gazette")
                    for k, v in options.items():
                        r = r.option(k, v)
                    return r.load().agg(F.count("value"), F.sum(F.length("value"))).collect()[0]

                return run

            cases = {"broker-planned": query(via_broker), "store-planned": query(alone)}
            answers = {k: fn() for k, fn in cases.items()}  # and warm-up
            assert answers["broker-planned"] == answers["store-planned"], answers
            best, rounds = best_of(cases, args.rounds, alternate=True)
            schema = untyped_schema(True, False)
            plans = {
                k: min(
                    _timed(lambda o=o: GazetteBatchReader(ReadOptions.parse(o), schema).partitions())
                    for _ in range(args.rounds)
                )
                for k, o in (("broker-planned", via_broker), ("store-planned", alone))
            }
            client.close()
        print(f"best of {args.rounds} rounds on local[2] (all rounds in brackets); rows {answers['store-planned'][0]}")
        for k, v in rounds.items():
            print(f"  {k:16s} {best[k]:7.2f}s  [{', '.join(f'{x:.2f}' for x in v)}]  planning {plans[k]:.2f}s")
        print(f"  (a) broker-planned / store-planned: {best['broker-planned'] / best['store-planned']:.2f}")
        print(f"  load average {os.getloadavg()}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _timed(fn) -> float:  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


if __name__ == "__main__":
    sys.exit(main())
