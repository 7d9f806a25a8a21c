"""Reading partitions (executor side): bytes of segments -> framed messages -> Arrow batches.

Each :class:`~pyspark_gazette.spark.read.plan.Segment` is read from one byte source:

* a persisted fragment straight from its object store (fsspec through
  :class:`~pyspark_gazette.fragments.FragmentStore`, or the broker's signed URL), decompressed
  and length-checked by :class:`~pyspark_gazette.fragments.FragmentReader`;
* otherwise the broker's Read RPC (:class:`~pyspark_gazette.client.RetryReader`).

Messages that begin in ``[begin, end)`` are decoded and returned; the one straddling ``end``
is read to its end. A segment whose ``begin`` may sit inside a message (``boundary=False``)
starts one byte early and skips through the first newline (text framings), or resynchronises on
the magic word (protobuf-fixed).

Missing or corrupt content (a deleted fragment, a bad file, an offset jump) fails the task with
an error naming the journal, offsets and fragment, or with ``failOnDataLoss=false`` is skipped
with a warning and counted in :data:`LOSS_COUNTER`.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from pyspark_gazette import testing
from pyspark_gazette.client import Connections, RetryReader
from pyspark_gazette.client.heads import write_head
from pyspark_gazette.errors import (
    FragmentError,
    FramingError,
    OffsetJumpError,
    OffsetNotYetAvailableError,
    StoreError,
    SuspendedError,
    TransportError,
)
from pyspark_gazette.fragments import FragmentReader, FragmentStore, open_fragment_url
from pyspark_gazette.message import ArrowLineDecoder, Framing
from pyspark_gazette.spark.options import ReadOptions
from pyspark_gazette.spark.read.plan import GazettePartition, Segment

log = logging.getLogger(__name__)

#: Decode in pieces of at least this many bytes (the Arrow line splitter's sweet spot).
FEED_BYTES = 1 << 20
_stores: dict[tuple, Any] = {}
_stores_lock = threading.Lock()
_conns: dict[Any, Connections] = {}


class LossCounter:
    """Bytes and segments skipped under ``failOnDataLoss=false`` in this executor process."""

    def __init__(self) -> None:
        self.segments = 0
        self.bytes = 0
        self._lock = threading.Lock()  # packed partitions read pieces in threads

    def add(self, nbytes: int) -> None:
        with self._lock:
            self.segments += 1
            self.bytes += max(0, nbytes)


LOSS_COUNTER = LossCounter()


class OpenCounter:
    """Segments this executor process has started reading: ``fragments`` opened straight from a
    store, ``broker_reads`` through the broker's Read RPC. Pruning shows here (and tests assert
    it): a bounded read opens only the fragments its bounds need."""

    def __init__(self) -> None:
        self.fragments = 0
        self.broker_reads = 0
        self._lock = threading.Lock()

    def add(self, direct: bool) -> None:
        with self._lock:
            if direct:
                self.fragments += 1
            else:
                self.broker_reads += 1


OPEN_COUNTER = OpenCounter()


def connections(opts: ReadOptions) -> Connections:
    """This process's connections to the cluster (one channel per broker, shared by threads)."""
    key = opts.connection
    with _stores_lock:
        conns = _conns.get(key)
        if conns is None:
            conns = _conns[key] = Connections(opts.connection.client_config(direct_reads=False, task=True))
    return conns


def store_for(url: str, opts: ReadOptions):
    key = (url, opts.connection.file_root, opts.connection.storage)
    with _stores_lock:
        store = _stores.get(key)
        if store is None:
            store = _stores[key] = FragmentStore(
                url, file_root=opts.connection.file_root, storage_options=opts.connection.storage_options()
            )
    return store


# -- byte sources -------------------------------------------------------------------------------


def _direct_chunks(seg: Segment, read_from: int, opts: ReadOptions) -> Iterator[bytes]:
    ref = seg.fragment
    assert ref is not None
    if seg.signed_url:
        raw = open_fragment_url(seg.signed_url, ref.codec, file_root=opts.connection.file_root)
        reader = FragmentReader(raw, ref, read_from, verify_sha1=opts.verify_sha1)  # type: ignore[arg-type]
    else:
        reader = store_for(ref.backing_store, opts).open_reader(ref, read_from, verify_sha1=opts.verify_sha1)
    with reader:
        yield from reader.iter_chunks(FEED_BYTES)


