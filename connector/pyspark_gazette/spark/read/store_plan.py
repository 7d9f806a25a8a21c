"""Planning reads from a fragment store alone (driver side): ``store.url``, no broker.

A persisted fragment describes itself (its key holds the journal, the offsets, the SHA1 and the
codec), so a read of persisted history needs no broker. The planner lists the store once
(:func:`~pyspark_gazette.fragments.listing.list_store`: under the directory every journal read
lies below), chooses the journals (``journals``; a ``selector`` of ``name`` / ``name:prefix``
terms; a ``collection``, whose journal names carry its logical partitions) and takes a
:class:`~pyspark_gazette.spark.read.plan.Snapshot` of each from its fragments alone:

* overlapping fragments are resolved as Gazette's index resolves a read, the longest covering
  fragment first (:func:`~pyspark_gazette.fragments.listing.read_chain`);
* holes are judged by the brokers' own age rule (:func:`~pyspark_gazette.client.settle.holes`
  and :func:`~pyspark_gazette.client.settle.is_gone`): a hole before every fragment, or one whose
  next fragment was persisted long enough ago (``holeAgeThreshold``, Gazette's 6 hours), is lost
  (``failOnDataLoss`` decides, as through a broker). A younger hole is not yet decidable (an
  upload may still be in flight): the journal's persisted history, as this read sees it, ends
  there;
* the snapshot's write head is the end of that contiguous persisted history: content not yet
  persisted (a broker's open spool) is not in the store and is not read. An offset beyond it
  (``startingOffsets``, ``endingOffsets``) is an error saying where the history ends.

Partitions are then planned exactly as a broker-planned read's
(:func:`~pyspark_gazette.spark.read.plan.segments`, :func:`~pyspark_gazette.spark.read.plan.partition`),
every segment read straight from the store; a read ending at ``latest`` ends at the end planned
(there is no broker to read on to a write head). The journals get synthetic
:class:`~pyspark_gazette.client.JournalInfo` s: their name, and for a ``collection`` Flow's
``estuary.dev/collection`` and ``estuary.dev/field/*`` labels decoded from the name (so the
logical partition columns are the broker read's); the ``estuary.dev/truncated-at`` label lives
only in the brokers' specs, so a store read truncates nothing.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence

from pyspark_gazette.client import JournalInfo, ListedFragment
from pyspark_gazette.client.settle import holes, is_gone
from pyspark_gazette.errors import OptionError, StoreError, redact_url
from pyspark_gazette.flow.labels import COLLECTION, FIELD_PREFIX, encode_value, journal_prefix, name_partitions
from pyspark_gazette.fragments.listing import StoreListing, common_directory, list_store, read_chain
from pyspark_gazette.fragments.names import FragmentRef
from pyspark_gazette.message import framing_by_name
from pyspark_gazette.protocol import pb
from pyspark_gazette.protocol.labels import META_NAME, META_PREFIX, matches, parse_selector
from pyspark_gazette.spark.options import ReadOptions
from pyspark_gazette.spark.options.parsing import closest
from pyspark_gazette.spark.read.plan import (
    GazettePartition,
    Segment,
    Snapshot,
    partition,
    planned_range,
    segments,
)
from pyspark_gazette.spark.read.segments import store_for

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class StoreSnapshot:
    """A journal planned from the store: its :class:`Snapshot` (fragments of its read chain up
    to the end of its contiguous persisted history, which is its ``write_head``) and the hole,
    not yet decidable, that history ends at (None when it ends at its last fragment)."""

    snap: Snapshot
    young_hole: tuple[int, int] | None = None
    #: The end of every fragment the store holds (beyond a young hole too).
    stored_end: int = 0


def listing_base(opts: ReadOptions) -> str:
    """The directory below the store's prefix one listing must cover for ``opts``'s journals."""
    if opts.journals:
        return common_directory(opts.journals)
    if opts.selector:
        sel = parse_selector(opts.selector)
        names = [lb.value for lb in sel.include.labels if lb.name in (META_NAME, META_PREFIX)]
        return common_directory(names)
    return ""


def list_journals(opts: ReadOptions) -> tuple[list[JournalInfo], dict[str, list[FragmentRef]], StoreListing]:
    """The journals ``opts`` reads from ``store.url`` (synthetic infos, in name order), their
    fragments, and the listing. Errors: a store that cannot be listed (credentials), a store
    with no fragment under the listed directory, a journal or selection with none."""
    assert opts.store_url
    store = store_for(opts.store_url, opts)
    base = listing_base(opts)
    where = redact_url(opts.store_url) + base
    try:
        listing = list_store(
            store,
            base,
            journals=opts.journals or None,
            postfix_depth=opts.store_postfix_depth,
        )
    except StoreError as e:
        raise StoreError(
            f"store.url {where} cannot be listed ({e}); a store read needs read access (list and get) to "
            "the bucket: give its credentials with the store.* options or the environment"
        ) from None
    found = listing.fragments
    if not found and not listing.others:
        skipped = f" ({listing.skipped_text()})" if listing.skipped else ""
        raise OptionError("store.url", f"no fragment files under {where}{skipped}")
    if opts.journals:
        missing = [j for j in opts.journals if j not in found]
        if missing:
            hint = _did_you_mean(store, missing[0], opts)
            raise OptionError("journals", f"journal(s) not in store {where}: {', '.join(map(repr, missing))}{hint}")
        names = list(opts.journals)
    else:
        sel = parse_selector(opts.selector or "")
        names = [j for j in found if matches(sel, labels_of(j, opts), journal_name=j)]
        if not names:
            what = f"collection {opts.collection!r}" if opts.collection else f"selector {opts.selector!r}"
            near = (
                closest(journal_prefix(opts.collection) if opts.collection else "", found) if opts.collection else None
            )
            hint = f" (journals there include {sorted(found)[0]!r})" if not near else f" (did you mean {near!r}?)"
            raise OptionError(
                "collection" if opts.collection else "selector", f"{what} matches no journal in store {where}{hint}"
            )
    infos = [info_of(j, opts) for j in sorted(set(names))]
    return infos, {i.name: found[i.name] for i in infos}, listing


def _did_you_mean(store, journal: str, opts: ReadOptions) -> str:
    """`` (did you mean 'x'?)`` naming the journal of the store closest to ``journal``: from a
    listing of the directory above it (one more listing, only on this error)."""
    try:
        near_listing = list_store(store, common_directory([journal]), postfix_depth=opts.store_postfix_depth)
    except StoreError:
        return ""
    near = closest(journal, near_listing.fragments)
    return f" (did you mean {near!r}?)" if near else ""


def labels_of(journal: str, opts: ReadOptions) -> pb.LabelSet:
    """The labels a store read knows of ``journal``: none, except a ``collection`` read's Flow
    labels (``estuary.dev/collection`` and the logical partitions its name encodes)."""
    if not opts.collection:
        return pb.LabelSet()
    pairs = [(COLLECTION, opts.collection)]
    pairs += [(FIELD_PREFIX + field, encode_value(value)) for field, value in name_partitions(journal).items()]
    return pb.LabelSet(labels=[pb.Label(name=name, value=value) for name, value in sorted(pairs)])


def info_of(journal: str, opts: ReadOptions) -> JournalInfo:
    """A synthetic :class:`JournalInfo` of a journal seen in the store (no route, no revision)."""
    spec = pb.JournalSpec(name=journal, labels=labels_of(journal, opts))
    return JournalInfo(spec, 0, 0, pb.Route())


def _hole_age(opts: ReadOptions) -> dict[str, float]:
    """``is_gone``'s ``threshold`` keyword when the ``holeAgeThreshold`` option exists."""
    threshold = getattr(opts, "hole_age_threshold", None)
    return {} if threshold is None else {"threshold": threshold}


