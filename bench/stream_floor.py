"""Spark's own per-micro-batch floor, for bench_stream.py's same-run baselines.

``tick`` is the smallest possible Python data source: its stream reader always has one more
row (so a 0-interval trigger runs batches back to back) and its stream writer counts rows and
commits nothing. A ``tick -> tick`` query has the shape of ``gazette -> gazette`` (a Python
source read in one Python worker, a Python sink in another, the sink's commit in a third
process on the driver) with none of our code, so its batch time is what Spark's Python data
source machinery costs per batch. ``rate-micro-batch -> noop`` is the same for Spark's JVM-only
pieces (offset and commit logs, planning, task launch).
"""

from __future__ import annotations

import dataclasses
import statistics
import time

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

#: Per-batch durations reported by Spark (StreamingQueryProgress.durationMs) that the bench prints.
PHASES = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets", "triggerExecution")


class _TickReader(DataSourceStreamReader):
    def __init__(self) -> None:
        self.n = 0

    def initialOffset(self) -> dict:
        return {"n": 0}

    def latestOffset(self, start: dict, limit) -> dict:  # type: ignore[no-untyped-def]
        self.n = max(self.n, int(start["n"])) + 1
        return {"n": self.n}

    def partitions(self, start: dict, end: dict) -> list:
        return [InputPartition(end["n"])]

    def read(self, partition):  # type: ignore[no-untyped-def]
        yield (int(partition.value), time.time())

    def commit(self, end: dict) -> None:
        pass


class _BoundedTickReader(_TickReader, SupportsTriggerAvailableNow):
    """``tick`` with the option ``batches`` N: one row per micro-batch, N micro-batches in all
    under ``Trigger.AvailableNow`` (the floor of a catch-up of N micro-batches)."""

    def __init__(self, batches: int) -> None:
        super().__init__()
        self.batches = batches

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        pass

    def latestOffset(self, start: dict, limit) -> dict:  # type: ignore[no-untyped-def]
        return {"n": min(int(start["n"]) + 1, self.batches)}


@dataclasses.dataclass(frozen=True)
class _Count(WriterCommitMessage):
    rows: int


class _TickWriter(DataSourceStreamWriter):
    def write(self, iterator):  # type: ignore[no-untyped-def]
        return _Count(sum(1 for _ in iterator))

    def commit(self, messages, batchId) -> None:  # type: ignore[no-untyped-def]  # noqa: N803
        pass

    def abort(self, messages, batchId) -> None:  # type: ignore[no-untyped-def]  # noqa: N803
        pass


class TickDataSource(DataSource):
    """``spark.readStream.format("tick")`` / ``writeStream.format("tick")``; see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return "tick"

    def schema(self) -> str:
        return "n long, t double"

    def streamReader(self, schema):  # type: ignore[no-untyped-def]
        if "batches" in self.options:
            return _BoundedTickReader(int(self.options["batches"]))
        return _TickReader()

    def streamWriter(self, schema, overwrite):  # type: ignore[no-untyped-def]  # noqa: N802
        return _TickWriter()


def batch_medians(progress: list[dict], skip: int = 2) -> dict[str, float]:
    """Median of each phase over the batches that read rows, after ``skip`` warm-up batches."""
    rows = [p for p in progress if p["numInputRows"] > 0][skip:]
    if not rows:
        return {}
    out = {k: float(statistics.median(p["durationMs"].get(k, 0) for p in rows)) for k in PHASES}
    out["batches"] = len(rows)
    return out


def run_floor(  # type: ignore[no-untyped-def]
    spark,
    fmt_in: str,
    fmt_out: str,
    checkpoint: str,
    seconds: float,
    source_options: dict[str, str] | None = None,
    sink_options: dict[str, str] | None = None,
) -> dict[str, float]:
    """Run ``fmt_in -> fmt_out`` with a 0-interval trigger for ``seconds`` after its first batch."""
    reader = spark.readStream.format(fmt_in).options(**(source_options or {}))
    if fmt_in == "rate-micro-batch":
        reader = reader.option("rowsPerBatch", 1)
    query = (
        reader.load()
        .writeStream.format(fmt_out)
        .options(**(sink_options or {}))
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="0 seconds")
        .start()
    )
    try:
        wait_first_batch(query, 300)
        time.sleep(seconds)  # a fixed measuring window: batches run back to back meanwhile
    finally:
        query.stop()
    return batch_medians(query.recentProgress)


def wait_first_batch(query, timeout: float) -> float:  # type: ignore[no-untyped-def]
    """Seconds until the query reported its first progress (start-up), polled with a deadline."""
    t0 = time.perf_counter()
    deadline = t0 + timeout
    while query.lastProgress is None:
        if query.exception() is not None:
            raise RuntimeError(f"query failed: {query.exception()}")
        if time.perf_counter() > deadline:
            raise TimeoutError(f"no micro-batch finished within {timeout:.0f} s")
        time.sleep(0.05)
    return time.perf_counter() - t0


def describe(name: str, m: dict[str, float]) -> str:
    if not m:
        return f"{name}: no batch with rows"
    parts = ", ".join(f"{k} {m[k]:.0f}" for k in PHASES if k != "triggerExecution")
    return f"{name}: batch {m['triggerExecution']:.0f} ms median over {m['batches']:.0f} batches ({parts})"
