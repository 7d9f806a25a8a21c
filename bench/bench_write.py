"""Spark batch writes: ``df.write.format("gazette")`` beside ``df.write.json`` in the same run.

One click-event DataFrame (``spark.range`` + expressions, cached first so generating it is not
timed) is written as ndjson:

* baseline: ``df.write.json(dir)`` to local disk (Spark's JVM JSON writer);
* gazette: ``df.write.format("gazette")`` into one ZSTANDARD journal of a broker running as a
  child process (``python -m pyspark_gazette.broker``, file store under a temp dir); the save
  returns once every append is durable in the broker.

The ratio is baseline time / gazette time (same rows; goal >= 0.7). The same-run floor is
``df.write.format("discard")`` (bench/floors.py): a ``DataSourceArrowWriter`` that receives the
same DataFrame and drops every batch, i.e. what Spark charges any Python data source writer;
ours / floor (floor time / our time) has the goal >= 0.8. ``--batch-records`` repeats ours and
the floor under each ``spark.sql.execution.arrow.maxRecordsPerBatch`` given (Spark's default
10000); ``R/B`` also sets ``spark.sql.execution.arrow.maxBytesPerBatch`` to B (Spark's default
64 MiB makes the JVM size the Arrow batch after every row; 2147483647, Int.MaxValue, skips
that check). With ``--jfr FILE``, one more gazette write (not timed) is recorded with JDK Flight
Recorder (bench/jfr_top.py summarises it). Where the time goes is
shown by two more passes over the same DataFrame: ``mapInArrow`` that only counts the Arrow
batches (the JVM -> Python Arrow transfer every Python data source pays), and one that also
runs the writer's JSON encoder and drops the bytes (transfer + encode). The rest of the
gazette time is appending (gRPC to the broker, its spool, fsync and compression).

    .venv/bin/python bench/bench_write.py [--rows 2000000] [--partitions 2] [--rounds 1]
        [--batch-records 10000,50000] [--jfr write.jfr] [--sinks embedded,null,null-go,gazette]

``--sinks`` adds, in the same run and interleaved with the floor, our write into other servers:
``null`` is bench/null_append_server.py (a gRPC server in its own process that answers List and
Append and stores nothing: what the RPCs alone cost, received by Python's gRPC), ``null-go`` its
Go twin (``gazette-peer null-append``, tests/peers/gazette-peer; needs ``make gazette``: what
Go's gRPC, as in Gazette's brokers, costs to receive the same appends), ``gazette`` a real Gazette v0.103.0 broker
with etcd (tests/realgazette.py; needs ``make gazette``), its journal on a file store like the
embedded broker's. ``embedded`` is the broker above. Each gets ``ours/floor``: where ours against
the null server is near the floor and ours against a broker is not, the broker on the same cores
is the bound.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

MiB = 1 << 20
WARMUP_TEMPLATE = (
    '{"replication": 1, "labels": [{"name": "content-type", "value": "application/x-ndjson"}], '
    '"fragment": {"length": 1048576, "compression_codec": "NONE"}}'
)


def click_events(spark, rows: int, partitions: int):
    return spark.range(0, rows, 1, partitions).selectExpr(
        "id AS event_id",
        "concat('u-', lpad(cast(id * 7919 % 1000003 AS string), 7, '0')) AS user_id",
        "timestamp_seconds(1767225600 + id DIV 50) + make_interval(0, 0, 0, 0, 0, 0, (id % 1000) / 1000.0) AS ts",
        "element_at(array('view', 'click', 'add_to_cart', 'purchase'), cast(id % 4 + 1 AS int)) AS action",
        "concat('https://shop.example.com/p/', cast(id % 5000 AS string), '?ref=', "
        "element_at(array('search', 'email', 'ad', 'direct'), cast(id % 4 + 1 AS int))) AS url",
        "element_at(array('US', 'DE', 'FR', 'JP', 'BR', 'IN'), cast(id % 6 + 1 AS int)) AS country",
        "id % 3 = 0 AS mobile",
        "round((id % 10000) * 0.37, 2) AS price",
        "cast(id % 17 AS int) AS quantity",
        "concat('Mozilla/5.0 (', element_at(array('X11; Linux', 'Windows NT 10.0', 'Macintosh'), "
        "cast(id % 3 + 1 AS int)), ') \"bench\"') AS agent",
    )


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def count_batches(it):
    import pyarrow as pa

    n = 0
    for batch in it:
        n += batch.num_rows
    yield pa.record_batch([pa.array([n], pa.int64())], names=["n"])


def encode_batches(it):
    import pyarrow as pa

    from pyspark_gazette.spark.write.encode import json_lines

    size = 0
    for batch in it:
        data, _ = json_lines([(name, batch.column(name)) for name in batch.schema.names])
        size += len(data)
    yield pa.record_batch([pa.array([size], pa.int64())], names=["n"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument(
        "--batch-records", default="10000", help="maxRecordsPerBatch[/maxBytesPerBatch] values, comma-separated"
    )
    ap.add_argument("--jfr", help="record one more gazette write with JFR into this file")
    ap.add_argument(
        "--sinks",
        default="embedded",
        help="comma-separated: embedded, null, null-go, gazette (timed in the same rounds)",
    )
    args = ap.parse_args()
    sinks = args.sinks.split(",")

    os.environ["PYSPARK_PYTHON"] = sys.executable
    here = os.path.dirname(os.path.abspath(__file__))
    os.environ["PYTHONPATH"] = os.pathsep.join(x for x in (here, os.environ.get("PYTHONPATH")) if x)
    import floors
    from benchlib import best_of, jfr_recording, local_spark, machine_cpu, ndjson_spec, process_cpu, wait_idle
    from pyspark_gazette.broker.main import spawn_broker
    from pyspark_gazette.client import Change, JournalClient

    tmp = tempfile.mkdtemp(prefix="bench-write-")
    broker, address = spawn_broker(os.path.join(tmp, "broker"), os.path.join(tmp, "store"))
    others: dict[str, str] = {}  # sink -> broker address
    import null_append_server

    null_procs = []
    cluster = None
    for sink in ("null", "null-go"):
        if sink in sinks:
            proc, others[sink] = null_append_server.spawn(go=sink == "null-go")
            null_procs.append(proc)
    if "gazette" in sinks:
        sys.path.insert(0, os.path.join(os.path.dirname(here), "tests"))
        from realgazette import GazetteCluster, require

        require()
        cluster = GazetteCluster(os.path.join(tmp, "gazette"), brokers=1)
        cluster.start()
        cluster.apply_specs([ndjson_spec("bench/clicks", 128 * MiB, store="file:///store/", refresh_seconds=60)])
        others["gazette"] = cluster.address
    spark = local_spark(
        **{"spark.driver.memory": "6g", "spark.sql.session.timeZone": "UTC", "spark.ui.showConsoleProgress": "false"}
    )
    floors.register(spark)
    try:
        df = click_events(spark, args.rows, args.partitions).cache()
        t_gen = timed(df.count)
        spec = ndjson_spec("bench/clicks", 128 * MiB, store="file:///store/", refresh_seconds=60)
        with JournalClient(address) as client:
            client.apply([Change(expect_mod_revision=0, upsert=spec)])

            def gazette() -> None:
                df.write.format("gazette").mode("append").option("broker.address", address).option(
                    "journal", "bench/clicks"
                ).save()

            json_dir = os.path.join(tmp, "json")

            def baseline() -> None:
                df.write.mode("overwrite").json(json_dir)

            # Warm-up: the first Python data source write of a session pays for discovering data
            # sources and starting Python workers (~10 s here); the JVM JSON writer warms up too.
            spark.range(3).write.format("gazette").mode("append").option("broker.address", address).option(
                "journal", "bench/warmup"
            ).option("createJournals", WARMUP_TEMPLATE).save()
            spark.range(3).write.mode("overwrite").json(json_dir)

            def floor() -> None:
                df.write.format("discard").mode("append").save()

            def into(addr: str):
                def write() -> None:
                    df.write.format("gazette").mode("append").option("broker.address", addr).option(
                        "journal", "bench/clicks"
                    ).save()

                return write

            extra = {f"gazette->{k}": into(a) for k, a in others.items()}
            # CPU seconds of each call: the whole machine's, and every server's processes (the
            # receiving one's, and the embedded broker's persisting of earlier writes, which can
            # run on during any case).
            all_servers = [
                broker.pid,
                *(p.pid for p in null_procs),
                *(cluster.pids if cluster else []),
            ]
            cpu: dict[str, list[tuple[float, float]]] = {}

            def metered(name: str, fn):  # type: ignore[no-untyped-def]
                def call() -> None:
                    m0, s0 = machine_cpu(), sum(process_cpu(p) for p in all_servers)
                    fn()
                    cpu.setdefault(name, []).append((machine_cpu() - m0, sum(process_cpu(p) for p in all_servers) - s0))

                return call

            for a in others.values():  # warm-up
                df.limit(10).write.format("gazette").mode("append").option("broker.address", a).option(
                    "journal", "bench/clicks"
                ).save()

            spark.range(3).write.format("discard").mode("append").save()
            sweep = args.batch_records.split(",")
            per_setting = {}
            per_cpu: dict[str, dict[str, tuple[float, float]]] = {}
            head0 = client.append("bench/clicks", b"").begin
            default_bytes = spark.conf.get("spark.sql.execution.arrow.maxBytesPerBatch")

            def configure(setting: str) -> None:
                records, _, max_bytes = setting.partition("/")
                spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", records)
                spark.conf.set("spark.sql.execution.arrow.maxBytesPerBatch", max_bytes or default_bytes)

            for records in sweep:
                configure(records)
                cpu.clear()
                cases = {"json": baseline, "gazette": gazette, "floor": floor, **extra}
                # Before each case, untimed: the servers finish what an earlier case left them
                # (the embedded broker compressing and persisting a fragment).
                best, all_times = best_of(
                    {k: metered(k, fn) for k, fn in cases.items()},
                    args.rounds,
                    alternate=True,
                    before=lambda: wait_idle(all_servers),
                )
                per_cpu[records] = {k: v[all_times[k].index(best[k])] for k, v in cpu.items()}
                per_setting[records] = (best, all_times)
            t_json, t_ours = per_setting[sweep[0]][0]["json"], per_setting[sweep[0]][0]["gazette"]
            json_bytes = sum(os.path.getsize(os.path.join(json_dir, f)) for f in os.listdir(json_dir))
            # zero-byte append: the write head; bytes of one gazette write
            ours_size = (client.append("bench/clicks", b"").begin - head0) // (args.rounds * len(sweep))
            configure(sweep[0])
            with jfr_recording(spark, args.jfr):
                if args.jfr:
                    gazette()
            small = df.limit(1000)
            small.mapInArrow(count_batches, "n long").collect()  # warm-up
            small.mapInArrow(encode_batches, "n long").collect()
            t_transfer = timed(lambda: df.mapInArrow(count_batches, "n long").collect())
            t_encode = timed(lambda: df.mapInArrow(encode_batches, "n long").collect())
        rows = args.rows
        print(f"{rows:,} click events in {args.partitions} partitions (generated and cached in {t_gen:.1f} s)")
        print(f"{'path':<44} {'s':>7} {'MB':>7} {'MB/s':>7} {'k rows/s':>9}")
        for name, t, size in (
            ("df.write.json (baseline, local disk)", t_json, json_bytes),
            ("df.write.format('gazette') ZSTANDARD", t_ours, ours_size),
        ):
            print(f"{name:<44} {t:7.2f} {size / 1e6:7.0f} {size / 1e6 / t:7.1f} {rows / t / 1e3:9.0f}")
        ratio = t_json / t_ours
        print(
            f"ratio gazette/baseline throughput (rows/s): {ratio:.2f} (goal >= 0.7: {'met' if ratio >= 0.7 else 'MISSED'})"
        )
        print("where gazette's time goes (same DataFrame, separate passes):")
        print(f"  JVM -> Python Arrow transfer (mapInArrow, count only): {t_transfer:6.2f} s")
        print(f"  + JSON encoding (mapInArrow, encode and drop):         {t_encode:6.2f} s")
        print(f"  appends (gazette minus transfer+encode):               {max(0.0, t_ours - t_encode):6.2f} s")
        print(f"ceiling for any Python data source here (baseline / transfer alone): {t_json / t_transfer:.2f}")
        print(f"\nsame-run floor (discard writer), per maxRecordsPerBatch; best of {args.rounds} [all rounds]:")
        for records, (best, all_times) in per_setting.items():
            r = best["floor"] / best["gazette"]

            def median_ratio(k: str, times: dict[str, list[float]] = all_times) -> float:
                return statistics.median(times["floor"]) / statistics.median(times[k])

            rounds = "; ".join(f"{k} {', '.join(f'{x:.2f}' for x in v)}" for k, v in all_times.items())
            print(
                f"  maxRecordsPerBatch[/maxBytesPerBatch]={records:<17s} json {best['json']:6.2f} s  gazette {best['gazette']:6.2f} s  "
                f"floor {best['floor']:6.2f} s  ours/floor {r:.2f} (goal >= 0.8: {'met' if r >= 0.8 else 'MISSED'}; "
                f"medians {median_ratio('gazette'):.2f})  "
                f"ours/json {best['json'] / best['gazette']:.2f}  floor/json {best['json'] / best['floor']:.2f}  [{rounds}]"
            )
            for k in extra:
                print(
                    f"    {k:<16s} {best[k]:6.2f} s  ours/floor {best['floor'] / best[k]:.2f} (medians {median_ratio(k):.2f})  "
                    f"vs the embedded broker {best['gazette'] / best[k]:.2f}x"
                )
            print(
                "    CPU seconds of the best round: the machine's, the servers' processes', and the rest (Spark's\n"
                "    JVM and Python workers: the writer's side); floor/case of the rest: ours/floor without the servers"
            )
            floor_rest = per_cpu[records]["floor"][0] - per_cpu[records]["floor"][1]
            for k, (machine, server) in per_cpu[records].items():
                rest = machine - server
                print(
                    f"      {k:<18s} {machine:6.2f} CPU-s  servers {server:5.2f}  rest {rest:5.2f}"
                    + (f"  floor/rest {floor_rest / rest:.2f}" if k.startswith("gazette") else "")
                )
        print(f"load average {os.getloadavg()}")
    finally:
        spark.stop()
        broker.terminate()
        broker.wait(30)
        for proc in null_procs:
            proc.terminate()
            proc.wait(30)
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