def snapshot(
    info: JournalInfo, refs: Sequence[FragmentRef], opts: ReadOptions, now: float | None = None
) -> StoreSnapshot:
    """``info``'s snapshot from its stored fragments ``refs`` (module docstring)."""
    now = time.time() if now is None else now
    chain = [ListedFragment(r.to_proto()) for r in read_chain(refs)]
    stored_end = chain[-1].spec.end if chain else 0
    young = None
    kept = chain
    for hole in holes(chain, stored_end):
        if not is_gone(hole, chain, now, **_hole_age(opts)):
            young = hole
            kept = [f for f in chain if f.spec.end <= hole[0]]
            log.warning(
                "journal %r: offsets [%d, %d) are not in store %s and the fragment after them is younger than "
                "the hole age threshold (an upload may still be in flight): the read ends at %d, where its "
                "contiguous persisted history ends",
                info.name,
                hole[0],
                hole[1],
                redact_url(opts.store_url or ""),
                hole[0],
            )
            break
    head = young[0] if young else stored_end
    framing = framing_by_name(opts.framing)
    snap = Snapshot(info, framing, tuple(kept), head)
    return StoreSnapshot(snap, young, stored_end)


def _check_offset(s: StoreSnapshot, spec: object, option: str, opts: ReadOptions) -> None:
    """An explicit offset of ``spec`` beyond ``s``'s persisted history is an error saying where
    that history ends."""
    if not isinstance(spec, dict):
        return
    value = spec.get(s.snap.name)
    if value is None or value < 0 or value <= s.snap.write_head:
        return
    why = (
        f"; offsets [{s.young_hole[0]}, {s.young_hole[1]}) are missing before younger fragments (an upload may be "
        f"in flight)"
        if s.young_hole
        else ""
    )
    raise OptionError(
        option,
        f"offset {value} of journal {s.snap.name!r} is beyond the end of its persisted history in store "
        f"{redact_url(opts.store_url or '')} ({s.snap.write_head}){why}; content not yet persisted (a broker's "
        "open spool) is not in the store",
    )