def _broker_chunks(seg: Segment, read_from: int, opts: ReadOptions) -> Iterator[bytes]:
    """[read_from, seg.end) through the broker, then on past ``end`` while the caller keeps
    asking (to finish a straddling message), up to the write head.

    The first Read goes to the broker the plan names (the primary at planning), which holds the
    unpersisted content the plan counted on; a route member that re-joined since may not have
    it yet (:mod:`pyspark_gazette.client.settle`) and would block on it."""
    conns = connections(opts)
    first = {"endpoint": seg.endpoint} if seg.endpoint else {}
    with RetryReader(conns, seg.journal, read_from, end_offset=seg.end, block=True, do_not_proxy=False, **first) as r:
        yield from _coalesce(_held(_reader_chunks(r), r, seg))
    with RetryReader(conns, seg.journal, seg.end, block=False, do_not_proxy=False) as r:
        yield from _reader_chunks(r)


def _held(chunks: Iterator[bytes], r: RetryReader, seg: Segment) -> Iterator[bytes]:
    """``chunks``, pausing after the first at the :func:`~pyspark_gazette.testing.read_hold`
    test hook (a no-op unless a test armed it)."""
    for i, chunk in enumerate(chunks):
        if i == 0:
            testing.read_hold(seg.journal, r.offset, seg.end, r.reader.endpoint)
        yield chunk


def _reader_chunks(r: RetryReader) -> Iterator[bytes]:
    while True:
        try:
            data = r.read()
        except OffsetNotYetAvailableError:
            return
        if not data:
            return
        yield data


def _coalesce(chunks: Iterator[bytes]) -> Iterator[bytes]:
    buf: list[bytes] = []
    size = 0
    for c in chunks:
        buf.append(c)
        size += len(c)
        if size >= FEED_BYTES:
            yield b"".join(buf)
            buf, size = [], 0
    if buf:
        yield b"".join(buf)


# -- messages ---------------------------------------------------------------------------------


class Messages:
    """Decoded messages of one piece of a segment: journal offsets and payloads (Arrow).

    ``end`` is the journal offset just past the last message (where undecoded content
    begins), or -1 when unknown; a data-loss skip starts there.
    """

    __slots__ = ("offsets", "values", "mod_time", "end")

    def __init__(self, offsets: pa.Array, values: pa.Array, mod_time: int, end: int = -1):
        self.offsets, self.values, self.mod_time, self.end = offsets, values, mod_time, end

    @classmethod
    def of_envelopes(cls, envelopes: list, mod_time: int) -> Messages | None:
        """The messages of sequenced envelopes (read-committed output), or None if there are none."""
        if not envelopes:
            return None
        return cls(
            pa.array([e.begin for e in envelopes], pa.int64()),
            pa.array([e.message for e in envelopes], pa.binary()),
            mod_time,
        )


def read_from(seg: Segment, framing: Framing) -> int:
    """Where reading ``seg`` starts: a byte early when ``begin`` may fall inside a message of a
    line-based framing (the partial message up to the first newline is then skipped)."""
    inside = not seg.boundary and seg.begin > 0 and framing.line_based
    return seg.begin - 1 if inside else seg.begin


def segment_messages(
    seg: Segment, framing: Framing, opts: ReadOptions, content: bytes | None = None
) -> Iterator[Messages]:
    """Messages beginning in ``[seg.begin, seg.end)``, in order, in Arrow pieces.

    ``content``: the segment's bytes from :func:`read_from` to ``end``, already fetched (a packed
    partition's prefetch), read instead of the store or the broker.
    """
    if seg.tail and content is None:
        seg = _to_write_head(seg, opts)
        if seg.length <= 0:
            return
    start = read_from(seg, framing)
    skip = start < seg.begin
    OPEN_COUNTER.add(seg.fragment is not None)
    if content is not None:
        source: Iterator[bytes] = iter((content,))
    elif seg.fragment is not None:
        source = _direct_chunks(seg, start, opts)
    else:
        source = _broker_chunks(seg, start, opts)
    mod_time = seg.mod_time
    pos = start
    chunks = iter(source)
    try:
        if skip:
            pos, first = _skip_partial(chunks, pos)
            if first is None:
                return
            chunks = _prepend(first, chunks)
        if framing.newline_split:
            yield from _lines(chunks, pos, seg, framing, mod_time)
        else:
            yield from _framed(chunks, pos, seg, framing, mod_time)
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()


