"""Consistent snapshots of a journal through broker failover: the end a read plans to, and the
holes of a fragment listing: which are data loss at once, which a route member can still fill.

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
  **primary** and its other members (:func:`primary_head`: a metadata-only Read at offset
  ``-1`` sent to each). An append is acknowledged only once the primary and every replica of
  its pipeline committed it, and each of them reports it in its write head (the end of its
  fragment index) until it leaves the route; a member that joined later reports it only once
  the content is persisted and listed;
* a hole of the listing below that end (:func:`holes`) is **gone** when Gazette itself would
  skip it (:func:`is_gone`): it is followed by a fragment persisted more than
  :data:`HOLE_JUMP_AGE` ago (Gazette's ``offsetJumpAgeThreshold``, the only case in which its
  index lets a reader jump a hole);
* every other hole is decided at once by :func:`settle`, from what can be known without
  waiting: it asks every route member for its own listing (``do_not_proxy``, every page:
  :func:`member_listing`; a member's spool is in it) and merges them. What no member lists is
  looked up in the journal's fragment stores (a listing under the journal's prefix, where this
  process can read the store: the executors read those files anyway). A hole the store holds
  is **pending**: a member lists it at its next store refresh. A hole the store does not hold
  is **lost**: no broker can ever serve it (a fragment file deleted from the store), and the
  caller reports it (or skips it with ``failOnDataLoss=false``) without a wait. A hole is also
  pending when a member did not answer or the store could not be listed here (it may yet be
  filled);
* :func:`fill` waits only for the pending holes that touch the range a read plans (a read
  that starts after a hole never waits for it), listing the members again with Gazette's
  backoff (:func:`~pyspark_gazette.client.conn.backoff`) for about one fragment refresh
  interval of the journal (at most ``broker_timeout``), and logs at WARNING what it awaits,
  why, and until when. Holes still open then are returned for the caller to report as data
  loss.

Retried: the listings above (each with the retries of
:func:`~pyspark_gazette.client.list_apply.list_fragments`). Surfaced: the listing's errors, and
the holes lost or still open at the deadline.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import grpc

from pyspark_gazette import testing
from pyspark_gazette.client.conn import Connections, backoff
from pyspark_gazette.client.list_apply import ListedFragment, list_fragments
from pyspark_gazette.errors import offset_ranges, redact_url
from pyspark_gazette.protocol import pb

if TYPE_CHECKING:
    from pyspark_gazette.fragments import FragmentRef

log = logging.getLogger(__name__)

#: A hole followed by a fragment persisted longer ago than this is gone (Gazette's
#: ``offsetJumpAgeThreshold`` in broker/fragment/index.go: 6 hours).
HOLE_JUMP_AGE = 6 * 3600

#: Waits of :func:`settle` in this process (holes that were not filled at the first listing).
SETTLE_WAITS = 0


@dataclasses.dataclass(frozen=True)
class Settled:
    """A journal's fragments (ordered by begin), the end a read plans to, the endpoint of the
    broker to read unpersisted content through ('' when unknown), and the holes still open
    (lost, or :attr:`pending` until :func:`fill` has waited for them)."""

    fragments: tuple[ListedFragment, ...]
    head: int
    endpoint: str = ""
    holes: tuple[tuple[int, int], ...] = ()
    #: The holes a route member can still fill (:func:`fill` waits for those a read touches).
    pending: tuple[tuple[int, int], ...] = ()
    #: What the pending holes wait for, for the log.
    why: str = ""


def ordered(listed: Sequence[ListedFragment]) -> tuple[ListedFragment, ...]:
    """Fragments by begin, the longest first among equal begins, duplicates dropped."""
    seen: set[tuple[int, int, str]] = set()
    out = []
    for f in sorted(listed, key=lambda f: (f.spec.begin, -f.spec.end, -f.spec.mod_time)):
        key = (f.spec.begin, f.spec.end, f.spec.sum.SerializeToString().hex())
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


def is_gone(hole: tuple[int, int], frags: Sequence[ListedFragment], now: float | None = None) -> bool:
    """Whether Gazette treats ``hole`` as gone: the fragment right after it was persisted more
    than :data:`HOLE_JUMP_AGE` ago (module docstring)."""
    now = time.time() if now is None else now
    after = [f.spec for f in frags if f.spec.begin >= hole[1]]
    if not after:
        return False
    nxt = min(after, key=lambda f: f.begin)
    return bool(nxt.mod_time) and nxt.mod_time < now - HOLE_JUMP_AGE


def primary_head(conns: Connections, journal: str) -> int | None:
    """The largest write head ``journal``'s route members report, the primary first, or
    ``None`` when no plain answer came (the caller keeps its listing's end). A metadata-only
    Read at ``-1`` goes to the primary's endpoint when the route is known; else (or after a
    failed call) to the bootstrap address, whose answer names the route; then to each member not
    asked yet.

    Every member is asked because Gazette reports a broker's write head as the end of its
    fragment index, not of its spool: a member that joined the route after the last appends
    (even one that became primary, after Gazette's allocator moved the journal) reports less
    until the others persist, while a member that was in the appends' pipeline reports them."""
    endpoint = conns.append_endpoint(journal)
    best = None
    asked: set[str] = set()
    while endpoint and endpoint not in asked:
        asked.add(endpoint)
        head = _metadata_head(conns, journal, endpoint)
        if head is not None:
            best = max(best or 0, head)
        route = conns.route(journal)
        # After a failed call the route is forgotten: the bootstrap address comes next.
        members = [primary_endpoint(conns, journal), *(route.endpoints if route is not None else ())]
        members.append(conns.append_endpoint(journal))
        endpoint = next((e for e in members if e and e not in asked), "")
    return best


def spool_vouches(listed: Sequence[ListedFragment], head: int) -> bool:
    """Whether a listing of a journal shows that ``head`` (its primary's write head) is not
    short of any acknowledged append, so the route's other members need not be asked
    (:func:`~pyspark_gazette.client.heads.sweep_heads` with ``members``).

    It does when the listing holds content its answering member committed to its spool (a
    fragment not persisted, ``mod_time`` 0, not empty) ending at ``head`` or beyond. A member's
    spool starts, when it joins the route, at the end of the pipeline it joins, and every append
    acknowledged while it is a member is committed by it: so its spool's end is at or beyond
    every acknowledged append. A listing of persisted fragments only (an idle journal whose
    spools were flushed, or a member that joined after the last appends: its index holds the
    fragments persisted when it joined) vouches for nothing."""
    return any(not f.spec.mod_time and f.spec.begin < f.spec.end and f.spec.end >= head for f in listed)


def _metadata_head(conns: Connections, journal: str, endpoint: str) -> int | None:
    request = conns.read_request(journal, offset=-1, metadata_only=True)
    try:
        responses = list(conns.stub(endpoint).Read(request, **conns.call_kwargs(conns.config.timeout or 30.0)))
    except grpc.RpcError as e:
        conns.endpoint_failed(journal, endpoint if e.code() == grpc.StatusCode.UNAVAILABLE else None)
        return None
    if len(responses) == 1 and responses[0].status in (pb.OK, pb.OFFSET_NOT_YET_AVAILABLE):
        resp = responses[0]
        if resp.HasField("header"):
            conns.update_route(journal, resp.header)
        return max(resp.write_head, resp.fragment.end if resp.HasField("fragment") else 0)
    return None


def primary_endpoint(conns: Connections, journal: str) -> str:
    route = conns.route(journal)
    if route is not None and 0 <= route.primary < len(route.endpoints):
        return route.endpoints[route.primary]
    return ""


#: Longest wait for a hole a member can still fill when the journal's spec has no fragment
#: refresh interval (a journal without stores: only an unanswered member can fill it).
FILL_WAIT_WITHOUT_REFRESH = 60.0
#: Added to the fragment refresh interval: the time a member's store listing takes to land.
REFRESH_SLACK = 5.0

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
) -> Settled:
    """``listed`` (a listing of ``journal``) settled without waiting (module docstring): the
    planned end, every route member's own listing merged in when the listing has a hole, and
    each hole left classified: :attr:`Settled.pending` when a member can still fill it, else
    lost at once. The end is the largest of the listing's end, ``need`` (an end the caller
    already knows, such as a stream's planned offset) and, with ``ask_primary``, the primary's
    write head. ``stores`` (the journal's fragment stores) are listed with ``list_store`` when
    a hole is in no member's listing; :func:`fill` waits for the pending holes a read touches."""
    frags = ordered(listed)
    head = max([need, *(f.spec.end for f in frags)])
    if ask_primary:
        head = max(head, primary_head(conns, journal) or 0)
    answered, asked = True, False
    if not frags and head > 0:
        # Nothing listed below a head: a fully pruned journal, or a member that joined before
        # anything was persisted. The members' own listings tell (no wait when none has any).
        more, answered = _members_listings(conns, journal, signature_ttl)
        frags, asked = ordered(more), True
    open_holes = [h for h in holes(frags, head) if not is_gone(h, frags)]
    if open_holes and not asked:
        log.info(
            "journal %r: offsets %s are not listed; asking the route's members", journal, offset_ranges(open_holes)
        )
        more, answered = _members_listings(conns, journal, signature_ttl)
        frags = ordered([*frags, *more])
        open_holes = [h for h in holes(frags, head) if not is_gone(h, frags)]
    endpoint = primary_endpoint(conns, journal)
    if not open_holes:
        return Settled(frags, head, endpoint)
    all_holes = tuple(holes(frags, head))
    if not answered:
        why = "a route member did not answer"
        return Settled(frags, head, endpoint, all_holes, tuple(open_holes), why)
    held, unknown = _held_in_stores(journal, open_holes, stores, frags, list_store)
    if unknown:
        why = f"the fragment store could not be listed here to tell whether it holds them ({unknown})"
        return Settled(frags, head, endpoint, all_holes, tuple(open_holes), why)
    pending = [p for h in open_holes for p in _covered(h, held)]
    lost = [p for h in open_holes for p in _uncovered(h, held)]
    if lost:
        log.info(
            "journal %r: offsets %s are in no route member's listing nor in the journal's stores: "
            "a read of them is data loss, without a wait",
            journal,
            offset_ranges(lost),
        )
    why = "its fragment store holds them and a broker lists them at its next store refresh"
    return Settled(frags, head, endpoint, all_holes, tuple(pending), why if pending else "")


