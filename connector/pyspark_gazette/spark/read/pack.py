"""Packing many small journal pieces into few Spark partitions, and reading them concurrently.

The planners (:mod:`~pyspark_gazette.spark.read.plan`, :mod:`~pyspark_gazette.spark.read.stream`) first cut
each journal into :class:`~pyspark_gazette.spark.read.plan.GazettePartition` s of at most about
``maxPartitionBytes``. A selector over thousands of small journals would then run thousands of
tiny tasks, each paying Spark's per-task cost for a few bytes. :func:`pack` groups consecutive
pieces the way Spark's file sources group small files: each piece weighs its length plus
``openCostInBytes``, and pieces are added in order to the current group until the next one would
take it past the target size

    target = min(maxPartitionBytes, max(openCostInBytes, total weight / minPartitions))

(without ``minPartitions`` the target is ``maxPartitionBytes``). A group of one piece stays that
piece; a larger group becomes a :class:`PackedPartition`.

Determinism: the grouping depends only on the pieces' order and weights. The stream planner
weighs a piece by its planned offset range (never by which fragments happen to be persisted), so
the same micro-batch offsets always give the same partitions, which the exactly-once sink relies on.

:func:`read_packed` reads a packed partition's pieces with a small thread pool, so the latency of
many small reads (a Read RPC or a store GET each) overlaps, and yields their rows in piece order,
hence in offset order per journal, joining the small batches of consecutive pieces into one. At
most :data:`READ_THREADS` reads run at once, and reads ahead are bounded by ``maxPartitionBytes``
of planned content.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from pyspark_gazette.spark.options import ReadOptions
from pyspark_gazette.spark.read.plan import GazettePartition

#: Concurrent reads inside one packed partition (each is mostly waiting on a socket or a file).
READ_THREADS = 4
#: Pieces read ahead of the one being yielded, at most.
READ_AHEAD = 16
#: Batches of consecutive pieces are joined up to this many rows or bytes: a thousand one-row
#: batches cost Spark far more to take in than one batch of a thousand rows.
COALESCE_ROWS = 8192
COALESCE_BYTES = 4 << 20


@dataclasses.dataclass(frozen=True)
class PackedPartition(InputPartition):
    """One Spark task reading several journal pieces (each a one-journal partition), in order."""

    index: int
    members: tuple[GazettePartition, ...]

    def __init__(self, index: int, members: tuple[GazettePartition, ...]):
        object.__setattr__(self, "index", index)
        object.__setattr__(self, "members", members)
        object.__setattr__(self, "value", index)

    @property
    def length(self) -> int:
        return sum(m.length for m in self.members)

    @property
    def journals(self) -> tuple[str, ...]:
        """The journals read, in order, each once."""
        return tuple(dict.fromkeys(m.journal for m in self.members))


def pack_target(weights: Sequence[int], opts: ReadOptions) -> int:
    """The most a packed partition may weigh (see the module docstring)."""
    target = opts.max_partition_bytes
    if opts.min_partitions:
        per_partition = -(-sum(weights) // opts.min_partitions)  # ceil
        target = min(target, max(opts.open_cost_bytes, per_partition))
    return target


def pack(
    pieces: Sequence[GazettePartition], opts: ReadOptions, weights: Sequence[int] | None = None
) -> list[GazettePartition | PackedPartition]:
    """Group ``pieces`` (in the order given) into partitions numbered from 0.

    ``weights[i]`` is the content size of ``pieces[i]`` to pack by (default: its planned
    length); each piece also costs ``openCostInBytes``.
    """
    sizes = [w + opts.open_cost_bytes for w in (weights if weights is not None else [p.length for p in pieces])]
    if len(sizes) != len(pieces):
        raise ValueError("pack: one weight per piece")
    target = pack_target(sizes, opts)
    groups: list[list[GazettePartition]] = []
    current: list[GazettePartition] = []
    size = 0
    for piece, weight in zip(pieces, sizes, strict=True):
        if current and size + weight > target:
            groups.append(current)
            current, size = [], 0
        current.append(piece)
        size += weight
    if current:
        groups.append(current)
    out: list[GazettePartition | PackedPartition] = []
    for i, group in enumerate(groups):
        if len(group) == 1:
            only = group[0]
            out.append(GazettePartition(i, only.journal, only.framing, only.segments))
        else:
            out.append(PackedPartition(i, tuple(group)))
    return out


def read_packed(part: PackedPartition, opts: ReadOptions, schema: StructType) -> Iterator[pa.RecordBatch]:
    """The record batches of every piece of ``part``, piece after piece.

    Pieces are read by up to :data:`READ_THREADS` threads, ahead of the piece being yielded by at
    most :data:`READ_AHEAD` pieces and ``maxPartitionBytes`` of planned content (a piece read
    ahead is held in memory until its turn). The first error of a piece, in piece order, fails
    the task; the reads not yet started are cancelled.
    """
    members = part.members
    budget = opts.max_partition_bytes
    pending: collections.deque[tuple[Future[list[pa.RecordBatch]], int]] = collections.deque()
    ahead = 0
    nxt = 0
    buf: list[pa.RecordBatch] = []  # small batches of consecutive pieces, sent to Spark as one
    rows = nbytes = 0
    with ThreadPoolExecutor(max_workers=min(READ_THREADS, len(members)), thread_name_prefix="gazette-pack") as pool:
        try:
            while nxt < len(members) or pending:
                while nxt < len(members) and (
                    not pending or (len(pending) < READ_AHEAD and ahead + members[nxt].length <= budget)
                ):
                    member = members[nxt]
                    pending.append((pool.submit(_read_all, member, opts, schema), member.length))
                    ahead += member.length
                    nxt += 1
                future, length = pending.popleft()
                batches = future.result()
                ahead -= length
                for batch in batches:
                    if buf and (batch.schema != buf[0].schema):
                        yield _concat(buf)
                        buf, rows, nbytes = [], 0, 0
                    buf.append(batch)
                    rows += batch.num_rows
                    nbytes += batch.nbytes
                    if rows >= COALESCE_ROWS or nbytes >= COALESCE_BYTES:
                        yield _concat(buf)
                        buf, rows, nbytes = [], 0, 0
            if buf:
                yield _concat(buf)
        finally:
            for future, _ in pending:
                future.cancel()


def _concat(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    return batches[0] if len(batches) == 1 else pa.concat_batches(batches)


def _read_all(member: GazettePartition, opts: ReadOptions, schema: StructType) -> list[pa.RecordBatch]:
    from pyspark_gazette.spark.read.batch import read_batches

    return list(read_batches(member, opts, schema))
