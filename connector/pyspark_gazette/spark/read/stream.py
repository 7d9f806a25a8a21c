"""Streaming reads: ``spark.readStream.format("gazette")``.

Offsets are ``{journal: byte offset}``. Each micro-batch ``[start, end)`` is planned exactly like
a batch read (:mod:`pyspark_gazette.spark.read.plan`): persisted fragments are read directly from the
store by the executors, the live tail through the brokers, so catching up on a large backlog
scales with the object store.

* ``initialOffset``: ``startingOffsets`` (default ``latest``, like Spark's Kafka source) or
  ``startingTimestamp``.
* ``latestOffset(start, limit)``: the journals' write heads (one List, then one metadata-only
  Read per journal, a window of them in flight: no fragment listing), cut by the read limit.
  With ``watchWriteHeads`` (``auto``, the default, from :data:`WATCH_AUTO_JOURNALS` journals on), a
  :class:`~pyspark_gazette.client.heads.HeadWatcher` keeps a blocking metadata-only Read open per
  journal and only journals it does not watch yet are asked, and a
  :class:`~pyspark_gazette.client.list_apply.JournalListWatch` keeps the journals' listing (a List
  watch), so a trigger does not List them all (:meth:`GazetteStreamReader._journals`).
  With no new data it returns ``start`` and Spark runs no batch (no tasks). ``maxBytesPerTrigger`` (or Spark's
  ``ReadMaxBytes``) is shared across journals: each journal with a backlog first gets up to
  ``limit / (2 * journals)``, the rest is shared in proportion to the remaining backlogs, so a
  small journal is never starved by a big one. ``minBytesPerTrigger`` holds a batch back until that
  many bytes are waiting or ``maxTriggerDelay`` passed since the last batch.
* ``Trigger.AvailableNow`` reads up to the write heads seen when the query starts.
* Journals matching a ``selector`` that appear later are read from their start; journals that
  disappear end cleanly. Each journal's offset carries the Etcd revision at which the journal was
  created (``{"offset": E, "created": R}``) where the broker reports one (List's
  ``create_revision``: Gazette since v0.99, the embedded broker): a journal listed with another
  creation revision was deleted and re-created, whatever its write head. Without one (an older
  broker, an older checkpoint) a journal whose write head is found below the stream's offset in
  it was deleted and re-created. Either way the query fails saying so, or, with
  ``failOnDataLoss=false``, reads the new journal from its start
  (:meth:`GazetteStreamReader._recreated`). A write head below the offset of a journal whose
  creation revision is unchanged is waited for while the journal's store holds the content in
  between, or for about a refresh interval (a stale head after a hand-off:
  :meth:`GazetteStreamReader._head_catching_up`); still below, the journal lost content it had
  acknowledged (never persisted): that follows ``failOnDataLoss`` too, and the stream goes on
  from the head. Missing content (retention
  deleted it before it was read) follows ``failOnDataLoss``.
* Holes: ``latestOffset`` plans each journal that moves from a fragment listing
  (:func:`~pyspark_gazette.spark.read.plan.take_snapshot`, handed on to ``partitions``). A hole
  that cannot be judged lost yet (the fragment after it was persisted less than
  ``holeAgeThreshold`` ago: an upload may still be in flight after a broker hand-off;
  :mod:`pyspark_gazette.client.settle`) caps the journal's end at the hole's start: the stream
  reads up to it and waits there across triggers, logging a WARNING once per hole, never
  failing the query for it and never committing past it, until the fragment lands (a broker or
  the store lists it) or the hole ages past the threshold (then it is data loss, which follows
  ``failOnDataLoss``). A ``Trigger.AvailableNow`` query whose every journal waits at such a
  hole waits for it in ``latestOffset`` as a batch read does (up to ``broker.timeout``, then
  :class:`~pyspark_gazette.errors.HoleInFlightError`) rather than end short of its target.

Each micro-batch's journal ranges are cut at absolute multiples of ``maxPartitionBytes``
(:func:`aligned_partitions`), and the pieces of many small journals are packed together
(:mod:`pyspark_gazette.spark.read.pack`) by their offset spans, so the partitions depend on the batch's
offsets alone.

Batch ends may fall inside a message when a read limit cuts a journal: the message that begins
before the end belongs to that batch (read whole) and the next batch skips its tail, so every
message is returned once.

With ``readCommitted``, each journal's offset also carries the sequencer's producer states
(``{"offset": E, "producers": {...}}``, computed on the driver when ``E`` is fixed), each
journal's micro-batch is one partition that restores them, and each committed message is
emitted in the batch holding the message that committed it (its ACK for transaction members):
see :mod:`pyspark_gazette.spark.read.committed`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from pyspark_gazette import testing
from pyspark_gazette.client import JournalClient
from pyspark_gazette.client.conn import backoff
from pyspark_gazette.client.heads import HeadMode, HeadWatcher, concurrently, route_heads, write_head
from pyspark_gazette.client.list_apply import iter_fragments
from pyspark_gazette.client.settle import FILL_WAIT_WITHOUT_REFRESH, REFRESH_SLACK
from pyspark_gazette.errors import (
    BrokerTimeoutError,
    DataLossError,
    JournalNotFoundError,
    SuspendedError,
    TransportError,
    offset_ranges,
)
from pyspark_gazette.message import LINES, Framing, framing_by_name
from pyspark_gazette.protocol import pb
from pyspark_gazette.protocol.durations import duration_seconds
from pyspark_gazette.protocol.journal_names import base_journal
from pyspark_gazette.protocol.labels import names_selector
from pyspark_gazette.spark.options import ReadOptions, check_offsets_name_read_journals
from pyspark_gazette.spark.read.batch_scan import read_partition
from pyspark_gazette.spark.read.committed import (
    CommittedStreamPartition,
    committed_partition,
    created_of,
    offset_of,
    same_journal,
    scan_state,
    state_pieces,
    with_created,
)
from pyspark_gazette.spark.read.committed_task import read_committed_batches
from pyspark_gazette.spark.read.pack import pack
from pyspark_gazette.spark.read.plan import (
    GazettePartition,
    Snapshot,
    fully_suspended_at,
    merge_broker_runs,
    segments,
    settle_range,
    start_offset,
    store_holds,
    take_snapshot,
)
from pyspark_gazette.spark.read.scan_ahead import ScanAhead
from pyspark_gazette.spark.resolve import resolve_journals
from pyspark_gazette.spark.surface import plain

log = logging.getLogger(__name__)
_T = TypeVar("_T")
#: Metadata reads (write heads) and listings in flight at once on the driver.
SWEEP_THREADS = 32
#: Clients of the driver-side stream readers, by connection (see ``GazetteStreamReader._client``).
_planner_clients: dict = {}
#: Write-head watchers of the driver-side stream readers (``watchWriteHeads``), by reader token.
_watchers: dict = {}
#: Journal listing watches of the driver-side stream readers (with ``watchWriteHeads``), by reader token.
_list_watches: dict = {}
#: Read-committed state scans of the next micro-batch, by (reader token, journal) (scan_ahead.py).
_scans_ahead: dict = {}
#: Snapshots ``latestOffset`` planned a journal's range from, by (reader token, journal): (begin,
#: end, snapshot), for ``partitions`` of that range (one listing per journal and micro-batch).
_planned: dict = {}
#: A stream waiting at a hole lists the journal again at most this often (seconds): a trigger in
#: between keeps it at the hole without a listing.
HOLD_RECHECK = 5.0
#: ``watchWriteHeads=auto`` watches the heads of a stream over at least this many journals: from
#: here a sweep needs more than one window of :data:`~pyspark_gazette.client.heads.SWEEP_WINDOW`
#: Reads, while the watches cost the brokers one idle stream each (docs/streaming.md).
WATCH_AUTO_JOURNALS = 128


def share_bytes(backlogs: dict[str, int], limit: int) -> dict[str, int]:
    """Bytes each journal may read this batch under ``limit`` (see the module docstring)."""
    waiting = {j: b for j, b in backlogs.items() if b > 0}
    total = sum(waiting.values())
    if total <= limit:
        return dict(waiting)
    floor = max(1, limit // (2 * len(waiting)))
    alloc = {j: min(b, floor) for j, b in waiting.items()}
    remaining = limit - sum(alloc.values())
    rest = {j: waiting[j] - alloc[j] for j in waiting}
    rest_total = sum(rest.values())
    if remaining > 0 and rest_total > 0:
        for j, r in rest.items():
            alloc[j] += min(r, remaining * r // rest_total)
    return alloc


def aligned_spans(framing: Framing, start: int, end: int, size: int) -> list[tuple[int, int]]:
    """``[start, end)`` cut at absolute multiples of ``size`` (line-based framings; others stay whole)."""
    if not framing.line_based:
        return [(start, end)] if start < end else []  # only text framings resume inside a message
    out = []
    chunk = (start // size) * size
    while chunk < end:
        out.append((max(start, chunk), min(end, chunk + size)))
        chunk += size
    return out


def aligned_partitions(
    journal: str,
    framing: Framing,
    start: int,
    end: int,
    segs: list,
    size: int,
    first_index: int,
    truncated_at: int = 0,
) -> list:
    """Partitions of ``[start, end)`` cut at absolute multiples of ``size``, one per chunk.

    They depend only on the offsets, never on the fragment layout (which changes as fragments
    are persisted): a micro-batch re-run after a crash gets the same partitions with the same
    rows, which the exactly-once sink relies on (its registers are per partition). A chunk with
    no content left (skipped data loss) is still a partition, so the indices stay stable.
    """
    import dataclasses

    out: list[GazettePartition] = []
    for lo, hi in aligned_spans(framing, start, end, size):
        pieces = []
        for seg in segs:
            b, e = max(seg.begin, lo), min(seg.end, hi)
            if b < e:
                boundary = seg.boundary if b == seg.begin else False
                pieces.append(dataclasses.replace(seg, begin=b, end=e, boundary=boundary))
        out.append(
            GazettePartition(first_index + len(out), journal, framing, tuple(merge_broker_runs(pieces)), truncated_at)
        )
    return out


def _last_begin(snap: Snapshot, offset: int) -> int:
    """The begin of the last fragment of ``snap`` that begins at or before ``offset`` (0: none)."""
    for f in reversed(snap.fragments):  # ordered by begin: the range's end is near the last ones
        if f.spec.begin <= offset:
            return f.spec.begin
    return 0


def _resumes_at(client, journal: str) -> int:
    """Where a journal that answered SUSPENDED resumes: fully suspended, it has no content and
    its spec holds the offset its appends go on from (:func:`fully_suspended_at`; a journal
    resumed meanwhile keeps that offset in its spec too)."""
    return int(client.get_journal(journal).spec.suspend.offset)


def sweep(fn: Callable[[str], _T], names: Sequence[str]) -> dict[str, _T]:
    """``fn(name)`` for every name, :data:`SWEEP_THREADS` calls at a time; the first error (in
    name order) is raised and the calls not yet started are dropped."""
    return concurrently(fn, names, SWEEP_THREADS)


class GazetteStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch stream of journals; see the module docstring."""

    def __init__(self, opts: ReadOptions, schema: StructType):
        self.opts = opts
        self.schema = schema
        self._target: dict[str, int] | None = None
        self._last_batch = time.monotonic()
        self._latest: dict[str, int] | None = None
        #: The journals' Etcd creation revisions (0: not reported) at the last listing of ``_heads``.
        self._created: dict[str, int] = {}
        #: When a trigger first saw every member report a journal's write head below the stream's
        #: offset in it, the creation revision unchanged (:meth:`_head_catching_up`).
        self._behind: dict[str, float] = {}
        self._token = os.urandom(8).hex()  # names this reader's watcher (the reader is pickled)
        #: The journals at the last listing of ``_heads``, by name.
        self._infos: dict = {}
        #: Holes (journal, begin, end) the stream waits at, already logged.
        self._held: set[tuple[str, int, int]] = set()
        #: Journals waiting at a hole: (the hole's start, when to list it again).
        self._holds: dict[str, tuple[int, float]] = {}
        #: By journal, the begin of the fragment the last planned range ended in (or at): the next
        #: trigger, starting there, lists the journal from it (:meth:`_hold_at_holes`).
        self._listed_from: dict[str, int] = {}

    # -- helpers ------------------------------------------------------------------------------

    def _client(self):
        """The planner process's client of this cluster, kept open (callers must not close it).

        With a 0-interval trigger Spark calls ``latestOffset`` every ~10 ms while no data arrives;
        a new channel per call doubled each call's cost. Kept in a module-level cache, not on
        the reader, which is pickled to the executors.
        """
        key = self.opts.connection
        client = _planner_clients.get(key)
        if client is None:
            client = _planner_clients[key] = JournalClient(self.opts.connection.client_config(direct_reads=False))
        return client

    def _through_outages(self, fn: Callable[[], _T]) -> _T:
        """``fn()`` (the driver's calls of a running stream), called again while it fails with
        gRPC ``UNAVAILABLE`` (no broker answered through the client's own few retries) for up to
        ``broker.timeout``: a running query waits out a cluster restart as its tasks do, then
        fails with :class:`~pyspark_gazette.errors.BrokerTimeoutError` naming the option."""
        budget, since, attempt = self.opts.connection.broker_timeout, time.monotonic(), 0
        while True:
            try:
                return fn()
            except BrokerTimeoutError:
                raise
            except TransportError as err:
                waited = time.monotonic() - since
                if err.code != "UNAVAILABLE":
                    raise
                if budget and waited > budget:
                    raise BrokerTimeoutError(
                        "stream planning",
                        "UNAVAILABLE",
                        f"no broker answered for {waited:.0f}s, more than broker.timeout ({budget:g}s); "
                        f"last error: {err}",
                    ) from err
                log.warning("gazette stream: no broker answers (%s); retrying within broker.timeout", err)
                time.sleep(backoff(min(attempt, 4)))
                attempt += 1

    def _journals(self, client, *, fresh: bool = False) -> list:
        """The stream's journals, in name order: from the reader's listing watch when it has a
        snapshot, else listed now (``fresh``: always), starting the watch when the stream watches
        (:meth:`_watching`: a stream over many journals would otherwise List them all every
        trigger). A named journal missing from the watch's snapshot is listed now, which says
        which one is missing."""
        if not fresh and (watch := _list_watches.get(self._token)) is not None:
            listed = watch.listing()
            if listed is not None:
                if self.opts.selector:
                    return sorted(listed, key=lambda i: i.name)
                names = {base_journal(j) for j in self.opts.journals}
                infos = sorted((i for i in listed if i.name in names), key=lambda i: i.name)
                if len(infos) == len(names):
                    return infos
        infos = resolve_journals(client, self.opts.journals, self.opts.selector)
        if not fresh and self._token not in _list_watches and self._watching(len(infos)):
            _list_watches[self._token] = client.list_watch(self._watch_selector())
        return infos

    def _watch_selector(self) -> str | pb.LabelSelector:
        """The stream's ``selector``, or one matching each of its named journals."""
        if self.opts.selector:
            return self.opts.selector
        return names_selector(self.opts.journals)

    def _snapshot(self, client, info, *, need: int = 0):
        """``info``'s snapshot; ``need``: an end the stream planned (the primary is not asked)."""
        if need:
            return take_snapshot(client, info, self.opts, need=need, ask_primary=False)
        return take_snapshot(client, info, self.opts)

    def _settle(self, client, snap, begin: int, end: int):
        """``snap`` once the holes a route member can still fill in ``[begin, end)`` are settled."""
        return settle_range(client, snap, begin, end, self.opts)

    @staticmethod
    def _write_head(client, journal: str) -> int:
        try:
            return write_head(client.conns, journal)
        except SuspendedError:
            return _resumes_at(client, journal)

    @staticmethod
    def _earliest(client, journal: str) -> int:
        try:
            first = next(iter(iter_fragments(client.conns, journal, page_limit=1)), None)  # one page, one RPC
        except SuspendedError:
            return _resumes_at(client, journal)
        return first.spec.begin if first is not None else 0

    def _heads(self, client, *, fresh: bool = False) -> dict[str, int]:
        """Every journal's write head: asked now (without ``watchWriteHeads``), else from the
        watcher, asking only the journals it does not watch (yet). ``fresh`` (the end of a
        ``Trigger.AvailableNow`` query): asked now of each journal's primary and every other
        member, keeping the largest (:func:`~pyspark_gazette.client.heads.route_heads` with
        ``HeadMode.EVERY_MEMBER``), so that no append acknowledged before the query started is left out
        because one member had not caught up. A fully suspended journal's is its resumption
        offset, asked of no broker (:func:`fully_suspended_at`)."""
        infos = self._journals(client, fresh=fresh)
        self._created = {i.name: i.create_revision for i in infos}
        self._infos = {i.name: i for i in infos}
        suspended = {i.name: at for i in infos if (at := fully_suspended_at(i)) is not None}
        heads = self._live_heads(client, [i.name for i in infos if i.name not in suspended], fresh)
        return {i.name: suspended[i.name] if i.name in suspended else heads[i.name] for i in infos}

    def _live_heads(self, client, names: list[str], fresh: bool) -> dict[str, int]:
        if fresh:
            return route_heads(client.conns, names, HeadMode.EVERY_MEMBER)
        if not self._watching(len(names)):
            return route_heads(client.conns, names)
        watcher = _watchers.get(self._token)
        if watcher is None:
            watcher = _watchers[self._token] = HeadWatcher(client.conns)
        known = watcher.heads(names)
        asked = route_heads(client.conns, [n for n in names if n not in known])
        watcher.watch(asked)
        gone = watcher.watched().difference(names)
        if gone:
            watcher.unwatch(sorted(gone))
        return {n: known[n] if n in known else asked[n] for n in names}

    def _watching(self, journals: int) -> bool:
        """Whether heads come from the watcher: ``watchWriteHeads`` true, or auto and at least
        :data:`WATCH_AUTO_JOURNALS` journals. A stream that drops below the threshold keeps the
        watcher it started (its watches are already paid for)."""
        mode = self.opts.watch_write_heads
        if mode == "auto":
            return journals >= WATCH_AUTO_JOURNALS or self._token in _watchers or self._token in _list_watches
        return mode == "true"

    # -- DataSourceStreamReader ---------------------------------------------------------------

    @plain
    def initialOffset(self) -> dict:
        client = self._client()
        infos = {info.name: info for info in self._journals(client)}
        # Only where a query starts: later, the selector's journals may come and go.
        check_offsets_name_read_journals(self.opts.starting_offsets, None, list(infos))

        def initial(name: str) -> int:
            if self.opts.starting_timestamp is None and not isinstance(self.opts.starting_offsets, dict):
                if (self.opts.starting_offsets or "latest") == "latest":
                    return self._write_head(client, name)
                return self._earliest(client, name)
            snap = self._snapshot(client, infos[name])
            return start_offset(snap, self.opts, default="latest")

        return {j: with_created(o, infos[j].create_revision) for j, o in sweep(initial, list(infos)).items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_bytes_per_trigger:
            return ReadMaxBytes(self.opts.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._heads(self._client(), fresh=True)

    @plain
    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        return self._through_outages(lambda: self._latest_offset(start, limit))

    def _latest_offset(self, start: dict, limit: ReadLimit) -> dict:
        while True:
            end, held = self._latest_offset_once(start, limit)
            if not held or self._target is None or end != start:
                return end
            # Trigger.AvailableNow, every journal at a hole not yet decidable: wait for the holes as
            # a batch read does (up to broker.timeout, then HoleInFlightError) rather than end the
            # query short of its target; once they are decided, plan again.
            client = self._client()
            for snap, s, e in held.values():
                settle_range(client, snap, s, e, self.opts)

    def _latest_offset_once(self, start: dict, limit: ReadLimit) -> tuple[dict, dict]:
        """``latestOffset``'s answer, and the journals it holds at a hole not yet decidable:
        (snapshot, begin, end) of the range each would have read."""
        end = dict(start)
        backlogs: dict[str, int] = {}
        client = self._client()
        heads = self._heads(client)
        if self._target is not None:
            heads = {j: min(h, self._target[j]) for j, h in heads.items() if j in self._target}
        self._latest = heads
        created = self._created
        # A journal that appeared after the query started: read it from its start.
        new = sweep(lambda journal: self._earliest(client, journal), [j for j in heads if j not in start])
        # A journal listed with another creation revision than the stream read it at: Gazette's own
        # record that it was deleted and re-created.
        read_at = {j: created_of(start[j]) for j in heads if j not in new}
        renewed = [j for j, was in read_at.items() if was and created.get(j) and created[j] != was]
        heads.update(self._confirmed_below(client, heads, start, [*new, *renewed]))
        for journal, head in heads.items():
            if journal in new:
                end[journal] = new[journal]
                backlogs[journal] = head - new[journal]
                continue
            offset = offset_of(start[journal])
            if journal in renewed:
                was = (read_at[journal], created[journal])
                end[journal] = self._recreated(client, journal, offset, head, created=was)
                backlogs[journal] = 0  # this batch only moves to its start; the next ones read it
            elif head < offset:
                # Every member confirmed it (_confirmed_below), and Gazette never moves a write
                # head back: the journal was deleted and re-created, or, where its creation
                # revision says it was not, it lost content it had acknowledged, unless the
                # members that report it took the journal in a hand-off and list its last
                # fragments only at their next store refresh (_head_catching_up).
                if read_at[journal] and created.get(journal):
                    if self._head_catching_up(client, journal, offset, head):
                        backlogs[journal] = 0  # waits at its offset this trigger
                        continue
                    end[journal] = self._went_back(journal, offset, head, created[journal])
                else:
                    end[journal] = self._recreated(client, journal, offset, head)
                backlogs[journal] = 0  # this batch only moves there; the next ones read on
            else:
                self._behind.pop(journal, None)
                backlogs[journal] = max(0, head - offset)
        waiting = sum(backlogs.values())
        if (
            self.opts.min_bytes_per_trigger
            and self._target is None
            and 0 < waiting < self.opts.min_bytes_per_trigger
            and time.monotonic() - self._last_batch < self.opts.max_trigger_delay
        ):
            return dict(start), {}
        if isinstance(limit, ReadMaxBytes):
            allowed = share_bytes(backlogs, limit.max_bytes)
        else:
            allowed = {j: b for j, b in backlogs.items() if b > 0}
        for journal, nbytes in allowed.items():
            end[journal] = offset_of(end[journal]) + nbytes
        origin = {j: new[j] if j in new else offset_of(start[j]) for j in allowed}
        held = self._hold_at_holes(client, origin, end)
        if self.opts.read_committed:
            # A re-created journal has no state yet: its batch only moves to its start.
            origin = {j: new[j] if j in new else end[j] if j in renewed else start[j] for j in end}
            end = self._with_state(client, origin, end)
        end = {j: with_created(e, created.get(j, 0)) if j in heads else e for j, e in end.items()}
        if end != start:
            self._last_batch = time.monotonic()
        return end, held

    def _hold_at_holes(self, client, origin: dict[str, int], end: dict) -> dict:
        """Plan the range ``[origin, end)`` of each journal that moves (a fragment listing,
        settled: :func:`~pyspark_gazette.spark.read.plan.take_snapshot`) and cap ``end`` (in
        place) at the start of the first hole in it that cannot be judged lost yet (module
        docstring). Returns the journals held, with (snapshot, begin, end) of the uncapped range.
        The snapshots are kept for :meth:`partitions` of the same ranges."""
        for key in [k for k in _planned if k[0] == self._token]:
            del _planned[key]
        moved = [j for j in sorted(origin) if j in self._infos and offset_of(end[j]) > origin[j]]
        if self._target is None:  # a query that runs on: a hole is listed again every HOLD_RECHECK
            now = time.monotonic()
            for journal in [j for j in moved if j in self._holds and now < self._holds[j][1]]:
                if origin[journal] <= self._holds[journal][0]:
                    end[journal] = min(offset_of(end[journal]), self._holds[journal][0])
                    moved.remove(journal)

        def plan(journal: str) -> Snapshot | None:
            info, need = self._infos[journal], end[journal]
            try:
                # A steady trigger starts where the last one ended: the journal is listed from the
                # fragment that range ended in, not from its first fragment (a long journal has
                # many). The listing must reach back to the range's start, else it is listed whole.
                since = self._listed_from.get(journal, 0)
                if since and since <= origin[journal] and not self.opts.read_committed:
                    snap = take_snapshot(client, info, self.opts, need=need, ask_primary=False, since=since)
                    if snap.fragments and snap.fragments[0].spec.begin <= origin[journal]:
                        return snap
                return take_snapshot(client, info, self.opts, need=need, ask_primary=False)
            except JournalNotFoundError:
                return None  # deleted meanwhile: partitions() says so

        held: dict = {}
        for journal, snap in sweep(plan, moved).items():
            if snap is None:
                continue
            s, e = origin[journal], offset_of(end[journal])
            waiting = snap.settled.pending_in(s, e) if snap.settled is not None else []
            if not waiting:
                _planned[(self._token, journal)] = (s, e, snap)
                self._holds.pop(journal, None)
                self._listed_from[journal] = _last_begin(snap, e)
                continue
            first = min(waiting)
            end[journal] = max(s, first[0])
            self._listed_from[journal] = _last_begin(snap, end[journal])
            held[journal] = (snap, s, e)
            self._holds[journal] = (end[journal], time.monotonic() + HOLD_RECHECK)
            if (journal, *first) not in self._held:
                self._held.add((journal, *first))
                log.warning(
                    "journal %r: offsets %s are in no fragment yet and are not judged lost: %s. The stream "
                    "reads up to offset %d and waits there, trigger after trigger, until they are listed or "
                    "judged lost; it does not skip them",
                    journal,
                    offset_ranges(waiting),
                    snap.settled.why if snap.settled is not None else "",
                    end[journal],
                )
            testing.settle_waiting(journal, waiting)
        return held

    def _with_state(self, client, origin: dict, end: dict) -> dict:
        """``end`` with the sequencer's state at each journal's new offset (readCommitted): each
        journal that moved is scanned from its ``origin`` entry, the batch's start (see
        :func:`~pyspark_gazette.spark.read.committed.scan_state`)."""
        infos = {i.name: i for i in self._journals(client)}
        # Only journals that moved forward: a re-created journal's new offset has no state yet.
        moved = [j for j in sorted(end) if j in infos and offset_of(end[j]) > offset_of(origin[j])]

        def scan(journal: str):
            stop = offset_of(end[journal])
            snap = self._snapshot(client, infos[journal])
            snap = self._settle(client, snap, offset_of(origin[journal]), stop)

            def pieces(begin: int, until: int):
                return state_pieces(snap, begin, until, self.opts)

            ahead = _scans_ahead.pop((self._token, journal), None)
            got = ahead.resume(origin[journal], stop, pieces) if ahead is not None else None
            if got is None:
                got = scan_state(snap, origin[journal], stop, self.opts)
            # The next batch most likely reads as many bytes: scan them while this one runs.
            until = min(snap.write_head, stop + (stop - offset_of(origin[journal])))
            if until > stop:
                _scans_ahead[(self._token, journal)] = ScanAhead(journal, got, until, pieces, snap.framing, self.opts)
            return got

        out = dict(end)
        out.update(sweep(scan, moved))
        return out

    def reportLatestOffset(self) -> dict | None:
        return dict(self._latest) if self._latest is not None else None

    @plain
    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return self._through_outages(lambda: self._partitions(start, end))

    def _partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        client = self._client()
        infos = {i.name: i for i in self._journals(client)}
        # (journal, start, end) of each journal to read, in name order.
        ranges: list[tuple[str, int, int]] = []
        # The start entries (with readCommitted, their sequencer states) by journal.
        starts: dict[str, object] = {}
        for journal in sorted(end):
            e = offset_of(end[journal])
            entry = start.get(journal, e if journal not in infos else -1)
            s = offset_of(entry)
            # -1: new; s > e or another creation revision: re-created (see _recreated).
            if s == -1 or (journal in infos and (s > e or not same_journal(entry, end[journal]))):
                entry = s = self._earliest(client, journal) if s == -1 else e
            if s < e:
                ranges.append((journal, s, e))
                starts[journal] = entry

        def snapshot(journal: str):
            info = infos.get(journal)
            if info is None:
                return "the journal no longer exists"
            planned = _planned.pop((self._token, journal), None)
            if planned is not None and planned[:2] == (begin[journal], need[journal]):
                return planned[2]  # latestOffset's plan of this very range
            try:
                # The planned end was reached: holes below it that a member can still fill, and
                # that this batch's range touches, are waited for, not skipped.
                snap = self._snapshot(client, info, need=need[journal])
            except JournalNotFoundError:
                return "the journal was deleted"
            return self._settle(client, snap, begin[journal], need[journal])

        need = {j: e for j, _, e in ranges}
        begin = {j: s for j, s, _ in ranges}
        snaps = sweep(snapshot, [j for j, _, _ in ranges])
        if self.opts.read_committed:
            parts: list = []
            for journal, s, e in ranges:
                snap = snaps[journal]
                if isinstance(snap, str):
                    self._lost(journal, s, e, snap)
                    continue
                parts.append(committed_partition(snap, starts[journal], e, self.opts, len(parts)))
            return parts
        # Pieces weigh their offset span, never their content, so that packing depends on the
        # offsets alone: a missing journal keeps empty pieces in its place.
        size = self.opts.max_partition_bytes
        pieces: list[GazettePartition] = []
        weights: list[int] = []
        for journal, s, e in ranges:
            snap = snaps[journal]
            if isinstance(snap, str):
                self._lost(journal, s, e, snap)
                framing = framing_by_name(self.opts.framing) if self.opts.framing != "auto" else LINES
                spans = aligned_spans(framing, s, e, size)
                pieces.extend(GazettePartition(0, journal, framing, ()) for _ in spans)
            else:
                spans = aligned_spans(snap.framing, s, e, size)
                pieces.extend(
                    aligned_partitions(
                        snap.name, snap.framing, s, e, segments(snap, s, e, self.opts), size, 0, snap.truncated_at
                    )
                )
            weights.extend(hi - lo for lo, hi in spans)
        return pack(pieces, self.opts, weights)

    def _confirmed_below(self, client, heads: dict[str, int], start: dict, new: Sequence[str]) -> dict[str, int]:
        """The write heads, asked of every route member, of the journals whose head in ``heads``
        is below the stream's offset in them. A head comes from one member, and Gazette reports
        a member's write head as the end of its fragment index: a broker that restarted and
        rejoined the route reports only what was persisted until the primary's next append
        reaches it, below what the stream already read. Only the largest answer of all the
        members (:func:`~pyspark_gazette.client.heads.route_heads` with ``HeadMode.CONFIRMED``) tells a re-created journal
        from a stale member; when none answers, the journal waits at its offset (no new data
        this trigger) and the next trigger asks again. ``new``: journals not to ask (new, or
        known re-created)."""
        below = [j for j, h in heads.items() if j not in new and h < offset_of(start[j])]
        out: dict[str, int] = {}
        for journal in below:
            offset = offset_of(start[journal])
            confirmed = route_heads(client.conns, [journal], HeadMode.CONFIRMED).get(journal)
            log.info(
                "journal %s: a member reported write head %d, below the stream's offset %d; every member asked: %s",
                journal,
                heads[journal],
                offset,
                confirmed,
            )
            if confirmed is None:
                confirmed = offset
            elif confirmed >= offset and self._target is not None and journal in self._target:
                confirmed = max(offset, min(confirmed, self._target[journal]))  # AvailableNow's end
            out[journal] = confirmed
        return out

    def _recreated(self, client, journal: str, offset: int, head: int, created: tuple[int, int] | None = None) -> int:
        """The rule for a journal that was deleted and re-created: listed with another creation
        revision (``created``: the stream's and the listing's), or, where that is not known, with
        its write head below the stream's offset in it (its offsets restarted). With
        ``failOnDataLoss`` (the default) the query fails saying so; without, the stream goes on
        with the new journal from its start, which this micro-batch moves to (reading nothing of
        it) and the next ones read."""
        if created is not None:
            text = (
                f"journal {journal!r}: it was created at Etcd revision {created[1]}, not {created[0]} as when "
                f"the stream read it up to offset {offset}: the journal was deleted and re-created "
                f"(its write head is now {head})"
            )
        else:
            text = (
                f"journal {journal!r}: its write head {head} is below the stream's offset {offset} in it: "
                "the journal was deleted and re-created (its offsets restarted)"
            )
        if self.opts.fail_on_data_loss:
            raise DataLossError(
                text + "; set failOnDataLoss=false to read the new journal from its start", journal=journal
            )
        earliest = self._earliest(client, journal)
        log.warning("%s; reading the new journal from offset %d (failOnDataLoss=false)", text, earliest)
        return earliest

    def _head_catching_up(self, client, journal: str, offset: int, head: int) -> bool:
        """Whether a write head that every route member reports below the stream's ``offset`` in
        ``journal`` (its creation revision unchanged) may still catch up, so that the stream waits
        at its offset this trigger rather than call ``[head, offset)`` lost.

        Gazette reports a member's write head as the end of its fragment index. In a hand-off (a
        broker that got SIGTERM in a rolling upgrade) the leaving broker persists its spools as
        it goes, and the broker that takes the journal lists them only at its next store refresh
        (or once the next append reaches it): until then every member can report a head below
        content that was acknowledged and read. So the head is stale, not lost, while the
        journal's fragment stores hold ``[head, offset)`` (listed from here, as a batch read's
        planning does: :func:`~pyspark_gazette.spark.read.plan.store_holds`); otherwise it is
        waited for about one fragment refresh interval of the journal (at most
        ``broker.timeout``) from the first trigger that saw it, then judged lost
        (:meth:`_went_back`)."""
        now = time.monotonic()
        since = self._behind.setdefault(journal, now)
        info = next((i for i in self._journals(client) if i.name == journal), None)
        refresh = duration_seconds(info.spec.fragment.refresh_interval) if info is not None else 0.0
        budget = refresh + REFRESH_SLACK if refresh > 0 else FILL_WAIT_WITHOUT_REFRESH
        if self.opts.connection.broker_timeout:
            budget = min(budget, self.opts.connection.broker_timeout)
        stores = tuple(info.spec.fragment.stores) if info is not None else ()
        held = store_holds(journal, stores, head, offset, self.opts)
        if held or now - since < budget:
            if since == now:
                log.warning(
                    "journal %r: every member reports write head %d, below the stream's offset %d; %s",
                    journal,
                    head,
                    offset,
                    "its fragment store holds the content in between: a broker that took the journal lists it "
                    "at its next store refresh; waiting at the offset"
                    if held
                    else f"waiting at the offset for up to {budget:g}s before calling it lost",
                )
            return True
        self._behind.pop(journal, None)
        return False

    def _went_back(self, journal: str, offset: int, head: int, created: int) -> int:
        """The rule for a journal whose every member reports a write head below the stream's offset
        while its creation revision is unchanged: it was not re-created, it lost content it had
        acknowledged before persisting it (every broker holding it stopped). With
        ``failOnDataLoss`` the query fails saying so; without, the stream goes on from the head,
        where the journal's next appends go."""
        text = (
            f"journal {journal!r}: its write head {head} went back below the stream's offset {offset} in it "
            f"(the journal was not re-created: its creation revision is still {created}): content it had "
            "acknowledged was lost before it was persisted"
        )
        if self.opts.fail_on_data_loss:
            raise DataLossError(text + "; set failOnDataLoss=false to read on from its write head", journal=journal)
        log.warning("%s; reading on from offset %d (failOnDataLoss=false)", text, head)
        return head

    def _lost(self, journal: str, begin: int, end: int, why: str) -> None:
        text = f"journal {journal!r}: offsets [{begin}, {end}) cannot be read: {why}"
        if self.opts.fail_on_data_loss:
            raise DataLossError(text + "; set failOnDataLoss=false to skip them", journal=journal, begin=begin, end=end)
        log.warning("%s; skipped (failOnDataLoss=false)", text)

    @plain
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if self.opts.read_committed:
            assert isinstance(partition, CommittedStreamPartition)
            yield from read_committed_batches(partition, self.opts, self.schema)
            return
        yield from read_partition(partition, self.opts, self.schema)

    @plain
    def commit(self, end: dict) -> None:
        pass

    def stop(self) -> None:
        for key in [k for k in _planned if k[0] == self._token]:
            _planned.pop(key, None)
        for key in [k for k in _scans_ahead if k[0] == self._token]:
            ahead = _scans_ahead.pop(key, None)
            if ahead is not None:
                ahead.cancel()
        watcher = _watchers.pop(self._token, None)
        if watcher is not None:
            watcher.close()
        listing = _list_watches.pop(self._token, None)
        if listing is not None:
            listing.close()
