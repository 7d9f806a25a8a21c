#!/usr/bin/env python3
"""Many small journals: the gazette source against Spark reading as many small files, same run.

    .venv/bin/python bench/bench_many.py [--journals 1000,5000] [--rounds 3] [--active 10] [--triggers 6] [--persisted]
        [--broker embedded|embedded-process|gazette] [--brokers 1] [--open-costs 4m,1m] [--watch auto|true|false] [--no-stream]

For each journal count N, one run creates N ndjson journals (Apply in batches of 128) on an
embedded broker running in this process (``--broker embedded-process``: in a process of its own), or
with ``--broker gazette`` on a real Gazette cluster
(``--brokers`` ``gazette serve`` processes and etcd on loopback, from ``.bin/``: see
tests/realgazette.py), appends one small message to each (live content, read through the broker;
with ``--persisted``, embedded broker only, a persisted fragment instead, read directly from the
store) and writes the same N lines as N one-line files, then measures on a local[2] Spark:

  (a) ``count()`` over a selector of the N journals vs ``spark.read.text`` over the N files, both
      warm, best of ``--rounds`` (interleaved), goal ratio >= 0.5 (within 2x);
  (p) driver planning of the batch read (List, ListFragments of every journal, packing), goal < 2 s;
  (r) the executor read path alone (no Spark, in this process): every packed partition read one
      piece at a time vs with the pool;
  (l) a stream's ``latestOffset`` over the N journals, goal < 500 ms: sweeping every journal
      (``watchWriteHeads=false``) and with the default (``auto``: watched from 128 journals), and that an idle trigger (no new data) returns its start, so Spark runs
      no batch and no tasks;
  (s) a stream over the N journals where ``--active`` of them receive one message per trigger vs the
      same stream over just those journals: median trigger time (Spark's ``triggerExecution``) of
      ``--triggers`` triggers after one warm-up, goal ratio <= 1.5 (both streams with
      ``watchWriteHeads=--watch``, default ``auto``: the N journals are watched, the few are swept).

Ratios are baseline time / our time for (a) (above 1 means ours is faster) and ours / baseline
for (s).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
import tracemalloc

HERE = os.path.dirname(os.path.abspath(__file__))


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def line(name: str, i: int) -> bytes:
    return json.dumps({"journal": name, "i": i}, separators=(",", ":")).encode() + b"\n"


def persist(broker, store: str, name: str, content: bytes) -> None:
    """``content`` as the journal's first fragment, written straight into the file store."""
    import hashlib

    from pyspark_gazette.fragments import FragmentRef, compress_bytes
    from pyspark_gazette.protocol import pb

    ref = FragmentRef(name, 0, len(content), hashlib.sha1(content).hexdigest(), pb.ZSTANDARD)
    path = os.path.join(store, "bench", ref.content_path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(compress_bytes(pb.ZSTANDARD, content))
    broker.refresh(name)


def stream_triggers(
    spark, broker, store, client, options: dict, active: list[str], triggers: int, work: str, existing: int
) -> list:
    """Trigger times (ms) of a stream from the journals' start (``existing`` messages), where each
    of ``active`` then gets one message per trigger; the first trigger is a warm-up."""
    r = spark.readStream.format("gazette").option("broker.address", broker.address).option("store.fileRoot", store)
    r = r.option("startingOffsets", "earliest")
    for k, v in options.items():
        r = r.option(k, v)
    name = "q" + os.urandom(4).hex()
    q = (
        r.load()
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", os.path.join(work, "ckpt-" + name))
        .trigger(processingTime="0 seconds")
        .start()
    )
    times = []
    try:
        seen = existing
        for t in range(triggers + 1):
            for j in active:
                client.append(j, line(j, 1000 + t))
            seen += len(active)
            deadline = time.monotonic() + 120
            while spark.sql(f"SELECT count(*) FROM {name}").collect()[0][0] < seen:
                if q.exception() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"stream did not catch up: {q.exception()}")
                time.sleep(0.05)
            progress = [p for p in q.recentProgress if p["numInputRows"] > 0]
            if t > 0:  # the first trigger is the warm-up
                times.append(progress[-1]["durationMs"]["triggerExecution"])
    finally:
        q.stop()
    return times


