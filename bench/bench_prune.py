#!/usr/bin/env python3
"""Pruning: a bounded read of a long journal against ``spark.read.json`` over the whole export.

    .venv/bin/python bench/bench_prune.py [--hours 24,96,240] [--hour-mib 1] [--per-hour 4] [--rounds 2]

For each journal length (``--hours`` hours of ndjson click events, ``--hour-mib`` MiB an hour in
``--per-hour`` ZSTANDARD fragments whose persist times fall inside their hour; the fragment
files are written straight into the file store of an embedded broker, as in bench_read's (p)),
the same bytes are also exported to one local file (what a user without the connector reads).
Then, on local[2], interleaved, best of ``--rounds``, each query the same typed aggregate over
the events of a time window:

* baseline: ``spark.read.schema(s).json(export).where(ts in window)``: reads everything;
* ours, window of one hour (the middle one), chosen three ways: ``startingTimestamp`` /
  ``endingTimestamp`` (fragment persist times), ``startingOffsets`` / ``endingOffsets`` (the
  hour's byte range), and a pushed filter on ``_mod_time`` (``filterPushdown=true``);
* ours, a window of 1/24 of the journal (``hours / 24`` hours, by timestamps): the issue's goal
  case, >= 10x the baseline.

Every query's answer is checked against the baseline's (same rows, same sums), and the
fragments each way opens are counted in this process (``read.OPEN_COUNTER`` over the planned
partitions). Ours should stay flat as the journal grows; the baseline grows with it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA = "event_id LONG, ts TIMESTAMP, user_id STRING, country STRING, page STRING, amount DOUBLE"
BASE = 1_767_225_600  # 2026-01-01T00:00:00Z
COUNTRIES = ("US", "DE", "FR", "BR", "IN", "JP", "GB", "CA")
PAGES = ("/", "/search", "/product", "/cart", "/checkout")


def hour_lines(hour: int, size: int, first_id: int) -> tuple[list[bytes], int]:
    """About ``size`` bytes of events stamped inside ``hour``; returns the lines and the next id."""
    lines, total, i = [], 0, first_id
    # The hour's date and hour (BASE is a midnight, so an hour never straddles two days); a
    # journal longer than January must not stamp "2026-01-32", which both readers find malformed.
    prefix = time.strftime("%Y-%m-%dT%H:", time.gmtime(BASE + hour * 3600))
    while total < size:
        second = (i * 7) % 3600
        stamp = f"{prefix}{second // 60:02d}:{second % 60:02d}Z"
        line = (
            f'{{"event_id":{i},"ts":"{stamp}","user_id":"u{i * 7919 % 100003:06d}",'
            f'"country":"{COUNTRIES[i % 8]}","page":"{PAGES[i % 5]}","amount":{i % 10000 / 100}}}\n'
        ).encode()
        lines.append(line)
        total += len(line)
        i += 1
    return lines, i


def build_journal(client, broker, store: str, export: str, name: str, hours: int, hour_bytes: int, per_hour: int):  # type: ignore[no-untyped-def]
    """Fragments straight into the store, persist times inside their hour; the export file.
    Returns each hour's [begin, end) byte range."""
    from benchlib import ndjson_spec
    from pyspark_gazette.client import Change
    from pyspark_gazette.fragments import FragmentRef, compress_bytes
    from pyspark_gazette.protocol import pb

    client.apply([Change(0, upsert=ndjson_spec(name, 1 << 30))])
    offset, next_id, ranges = 0, 0, []
    with open(export, "wb") as out:
        for h in range(hours):
            lines, next_id = hour_lines(h, hour_bytes, next_id)
            begin_hour = offset
            step = -(-len(lines) // per_hour)
            for k in range(per_hour):
                content = b"".join(lines[k * step : (k + 1) * step])
                if not content:
                    continue
                ref = FragmentRef(name, offset, offset + len(content), hashlib.sha1(content).hexdigest(), pb.ZSTANDARD)
                path = os.path.join(store, "bench", ref.content_path)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    f.write(compress_bytes(pb.ZSTANDARD, content))
                persisted = BASE + h * 3600 + (k + 1) * 3600 // per_hour - 1
                os.utime(path, (persisted, persisted))
                out.write(content)
                offset += len(content)
            ranges.append((begin_hour, offset))
    broker.refresh(name)
    return ranges


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hours", default="24,96,240", help="journal lengths in hours (default %(default)s)")
    p.add_argument("--hour-mib", type=float, default=1.0)
    p.add_argument("--per-hour", type=int, default=4, help="fragments an hour")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    lengths = [int(x) for x in args.hours.split(",")]

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import functions as F

    from benchlib import best_of, local_spark, same_answers
    from pyspark_gazette.broker import EmbeddedBroker
    from pyspark_gazette.client import ClientConfig, JournalClient
    from pyspark_gazette.spark.options import ReadOptions
    from pyspark_gazette.spark.read.batch_scan import GazetteBatchReader, GazettePushdownBatchReader, read_partition
    from pyspark_gazette.spark.read.segments import OPEN_COUNTER

    work = tempfile.mkdtemp(prefix="bench-prune-", dir=os.environ.get("BENCH_TMP", HERE))
    try:
        store = os.path.join(work, "store")
        with EmbeddedBroker(os.path.join(work, "broker"), file_root=store) as broker:
            client = JournalClient(ClientConfig(broker.address, file_root=store))
            journals = {}
            for hours in lengths:
                name, export = f"bench/prune-{hours}h", os.path.join(work, f"export-{hours}h.json")
                ranges = build_journal(
                    client, broker, store, export, name, hours, int(args.hour_mib * (1 << 20)), args.per_hour
                )
                n = len(client.list_fragments(name))
                journals[hours] = (name, export, ranges, n)
                print(f"journal {name}: {ranges[-1][1] / 1e6:.1f} MB in {n} fragments; export {export}")

            spark = local_spark(
                **{
                    "spark.sql.session.timeZone": "UTC",
                    "spark.driver.memory": "4g",
                    "spark.ui.showConsoleProgress": "false",
                    "spark.sql.python.filterPushdown.enabled": "true",
                }
            )

            def gz(name, schema=SCHEMA, **opts):
                r = spark.read.format("gazette").option("broker.address", broker.address)
                r = r.option("store.fileRoot", store).option("journals", name).schema(schema)
                for k, v in opts.items():
                    r = r.option(k, v)
                return r.load()

            def window(hours: int, width: int) -> tuple[int, int]:
                first = hours // 2 - width // 2
                return first, first + width  # [first hour, end hour)

            def agg(df, lo: int, hi: int):
                lo_ts, hi_ts = (
                    F.timestamp_seconds(F.lit(BASE + lo * 3600)),
                    F.timestamp_seconds(F.lit(BASE + hi * 3600)),
                )
                df = df.where((F.col("ts") >= lo_ts) & (F.col("ts") < hi_ts))
                return [tuple(r) for r in df.agg(F.count("*"), F.sum("amount"), F.max("event_id")).collect()]

            def ts_opts(lo: int, hi: int) -> dict:
                # fragment persist times of hours [lo, hi) are in [BASE + lo h, BASE + hi h)
                return {
                    "startingTimestamp": str((BASE + lo * 3600) * 1000),
                    "endingTimestamp": str((BASE + hi * 3600) * 1000 - 1),
                }

            def offset_opts(name: str, ranges, lo: int, hi: int) -> dict:
                return {
                    "startingOffsets": json.dumps({name: ranges[lo][0]}),
                    "endingOffsets": json.dumps({name: ranges[hi - 1][1]}),
                }

            def pushed_df(name: str, lo: int, hi: int):
                df = gz(name, SCHEMA + ", _mod_time TIMESTAMP", filterPushdown="true")
                lo_ts, hi_ts = (
                    F.timestamp_seconds(F.lit(BASE + lo * 3600)),
                    F.timestamp_seconds(F.lit(BASE + hi * 3600)),
                )
                return df.where((F.col("_mod_time") >= lo_ts) & (F.col("_mod_time") < hi_ts))

            def opened(name: str, pushed=None, **opts) -> int:
                """Fragments the read opens, counted over the planned partitions in this process."""
                from pyspark.sql.datasource import GreaterThanOrEqual, LessThan
                from pyspark.sql.types import StructType

                o = ReadOptions.parse(
                    {"broker.address": broker.address, "store.fileRoot": store, "journals": name, **opts}
                )
                schema = StructType.fromDDL(SCHEMA)
                r = (GazettePushdownBatchReader if pushed else GazetteBatchReader)(o, schema)
                if pushed:
                    lo, hi = pushed
                    list(r.pushFilters([GreaterThanOrEqual(("_mod_time",), lo), LessThan(("_mod_time",), hi)]))
                before = OPEN_COUNTER.fragments
                for part in r.partitions():
                    for _ in read_partition(part, o, schema):
                        pass
                return OPEN_COUNTER.fragments - before

            import datetime as dt

            cases, answers, counts = {}, {}, {}
            for hours, (name, export, ranges, n) in journals.items():
                lo, hi = window(hours, 1)
                wlo, whi = window(hours, max(1, hours // 24))
                utc = dt.timezone.utc
                at = (
                    dt.datetime.fromtimestamp(BASE + lo * 3600, utc),
                    dt.datetime.fromtimestamp(BASE + hi * 3600, utc),
                )
                cases[f"{hours}h json, 1h"] = lambda e=export, a=lo, b=hi: agg(spark.read.schema(SCHEMA).json(e), a, b)
                cases[f"{hours}h json, 1/24"] = lambda e=export, a=wlo, b=whi: agg(
                    spark.read.schema(SCHEMA).json(e), a, b
                )
                cases[f"{hours}h ours 1h, timestamps"] = lambda m=name, a=lo, b=hi: agg(gz(m, **ts_opts(a, b)), a, b)
                cases[f"{hours}h ours 1h, offsets"] = lambda m=name, r=ranges, a=lo, b=hi: agg(
                    gz(m, **offset_opts(m, r, a, b)), a, b
                )
                cases[f"{hours}h ours 1h, pushed _mod_time"] = lambda m=name, a=lo, b=hi: agg(pushed_df(m, a, b), a, b)
                cases[f"{hours}h ours 1/24, timestamps"] = lambda m=name, a=wlo, b=whi: agg(
                    gz(m, **ts_opts(a, b)), a, b
                )
                counts[f"{hours}h ours 1h, timestamps"] = opened(name, **ts_opts(lo, hi))
                counts[f"{hours}h ours 1h, offsets"] = opened(name, **offset_opts(name, ranges, lo, hi))
                counts[f"{hours}h ours 1h, pushed _mod_time"] = opened(name, pushed=at, filterPushdown="true")
                counts[f"{hours}h ours 1/24, timestamps"] = opened(name, **ts_opts(wlo, whi))
                counts[f"{hours}h json, 1h"] = counts[f"{hours}h json, 1/24"] = n
            # Same answers (and a warm-up of every path).
            for key, fn in cases.items():
                answers[key] = fn()
            for key in cases:
                hours, _, rest = key.partition("h ")
                base_key = f"{hours}h json, {'1/24' if '1/24' in rest else '1h'}"
                assert same_answers(answers[key], answers[base_key]), (key, answers[key], answers[base_key])
            best, all_times = best_of(cases, args.rounds, alternate=True)
            spark.stop()
            client.close()

        print(f"\nbest of {args.rounds} rounds on local[2] (all rounds in brackets); rows = count(*) of the window")
        for key, s in best.items():
            rows = answers[key][0][0]
            print(
                f"  {key:36s} {s:6.2f} s  rows {rows:>8}  fragments opened {counts[key]:>5}   "
                f"[{', '.join(f'{x:.2f}' for x in all_times[key])}]"
            )
        print(
            f"\nratios (spark.read.json over the export / ours; goal >= 10 for the 1/24 window); load average {os.getloadavg()}"
        )
        for hours in lengths:
            for way in ("1h, timestamps", "1h, offsets", "1h, pushed _mod_time", "1/24, timestamps"):
                base = best[f"{hours}h json, {'1/24' if '1/24' in way else '1h'}"]
                r = base / best[f"{hours}h ours {way}"]
                goal = "  goal >= 10: " + ("met" if r >= 10 else "MISSED") if "1/24" in way else ""
                print(f"  {hours:4d}h  {way:22s} {r:6.2f}{goal}")
        first, last = lengths[0], lengths[-1]
        growth = best[f"{last}h ours 1h, timestamps"] / best[f"{first}h ours 1h, timestamps"]
        print(
            f"  ours (1h window) time at {last}h / at {first}h: {growth:.2f} (flat = 1.0; the json baseline: "
            f"{best[f'{last}h json, 1h'] / best[f'{first}h json, 1h']:.2f})"
        )
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