def fill(
    conns: Connections,
    journal: str,
    settled: Settled,
    begin: int,
    end: int,
    *,
    refresh_interval: float = 0.0,
    signature_ttl: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Settled:
    """``settled`` once the pending holes that touch ``[begin, end)`` are filled, or the wait
    for them is over: about one fragment refresh interval (``refresh_interval``, the journal
    spec's; :data:`FILL_WAIT_WITHOUT_REFRESH` without one), at most ``broker_timeout``. The
    wait is logged (what is awaited, why, until when); holes still open at its end are left in
    :attr:`Settled.holes` for the caller to report as data loss. Other holes are never waited
    for."""
    global SETTLE_WAITS

    def awaited(frags: Sequence[ListedFragment]) -> list[tuple[int, int]]:
        still = [
            (max(b, p0), min(e, p1))
            for b, e in holes(frags, settled.head)
            for p0, p1 in settled.pending
            if max(b, p0) < min(e, p1)
        ]
        return [(b, e) for b, e in still if b < end and begin < e]

    waiting = awaited(settled.fragments)
    if not waiting:
        return settled
    budget = refresh_interval + REFRESH_SLACK if refresh_interval > 0 else FILL_WAIT_WITHOUT_REFRESH
    timeout = conns.config.broker_timeout
    if timeout:
        budget = min(budget, timeout)
    deadline = time.monotonic() + budget
    log.warning(
        "journal %r: waiting until %s (up to %gs) for offsets %s, which no broker lists yet: %s",
        journal,
        time.strftime("%H:%M:%S UTC", time.gmtime(time.time() + budget)),
        budget,
        offset_ranges(waiting),
        settled.why or "a route member may still fill them",
    )
    SETTLE_WAITS += 1
    testing.settle_waiting(journal, waiting)
    frags = settled.fragments
    attempt = 0
    while time.monotonic() + backoff(attempt) <= deadline:
        sleep(backoff(attempt))
        attempt += 1
        more, _ = _members_listings(conns, journal, signature_ttl)
        frags = ordered([*frags, *more])
        waiting = awaited(frags)
        if not waiting:
            log.warning("journal %r: the offsets awaited are listed now; reading on", journal)
            return dataclasses.replace(settled, fragments=frags, holes=tuple(holes(frags, settled.head)), pending=())
    log.warning("journal %r: offsets %s were still in no fragment after %gs", journal, offset_ranges(waiting), budget)
    return dataclasses.replace(settled, fragments=frags, holes=tuple(holes(frags, settled.head)), pending=())


def _held_in_stores(
    journal: str,
    open_holes: Sequence[tuple[int, int]],
    stores: Sequence[str],
    frags: Sequence[ListedFragment],
    list_store: StoreLister | None,
) -> tuple[list[tuple[int, int]], str]:
    """The spans of ``journal`` its fragment stores hold (``stores`` and the stores of listed
    fragments), and why a store could not be listed ('' when every one was)."""
    urls = list(dict.fromkeys([*stores, *(f.spec.backing_store for f in frags if f.spec.backing_store)]))
    if list_store is None or not urls:
        return [], "no store to list" if not urls else f"{redact_url(urls[0])}: no store access"
    held: list[tuple[int, int]] = []
    for url in urls:
        try:
            refs = list_store(url, journal)
        except Exception as e:  # noqa: BLE001 - any failure means: not known here
            return held, f"{redact_url(url)}: {type(e).__name__}: {redact_url(str(e))}"
        if refs is None:
            return held, f"{redact_url(url)}: a file:// store is listed only with store.fileRoot"
        held.extend((r.begin, r.end) for r in refs if any(r.begin < e and b < r.end for b, e in open_holes))
    return held, ""


def _covered(hole: tuple[int, int], spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of ``hole`` that ``spans`` cover, merged."""
    out: list[tuple[int, int]] = []
    for b, e in sorted(spans):
        b, e = max(b, hole[0]), min(e, hole[1])
        if b >= e:
            continue
        if out and b <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((b, e))
    return out


def _uncovered(hole: tuple[int, int], spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of ``hole`` that ``spans`` do not cover."""
    out, pos = [], hole[0]
    for b, e in _covered(hole, spans):
        if b > pos:
            out.append((pos, b))
        pos = e
    if pos < hole[1]:
        out.append((pos, hole[1]))
    return out


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
