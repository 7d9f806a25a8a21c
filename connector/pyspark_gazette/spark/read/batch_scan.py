"""Batch reads: ``spark.read.format("gazette")`` (the driver side, and the reader's dispatch).

The driver resolves the journals (List), takes one fragment-listing snapshot per journal and
plans partitions (:mod:`pyspark_gazette.spark.read.plan`), packing small journals together
(:mod:`pyspark_gazette.spark.read.pack`); executors read them
(:mod:`pyspark_gazette.spark.read.partition_reader`) and yield Arrow batches.

With ``filterPushdown=true`` (and Spark's ``spark.sql.python.filterPushdown.enabled``), filters
on ``journal`` (``=``, ``IN``, ``LIKE 'prefix%'``) choose the journals, and filters on
``offset`` and ``mod_time`` (comparisons) drop whole fragments before any is opened. Journal
filters are fully handled; offset and mod-time filters are still re-checked by Spark row by row,
since pruning works at fragment granularity.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition
from pyspark.sql.types import StructType

from pyspark_gazette.client import JournalClient
from pyspark_gazette.errors import redact_url
from pyspark_gazette.flow.labels import name_partitions
from pyspark_gazette.message import LINES
from pyspark_gazette.spark.options import ReadOptions
from pyspark_gazette.spark.read import pack as pack_module
from pyspark_gazette.spark.read import store_plan
from pyspark_gazette.spark.read.arrow_output import is_untyped
from pyspark_gazette.spark.read.flow import FLOW_COLUMNS, predicate_of
from pyspark_gazette.spark.read.pack import PackedPartition, pack, read_packed
from pyspark_gazette.spark.read.partition_reader import read_batches
from pyspark_gazette.spark.read.plan import GazettePartition, plan
from pyspark_gazette.spark.resolve import resolve_journals
from pyspark_gazette.spark.surface import plain

log = logging.getLogger(__name__)


def read_partition(part: InputPartition, opts: ReadOptions, schema: StructType) -> Iterator[pa.RecordBatch]:
    """The record batches of a one-journal or a packed partition."""
    if isinstance(part, PackedPartition):
        yield from read_packed(part, opts, schema)
        return
    assert isinstance(part, GazettePartition)
    yield from read_batches(part, opts, schema)


@dataclasses.dataclass
class Pruning:
    """Bounds collected from pushed filters."""

    journals: set[str] | None = None
    prefixes: list[str] = dataclasses.field(default_factory=list)
    offset_min: float | None = None  # inclusive
    offset_max: float | None = None  # inclusive
    mod_time_min: float | None = None  # unix seconds, inclusive
    mod_time_max: float | None = None

    def keep_journal(self, name: str) -> bool:
        if self.journals is not None and name not in self.journals:
            return False
        return all(name.startswith(p) for p in self.prefixes)


class GazetteBatchReader(DataSourceReader):
    """Plans and reads a batch query over journals."""

    def __init__(self, opts: ReadOptions, schema: StructType):
        self.opts = opts
        self.schema = schema
        self.pruning = Pruning()

    @plain
    def partitions(self) -> Sequence[InputPartition]:
        if self.opts.store_url:
            return self._store_partitions()
        with JournalClient(self.opts.connection.client_config()) as client:
            infos = [
                i
                for i in resolve_journals(
                    client, self.opts.journals, self.opts.selector, offsets=self.opts.offset_bounds
                )
                if self.pruning.keep_journal(i.name)
            ]
            parts, ranges = plan(client, infos, self.opts)
        packed = spread(prune(parts, self.pruning), self.opts)
        log.info(
            "planned %d partitions over %d journals (%d bytes)",
            len(packed),
            len(ranges),
            sum(p.length for p in packed),
        )
        # Spark needs at least one partition; an empty one reads nothing.
        return packed or [GazettePartition(0, "", LINES, ())]

    def _store_partitions(self) -> Sequence[InputPartition]:
        """The partitions of a ``store.url`` read: planned from the store alone, no broker."""
        parts, ranges = store_plan.plan(self.opts)
        parts = [p for p in parts if self.pruning.keep_journal(p.journal)]
        packed = spread(prune(parts, self.pruning), self.opts)
        log.info(
            "planned %d partitions over %d journals (%d bytes) from store %s",
            len(packed),
            len(ranges),
            sum(p.length for p in packed),
            redact_url(self.opts.store_url or ""),
        )
        return packed or [GazettePartition(0, "", LINES, ())]

    @plain
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from read_partition(partition, self.opts, self.schema)


class GazettePushdownBatchReader(GazetteBatchReader):
    """:class:`GazetteBatchReader` with filter pushdown (``filterPushdown=true``)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        from pyspark.sql.datasource import (
            EqualTo,
            GreaterThan,
            GreaterThanOrEqual,
            In,
            LessThan,
            LessThanOrEqual,
            StringStartsWith,
        )

        untyped = is_untyped(self.schema, self.opts.include_metadata)
        journal_col = "journal" if untyped else "_journal"
        offset_col = "offset" if untyped else "_offset"
        mod_col = "mod_time" if untyped else "_mod_time"
        p = self.pruning
        for f in filters:
            attribute: tuple[str, ...] = getattr(f, "attribute", ())
            col = attribute[0] if len(attribute) == 1 else None
            if col == journal_col and isinstance(f, EqualTo) and isinstance(f.value, str):
                p.journals = {f.value} if p.journals is None else p.journals & {f.value}
                continue
            if col == journal_col and isinstance(f, In) and all(isinstance(v, str) for v in f.value):
                p.journals = set(f.value) if p.journals is None else p.journals & set(f.value)
                continue
            if col == journal_col and isinstance(f, StringStartsWith):
                p.prefixes.append(f.value)
                continue
            if col in (offset_col, mod_col) and isinstance(
                f, (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)
            ):
                value = _number(f.value)
                if value is not None:
                    lo = value if isinstance(f, (EqualTo, GreaterThanOrEqual, GreaterThan)) else None
                    hi = value if isinstance(f, (EqualTo, LessThanOrEqual, LessThan)) else None
                    if col == offset_col:
                        p.offset_min = _max(p.offset_min, lo)
                        p.offset_max = _min(p.offset_max, hi)
                    else:
                        p.mod_time_min = _max(p.mod_time_min, lo)
                        p.mod_time_max = _min(p.mod_time_max, hi)
            yield f  # re-checked by Spark: pruning is per fragment


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        return value.timestamp()
    return None