def _to_write_head(seg: Segment, opts: ReadOptions) -> Segment:
    """A tail segment extended to the journal's write head now (never shortened). A journal
    fully suspended meanwhile answers SUSPENDED: it has no content to read (as flowctl ends a
    non-blocking read at SUSPENDED), so the tail stays where it was planned."""
    try:
        head = write_head(connections(opts), seg.journal)
    except SuspendedError:
        head = seg.end
    return dataclasses.replace(seg, end=max(seg.end, head), tail=False)


def _skip_partial(chunks: Iterator[bytes], pos: int) -> tuple[int, bytes | None]:
    """Drop bytes through the first newline; returns the next message's offset and the rest."""
    for chunk in chunks:
        nl = chunk.find(b"\n")
        if nl >= 0:
            return pos + nl + 1, chunk[nl + 1 :]
        pos += len(chunk)
    return pos, None


def _prepend(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    if first:
        yield first
    yield from rest


def _lines(chunks: Iterator[bytes], pos: int, seg: Segment, framing: Framing, mod_time: int) -> Iterator[Messages]:
    dec = ArrowLineDecoder(pos, framing=framing.name)
    for chunk in chunks:
        batch = dec.feed(chunk)
        if len(batch):
            offsets, values = batch.offsets, batch.values
            end = dec.offset
            if offsets[len(offsets) - 1].as_py() >= seg.end:
                import pyarrow.compute as pc

                keep = pc.less(offsets, seg.end)
                offsets, values, end = offsets.filter(keep), values.filter(keep), seg.end
            if len(offsets):
                yield Messages(offsets, values, mod_time, end)
        if dec.offset >= seg.end:
            return
    dec.finish()  # content ended inside a message: UnexpectedEOFError


def _framed(chunks: Iterator[bytes], pos: int, seg: Segment, framing: Framing, mod_time: int) -> Iterator[Messages]:
    dec = framing.decoder(pos)
    for chunk in chunks:
        decoded = dec.feed(chunk)
        msgs = [m for m in decoded if m[0] < seg.end]
        if msgs:
            yield _messages(msgs, mod_time, dec.offset if len(msgs) == len(decoded) else seg.end)
        if dec.offset >= seg.end:
            return
    msgs = [m for m in dec.finish() if m[0] < seg.end]
    if msgs:
        yield _messages(msgs, mod_time)


def _messages(msgs: list[tuple[int, bytes]], mod_time: int, end: int = -1) -> Messages:
    offsets, values = pa.array([m[0] for m in msgs], pa.int64()), pa.array([m[1] for m in msgs], pa.binary())
    return Messages(offsets, values, mod_time, end)


# -- partitions -------------------------------------------------------------------------------


def partition_messages(part: GazettePartition, opts: ReadOptions, content: bytes | None = None) -> Iterator[Messages]:
    """Every message of a partition, applying the data-loss policy to each segment.

    ``content``: a one-segment partition's prefetched bytes (see :func:`segment_messages`).
    """
    if content is not None and len(part.segments) != 1:
        raise ValueError("prefetched content is for a partition of one segment")
    for seg in part.segments:
        done = seg.begin
        try:
            for msgs in segment_messages(seg, part.framing, opts, content):
                yield msgs
                done = msgs.end if msgs.end >= 0 else msgs.offsets[len(msgs.offsets) - 1].as_py() + 1
        except (FragmentError, StoreError, OffsetJumpError, FramingError, TransportError) as e:
            if isinstance(e, TransportError) and e.code != "DATA_LOSS":
                raise  # a proxied read's DATA_LOSS is the broker's report of a damaged fragment
            if opts.fail_on_data_loss:
                if isinstance(e, (FragmentError, OffsetJumpError, TransportError)):
                    raise
                raise type(e)(f"journal {seg.journal!r}, offsets [{seg.begin}, {seg.end}): {e}") from e
            LOSS_COUNTER.add(seg.end - done)
            log.warning(
                "journal %r: skipping offsets [%d, %d) (failOnDataLoss=false): %s", seg.journal, done, seg.end, e
            )
