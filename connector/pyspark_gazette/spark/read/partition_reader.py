"""Reading one journal's partition into Arrow batches (executor side).

A partition's segments become framed messages (:mod:`~pyspark_gazette.spark.read.segments`), pass
the read-committed filter when asked (:mod:`~pyspark_gazette.spark.read.committed`) and become
record batches in the query's schema (:mod:`~pyspark_gazette.spark.read.arrow_output`). Batch and
streaming reads, and the pieces of a packed partition (:mod:`~pyspark_gazette.spark.read.pack`),
all read through :func:`read_batches`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.types import StructType

from pyspark_gazette.spark.options import ReadOptions
from pyspark_gazette.spark.read.arrow_output import OutputBuilder
from pyspark_gazette.spark.read.committed import CommittedFilter
from pyspark_gazette.spark.read.plan import GazettePartition
from pyspark_gazette.spark.read.segments import partition_messages


def read_batches(
    part: GazettePartition,
    opts: ReadOptions,
    schema: StructType,
    content: bytes | None = None,
    builder: OutputBuilder | None = None,
) -> Iterator[pa.RecordBatch]:
    """The record batches of one partition (shared by batch and streaming reads); ``content``:
    a one-segment partition's bytes, prefetched (:mod:`~pyspark_gazette.spark.read.pack`);
    ``builder``: an :class:`OutputBuilder` of ``schema`` for ``part``'s framing to reuse (building
    one costs more than a one-message piece)."""
    if builder is None:
        builder = OutputBuilder(schema, opts, part.framing)
    committed = CommittedFilter(part.journal, part.framing, opts) if opts.read_committed else None
    for msgs in partition_messages(part, opts, content):
        if committed is not None:
            kept = committed.filter(msgs)
            if kept is None:
                continue
            msgs = kept
        batch = builder.build(part.journal, msgs)
        if batch is not None and batch.num_rows:
            yield batch
