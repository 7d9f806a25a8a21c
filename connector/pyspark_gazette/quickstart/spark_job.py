"""The Spark half of the quickstart (``pyspark-gazette quickstart``): session, data, queries.

:mod:`pyspark_gazette.quickstart` runs the broker, the steps and the report; everything that
touches pyspark lives here (only ``spark/`` and this module import pyspark). The sample data is a pure function
of the event ids (hashes of the id, no random generator), so the batch aggregation read back from
the journal can be checked against the same aggregation computed straight from the generator,
and a re-run with ``--keep`` continues the ids instead of repeating them.
"""

from __future__ import annotations

import dataclasses
import pathlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812

from pyspark_gazette.client import JournalClient
from pyspark_gazette.spark.options import ReadOptions
from pyspark_gazette.spark.read.batch_scan import spread
from pyspark_gazette.spark.read.plan import plan
from pyspark_gazette.spark.resolve import resolve_journals

#: The click events' schema, as the typed reads ask for it.
CLICK_SCHEMA = (
    "event_id long, ts timestamp, user_id string, country string, page string, device string, duration_ms int"
)
#: 2026-01-01T00:00:00Z in milliseconds; event ``i`` happens about ``20 * i`` ms later.
START_MS = 1_767_225_600_000
COUNTRIES = {"US": 30, "DE": 12, "FR": 10, "BR": 9, "IN": 9, "JP": 8, "GB": 8, "CA": 6, "MX": 5, "NG": 3}
PAGES = {"/": 25, "/search": 20, "/product": 25, "/cart": 12, "/checkout": 8, "/help": 5, "/account": 5}
DEVICES = {"mobile": 55, "desktop": 38, "tablet": 7}


def start_session(log4j: pathlib.Path | None) -> SparkSession:
    """A quiet local[2] session in UTC without the UI (the caller has set PYSPARK_PYTHON)."""
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("pyspark-gazette-quickstart")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.python.worker.reuse", "true")
        .config("spark.ui.showConsoleProgress", "false")  # our own progress lines instead
    )
    if log4j is not None:
        builder = builder.config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={log4j.as_uri()}")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _pick(choices: dict[str, int], salt: int) -> Column:
    """One of ``choices``, weighted, chosen by a hash of the event id and ``salt``."""
    bag = [F.lit(name) for name, weight in choices.items() for _ in range(weight)]
    return F.element_at(F.array(*bag), (F.pmod(F.xxhash64("id", F.lit(salt)), F.lit(len(bag))) + 1).cast("int"))


def _unit(salt: int) -> Column:
    """A number in [0, 1) from a hash of the event id and ``salt``."""
    return F.pmod(F.xxhash64("id", F.lit(salt)), F.lit(1_000_000)) / F.lit(1_000_000.0)


def clicks(spark: SparkSession, first_id: int, rows: int, partitions: int) -> DataFrame:
    """``rows`` click events with ids ``first_id ..``: countries, pages and devices weighted as on a
    real site, users from a pool of 20,000, durations long-tailed (30 ms to 30 s, mostly around 1 s)."""
    return spark.range(first_id, first_id + rows, numPartitions=partitions).select(
        F.col("id").alias("event_id"),
        F.timestamp_millis(F.lit(START_MS) + F.col("id") * 20 + F.pmod(F.xxhash64("id", F.lit(0)), F.lit(20))).alias(
            "ts"
        ),
        F.concat(F.lit("u"), F.lpad(F.pmod(F.xxhash64("id", F.lit(1)), F.lit(20_000)).cast("string"), 5, "0")).alias(
            "user_id"
        ),
        _pick(COUNTRIES, 2).alias("country"),
        _pick(PAGES, 3).alias("page"),
        _pick(DEVICES, 4).alias("device"),
        F.pow(F.lit(10.0), F.lit(1.5) + F.lit(1.5) * (_unit(5) + _unit(6))).cast("int").alias("duration_ms"),
    )


def by_country(df: DataFrame) -> DataFrame:
    """The quickstart's aggregation: per country, clicks, distinct events and users, durations."""
    return df.groupBy("country").agg(
        F.count("*").alias("clicks"),
        F.countDistinct("event_id").alias("events"),
        F.countDistinct("user_id").alias("users"),
        F.sum("duration_ms").alias("duration_ms"),
        F.sum("event_id").alias("id_sum"),
    )


def checkouts(df: DataFrame) -> DataFrame:
    """The stream's transformation: checkout clicks, enriched with seconds, hour and a slow flag."""
    return df.where(F.col("page") == "/checkout").select(
        "event_id",
        "ts",
        "user_id",
        "country",
        "device",
        F.round(F.col("duration_ms") / 1000.0, 3).alias("duration_s"),
        F.hour("ts").alias("hour"),
        (F.col("duration_ms") >= 3000).alias("slow"),
    )


def reader(spark: SparkSession, options: dict[str, str], schema: str) -> DataFrame:
    r = spark.read.format("gazette").schema(schema)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def write(df: DataFrame, options: dict[str, str]) -> None:
    w = df.write.format("gazette").mode("append")
    for k, v in options.items():
        w = w.option(k, v)
    w.save()


@dataclasses.dataclass
class StreamRun:
    """What one AvailableNow run of the stream did, from Spark's query progress."""

    batches: int
    input_rows: int
    seconds: float