def store_snapshots(opts: ReadOptions) -> list[StoreSnapshot]:
    """Every journal of ``opts`` planned from one store listing."""
    infos, fragments, _ = list_journals(opts)
    now = time.time()
    return [snapshot(info, fragments[info.name], opts, now) for info in infos]


def journal_segments(
    s: StoreSnapshot, start: int, end: int, opts: ReadOptions, lost: list | None = None
) -> list[Segment]:
    """``[start, end)`` of ``s`` cut along its fragments: every segment read from the store;
    a segment that continues where a fragment ended starts at a message boundary."""
    segs = segments(s.snap, start, end, opts, lost=lost)
    out: list[Segment] = []
    for seg in segs:
        if not seg.boundary and out and out[-1].fragment is not None and out[-1].fragment.end == seg.begin:
            seg = dataclasses.replace(seg, boundary=True)
        out.append(seg)
    return out


def plan(opts: ReadOptions, *, lost: list | None = None) -> tuple[list[GazettePartition], dict[str, tuple[int, int]]]:
    """Partitions of a batch read of ``store.url``, and the planned ``[start, end)`` of each
    journal, as :func:`~pyspark_gazette.spark.read.plan.plan` gives them for a broker read."""
    parts: list[GazettePartition] = []
    ranges: dict[str, tuple[int, int]] = {}
    for s in store_snapshots(opts):
        snap = s.snap
        _check_offset(s, opts.starting_offsets, "startingOffsets", opts)
        _check_offset(s, opts.ending_offsets, "endingOffsets", opts)
        start, end = ranges[snap.name] = planned_range(snap, opts, lost)
        parts.extend(partition(snap, journal_segments(s, start, end, opts, lost), opts, len(parts)))
    return parts, ranges
