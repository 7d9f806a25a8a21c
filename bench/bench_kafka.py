#!/usr/bin/env python3
"""Side by side with Spark's Kafka source: the same click events in a local Kafka and in a journal.

    make oldest-pyspark-venv
    .venv-oldest/bin/python bench/bench_kafka.py [--events 1000000] [--rounds 3] [--latency-seconds 60] [--broker gazette]

Kafka: a single-node KRaft Kafka 4.1.1 (broker + controller in one process on 127.0.0.1, jars
from Maven Central via ``mvn``, bench/kafkalib.py), started and stopped by this bench, read and
written by Spark's ``spark-sql-kafka-0-10_2.13`` (fetched with ``spark.jars.packages``; its
4.2.0 release is on Maven Central, hence the oldest supported pyspark's venv). Gazette: the
embedded broker, ZSTANDARD fragments persisted to a file store (as bench/bench_read.py). The
events are bench_read.py's click events, one per message, Kafka's topic with 2 partitions
(local[2]), Kafka's defaults otherwise (no compression, acks=all). ``--broker gazette`` puts our
side on a real Gazette broker and etcd (``make gazette``; fragments persist as they roll, the last
one is read through the broker).

Jobs (ratio = Kafka's time / ours: above 1 means ours is faster), interleaved, best of ``--rounds``:

  typed     every column typed (Kafka: ``from_json`` on ``value`` with the schema; ours: the
            schema), an aggregate over every column;
  infer     the same with the schema inferred (ours: ``inferSchema``, a sample of 4 MB; Kafka:
            ``spark.read.json`` of the first 4 MB of messages, then ``from_json``);
  raw       ``count(*)`` and ``sum(length(value))``;
  catchup   ``Trigger.AvailableNow`` over the whole backlog in ~10 micro-batches
            (``maxOffsetsPerTrigger`` / ``maxBytesPerTrigger``), typed, into ``noop``;
  write     ``df.write`` of the events (cached) into Kafka (``to_json`` as ``value``) and into a
            journal (our sink);
  latency   one event each ``--interval`` s for ``--latency-seconds`` into a stream with
            ``processingTime=0`` appending to ``foreachBatch``; p50 / p99 of append-to-batch time
            (the producer is Kafka's Java producer in the driver JVM, ``linger.ms=0``).

Floors, in the same run: what any Python data source pays, measured with the smallest one
(``tick``, bench/stream_floor.py, none of our code). The catch-up's floor is as many one-row
micro-batches as ours took, under ``Trigger.AvailableNow`` into ``noop``: Kafka's time over it is
the most any Python source can reach against Kafka at that number of micro-batches. The
latency's floor is the median micro-batch of ``tick -> noop`` run back to back.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA = "event_id LONG, ts TIMESTAMP, user_id STRING, country STRING, page STRING, device STRING, duration_ms LONG, amount DOUBLE"
PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13:{v}"
JOBS = ("typed", "infer", "raw", "catchup", "write", "latency")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1_000_000, help="click events (default %(default)s)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--jobs", default=",".join(JOBS), help="comma-separated, of: " + ", ".join(JOBS))
    p.add_argument("--latency-seconds", type=float, default=60.0, help="probing time of each latency run")
    p.add_argument("--interval", type=float, default=0.01, help="seconds between latency events")
    p.add_argument("--batches", type=int, default=10, help="micro-batches of the catch-up (default %(default)s)")
    p.add_argument("--fragment-mib", type=int, default=16, help="fragment length of the journal")
    p.add_argument(
        "--broker",
        choices=("embedded", "gazette"),
        default="embedded",
        help="our side: the embedded broker, or a real Gazette broker and etcd from .bin/ (make gazette)",
    )
    args = p.parse_args(argv)
    unknown = set(args.jobs.split(",")) - set(JOBS)
    if unknown:
        p.error(f"--jobs: unknown {', '.join(sorted(unknown))}; choose from {', '.join(JOBS)}")
    return args


def make_events(n: int) -> bytes:
    """``n`` of bench_read.py's click events as ndjson."""
    from bench_read import make_lines

    data = make_lines(n * 160)
    cut = -1
    for _ in range(n):
        cut = data.index(b"\n", cut + 1)
    return data[: cut + 1]