def run_stream(
    spark: SparkSession,
    source: dict[str, str],
    sink: dict[str, str],
    checkpoint: str,
    say: Callable[[str], None],
) -> StreamRun:
    """Run ``checkouts`` from the source journal to the sink journal until the backlog is done,
    printing each micro-batch's progress; raises the query's exception if it failed."""
    r = spark.readStream.format("gazette").schema(CLICK_SCHEMA)
    for k, v in source.items():
        r = r.option(k, v)
    w = checkouts(r.load()).writeStream.format("gazette").option("checkpointLocation", checkpoint)
    for k, v in sink.items():
        w = w.option(k, v)
    t0 = time.perf_counter()
    query = w.trigger(availableNow=True).start()
    seen: set[int] = set()
    rows = 0

    def report() -> None:
        nonlocal rows
        for p in query.recentProgress:
            batch = _get(p, "batchId")
            if batch in seen:
                continue
            seen.add(batch)
            n = int(_get(p, "numInputRows") or 0)
            rows += n
            rate = float(_get(p, "processedRowsPerSecond") or 0.0)
            say(f"      micro-batch {batch}: {n:,} rows in ({rate:,.0f} rows/s)")

    try:
        while not query.awaitTermination(1):
            report()
        report()
    finally:
        if query.isActive:
            query.stop()
    error = query.exception()
    if error is not None:
        raise RuntimeError(f"streaming query failed: {error}")
    return StreamRun(len(seen), rows, time.perf_counter() - t0)


def _get(progress: Any, name: str) -> Any:
    return progress[name] if isinstance(progress, dict) else getattr(progress, name)


@contextmanager
def job_progress(
    spark: SparkSession,
    what: str,
    say: Callable[[str], None],
    every: float = 2.0,
    terminal: bool | None = None,
    out: Any = None,
) -> Iterator[None]:
    """Task progress of the Spark jobs the block runs (a job group of their own). On a terminal
    one line is updated in place every ``every`` seconds; elsewhere (a log, a pipe) only the
    final count is printed, once the block succeeded."""
    import sys
    import uuid

    out = sys.stdout if out is None else out
    terminal = out.isatty() if terminal is None else terminal
    sc = spark.sparkContext
    tracker = sc.statusTracker()
    group = f"pyspark-gazette-quickstart-{uuid.uuid4().hex[:8]}"

    def line() -> str:
        finished, stages = 0, []
        for job_id in sorted(tracker.getJobIdsForGroup(group)):
            job = tracker.getJobInfo(job_id)
            if job is None:
                continue
            for stage_id in sorted(job.stageIds):
                stage = tracker.getStageInfo(stage_id)
                if stage is None or (job.status == "SUCCEEDED" and not stage.numCompletedTasks):
                    continue  # a finished job's skipped stages ran no task
                finished += stage.numCompletedTasks
                stages.append(stage.numTasks)
        total = sum(stages)
        if not total:
            return ""
        # Per stage, in order, so a count can be matched with the read's partitions (the first
        # stage of a read) and with the shuffle's partitions after it.
        split = f" (stages of {' + '.join(map(str, stages))})" if len(stages) > 1 else ""
        return f"      {what}: {finished}/{total} tasks{split}"

    done = threading.Event()

    def poll() -> None:
        shown = ""
        while not done.wait(every):
            current = line()
            if current and current != shown:
                shown = current
                out.write("\r" + shown)
                out.flush()

    sc.setJobGroup(group, what)
    thread = threading.Thread(target=poll, name="quickstart-progress", daemon=True)
    if terminal:
        thread.start()
    try:
        yield
    finally:
        done.set()
        if terminal:
            thread.join()
            out.write("\r")
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        sc.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]
    final = line()
    if final:
        say(final)


@dataclasses.dataclass
class PlannedRead:
    """How a batch read of the clicks is split between fragment files and the broker."""

    direct_fragments: int
    direct_bytes: int
    broker_ranges: int
    broker_bytes: int
    partitions: int
    #: Fragments (spool fragments, not yet persisted) the broker ranges cover.
    broker_fragments: int = 0


def planned_read(options: dict[str, str]) -> PlannedRead:
    """Plan the read on the driver with the connector's own planner (the same listing snapshot
    logic the data source runs), so the report states what the executors were given to read."""
    opts = ReadOptions.parse(options)
    with JournalClient(opts.connection.client_config()) as client:
        parts, _ = plan(client, resolve_journals(client, opts.journals, opts.selector), opts)
        partitions = spread(parts, opts)  # as the data source cuts and packs them
        segs = [s for p in parts for s in p.segments]
        direct = [s for s in segs if s.fragment is not None]
        broker = [s for s in segs if s.fragment is None]
        listed = {j: [f.spec for f in client.list_fragments(j)] for j in {s.journal for s in broker}}
    spool = {
        (s.journal, f.begin)
        for s in broker
        for f in listed[s.journal]
        if not f.backing_store and f.begin < s.end and s.begin < f.end
    }
    return PlannedRead(
        broker_fragments=len(spool),
        direct_fragments=len({(s.journal, s.fragment.begin) for s in direct if s.fragment is not None}),
        direct_bytes=sum(s.length for s in direct),
        broker_ranges=len(broker),
        broker_bytes=sum(s.length for s in broker),
        partitions=len(partitions),
    )
