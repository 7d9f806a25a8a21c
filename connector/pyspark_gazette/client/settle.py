"""Consistent snapshots of a journal through broker failover: the end a read plans to, and the
holes of a fragment listing: which are data loss, which are still in flight.

Gazette serves Read and ListFragments from whichever route member a request reaches (neither
requires the primary; broker/read_api.go), each from its own fragment index. A member that just
re-joined a journal's route starts its spool at the write head of the moment and knows only
the fragments persisted so far: the content the other members still hold in their spools
appears in its index once they have persisted it and it has listed the store again (the
journal's fragment refresh interval, about a minute). Until then its listing, and the write
head it reports, lie *below* appends that were acknowledged before a read began, or show a
hole below its own spool.

So a read plans from a :class:`Settled` listing:

* the end is the larger of the listing's end and the write heads reported by the route's
  **primary** and its other members (:func:`~pyspark_gazette.client.heads.route_heads` with
  ``HeadMode.CONFIRMED``: a metadata-only Read at offset ``-1`` sent to each). An append is
  acknowledged only once the primary and every replica of its pipeline committed it, and each of
  them reports it in its write head (the end of its fragment index) until it leaves the route; a
  member that joined later reports it only once the content is persisted and listed;
* a hole of the listing below that end (:func:`holes`) is first looked for in every route
  member's own listing (``do_not_proxy``, every page: :func:`member_listing`; a member's spool
  is in it), then in the journal's fragment stores (a listing under the journal's prefix, where
  this process can read the store: the executors read those files anyway). A fragment the store
  holds and no broker lists (uploaded by a broker that has since left the route, or not yet
  listed by a journal with a long refresh interval) is planned from the store at once
  (:attr:`ListedFragment.stored`);
* what is left is judged as Gazette's own index judges a hole (:func:`is_gone`; its
  ``offsetJumpAgeThreshold`` in broker/fragment/index.go): it is **lost** when it lies before
  every fragment, or when the fragment after it was persisted at least ``threshold`` ago
  (``holeAgeThreshold``, 6 hours by default): a read of it is data loss, reported (or skipped
  with ``failOnDataLoss=false``) without a wait;
* any other hole is **not yet decidable** (:attr:`Settled.pending`): the fragment after it was
  persisted recently, so it may be a fragment whose upload is still in flight after a broker
  hand-off; or a member did not answer, or the store could not be listed here. It is never
  skipped and never called data loss: :func:`fill` waits for the pending holes that touch the
  range a batch read plans (a read that starts after a hole never waits for it), listing the
  members and the stores again with Gazette's backoff
  (:func:`~pyspark_gazette.client.conn.backoff`) up to ``broker_timeout``, logging at WARNING
  what it awaits, why, and until when; holes still undecidable then raise
  :class:`~pyspark_gazette.errors.HoleInFlightError`. A stream instead reads up to such a hole
  and waits at it across triggers (spark/read/stream.py).

Retried: the listings above (each with the retries of
:func:`~pyspark_gazette.client.list_apply.list_fragments`). Surfaced: the listing's errors, the
lost holes (in :attr:`Settled.holes`, not pending) and, from :func:`fill`, the holes still
undecidable at its deadline.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import grpc

from pyspark_gazette import testing
from pyspark_gazette.client.conn import Connections, backoff
from pyspark_gazette.client.heads import HeadMode, primary_endpoint, route_heads
from pyspark_gazette.client.list_apply import ListedFragment, list_fragments
from pyspark_gazette.errors import HoleInFlightError, offset_ranges, redact_url
from pyspark_gazette.protocol import pb
from pyspark_gazette.protocol.durations import HOLE_JUMP_AGE

if TYPE_CHECKING:
    from pyspark_gazette.fragments import FragmentRef

log = logging.getLogger(__name__)


#: Waits of :func:`fill` in this process (holes that were not decided at the first listing).
SETTLE_WAITS = 0

#: How long a stream waits for a write head reported below its offset to catch up when the
#: journal's spec has no fragment refresh interval (no member lists the store again).
FILL_WAIT_WITHOUT_REFRESH = 60.0
#: Added to the fragment refresh interval: the time a member's store listing takes to land.
REFRESH_SLACK = 5.0


@dataclasses.dataclass(frozen=True)
class Settled:
    """A journal's fragments (ordered by begin), the end a read plans to, the endpoint of the
    broker to read unpersisted content through ('' when unknown), and the holes left: every one
    in :attr:`holes`, the not yet decidable ones also in :attr:`pending` (the others are lost)."""

    fragments: tuple[ListedFragment, ...]
    head: int
    endpoint: str = ""
    holes: tuple[tuple[int, int], ...] = ()
    #: The holes that cannot be judged lost yet (:func:`fill` waits for those a read touches).
    pending: tuple[tuple[int, int], ...] = ()
    #: Why the pending holes cannot be judged yet, for the log and the error.
    why: str = ""

    @property
    def lost(self) -> tuple[tuple[int, int], ...]:
        """The holes judged lost: data loss for a read whose range touches them."""
        return tuple(h for h in self.holes if h not in self.pending)

    def pending_in(self, begin: int, end: int) -> list[tuple[int, int]]:
        """The pending holes that touch ``[begin, end)``."""
        return [(b, e) for b, e in self.pending if b < end and begin < e]


def ordered(listed: Sequence[ListedFragment]) -> tuple[ListedFragment, ...]:
    """Fragments by begin, the longest first among equal begins, duplicates dropped (a broker's
    listing of a fragment is kept over the store's)."""
    seen: set[tuple[int, int, int, int, int]] = set()
    out = []
    for f in sorted(listed, key=lambda f: (f.spec.begin, -f.spec.end, -f.spec.mod_time, f.stored)):
        digest = f.spec.sum
        key = (f.spec.begin, f.spec.end, digest.part1, digest.part2, digest.part3)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return tuple(out)


def holes(frags: Sequence[ListedFragment], head: int) -> list[tuple[int, int]]:
    """Ranges from the first fragment's begin to ``head`` that no fragment covers."""
    out: list[tuple[int, int]] = []
    if not frags:
        return []  # nothing listed: the journal starts at its head (all of it pruned, or new)
    pos = frags[0].spec.begin
    for f in frags:
        if f.spec.begin > pos:
            out.append((pos, f.spec.begin))
        pos = max(pos, f.spec.end)
    if pos < head:
        out.append((pos, head))
    return out


def _next_after(hole: tuple[int, int], frags: Sequence[ListedFragment]) -> pb.Fragment | None:
    after = [f.spec for f in frags if f.spec.begin >= hole[1] and f.spec.end > f.spec.begin]
    return min(after, key=lambda f: f.begin) if after else None


def is_gone(
    hole: tuple[int, int],
    frags: Sequence[ListedFragment],
    now: float | None = None,
    *,
    threshold: float = HOLE_JUMP_AGE,
) -> bool:
    """Whether Gazette treats ``hole`` as gone (its index lets a reader jump it): the fragment
    right after it is persisted, and either the hole lies before every fragment (pruned by
    retention) or that fragment was persisted at least ``threshold`` seconds before ``now``
    (Gazette's ``offsetJumpAgeThreshold``, 6 hours). A younger fragment after it may follow a
    fragment whose upload is still in flight after a broker hand-off. Content not persisted yet
    after it (a spool) is as young as can be: only a ``threshold`` of 0 judges the hole gone
    then (Gazette's readers never jump it). Nothing after it (a hole up to a write head) is
    never gone."""
    now = time.time() if now is None else now
    nxt = _next_after(hole, frags)
    if nxt is None:
        return False
    if not nxt.mod_time:
        return threshold <= 0
    if all(f.spec.begin >= hole[1] for f in frags):
        return True
    return nxt.mod_time <= now - threshold


def why_undecided(hole: tuple[int, int], frags: Sequence[ListedFragment], now: float, threshold: float) -> str:
    """Why ``hole`` (not :func:`is_gone`) cannot be judged lost yet, in user terms, and from when
    it can be by its age ('' when no age will decide it)."""
    nxt = _next_after(hole, frags)
    if nxt is None:
        return "no fragment follows them yet: a route member's write head is beyond every listing"
    if not nxt.mod_time:
        return (
            "the content after them is not persisted yet, so they may precede a fragment whose upload is still "
            "in flight (with no persist time to judge them by, only holeAgeThreshold=0s judges them lost)"
        )
    return (
        f"the fragment after them was persisted at {_utc(nxt.mod_time)}, less than holeAgeThreshold "
        f"({_span(threshold)}) before now: it may follow a fragment whose upload is still in flight after "
        f"a broker hand-off (judged lost from {_utc(nxt.mod_time + threshold)} if still missing)"
    )


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def _span(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"


def spool_vouches(listed: Sequence[ListedFragment], head: int) -> bool:
    """Whether a listing of a journal shows that ``head`` (its primary's write head) is not
    short of any acknowledged append, so the route's other members need not be asked
    (:func:`~pyspark_gazette.client.heads.route_heads` with ``HeadMode.OTHER_MEMBERS``).

    It does when the listing holds content its answering member committed to its spool (a
    fragment not persisted, ``mod_time`` 0, not empty) ending at ``head`` or beyond. A member's
    spool starts, when it joins the route, at the end of the pipeline it joins, and every append
    acknowledged while it is a member is committed by it: so its spool's end is at or beyond
    every acknowledged append. A listing of persisted fragments only (an idle journal whose
    spools were flushed, or a member that joined after the last appends: its index holds the
    fragments persisted when it joined) vouches for nothing."""
    return any(not f.spec.mod_time and f.spec.begin < f.spec.end and f.spec.end >= head for f in listed)


#: Lists a fragment store: ``(store URL, journal)`` to the fragments of ``journal`` it holds;
#: ``None`` when this process cannot read that store (no file root, no credentials).
StoreLister = Callable[[str, str], "Sequence[FragmentRef] | None"]


def settle(
    conns: Connections,
    journal: str,
    listed: Sequence[ListedFragment],
    *,
    need: int = 0,
    signature_ttl: float | None = None,
    ask_primary: bool = True,
    stores: Sequence[str] = (),
    list_store: StoreLister | None = None,
    threshold: float = HOLE_JUMP_AGE,
    now: float | None = None,
) -> Settled:
    """``listed`` (a listing of ``journal``) settled without waiting (module docstring): the
    planned end, every route member's own listing and the fragments its stores hold merged in
    when the listing has a hole, and each hole left judged: lost (:func:`is_gone` with
    ``threshold``), else :attr:`Settled.pending`. The end is the largest of the listing's end,
    ``need`` (an end the caller already knows, such as a stream's planned offset) and, with
    ``ask_primary``, the primary's write head. ``stores`` (the journal's fragment stores) are
    listed with ``list_store``; :func:`fill` waits for the pending holes a read touches."""
    frags = ordered(listed)
    head = max([need, *(f.spec.end for f in frags)])
    if ask_primary:
        head = max(head, route_heads(conns, [journal], HeadMode.CONFIRMED).get(journal, 0))
    answered = True
    if (not frags and head > 0) or holes(frags, head):
        # Nothing listed below a head (a fully pruned journal, or a member that joined before
        # anything was persisted), or a hole: the members' own listings tell.
        if frags:
            log.info(
                "journal %r: offsets %s are not listed; asking the route's members",
                journal,
                offset_ranges(holes(frags, head)),
            )
        more, answered = _members_listings(conns, journal, signature_ttl)
        frags = ordered([*frags, *more])
    endpoint = primary_endpoint(conns, journal)
    open_holes = holes(frags, head)
    if not open_holes:
        return Settled(frags, head, endpoint)
    stored, unknown = _held_in_stores(journal, open_holes, stores, frags, list_store)
    if stored:
        log.info(
            "journal %r: offsets %s are in no broker's listing; its fragment store holds them: read from there",
            journal,
            offset_ranges([(r.begin, r.end) for r in stored]),
        )
        frags = ordered([*frags, *(ListedFragment(r.to_proto(), stored=True) for r in stored)])
        open_holes = holes(frags, head)
        if not open_holes:
            return Settled(frags, head, endpoint)
    return judged(frags, head, endpoint, answered, unknown, threshold, journal, now)


def judged(
    frags: tuple[ListedFragment, ...],
    head: int,
    endpoint: str,
    answered: bool,
    unknown: str,
    threshold: float,
    journal: str = "",
    now: float | None = None,
) -> Settled:
    """The holes of ``frags`` below ``head`` judged (pure): lost when :func:`is_gone`, else
    pending, with why. ``answered``: every route member gave its listing; ``unknown``: why a
    fragment store could not be listed ('' when every one was)."""
    now = time.time() if now is None else now
    all_holes = tuple(holes(frags, head))
    lost = [h for h in all_holes if is_gone(h, frags, now, threshold=threshold)]
    pending = tuple(h for h in all_holes if h not in lost)
    if lost:
        log.info(
            "journal %r: offsets %s are in no route member's listing nor in the journal's stores, and the "
            "fragment after them was persisted at least holeAgeThreshold (%s) ago: a read of them is data loss",
            journal,
            offset_ranges(lost),
            _span(threshold),
        )
    reasons = list(dict.fromkeys(why_undecided(h, frags, now, threshold) for h in pending))
    if not answered:
        reasons.append("a route member did not answer")
    if unknown:
        reasons.append(f"the fragment store could not be listed here to tell whether it holds them ({unknown})")
    return Settled(frags, head, endpoint, all_holes, pending, "; ".join(reasons) if pending else "")


def fill(
    conns: Connections,
    journal: str,
    settled: Settled,
    begin: int,
    end: int,
    *,
    stores: Sequence[str] = (),
    list_store: StoreLister | None = None,
    threshold: float = HOLE_JUMP_AGE,
    signature_ttl: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Settled:
    """``settled`` once the pending holes that touch ``[begin, end)`` are decided: filled (a
    member lists them, or the store holds them) or judged lost (the fragment after them aged
    past ``threshold``, left in :attr:`Settled.holes` for the caller to report). It lists the
    members and the stores again with Gazette's backoff, up to ``broker_timeout`` (forever when
    that is 0), logging what it awaits, why and until when; holes still undecidable then raise
    :class:`~pyspark_gazette.errors.HoleInFlightError`. Other holes are never waited for."""
    global SETTLE_WAITS

    waiting = settled.pending_in(begin, end)
    if not waiting:
        return settled
    timeout = conns.config.broker_timeout
    budget = float(timeout) if timeout else math.inf
    started = time.monotonic()
    deadline = started + budget
    until = (
        "with no time limit (broker.timeout is 0)"
        if math.isinf(budget)
        else f"until {time.strftime('%H:%M:%S UTC', time.gmtime(time.time() + budget))} at most (broker.timeout, "
        f"{budget:g}s)"
    )
    log.warning(
        "journal %r: offsets %s are in no fragment yet and are not judged lost: %s. The read waits for "
        "them, %s; it never skips them",
        journal,
        offset_ranges(waiting),
        settled.why or "a route member may still fill them",
        until,
    )
    SETTLE_WAITS += 1
    testing.settle_waiting(journal, waiting)
    current = settled
    attempt = 0
    while (left := deadline - time.monotonic()) > 0:
        sleep(min(backoff(attempt), left))
        attempt += 1
        current = settle(
            conns,
            journal,
            current.fragments,
            need=settled.head,
            signature_ttl=signature_ttl,
            ask_primary=False,
            stores=stores,
            list_store=list_store,
            threshold=threshold,
        )
        current = dataclasses.replace(current, endpoint=current.endpoint or settled.endpoint)
        waiting = current.pending_in(begin, end)
        if not waiting:
            lost = [h for h in current.lost if h[0] < end and begin < h[1]]
            log.warning(
                "journal %r: the offsets awaited are decided: %s; reading on",
                journal,
                f"{offset_ranges(lost)} judged lost (holeAgeThreshold passed)" if lost else "every one is listed now",
            )
            return current
    waited = time.monotonic() - started
    raise HoleInFlightError(
        f"journal {journal!r}: offsets {offset_ranges(waiting)} are still in no fragment after waiting "
        f"{waited:.0f}s (broker.timeout), and are not judged lost: {current.why or 'a route member may still fill them'}. "
        "The range may still be in flight (a fragment upload after a broker hand-off). Retry the read later, "
        "or raise broker.timeout to wait longer; if the data is known to be gone, lower holeAgeThreshold "
        "so that the hole is judged lost (and failOnDataLoss applies)",
        journal=journal,
        holes=waiting,
        waited=waited,
    )


def _held_in_stores(
    journal: str,
    open_holes: Sequence[tuple[int, int]],
    stores: Sequence[str],
    frags: Sequence[ListedFragment],
    list_store: StoreLister | None,
) -> tuple[list[FragmentRef], str]:
    """The fragments of ``journal`` its fragment stores hold (``stores`` and the stores of listed
    fragments) that overlap ``open_holes``, and why a store could not be listed ('' when every
    one was)."""
    urls = list(dict.fromkeys([*stores, *(f.spec.backing_store for f in frags if f.spec.backing_store)]))
    if list_store is None or not urls:
        return [], "no store to list" if not urls else f"{redact_url(urls[0])}: no store access"
    held: list[FragmentRef] = []
    for url in urls:
        try:
            refs = list_store(url, journal)
        except Exception as e:  # noqa: BLE001 - any failure means: not known here
            return held, f"{redact_url(url)}: {type(e).__name__}: {redact_url(str(e))}"
        if refs is None:
            return held, f"{redact_url(url)}: a file:// store is listed only with store.fileRoot"
        held.extend(r for r in refs if r.mod_time and any(r.begin < e and b < r.end for b, e in open_holes))
    return held, ""


#: Fragments per page of a member's own listing (:func:`member_listing`; 0: the broker's
#: default, 1,000 on Gazette).
MEMBER_PAGE_LIMIT = 0


def _members_listings(
    conns: Connections, journal: str, signature_ttl: float | None
) -> tuple[list[ListedFragment], bool]:
    """Every route member's own listing (:func:`member_listing`), merged, and whether every
    member answered (the listing through the route, with its retries, is always included)."""
    out = list(list_fragments(conns, journal, signature_ttl=signature_ttl))
    route = conns.route(journal)
    answered = True
    for endpoint in list(route.endpoints) if route is not None else []:
        own, ok = _member_pages(conns, journal, endpoint, signature_ttl, None)
        out.extend(own)
        answered = answered and ok
    return out, answered


def member_listing(
    conns: Connections,
    journal: str,
    endpoint: str,
    signature_ttl: float | None = None,
    page_limit: int | None = None,
) -> list[ListedFragment]:
    """The fragments of ``journal`` in the index of the broker at ``endpoint`` (``do_not_proxy``:
    a route member answers from its own index), every page (``next_page_token``, ``page_limit``
    fragments a page, default :data:`MEMBER_PAGE_LIMIT`). The pages up to a failed call (a dead
    member, a non-member's refusal, another status) are returned; the failure is only logged."""
    return _member_pages(conns, journal, endpoint, signature_ttl, page_limit)[0]


def _member_pages(
    conns: Connections, journal: str, endpoint: str, signature_ttl: float | None, page_limit: int | None
) -> tuple[list[ListedFragment], bool]:
    """:func:`member_listing`, and whether every page of it came (False after a failed call)."""
    request = pb.FragmentsRequest(
        journal=journal, do_not_proxy=True, page_limit=MEMBER_PAGE_LIMIT if page_limit is None else page_limit
    )
    if signature_ttl:
        request.signatureTTL.seconds = int(signature_ttl)
    out: list[ListedFragment] = []
    while True:
        try:
            resp = conns.stub(endpoint).ListFragments(request, **conns.call_kwargs(conns.config.timeout or 30.0))
        except grpc.RpcError as e:
            log.debug("ListFragments of %r at %s failed: %s", journal, endpoint, e)
            return out, False
        if resp.status != pb.OK:
            log.debug("ListFragments of %r at %s: %s", journal, endpoint, pb.Status.Name(resp.status))
            return out, False
        out.extend(ListedFragment(f.spec, f.signed_url) for f in resp.fragments)
        if not resp.next_page_token or resp.next_page_token == request.next_page_token:
            return out, True
        request.next_page_token = resp.next_page_token
