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

Batch reads spread their bytes over the cores like Spark's file sources: with ``minPartitions``
unset they plan for :func:`default_parallelism` partitions (the planning process's cores: a
Python data source is planned in a Python worker on the driver, which is told nothing of Spark's
default parallelism), and :func:`split` first cuts a journal longer than the target (as one
range, however the planner cut it) along its segments (a fragment is never split; a broker-read
tail is cut at the target). Streams keep ``minPartitions`` as given (their partitions must not
depend on the machine).

Determinism: the grouping depends only on the pieces' order and weights. The stream planner
weighs a piece by its planned offset range (never by which fragments happen to be persisted), so
the same micro-batch offsets always give the same partitions, which the exactly-once sink relies on.

:func:`read_packed` reads a packed partition's pieces concurrently and yields their rows in piece
order, hence in offset order per journal, joining the small batches of consecutive pieces into
one. A small piece of a journal's live tail (line-framed, at most :data:`PREFETCH_BYTES`) has its
Read RPC started at once without a thread (:class:`_Prefetch`, up to :data:`PREFETCH_AHEAD` in
flight): with thousands of one-message journals the per-piece cost is the gRPC call itself, and a
thread per call cost more than the call (measured in bench_many). Other pieces (fragment files,
larger ranges) are read by a small thread pool, at most :data:`READ_THREADS` at once. Reads ahead
are bounded by ``maxPartitionBytes`` of planned content.
"""

from __future__ import annotations

import collections
import dataclasses
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import grpc
import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from pyspark_gazette.protocol import pb
from pyspark_gazette.spark.options import ReadOptions
from pyspark_gazette.spark.read.flow import output_builder
from pyspark_gazette.spark.read.partition_reader import read_batches
from pyspark_gazette.spark.read.plan import GazettePartition
from pyspark_gazette.spark.read.segments import connections, read_from

#: Concurrent reads inside one packed partition (each is mostly waiting on a socket or a file).
READ_THREADS = 4
#: Pieces read ahead of the one being yielded by the threads, at most.
READ_AHEAD = 16
#: Small broker pieces (:class:`_Prefetch`) whose Reads are in flight at once, at most.
PREFETCH_AHEAD = 64
#: Broker pieces up to this long are prefetched whole.
PREFETCH_BYTES = 256 << 10
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


def default_parallelism() -> int:
    """The cores this process may run on: what a batch read plans for without ``minPartitions``."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def split(parts: Sequence[GazettePartition], opts: ReadOptions) -> list[GazettePartition]:
    """Cut partitions longer than :func:`pack_target` (over all ``parts``) along their segments.

    A partition becomes ``ceil(length / target)`` partitions of about equal length, its segments
    kept in order (each goes where its middle byte falls, so a partition may pass the target by
    less than a fragment); a fragment is never split, a broker-read segment of a text framing is
    cut at the target first. Consecutive partitions of one journal (the planner cut it at
    ``maxPartitionBytes``) are cut as one range when one of them is longer than the target: a
    200 MB journal on 2 cores becomes 2 partitions of 100 MB, not 67 + 67 + 66 MB (3 tasks, one
    core idle for the third). Read-committed partitions (one journal in order, one task) stay
    whole. Indices are renumbered from 0.
    """
    from pyspark_gazette.spark.read.plan import split_tail

    target = pack_target([p.length + opts.open_cost_bytes for p in parts], opts)
    out: list[GazettePartition] = []
    for run in _journal_runs(parts):
        part = run[0]
        if opts.read_committed or all(p.length <= target for p in run):
            for p in run:
                out.append(GazettePartition(len(out), p.journal, p.framing, p.segments, p.truncated_at))
            continue
        pieces = [
            p
            for one in run
            for seg in one.segments
            for p in (split_tail(seg, target, part.framing) if seg.fragment is None else [seg])
        ]
        length = sum(p.length for p in pieces)
        n = -(-length // target)  # ceil
        share = length / n
        groups: list[list] = [[] for _ in range(n)]
        done = 0
        for piece in pieces:  # each piece to the group its middle byte falls in: n balanced groups
            groups[min(n - 1, int((done + piece.length / 2) // share))].append(piece)
            done += piece.length
        for g in groups:
            if g:
                out.append(GazettePartition(len(out), part.journal, part.framing, tuple(g), part.truncated_at))
    return out


def _journal_runs(parts: Sequence[GazettePartition]) -> list[list[GazettePartition]]:
    """``parts`` in runs of consecutive partitions of the same journal."""
    runs: list[list[GazettePartition]] = []
    for part in parts:
        if runs and runs[-1][0].journal == part.journal:
            runs[-1].append(part)
        else:
            runs.append([part])
    return runs


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
            out.append(GazettePartition(i, only.journal, only.framing, only.segments, only.truncated_at))
        else:
            out.append(PackedPartition(i, tuple(group)))
    return out


def read_packed(part: PackedPartition, opts: ReadOptions, schema: StructType) -> Iterator[pa.RecordBatch]:
    """The record batches of every piece of ``part``, piece after piece.

    Small live tails are prefetched (:class:`_Prefetch`, up to :data:`PREFETCH_AHEAD` pieces
    ahead); other pieces are read by up to :data:`READ_THREADS` threads, up to :data:`READ_AHEAD`
    pieces ahead. Either way at most ``maxPartitionBytes`` of planned content is read ahead of the
    piece being yielded (a piece read ahead is held in memory until its turn). The first error
    of a piece, in piece order, fails the task; the reads not yet started are cancelled.
    """
    members = part.members
    budget = opts.max_partition_bytes
    pending: collections.deque[tuple[Future[list[pa.RecordBatch]] | _Prefetch, int]] = collections.deque()
    ahead = 0
    threaded = 0  # pieces of ``pending`` given to the thread pool
    nxt = 0
    buf: list[pa.RecordBatch] = []  # small batches of consecutive pieces, sent to Spark as one
    rows = nbytes = 0
    builders: dict = {}  # used on this thread only (by the prefetches' results)
    with ThreadPoolExecutor(max_workers=min(READ_THREADS, len(members)), thread_name_prefix="gazette-pack") as pool:
        try:
            while nxt < len(members) or pending:
                while nxt < len(members) and (
                    not pending or (len(pending) < PREFETCH_AHEAD and ahead + members[nxt].length <= budget)
                ):
                    member = members[nxt]
                    if _prefetchable(member):
                        pending.append((_Prefetch(member, opts, schema, builders), member.length))
                    elif threaded < READ_AHEAD:
                        pending.append((pool.submit(_read_all, member, opts, schema), member.length))
                        threaded += 1
                    else:
                        break
                    ahead += member.length
                    nxt += 1
                future, length = pending.popleft()
                threaded -= isinstance(future, Future)
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


def _read_all(
    member: GazettePartition, opts: ReadOptions, schema: StructType, content: bytes | None = None, builder=None
) -> list[pa.RecordBatch]:
    return list(read_batches(member, opts, schema, content, builder))


def _prefetchable(member: GazettePartition) -> bool:
    """A small piece of a line-framed journal that the broker serves (its journal's live tail)."""
    return (
        len(member.segments) == 1
        and member.segments[0].fragment is None
        and member.framing.newline_split
        and 0 < member.length <= PREFETCH_BYTES
    )


class _Prefetch:
    """A small broker piece whose Read starts at once, without a thread (gRPC runs the call as
    soon as it is made), and whose answer is taken in order by :meth:`result`.

    Only a plain answer is used: every byte of ``[read_from, end)`` in order, ending with a
    newline (no message straddles the end). A tail piece (``Segment.tail``: read on to the write
    head when it is read) asks for everything to the write head instead, and its plain answer
    ends with OFFSET_NOT_YET_AVAILABLE at a head no lower than the planned end. Anything else (a
    broker error, another status, a short or shifted read) drops the call and reads the piece the
    usual way
    (:func:`_read_all`, with its retries, route changes and data-loss rules), so the prefetch
    never changes what a piece yields.
    """

    def __init__(self, member: GazettePartition, opts: ReadOptions, schema: StructType, builders: dict):
        self.member, self.opts, self.schema = member, opts, schema
        # OutputBuilders by (framing, truncation clock), shared by the partition's prefetches
        self.builders = builders
        seg = member.segments[0]
        self.begin, self.end = read_from(seg, member.framing), seg.end
        self.tail = seg.tail
        self.conns = connections(opts)
        # A tail reads to the write head (end_offset 0, not blocking): the journal as of this read.
        request = self.conns.read_request(seg.journal, offset=self.begin, end_offset=0 if self.tail else self.end)
        kwargs = {k: v for k, v in self.conns.call_kwargs().items() if k != "timeout"}
        try:
            # The broker the plan names first (the primary at planning: it holds the unpersisted
            # content counted on; a fresh executor knows no route and would go through the
            # bootstrap address, which proxies or answers from its own index).
            endpoint = seg.endpoint or self.conns.read_endpoint(seg.journal)
            self.call = self.conns.stub(endpoint).Read(request, **kwargs)
        except grpc.RpcError:
            self.call = None

    def cancel(self) -> None:
        if self.call is not None:
            self.call.cancel()

    def result(self) -> list[pa.RecordBatch]:
        content = self._content()
        if content is None:
            return _read_all(self.member, self.opts, self.schema)
        member = self.member
        if self.tail:  # the piece as read: to the write head the broker answered with
            (seg,) = member.segments
            seg = dataclasses.replace(seg, end=self.begin + len(content), tail=False)
            member = GazettePartition(member.index, member.journal, member.framing, (seg,), member.truncated_at)
        key = (member.framing, member.truncated_at)
        builder = self.builders.get(key)
        if builder is None:
            builder = self.builders[key] = output_builder(self.schema, self.opts, *key)
        return _read_all(member, self.opts, self.schema, content, builder)

    def _content(self) -> bytes | None:
        if self.call is None:
            return None
        chunks: list[bytes] = []
        pos = self.begin
        try:
            for resp in self.call:
                if resp.HasField("header"):
                    self.conns.update_route(self.member.journal, resp.header)
                if self.tail and resp.status == pb.OFFSET_NOT_YET_AVAILABLE and resp.offset == pos:
                    break  # the write head
                if resp.status != pb.OK or resp.offset != pos:
                    return None
                if resp.content:
                    chunks.append(resp.content)
                    pos += len(resp.content)
        except grpc.RpcError:
            return None
        finally:
            self.call.cancel()
        content = b"".join(chunks)
        if (pos < self.end if self.tail else pos != self.end) or not content.endswith(b"\n"):
            return None
        return content