def run(n: int, args, spark, work: str) -> dict:
    from pyspark.sql import functions as F

    from benchlib import Embedded, EmbeddedProcess, RealGazette, ndjson_spec
    from pyspark_gazette.client import ClientConfig, JournalClient
    from pyspark_gazette.protocol import label_set
    from pyspark_gazette.spark.options import ReadOptions
    from pyspark_gazette.spark.read import stream as stream_module
    from pyspark_gazette.spark.read.batch_scan import GazetteBatchReader
    from pyspark_gazette.spark.read.stream import GazetteStreamReader
    from pyspark_gazette.spark.source import untyped_schema

    base = os.path.join(work, f"n{n}")
    store = os.path.join(base, "store")
    files = os.path.join(base, "files")
    os.makedirs(files)
    if args.broker == "gazette":
        cluster = RealGazette(base, args.brokers, n)
    elif args.broker == "embedded-process":
        cluster = EmbeddedProcess(base, store)
    else:
        cluster = Embedded(base, store)
    with cluster as broker:
        store = broker.store
        client = JournalClient(ClientConfig(broker.address, file_root=store))
        names = [f"many/j{i:05d}" for i in range(n)]
        specs = []
        for name in names:
            spec = ndjson_spec(name, 1 << 20)
            spec.labels.CopyFrom(label_set({"content-type": "application/x-ndjson", "set": "many"}))
            specs.append(spec)
        t = time.perf_counter()
        broker.apply(client, specs)
        for i, name in enumerate(names):
            if args.persisted:
                persist(broker, store, name, line(name, 0))
            else:
                client.append(name, line(name, 0))
            with open(os.path.join(files, f"part-{i:05d}.json"), "wb") as f:
                f.write(line(name, 0))
        print(
            f"\n== {n} journals on {args.broker} ({args.brokers if args.broker == 'gazette' else 1} broker(s)):"
            f" created and appended in {time.perf_counter() - t:.1f}s; load average {os.getloadavg()}"
        )

        opts = {"broker.address": broker.address, "store.fileRoot": store, "selector": "set=many"}

        def gz(**more):
            r = spark.read.format("gazette")
            for k, v in {**opts, **more}.items():
                r = r.option(k, v)
            return r.load()

        costs = [c for c in args.open_costs.split(",") if c]

        def gz_count(**more):
            return lambda: gz(**more).agg(F.count("value")).collect()[0][0]

        # With --persisted every journal's content is in the store: also planned from the store
        # alone (store.url: one listing, no broker).
        store_opts = {
            "store.url": "file:///bench/",
            "store.fileRoot": store,
            "selector": "name:prefix=many/",
            "framing": "ndjson",
        }

        def gz_store_count():
            r = spark.read.format("gazette")
            for k, v in store_opts.items():
                r = r.option(k, v)
            return r.load().agg(F.count("value")).collect()[0][0]

        cases = {
            "gazette count()": gz_count(),
            **({"gazette store.url count()": gz_store_count} if args.persisted else {}),
            **{f"gazette, openCost {c}": gz_count(openCostInBytes=c) for c in costs},
            "spark.read.text count()": lambda: spark.read.text(files).agg(F.count("value")).collect()[0][0],
        }
        assert all(fn() == n for fn in cases.values())  # and warm-up
        parts = {
            "gazette": gz().rdd.getNumPartitions(),
            **{f"gazette, openCost {c}": gz(openCostInBytes=c).rdd.getNumPartitions() for c in costs},
            "text": spark.read.text(files).rdd.getNumPartitions(),
        }
        rounds: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(args.rounds):
            for k, fn in cases.items():
                rounds[k].append(timed(fn))

        ro = ReadOptions.parse(opts)
        schema = untyped_schema(True, False)
        plan_s = [timed(lambda: GazetteBatchReader(ro, schema).partitions()) for _ in range(args.rounds)]
        # The planner's memory: the most its Python allocations held at once over one planning
        # (tracemalloc, untimed: tracing slows it).
        tracemalloc.start()
        GazetteBatchReader(ro, schema).partitions()
        plan_peak_mib = tracemalloc.get_traced_memory()[1] / (1 << 20)
        tracemalloc.stop()
        store_plan_s: list[float] = []
        if args.persisted:
            rs = ReadOptions.parse(store_opts)
            store_plan_s = [timed(lambda: GazetteBatchReader(rs, schema).partitions()) for _ in range(args.rounds)]

        # (r) the executor read path alone, in this process: every packed partition, one read at
        # a time vs the pool (the broker runs in this process too, so they share its cores).
        import pyspark_gazette.spark.read.pack as pack_module
        from pyspark_gazette.spark.read.batch_scan import read_partition

        planned = GazetteBatchReader(ro, schema).partitions()
        source_s = {}
        for threads in (1, pack_module.READ_THREADS):
            saved, pack_module.READ_THREADS = pack_module.READ_THREADS, threads
            try:
                source_s[threads] = min(
                    timed(lambda: [b.num_rows for p in planned for b in read_partition(p, ro, schema)])
                    for _ in range(args.rounds)
                )
            finally:
                pack_module.READ_THREADS = saved

        sr = GazetteStreamReader(ReadOptions.parse({**opts, "watchWriteHeads": "false"}, streaming=True), schema)
        start = sr.initialOffset()
        limit = sr.getDefaultReadLimit()
        latest_s = [timed(lambda: sr.latestOffset(start, limit)) for _ in range(args.rounds)]
        idle_is_start = sr.latestOffset(start, limit) == start
        # (l') the same with the default (auto: watched): the first call sweeps and starts the watches.
        srw = GazetteStreamReader(ReadOptions.parse(opts, streaming=True), schema)
        try:
            srw.latestOffset(start, limit)
            # A running stream's triggers find its journal listing watched (from 128 journals): the
            # timed calls start once the watch has its first snapshot.
            listing = getattr(stream_module, "_list_watches", {}).get(srw._token)
            if listing is not None:
                listing.wait(lambda got: len(got) >= n, 120)
            latest_w = [timed(lambda: srw.latestOffset(start, limit)) for _ in range(args.rounds)]
            idle_is_start = idle_is_start and srw.latestOffset(start, limit) == start
        finally:
            srw.stop()

        # (l'') a store stream's latestOffset: one listing of the store per trigger.
        store_latest_s: list[float] = []
        if args.persisted:
            from pyspark_gazette.spark.read.store_stream import StoreStreamReader

            ss = StoreStreamReader(ReadOptions.parse(store_opts, streaming=True), schema)
            try:
                s_start = ss.initialOffset()
                store_latest_s = [timed(lambda: ss.latestOffset(s_start, limit)) for _ in range(args.rounds)]
                idle_is_start = idle_is_start and ss.latestOffset(s_start, limit) == s_start
            finally:
                ss.stop()

        best = {k: min(v) for k, v in rounds.items()}
        print(f"best of {args.rounds} rounds on local[2] (all rounds in brackets)")
        for k, v in rounds.items():
            print(f"  {k:26s} {best[k]:7.2f}s   [{', '.join(f'{x:.2f}' for x in v)}]")
        print(f"  partitions: {parts}")
        print(f"  planning {min(plan_s):.2f}s  [{', '.join(f'{x:.2f}' for x in plan_s)}]")
        if store_plan_s:
            print(
                f"  planning from the store alone (store.url) {min(store_plan_s):.2f}s"
                f"  [{', '.join(f'{x:.2f}' for x in store_plan_s)}]"
            )
            text = best["spark.read.text count()"]
            print(
                f"  (a'') count() vs spark.read.text: broker-planned {text / best['gazette count()']:.2f}, "
                f"store-planned {text / best['gazette store.url count()']:.2f}"
            )
        print(
            f"  source only, one process, by reads at once: {', '.join(f'{k}: {v:.2f}s' for k, v in source_s.items())}"
        )
        print(
            f"  latestOffset, watchWriteHeads=false {min(latest_s) * 1000:.0f} ms  [{', '.join(f'{x * 1000:.0f}' for x in latest_s)}]"
        )
        print(
            f"  latestOffset, default (watchWriteHeads=auto: watched) {min(latest_w) * 1000:.0f} ms"
            f"  [{', '.join(f'{x * 1000:.0f}' for x in latest_w)}]"
        )
        if store_latest_s:
            print(
                f"  latestOffset of a store.url stream (one listing) {min(store_latest_s) * 1000:.0f} ms"
                f"  [{', '.join(f'{x * 1000:.0f}' for x in store_latest_s)}]"
            )
        print(f"  idle trigger returns its start (no batch, no tasks): {idle_is_start}", flush=True)

        print(f"  planner's peak Python memory (tracemalloc) {plan_peak_mib:.1f} MiB")
        best = {k: min(v) for k, v in rounds.items()}
        result = {
            "journals": n,
            "broker": args.broker,
            "count_s": best["gazette count()"],
            "text_s": best["spark.read.text count()"],
            "ratio": best["spark.read.text count()"] / best["gazette count()"],
            "partitions": parts["gazette"],
            "plan": min(plan_s),
            "plan_peak_mib": plan_peak_mib,
            "latest": min(latest_s),
            "latest_watch": min(latest_w),
            "idle_is_start": idle_is_start,
            **(
                {"store_plan": min(store_plan_s), "store_count_s": best["gazette store.url count()"]}
                if store_plan_s
                else {}
            ),
            **({"store_latest": min(store_latest_s)} if store_latest_s else {}),
        }
        if args.no_stream:
            client.close()
            print(f"  load average {os.getloadavg()}")
            return result
        active = names[:: max(1, n // args.active)][: args.active]
        t = args.triggers
        watch = {"watchWriteHeads": args.watch}
        many = stream_triggers(spark, broker, store, client, {"selector": "set=many", **watch}, active, t, base, n)
        # The active journals now hold 1 + (t + 1) messages each.
        few = stream_triggers(
            spark,
            broker,
            store,
            client,
            {"journals": ",".join(active), **watch},
            active,
            t,
            base,
            len(active) * (t + 2),
        )
        client.close()

    best = {k: min(v) for k, v in rounds.items()}
    print(f"  stream trigger ms, {n} journals ({len(active)} active): {many}")
    print(f"  stream trigger ms, {len(active)} journals: {few}")
    ratio = best["spark.read.text count()"] / best["gazette count()"]
    stream_ratio = statistics.median(many) / statistics.median(few)
    print(f"  (a) count() vs spark.read.text: ratio {ratio:.2f} (goal >= 0.5)")
    for c in costs:
        small = best["spark.read.text count()"] / best[f"gazette, openCost {c}"]
        print(f"  (a') the same with openCostInBytes={c}: ratio {small:.2f}")
    print(f"  (p) planning {min(plan_s):.2f}s (goal < 2 s)")
    print(
        f"  (l) latestOffset {min(latest_s) * 1000:.0f} ms (goal < 500 ms); watchWriteHeads {min(latest_w) * 1000:.0f} ms"
    )
    print(f"  (s) stream {n} journals / {len(active)} journals: {stream_ratio:.2f} (goal <= 1.5)")
    print(f"  load average {os.getloadavg()}")
    return {
        **result,
        "stream": stream_ratio,
        "stream_many_ms": statistics.median(many),
        "stream_few_ms": statistics.median(few),
        "active": len(active),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--journals", default="1000,5000", help="comma-separated journal counts (default %(default)s)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--active", type=int, default=10, help="journals receiving data per stream trigger")
    p.add_argument("--triggers", type=int, default=6)
    p.add_argument("--broker", choices=("embedded", "embedded-process", "gazette"), default="embedded")
    p.add_argument("--no-stream", action="store_true", help="skip (s), the streams")
    p.add_argument(
        "--watch", default="auto", choices=("auto", "true", "false"), help="watchWriteHeads of the (s) streams"
    )
    p.add_argument(
        "--open-costs",
        default="4m,1m",
        help="(a) also with these openCostInBytes, comma-separated (default %(default)s)",
    )
    p.add_argument("--brokers", type=int, default=1, help="gazette serve processes with --broker gazette")
    p.add_argument(
        "--persisted",
        action="store_true",
        help="the journals' messages are persisted fragments (read directly from the store), not live content",
    )
    args = p.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks: stop the brokers
    sys.path.insert(0, HERE)
    from benchlib import local_spark

    work = tempfile.mkdtemp(prefix="bench-many-", dir=os.environ.get("BENCH_TMP"))  # never inside the repository
    spark = local_spark(**{"spark.sql.session.timeZone": "UTC", "spark.driver.memory": "2g"})
    try:
        for n in (int(x) for x in args.journals.split(",")):
            run(n, args, spark, work)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