def _max(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def _min(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


def spread(parts: list[GazettePartition], opts: ReadOptions) -> list[GazettePartition | PackedPartition]:
    """The Spark partitions of a batch read's planned ``parts``: long ones cut and small ones
    packed, over ``minPartitions`` or, without it, the driver's cores (like Spark's file sources)."""
    if opts.min_partitions is None:
        opts = dataclasses.replace(opts, min_partitions=pack_module.default_parallelism())
    return pack(pack_module.split(parts, opts), opts)


def prune(parts: list[GazettePartition], p: Pruning) -> list[GazettePartition]:
    """Drop segments that cannot hold a row matching the offset and mod-time bounds."""
    if p.offset_min is None and p.offset_max is None and p.mod_time_min is None and p.mod_time_max is None:
        return parts
    out: list[GazettePartition] = []
    for part in parts:
        segs = tuple(
            s
            for s in part.segments
            if (p.offset_min is None or s.end > p.offset_min or s.tail)
            and (p.offset_max is None or s.begin <= p.offset_max)
            and (p.mod_time_min is None or (s.mod_time and s.mod_time >= p.mod_time_min))
            and (p.mod_time_max is None or (s.mod_time and s.mod_time <= p.mod_time_max))
        )
        if segs:
            out.append(GazettePartition(len(out), part.journal, part.framing, segs, part.truncated_at))
    return out


class FlowPruning(Pruning):
    """:class:`Pruning` plus predicates on a collection's logical partition columns, decided per
    journal from its partition values before any fragment is listed."""

    def __init__(self) -> None:
        super().__init__()
        self.partition_predicates: list = []

    def keep_journal(self, name: str) -> bool:
        if not super().keep_journal(name):
            return False
        if not self.partition_predicates:
            return True
        values = name_partitions(name)
        return all(p.holds(values) for p in self.partition_predicates)


class FlowPushdownBatchReader(GazettePushdownBatchReader):
    """A ``collection`` read with ``filterPushdown=true``: filters on logical partition columns
    (``=``, ``IN``, ``IS NULL``, ``IS NOT NULL``) prune the collection's journals before any read
    (Spark still re-checks them row by row); the other filters as
    :class:`GazettePushdownBatchReader` takes them."""

    def __init__(self, opts: ReadOptions, schema: StructType):
        super().__init__(opts, schema)
        self.pruning = FlowPruning()

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:  # noqa: N802
        columns = {f.name for f in self.schema.fields if f.name not in FLOW_COLUMNS and f.name not in _BASE_COLUMNS}
        rest = []
        for f in filters:
            pred = predicate_of(f, columns)
            if pred is not None:
                assert isinstance(self.pruning, FlowPruning)
                self.pruning.partition_predicates.append(pred)
            rest.append(f)  # re-checked by Spark either way
        schema = self.schema
        base = [f for f in schema.fields if f.name in _BASE_COLUMNS]
        self.schema = StructType(base) if base else schema  # journal/offset/mod_time as the plain read names them
        try:
            yield from list(super().pushFilters(rest))
        finally:
            self.schema = schema


#: Columns of an untyped read that are not logical partitions of a collection.
_BASE_COLUMNS = frozenset({"journal", "offset", "value", "uuid", "producer", "clock", "flags", "mod_time"})
