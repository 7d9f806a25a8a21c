"""Planning reads (driver side): from fragment listings to Spark input partitions.

For each journal the planner takes one snapshot: the broker's fragment listing (persisted
fragments with their store, plus the local, not yet persisted ones) and the write head at that
moment, **settled** through failover (:mod:`pyspark_gazette.client.settle`): the end is the
largest write head the route's members report when that is beyond the listing (a re-joined
replica lists less than was acknowledged; with many journals, each primary is asked in one
window, then every member of the journals whose listing does not vouch for their primary's
answer: :func:`~pyspark_gazette.client.settle.spool_vouches`). Holes of the listing are looked
up in every route member's own listing and in a listing of the journal's fragment store (where
the driver can read it): a fragment the store holds and no broker lists is read from the store
at once. A hole left is judged as Gazette judges it: lost when the fragment after it was
persisted at least ``holeAgeThreshold`` ago (data loss without a wait); else it may still be in
flight, and a read whose range touches it waits for it, logged, up to ``broker.timeout``
(:class:`~pyspark_gazette.errors.HoleInFlightError` then), never skipping it. Bounds (offsets or
fragment mod times) become a byte range ``[start, end)`` per journal, and the range is cut into
:class:`Segment` s along fragment boundaries:

* a segment of a persisted fragment is read **directly from the object store** by the executor
  (fsspec over the store URL, or the broker's signed URL); so is one that only the store's
  listing found (whatever ``directReads``: no broker would serve it yet);
* content not yet persisted, and everything when ``directReads`` is off, is read through the
  broker's Read RPC;
* small direct segments are coalesced into one partition up to ``maxPartitionBytes``; a long
  unpersisted tail is split at that size (text framings only);
* the pieces of many small journals are then packed together into few partitions
  (:mod:`pyspark_gazette.spark.read.pack`).

The fragment listings of many journals are fetched concurrently (:data:`PLAN_WINDOW` in flight).

The snapshot fixes a read's start and every planned byte range. Spark plans a DataFrame's
partitions once and reuses them for every action on it, so a journal whose end is ``latest``
(``endingOffsets`` unset or -1, no ``endingTimestamp``) also gets a *tail*: its last segment is
marked :attr:`Segment.tail` (a zero-length broker segment at the planned end when the range ends
on a persisted fragment or is empty) and is read on to the write head **at the time it is
read**. Each action (``count()``, ``show()``, a query of a SQL view) therefore sees what was
appended until it ran, as Spark's Kafka source resolves ``latest`` per query. Explicit ending
offsets and ``endingTimestamp`` stay exact and repeatable. Journals created after planning (a
selector) are not added: that needs a new DataFrame.

Message boundaries: appends never split a message, so fragment boundaries and write heads are
message boundaries. A range start inside a message (an explicit offset, or a tail split) is
marked ``boundary=False`` and the executor skips to the next message; a message that *begins*
before a range's end is read to its end. Adjacent ranges therefore return every message once.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Sequence

from pyspark.sql.datasource import InputPartition

from pyspark_gazette.client import JournalClient, JournalInfo, ListedFragment
from pyspark_gazette.client.heads import HeadMode, concurrently, route_heads
from pyspark_gazette.client.list_apply import iter_fragments, list_fragments_many
from pyspark_gazette.client.settle import Settled, fill, settle, spool_vouches
from pyspark_gazette.errors import DataLossError, OptionError, StoreError, redact_url
from pyspark_gazette.flow.labels import truncated_at
from pyspark_gazette.fragments import FragmentRef, require_package
from pyspark_gazette.message import Framing
from pyspark_gazette.protocol import pb
from pyspark_gazette.spark.options import ReadOptions
from pyspark_gazette.spark.resolve import framing_of

log = logging.getLogger(__name__)

#: ListFragments calls in flight at once while planning many journals.
PLAN_WINDOW = 128
#: Lifetime asked for signed fragment URLs (``signedUrls``): tasks may start well after planning.
SIGNED_URL_TTL = 6 * 3600.0


@dataclasses.dataclass(frozen=True)
class Segment:
    """Messages of ``journal`` that begin in ``[begin, end)``.

    ``fragment`` is set when the executor reads a persisted fragment directly (``signed_url``
    when it should use the broker's signed URL); otherwise the broker's Read RPC serves it.
    ``boundary`` says whether ``begin`` is known to be a message boundary.
    """

    journal: str
    begin: int
    end: int
    fragment: FragmentRef | None = None
    signed_url: str = dataclasses.field(default="", repr=False)
    boundary: bool = True
    #: Unix seconds the fragment was persisted (0 while it is not).
    mod_time: int = 0
    #: The broker to read a broker segment through first (the primary at planning; '' = any).
    endpoint: str = ""
    #: The range's end was the write head at planning (``endingOffsets=latest``): reading goes on
    #: to the journal's write head when the segment is read, so each Spark action over the same
    #: DataFrame sees what is appended until it runs (Spark plans a DataFrame's partitions once).
    tail: bool = False

    @property
    def length(self) -> int:
        return self.end - self.begin


@dataclasses.dataclass(frozen=True)
class GazettePartition(InputPartition):
    """One Spark task: segments of one journal, read in order."""

    index: int
    journal: str
    framing: Framing
    segments: tuple[Segment, ...]
    #: A ``collection`` read's truncation clock of the journal (its ``estuary.dev/truncated-at``
    #: label): documents published before it are not returned. 0: none.
    truncated_at: int

    def __init__(
        self, index: int, journal: str, framing: Framing, segments: tuple[Segment, ...], truncated_at: int = 0
    ):
        object.__setattr__(self, "index", index)
        object.__setattr__(self, "journal", journal)
        object.__setattr__(self, "framing", framing)
        object.__setattr__(self, "segments", segments)
        object.__setattr__(self, "truncated_at", truncated_at)
        object.__setattr__(self, "value", index)

    @functools.cached_property
    def length(self) -> int:
        # Cached: packing asks for it many times, and a journal of many small fragments makes
        # partitions of many thousand segments (the segments are an immutable tuple).
        return sum(s.length for s in self.segments)


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """A journal as planned: its fragments (ordered by begin) and write head."""

    info: JournalInfo
    framing: Framing
    fragments: tuple[ListedFragment, ...]
    write_head: int
    #: The primary's endpoint at planning ('' when unknown): broker segments are read there first.
    endpoint: str = ""
    #: The truncation clock of a ``collection`` read (:func:`truncation_of`); 0 otherwise.
    truncated_at: int = 0
    #: The settled listing: its holes a route member can still fill (:func:`settle_range`).
    settled: Settled | None = dataclasses.field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def earliest(self) -> int:
        return self.fragments[0].spec.begin if self.fragments else self.write_head


def truncation_of(info: JournalInfo, opts: ReadOptions) -> int:
    """The clock a ``collection`` read's documents of ``info`` start at: its Flow
    ``estuary.dev/truncated-at`` label (:func:`~pyspark_gazette.flow.labels.truncated_at`), as
    Flow's readers apply it; 0 for other reads, which return every document."""
    if not opts.collection:
        return 0
    return truncated_at(info.name, ((lb.name, lb.value) for lb in info.spec.labels.labels))


def fully_suspended_at(info: JournalInfo) -> int | None:
    """The offset a fully suspended journal resumes at, or None when ``info`` is not fully
    suspended.

    Gazette suspends a journal FULL only when its fragment index is empty (every fragment was
    pruned, or none was ever written), and then answers SUSPENDED to its reads and fragment
    listings until an append resumes it at that offset (``broker/append_fsm.go``). Such a
    journal is planned as empty at that offset, as Flow's readers treat it: nothing is lost (there
    is no content), nothing fails, and a stream reads what is appended once it resumes.
    A partially suspended journal is read like any other: one broker still serves it.
    """
    if info.spec.suspend.level == pb.JournalSpec.Suspend.FULL:
        return info.spec.suspend.offset
    return None


def take_snapshots(client: JournalClient, infos: Sequence[JournalInfo], opts: ReadOptions) -> list[Snapshot]:
    """:func:`take_snapshot` of each journal, in order, up to :data:`PLAN_WINDOW` listings in
    flight (:func:`~pyspark_gazette.client.list_apply.list_fragments_many`).

    The first failure (in journal order) is raised and the listings not yet started are dropped.
    """
    live = [i for i in infos if fully_suspended_at(i) is None]
    if len(live) <= 1:
        return [take_snapshot(client, info, opts) for info in infos]
    ttl = SIGNED_URL_TTL if opts.signed_urls else None
    names = [i.name for i in live]
    by_primary: dict[str, int] = {}
    listed = dict(
        list_fragments_many(client.conns, names, signature_ttl=ttl, window=PLAN_WINDOW, primary_heads=by_primary)
    )
    # The primary's write head: its listing's end where the primary answered it (one RPC a
    # journal, not two: list_fragments_many), else asked after the listings (never below them).
    heads = route_heads(client.conns, [n for n in names if n not in by_primary], HeadMode.PRIMARY, PLAN_WINDOW)
    heads.update(by_primary)
    # A primary that joined the route after the last appends reports less than they reached;
    # where the listing does not vouch for its head, every route member is asked too.
    # (A route of one member, as on the embedded broker, has no one else to ask.)
    doubtful = [
        n for n in names if n in listed and _replicated(client, n) and not spool_vouches(listed[n], heads.get(n, 0))
    ]
    for n, head in route_heads(client.conns, doubtful, HeadMode.OTHER_MEMBERS, PLAN_WINDOW).items():
        heads[n] = max(heads.get(n, 0), head)
    return [
        _snapshot(client, info, listed[info.name], opts, need=heads.get(info.name, 0), ask_primary=False)
        if info.name in listed
        else take_snapshot(client, info, opts)
        for info in infos
    ]


#: Journals a timestamp-bounded read plans at once (:func:`window_snapshot`: a few listings each).
WINDOW_THREADS = 32


def window_snapshot(client: JournalClient, info: JournalInfo, opts: ReadOptions) -> Snapshot | None:
    """A ``startingTimestamp`` read's snapshot of ``info`` from listings of its range alone, or
    None when the caller must list the whole journal (:func:`take_snapshot`).

    The broker filters by persist time (ListFragments' ``begin_mod_time`` / ``end_mod_time``), so
    the fragments outside the window are never sent: the read's start is the first fragment,
    in offset order, persisted at or after ``startingTimestamp`` (the first of a listing with
    ``begin_mod_time``, one fragment a page); with ``endingTimestamp`` its end is the furthest end
    of the fragments from there persisted at or before it (a listing from the start, page token,
    with ``end_mod_time``). Then the journal is listed from the start (page token) up to that end,
    or to its write head without ``endingTimestamp``. Listings are cover sets, so from its first
    fragment on this is what a whole listing holds: the range, its holes and its segments are the
    same. None when no fragment is persisted at or after ``startingTimestamp``, when nothing from
    the start is persisted at or before ``endingTimestamp``, or for a fully suspended journal.
    """
    if opts.starting_timestamp is None or fully_suspended_at(info) is not None:
        return None
    ttl = SIGNED_URL_TTL if opts.signed_urls else None
    begin_mod = -(-opts.starting_timestamp // 1000)  # mod times are whole seconds: >= bound
    start = next(
        (
            f.spec.begin
            for f in iter_fragments(client.conns, info.name, begin_mod_time=begin_mod, page_limit=1)
            if f.spec.mod_time  # unpersisted content passes the filter: start_offset skips it
        ),
        None,
    )
    if start is None:
        return None
    end: int | None = None
    if opts.ending_timestamp is not None:
        end_mod = opts.ending_timestamp // 1000  # <= bound
        ends = [f.spec.end for f in iter_fragments(client.conns, info.name, end_mod_time=end_mod, start=start)]
        if not ends:
            return None
        end = max(ends)
    listed = []
    for f in iter_fragments(client.conns, info.name, signature_ttl=ttl, start=start):
        if end is not None and f.spec.begin >= end:
            break
        listed.append(f)
    if not listed or listed[0].spec.begin != start:
        return None
    return _snapshot(client, info, listed, opts, need=end or 0, ask_primary=end is None)


def _replicated(client: JournalClient, journal: str) -> bool:
    route = client.conns.route(journal)
    return route is not None and len(route.endpoints) > 1


def take_snapshot(
    client: JournalClient,
    info: JournalInfo,
    opts: ReadOptions,
    *,
    need: int = 0,
    ask_primary: bool = True,
    since: int = 0,
) -> Snapshot:
    """``info``'s snapshot; ``need``: an end the caller knows was reached (a stream's planned
    offset), below which holes are waited out like those below the primary's head
    (``ask_primary``: also ask the primary for its write head). A fully suspended journal's is
    empty at its resumption offset, with no RPC (:func:`fully_suspended_at`).

    ``since``: list only the fragments that begin at or after this offset (ListFragments' page
    token). Listings are cover sets (ordered by begin, ends ascending), so from the first
    fragment listed on such a snapshot holds exactly what a whole listing holds: a range that
    starts at or after that fragment's begin is planned the same (the caller checks that it
    does; :attr:`Snapshot.earliest` is then that fragment's begin, not the journal's)."""
    at = fully_suspended_at(info)
    if at is not None:
        return Snapshot(info, framing_of(info, opts.framing), (), at, truncated_at=truncation_of(info, opts))
    ttl = SIGNED_URL_TTL if opts.signed_urls else None
    listed = client.list_fragments(info.name, signature_ttl=ttl, **({"start": since} if since else {}))
    return _snapshot(client, info, listed, opts, need=need, ask_primary=ask_primary)


def _snapshot(
    client: JournalClient,
    info: JournalInfo,
    listed: Sequence[ListedFragment],
    opts: ReadOptions,
    *,
    need: int = 0,
    ask_primary: bool = True,
) -> Snapshot:
    ttl = SIGNED_URL_TTL if opts.signed_urls else None
    done = settle(
        client.conns,
        info.name,
        listed,
        need=need,
        signature_ttl=ttl,
        ask_primary=ask_primary,
        stores=tuple(info.spec.fragment.stores),
        list_store=lambda url, journal: _list_store(url, journal, opts),
        threshold=opts.hole_age_threshold,
    )
    return Snapshot(
        info,
        framing_of(info, opts.framing),
        done.fragments,
        done.head,
        done.endpoint,
        truncated_at=truncation_of(info, opts),
        settled=done,
    )


def _list_store(url: str, journal: str, opts: ReadOptions) -> list[FragmentRef] | None:
    """The fragments of ``journal`` in the store at ``url``, as the executors would read them;
    ``None`` when this process cannot read it (a ``file://`` store without ``store.fileRoot``)."""
    from pyspark_gazette.spark.read.segments import store_for  # it imports this module

    if url.startswith("file://") and opts.connection.file_root is None:
        return None
    return store_for(url, opts).list(journal)


def store_holds(journal: str, stores: Sequence[str], begin: int, end: int, opts: ReadOptions) -> bool:
    """Whether the fragment stores ``stores`` of ``journal``, listed from this process as the
    executors would read them (:func:`_list_store`), hold every offset of ``[begin, end)``; False
    when they do not, or cannot be listed here."""
    spans: list[tuple[int, int]] = []
    for url in stores:
        try:
            refs = _list_store(url, journal, opts)
        except Exception as e:  # noqa: BLE001 - any failure means: not known here
            log.info("journal %r: store %s could not be listed: %s", journal, redact_url(url), redact_url(str(e)))
            continue
        spans.extend((r.begin, r.end) for r in refs or ())
    reached = begin
    for span_begin, span_end in sorted(spans):
        if span_begin > reached:
            break
        reached = max(reached, span_end)
    return reached >= end


def settle_range(client: JournalClient, snap: Snapshot, begin: int, end: int, opts: ReadOptions) -> Snapshot:
    """``snap`` once the holes not yet decidable that touch ``[begin, end)`` are decided
    (:func:`~pyspark_gazette.client.settle.fill`: listed by a member or held by the store, or
    judged lost by ``holeAgeThreshold``; waited for up to ``broker.timeout``, logged, then
    :class:`~pyspark_gazette.errors.HoleInFlightError`). Other holes are not waited for; lost
    ones are data loss to :func:`segments`."""
    if snap.settled is None or not snap.settled.pending:
        return snap
    done = fill(
        client.conns,
        snap.name,
        snap.settled,
        begin,
        end,
        stores=tuple(snap.info.spec.fragment.stores),
        list_store=lambda url, journal: _list_store(url, journal, opts),
        threshold=opts.hole_age_threshold,
        signature_ttl=SIGNED_URL_TTL if opts.signed_urls else None,
    )
    if done is snap.settled:
        return snap
    return dataclasses.replace(snap, fragments=done.fragments, settled=done)


def resolve_offset(snap: Snapshot, spec: str | dict[str, int] | None, default: str, option: str) -> int:
    """A start or end offset of ``snap`` from an offsets option value."""
    if isinstance(spec, dict):
        value = spec.get(snap.name, -2 if default == "earliest" else -1)
    else:
        value = {"earliest": -2, "latest": -1}[spec or default]
    if value == -2:
        return snap.earliest
    if value == -1:
        return snap.write_head
    if value > snap.write_head:
        raise OptionError(option, f"offset {value} of journal {snap.name!r} is beyond its write head {snap.write_head}")
    return value


def start_offset(snap: Snapshot, opts: ReadOptions, default: str = "earliest") -> int:
    if opts.starting_timestamp is not None:
        bound = opts.starting_timestamp / 1000.0
        for f in snap.fragments:
            if f.spec.mod_time and f.spec.mod_time >= bound:
                return f.spec.begin
        # Nothing persisted at or after the bound: start at the first unpersisted content.
        local = [f.spec.begin for f in snap.fragments if not f.spec.mod_time]
        return min(local) if local else snap.write_head
    return resolve_offset(snap, opts.starting_offsets, default, "startingOffsets")


def end_offset(snap: Snapshot, opts: ReadOptions, start: int) -> int:
    if opts.ending_timestamp is not None:
        bound = opts.ending_timestamp / 1000.0
        ends = [f.spec.end for f in snap.fragments if f.spec.mod_time and f.spec.mod_time <= bound]
        return max([start, *ends])
    return resolve_offset(snap, opts.ending_offsets, "latest", "endingOffsets")


#: The data-loss error's earlier name, kept for imports of it.
DataLoss = DataLossError


def segments(
    snap: Snapshot,
    start: int,
    end: int,
    opts: ReadOptions,
    *,
    start_is_boundary: bool = False,
    lost: list[tuple[str, int, int]] | None = None,
) -> list[Segment]:
    """Cut ``[start, end)`` of ``snap`` into segments along its fragments.

    A hole (no fragment covers some bytes) left in a settled snapshot (judged lost: in neither
    a member's listing nor the store, and the fragment after it persisted at least
    ``holeAgeThreshold`` ago; :func:`settle_range` has waited for the others) is data loss: it raises :class:`~pyspark_gazette.errors.DataLossError` naming the journal and
    offsets when ``failOnDataLoss`` is on, else it is logged and appended to ``lost``.
    """
    out: list[Segment] = []
    pos = start
    file_root = opts.connection.file_root
    checked: set[str] = set()  # stores whose fsspec package is known to be here
    for listed in snap.fragments:
        f = listed.spec
        if pos >= end:
            break
        if f.end <= pos:
            continue
        if f.begin > pos:
            report_lost(snap.name, pos, min(f.begin, end), opts, lost)
            pos = min(f.begin, end)
            if pos >= end:
                break
        seg_begin, seg_end = pos, min(f.end, end)
        boundary = seg_begin == f.begin or (start_is_boundary and seg_begin == start)
        ref = FragmentRef.from_proto(f)
        # A fragment only the store's listing found is read there whatever directReads says:
        # no broker serves it yet (this process listed the store with the read's own options).
        direct = (
            (opts.direct_reads or listed.stored)
            and ref.is_persisted
            and (bool(listed.signed_url) if opts.signed_urls and not listed.stored else True)
            and (file_root is not None or not ref.backing_store.startswith("file://"))
        )
        if direct and not (opts.signed_urls and not listed.stored) and ref.backing_store not in checked:
            _require_store_package(snap.name, ref.backing_store)
            checked.add(ref.backing_store)
        out.append(
            Segment(
                snap.name,
                seg_begin,
                seg_end,
                ref if direct else None,
                listed.signed_url if direct and opts.signed_urls and not listed.stored else "",
                boundary,
                ref.mod_time,
                "" if direct else snap.endpoint,
            )
        )
        pos = seg_end
    if pos < end:
        report_lost(snap.name, pos, end, opts, lost)
    return out


def _require_store_package(journal: str, store_url: str) -> None:
    """Fail planning, naming the pip extra, when the store's fsspec package is missing here
    (executors read the store with it)."""
    try:
        require_package(store_url.partition(":")[0].lower())
    except StoreError as e:
        raise StoreError(f"journal {journal!r} has fragments in {redact_url(store_url)}: {e}") from e.__cause__


def report_lost(journal: str, begin: int, end: int, opts: ReadOptions, lost: list | None) -> None:
    text = f"journal {journal!r}: offsets [{begin}, {end}) are not in any fragment (deleted or pruned)"
    if opts.fail_on_data_loss:
        raise DataLossError(text + "; set failOnDataLoss=false to skip them", journal=journal, begin=begin, end=end)
    log.warning("%s; skipped (failOnDataLoss=false)", text)
    if lost is not None:
        lost.append((journal, begin, end))


def partition(
    snap: Snapshot, segs: Sequence[Segment], opts: ReadOptions, first_index: int = 0
) -> list[GazettePartition]:
    """Group one journal's segments into partitions (see the module docstring)."""
    if not segs:
        return []
    if opts.read_committed:
        return [GazettePartition(first_index, snap.name, snap.framing, tuple(segs), snap.truncated_at)]
    limit = opts.max_partition_bytes
    groups: list[list[Segment]] = []
    current: list[Segment] = []
    size = 0

    def flush() -> None:
        nonlocal current, size
        if current:
            groups.append(current)
        current, size = [], 0

    for seg in merge_broker_runs(segs):
        if seg.fragment is None:
            flush()
            for piece in split_tail(seg, limit, snap.framing):
                groups.append([piece])
            continue
        if current and size + seg.length > limit:
            flush()
        current.append(seg)
        size += seg.length
    flush()
    return [
        GazettePartition(first_index + i, snap.name, snap.framing, tuple(g), snap.truncated_at)
        for i, g in enumerate(groups)
    ]


def merge_broker_runs(segs: Sequence[Segment]) -> list[Segment]:
    """Adjacent broker-read segments become one range (one Read RPC)."""
    out: list[Segment] = []
    for seg in segs:
        prev = out[-1] if out else None
        if (
            prev is not None
            and prev.fragment is None
            and seg.fragment is None
            and prev.end == seg.begin
            and prev.mod_time == seg.mod_time
        ):
            out[-1] = dataclasses.replace(prev, end=seg.end, tail=seg.tail)
        else:
            out.append(seg)
    return out


def split_tail(seg: Segment, limit: int, framing: Framing) -> list[Segment]:
    """A broker-served ``seg`` of a line-based framing cut into byte ranges of at most ``limit``
    bytes; a piece after the first is not at a message boundary, so its reader resynchronises at
    the next line. Short segments, and other framings, stay whole."""
    if seg.length <= limit or not framing.line_based:
        return [seg]
    pieces = []
    pos = seg.begin
    while pos < seg.end:
        nxt = min(pos + limit, seg.end)
        pieces.append(
            dataclasses.replace(
                seg,
                begin=pos,
                end=nxt,
                boundary=seg.boundary if pos == seg.begin else False,
                tail=seg.tail and nxt == seg.end,
            )
        )
        pos = nxt
    return pieces


def planned_range(snap: Snapshot, opts: ReadOptions, lost: list | None) -> tuple[int, int]:
    """The ``[start, end)`` a batch read plans in ``snap``'s journal: an ``endingOffsets`` before the
    start is an error, and a ``startingOffsets`` below the earliest offset is data loss (reported or
    skipped: :func:`report_lost`)."""
    start = start_offset(snap, opts)
    end = end_offset(snap, opts, start)
    if end < start:
        raise OptionError("endingOffsets", f"journal {snap.name!r} ends at {end}, before its start {start}")
    if opts.starting_offsets is not None and start < snap.earliest:
        report_lost(snap.name, start, snap.earliest, opts, lost)
        start = snap.earliest
    return start, end


def plan(
    client: JournalClient, infos: Sequence[JournalInfo], opts: ReadOptions, *, lost: list | None = None
) -> tuple[list[GazettePartition], dict[str, tuple[int, int]]]:
    """Partitions of a batch read, and the planned ``[start, end)`` of each journal."""
    by_name = {i.name: i for i in infos}
    names = list(by_name)
    parts: list[GazettePartition] = []
    ranges: dict[str, tuple[int, int]] = {}
    if opts.starting_timestamp is not None:
        # A window of persist times: each journal listed over its range alone where it can be.
        windowed = concurrently(lambda name: window_snapshot(client, by_name[name], opts), names, WINDOW_THREADS)
        rest = iter(take_snapshots(client, [i for i in infos if windowed[i.name] is None], opts))
        snaps = [windowed[i.name] or next(rest) for i in infos]
    else:
        snaps = take_snapshots(client, infos, opts)
    for snap in snaps:
        start, end = ranges[snap.name] = planned_range(snap, opts, lost)
        snap = settle_range(client, snap, start, end, opts)
        segs = segments(snap, start, end, opts, lost=lost)
        if open_ended(snap.name, opts):
            segs = with_tail(snap.name, segs, end)
        parts.extend(partition(snap, segs, opts, len(parts)))
    return parts, ranges


def open_ended(journal: str, opts: ReadOptions) -> bool:
    """Whether a batch read of ``journal`` ends at ``latest`` (read on to the write head when read)."""
    if opts.ending_timestamp is not None:
        return False
    ending = opts.ending_offsets
    return ending == "latest" if not isinstance(ending, dict) else ending.get(journal, -1) == -1


def with_tail(journal: str, segs: list[Segment], end: int) -> list[Segment]:
    """``segs`` with the last one marked :attr:`Segment.tail` when the broker reads it up to
    ``end``, else followed by a zero-length tail segment at ``end``."""
    if segs and segs[-1].fragment is None and segs[-1].end == end:
        return [*segs[:-1], dataclasses.replace(segs[-1], tail=True)]
    return [*segs, Segment(journal, end, end, tail=True)]