def every_column(df):  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    return df.agg(
        F.count("*"),
        F.sum("event_id"),
        F.max("ts"),
        F.max("user_id"),
        F.max("country"),
        F.max("page"),
        F.count_distinct("device"),
        F.sum("duration_ms"),
        F.round(F.sum("amount"), 0),
    ).collect()[0]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    jobs = set(args.jobs.split(","))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.path.insert(0, HERE)
    # The workers import stream_floor's `tick` source (the floors).
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, os.environ.get("PYTHONPATH")) if p)
    import pyspark
    from pyspark.sql import functions as F

    from benchlib import Embedded, RealGazette, append_lines, best_of, local_spark, ndjson_spec
    from kafkalib import KafkaBroker
    from pyspark_gazette.client import ClientConfig, JournalClient
    from stream_floor import TickDataSource, run_floor

    print(f"load average at start {os.getloadavg()}", flush=True)
    # Spark (a forked JVM) before the in-process broker's gRPC threads exist.
    spark = local_spark(
        **{
            "spark.jars.packages": PACKAGE.format(v=pyspark.__version__),
            "spark.sql.session.timeZone": "UTC",
            "spark.driver.memory": "4g",
            "spark.sql.shuffle.partitions": 2,
            "spark.ui.showConsoleProgress": "false",
        }
    )
    spark.dataSource.register(TickDataSource)
    work = tempfile.mkdtemp(prefix="bench-kafka-", dir=os.environ.get("BENCH_TMP", HERE))
    ours = RealGazette(work, 1, 8) if args.broker == "gazette" else Embedded(work, os.path.join(work, "store"))
    try:
        with KafkaBroker(os.path.join(work, "kafka")) as kafka, ours as broker:
            store = broker.store
            print(f"kafka {kafka.bootstrap} (pid {kafka.pid}), {broker.name} {broker.address}", flush=True)
            client = JournalClient(ClientConfig(broker.address, file_root=store))
            broker.apply(
                client, [ndjson_spec(j, args.fragment_mib << 20) for j in ("bench/events", "bench/w", "bench/lat")]
            )
            data = make_events(args.events)
            flat = os.path.join(work, "events.json")
            with open(flat, "wb") as f:
                f.write(data)
            t = time.perf_counter()
            append_lines(client, "bench/events", data)  # 1 MiB appends on line boundaries
            assert broker.persisted(600)
            t_gz = time.perf_counter() - t
            t = time.perf_counter()
            (
                spark.read.text(flat)
                .write.format("kafka")
                .option("kafka.bootstrap.servers", kafka.bootstrap)
                .option("topic", "events")
                .save()
            )
            t_kf = time.perf_counter() - t
            print(
                f"data: {args.events} events, {len(data) / 1e6:.1f} MB of ndjson; into the journal in {t_gz:.1f} s, "
                f"into Kafka (Spark's Kafka sink from a local file) in {t_kf:.1f} s",
                flush=True,
            )

            def kafka_read(topic: str = "events"):  # type: ignore[no-untyped-def]
                return (
                    spark.read.format("kafka")
                    .option("kafka.bootstrap.servers", kafka.bootstrap)
                    .option("subscribe", topic)
                )

            def gz():  # type: ignore[no-untyped-def]
                return (
                    spark.read.format("gazette")
                    .option("broker.address", broker.address)
                    .option("store.fileRoot", store)
                )

            def kafka_typed(schema):  # type: ignore[no-untyped-def]
                v = F.from_json(F.col("value").cast("string"), schema).alias("j")
                return kafka_read().load().select(v).select("j.*")

            def kafka_infer():  # type: ignore[no-untyped-def]
                sample = kafka_read().load().selectExpr("CAST(value AS STRING) AS value").limit(4_000_000 // 152)
                jvm = spark._jvm
                ds = getattr(sample._jdf, "as")(jvm.org.apache.spark.sql.Encoders.STRING())
                schema = spark._jsparkSession.read().json(ds).schema().json()
                from pyspark.sql.types import StructType

                return every_column(kafka_typed(StructType.fromJson(json.loads(schema))))

            def raw(df):  # type: ignore[no-untyped-def]
                return tuple(df.agg(F.count("*"), F.sum(F.length("value"))).collect()[0])

            cases: dict[str, dict[str, object]] = {
                "typed": {
                    "kafka": lambda: every_column(kafka_typed(SCHEMA)),
                    "ours": lambda: every_column(gz().schema(SCHEMA).load("bench/events")),
                },
                "infer": {
                    "kafka": kafka_infer,
                    "ours": lambda: every_column(gz().option("inferSchema", "true").load("bench/events")),
                },
                "raw": {
                    "kafka": lambda: raw(kafka_read().load()),
                    "ours": lambda: raw(gz().load("bench/events")),
                },
            }
            runs = iter(range(10_000))

            def catch_up(side: str, df) -> None:  # type: ignore[no-untyped-def]
                """``df`` into ``noop`` with ``Trigger.AvailableNow``; notes its micro-batches."""
                q = (
                    df.writeStream.format("noop")
                    .option("checkpointLocation", os.path.join(work, f"ckpt-{next(runs)}"))
                    .trigger(availableNow=True)
                    .start()
                )
                q.awaitTermination()
                batches[side] = sum(1 for p in q.recentProgress if p["numInputRows"])

            def catchup_kafka() -> None:
                df = (
                    spark.readStream.format("kafka")
                    .option("kafka.bootstrap.servers", kafka.bootstrap)
                    .option("subscribe", "events")
                    .option("startingOffsets", "earliest")
                    .option("maxOffsetsPerTrigger", str(args.events // args.batches + 1))
                    .load()
                    .select(F.from_json(F.col("value").cast("string"), SCHEMA).alias("j"))
                    .select("j.*")
                )
                catch_up("kafka", df)

            def catchup_ours() -> None:
                df = (
                    spark.readStream.format("gazette")
                    .option("broker.address", broker.address)
                    .option("store.fileRoot", store)
                    .option("journals", "bench/events")
                    .option("startingOffsets", "earliest")
                    .option("maxBytesPerTrigger", str(len(data) // args.batches + 1))
                    .schema(SCHEMA)
                    .load()
                )
                catch_up("ours", df)

            def catchup_floor() -> None:
                # Spark's floor for a Python source: as many micro-batches of one row each, from
                # the smallest Python source (stream_floor's `tick`), none of our code.
                df = (
                    spark.readStream.format("tick")
                    .option("batches", str(max(batches.get("ours") or args.batches, 1)))
                    .load()
                )
                catch_up("floor", df)

            batches: dict[str, int] = {}
            cases["catchup"] = {"kafka": catchup_kafka, "ours": catchup_ours, "floor": catchup_floor}
            if "write" in jobs:
                events_df = spark.read.schema(SCHEMA).json(flat).cache()
                events_df.count()
                cases["write"] = {
                    "kafka": lambda: (
                        events_df.select(F.to_json(F.struct("*")).alias("value"))
                        .write.format("kafka")
                        .option("kafka.bootstrap.servers", kafka.bootstrap)
                        .option("topic", "w")
                        .save()
                    ),
                    "ours": lambda: (
                        events_df.write.format("gazette")
                        .mode("append")
                        .option("broker.address", broker.address)
                        .option("journal", "bench/w")
                        .save()
                    ),
                }
            # Same answers first (also the warm-up of every path).
            for job in ("typed", "infer", "raw"):
                if job in jobs:
                    k, o = cases[job]["kafka"](), cases[job]["ours"]()  # type: ignore[operator]
                    if tuple(k) != tuple(o):
                        print(f"{job}: answers differ: Kafka {tuple(k)}, ours {tuple(o)}", flush=True)
            for job in ("catchup", "write"):
                if job in jobs:
                    for fn in cases[job].values():
                        fn()  # type: ignore[operator]
            flat_cases = {f"{j}: {s}": fn for j in JOBS if j in jobs and j in cases for s, fn in cases[j].items()}
            best, times = best_of(flat_cases, args.rounds, alternate=True)  # type: ignore[arg-type]
            load_after = os.getloadavg()
            lat = latency(spark, kafka, broker, client, store, work, args) if "latency" in jobs else {}
            # Spark's per-micro-batch floor for a Python source into foreachBatch, as the latency
            # queries run: `tick` (one row a batch, batches back to back) for a fixed window.
            floor = (
                run_floor(spark, "tick", "noop", os.path.join(work, "ckpt-floor"), min(args.latency_seconds, 30))
                if "latency" in jobs
                else {}
            )
            print(f"\nbest of {args.rounds} rounds on local[2], {args.events} events (all rounds in brackets)")
            for name, s in best.items():
                print(f"  {name:16s} {s:7.2f}s   [{', '.join(f'{x:.2f}' for x in times[name])}]")
            if batches:
                print(
                    f"  catch-up micro-batches: Kafka {batches.get('kafka')}, ours {batches.get('ours')}, floor {batches.get('floor')}"
                )
            print(f"\nratios (Kafka's time / ours; > 1: ours faster); load average {load_after}:")
            goals = {"catchup": 1.5}
            for job in JOBS:
                if f"{job}: ours" in best:
                    r = best[f"{job}: kafka"] / best[f"{job}: ours"]
                    goal = goals.get(job)
                    mark = f"  [>= {goal}] {'met' if r >= goal else 'MISSED'}" if goal else ""
                    print(f"  {job:10s} {r:5.2f}{mark}")
            if "catchup: floor" in best:
                f = best["catchup: floor"]
                print(
                    f"  catch-up floor (the same number of one-row micro-batches from the smallest Python "
                    f"source): {f:.2f} s; Kafka's time / floor {best['catchup: kafka'] / f:.2f} (the most any "
                    f"Python source can reach); ours / floor {best['catchup: ours'] / f:.2f}"
                )
            if floor:
                print(
                    f"  floor of a micro-batch, tick -> noop, batches back to back: median "
                    f"{floor['triggerExecution']:.0f} ms over {floor['batches']:.0f} batches"
                )
            for side, (p50, p99, n) in lat.items():
                print(f"  latency {side:6s} p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms ({n} events)")
            if lat:
                ok = lat["ours"][0] <= lat["kafka"][0] and lat["ours"][1] <= lat["kafka"][1]
                print(f"  latency goal (ours at or below Kafka's p50 and p99): {'met' if ok else 'MISSED'}")
            print(f"load average at the end {os.getloadavg()}")
            client.close()
        return 0
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


def percentile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def latency(spark, kafka, broker, client, store: str, work: str, args) -> dict[str, tuple[float, float, int]]:  # type: ignore[no-untyped-def]
    """p50, p99 and count of append-to-``foreachBatch`` times, Kafka then ours."""
    from pyspark.sql import functions as F

    jvm = spark._jvm
    props = jvm.java.util.Properties()
    for k, v in {
        "bootstrap.servers": kafka.bootstrap,
        "key.serializer": "org.apache.kafka.common.serialization.StringSerializer",
        "value.serializer": "org.apache.kafka.common.serialization.StringSerializer",
        "linger.ms": "0",
    }.items():
        props.setProperty(k, v)
    producer = jvm.org.apache.kafka.clients.producer.KafkaProducer(props)
    producer.send(jvm.org.apache.kafka.clients.producer.ProducerRecord("lat", '{"seq":-1}')).get()
    out: dict[str, tuple[float, float, int]] = {}
    for side in ("kafka", "ours"):
        sent: dict[int, float] = {}
        seen: dict[int, float] = {}

        def on_batch(df, _id, seen=seen) -> None:  # type: ignore[no-untyped-def]
            rows = df.select(F.col("value").cast("string")).collect()
            now = time.perf_counter()
            for r in rows:
                seen.setdefault(json.loads(r[0])["seq"], now)

        if side == "kafka":
            stream = (
                spark.readStream.format("kafka")
                .option("kafka.bootstrap.servers", kafka.bootstrap)
                .option("subscribe", "lat")
                .option("startingOffsets", "latest")
                .load()
            )

            def send(seq: int) -> None:
                producer.send(jvm.org.apache.kafka.clients.producer.ProducerRecord("lat", json.dumps({"seq": seq})))

        else:
            stream = (
                spark.readStream.format("gazette")
                .option("broker.address", broker.address)
                .option("store.fileRoot", store)
                .option("journals", "bench/lat")
                .option("startingOffsets", "latest")
                .load()
            )

            def send(seq: int) -> None:
                client.append("bench/lat", json.dumps({"seq": seq}).encode() + b"\n")

        q = (
            stream.writeStream.foreachBatch(on_batch)
            .option("checkpointLocation", os.path.join(work, f"ckpt-lat-{side}"))
            .trigger(processingTime="0 seconds")
            .start()
        )
        # Warm-up: events until one is seen (the query's start-up and first batches).
        seq = -1
        deadline = time.monotonic() + 300
        while not seen and time.monotonic() < deadline:
            sent[seq] = time.perf_counter()
            send(seq)
            seq -= 1
            time.sleep(0.2)
        stop_at, seq = time.monotonic() + args.latency_seconds, 0
        while time.monotonic() < stop_at:
            sent[seq] = time.perf_counter()
            send(seq)
            seq += 1
            time.sleep(args.interval)
        deadline = time.monotonic() + 60
        while (seq - 1) not in seen and time.monotonic() < deadline:
            time.sleep(0.05)
        q.stop()
        lat = sorted(seen[s] - sent[s] for s in range(seq) if s in seen)
        out[side] = (statistics.median(lat), percentile(lat, 0.99), len(lat))
        print(
            f"latency {side}: p50 {out[side][0] * 1000:.0f} ms, p99 {out[side][1] * 1000:.0f} ms, "
            f"{len(lat)}/{seq} events; load average {os.getloadavg()}",
            flush=True,
        )
    producer.close()
    return out


if __name__ == "__main__":
    sys.exit(main())
