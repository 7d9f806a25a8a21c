"""Reading one journal's partition into Arrow batches (executor side).

A partition's segments become framed messages (:mod:`~pyspark_gazette.spark.read.segments`), pass
the read-committed filter when asked (:mod:`~pyspark_gazette.spark.read.committed`) and become
record batches in the query's schema (:mod:`~pyspark_gazette.spark.read.arrow_output`). Batch and
streaming reads, and the pieces of a packed partition (:mod:`~pyspark_gazette.spark.read.pack`),
all read through :func:`read_batches`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.types import StructType

from pyspark_gazette.spark.options import ReadOptions
from pyspark_gazette.spark.read.arrow_output import OutputBuilder
from pyspark_gazette.spark.read.committed import CommittedFilter
from pyspark_gazette.spark.read.flow import FlowOutputBuilder, output_builder
from pyspark_gazette.spark.read.plan import GazettePartition
from pyspark_gazette.spark.read.segments import Messages, partition_messages

#: Typed reads parse a segment's messages in units of about this many bytes, not the 1 MiB
#: pieces the line splitter is fed: pyarrow's JSON reader and Spark's Arrow hand-off both cost
#: less per byte on larger batches (docs/benchmarks.md, "Typed reads"). The environment
#: variable ``PYSPARK_GAZETTE_TYPED_PARSE_BYTES`` (read by each Python worker) overrides it for
#: benchmarks.
TYPED_PARSE_ENV = "PYSPARK_GAZETTE_TYPED_PARSE_BYTES"
TYPED_PARSE_BYTES = int(os.environ.get(TYPED_PARSE_ENV) or 8 << 20)


def read_batches(
    part: GazettePartition,
    opts: ReadOptions,
    schema: StructType,
    content: bytes | None = None,
    builder: OutputBuilder | FlowOutputBuilder | None = None,
) -> Iterator[pa.RecordBatch]:
    """The record batches of one partition (shared by batch and streaming reads); ``content``:
    a one-segment partition's bytes, prefetched (:mod:`~pyspark_gazette.spark.read.pack`);
    ``builder``: an :class:`OutputBuilder` of ``schema`` for ``part``'s framing to reuse (building
    one costs more than a one-message piece)."""
    if builder is None:
        builder = output_builder(schema, opts, part.framing, part.truncated_at)
    committed = CommittedFilter(part.journal, part.framing, opts, part.segments) if opts.read_committed else None

    def messages() -> Iterator[Messages]:
        for msgs in partition_messages(part, opts, content):
            if committed is not None:
                kept = committed.filter(msgs)
                if kept is None:
                    continue
                msgs = kept
            yield msgs

    pieces = messages() if builder.typed_decoder is None else _joined(messages(), TYPED_PARSE_BYTES)
    for msgs in pieces:
        batch = builder.build(part.journal, msgs)
        if batch is not None and batch.num_rows:
            yield batch


def _joined(pieces: Iterator[Messages], size: int) -> Iterator[Messages]:
    """Consecutive pieces of one segment (same ``mod_time``) joined up to about ``size`` bytes."""
    buf: list[Messages] = []
    nbytes = 0

    def flush() -> Messages:
        if len(buf) == 1:
            return buf[0]
        values = pa.concat_arrays([m.values for m in buf])
        offsets = pa.concat_arrays([m.offsets for m in buf])
        return Messages(offsets, values, buf[0].mod_time, buf[-1].end)

    for msgs in pieces:
        if buf and (msgs.mod_time != buf[0].mod_time or msgs.values.type != buf[0].values.type):
            yield flush()
            buf, nbytes = [], 0
        buf.append(msgs)
        nbytes += msgs.values.nbytes
        if nbytes >= size:
            yield flush()
            buf, nbytes = [], 0
    if buf:
        yield flush()
