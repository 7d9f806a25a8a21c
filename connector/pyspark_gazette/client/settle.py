"""Consistent snapshots of a journal through broker failover: the end a read plans to, and the
holes of a fragment listing that are waited out rather than reported as data loss.

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
  index lets a reader jump a hole). Every other hole is **transient**: a route member holds it
  in its spool, or has persisted it and the answering broker has not listed it yet;
* :func:`settle` fills transient holes: it asks every route member for its own listing
  (``do_not_proxy``, every page: :func:`member_listing`) and merges them, then lists again
  with Gazette's backoff (:func:`~pyspark_gazette.client.conn.backoff`) until they are
  covered or ``broker_timeout`` has passed. Holes that outlast it are returned for the
  caller to report as data loss.

Retried: the listings above (each with the retries of
:func:`~pyspark_gazette.client.list_apply.list_fragments`). Surfaced: the listing's errors, and
the holes still open at the deadline.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence

import grpc

from pyspark_gazette import testing
from pyspark_gazette.client.conn import Connections, backoff
from pyspark_gazette.client.list_apply import ListedFragment, list_fragments
from pyspark_gazette.protocol import pb

log = logging.getLogger(__name__)

#: A hole followed by a fragment persisted longer ago than this is gone (Gazette's
#: ``offsetJumpAgeThreshold`` in broker/fragment/index.go: 6 hours).
HOLE_JUMP_AGE = 6 * 3600

#: Waits of :func:`settle` in this process (holes that were not filled at the first listing).
SETTLE_WAITS = 0


@dataclasses.dataclass(frozen=True)
class Settled:
    """A journal's fragments (ordered by begin), the end a read plans to, the endpoint of the
    broker to read unpersisted content through ('' when unknown), and the holes still open."""

    fragments: tuple[ListedFragment, ...]
    head: int
    endpoint: str = ""
    holes: tuple[tuple[int, int], ...] = ()


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
    request = pb.ReadRequest(journal=journal, offset=-1, metadata_only=True)
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


def settle(
    conns: Connections,
    journal: str,
    listed: Sequence[ListedFragment],
    *,
    need: int = 0,
    signature_ttl: float | None = None,
    ask_primary: bool = True,
    sleep: Callable[[float], None] = time.sleep,
) -> Settled:
    """``listed`` (a listing of ``journal``) with its transient holes below the planned end
    filled (module docstring). The end is the largest of the listing's end, ``need`` (an end
    the caller already knows, such as a stream's planned offset) and, with ``ask_primary``, the
    primary's write head."""
    global SETTLE_WAITS
    frags = ordered(listed)
    head = max([need, *(f.spec.end for f in frags)])
    if ask_primary:
        head = max(head, primary_head(conns, journal) or 0)
    if not frags and head > 0:
        # Nothing listed below a head: a fully pruned journal, or a member that joined before
        # anything was persisted. The members' own listings tell (no wait when none has any).
        frags = ordered(_members_listings(conns, journal, signature_ttl))
    open_holes = [h for h in holes(frags, head) if not is_gone(h, frags)]
    if not open_holes:
        return Settled(frags, head, primary_endpoint(conns, journal))
    budget = conns.config.broker_timeout
    deadline = time.monotonic() + (budget if budget is not None else 300.0)
    log.info("journal %r: offsets %s are not listed yet; asking the route's members", journal, open_holes)
    SETTLE_WAITS += 1
    attempt = -1
    while True:
        frags = ordered([*frags, *_members_listings(conns, journal, signature_ttl)])
        open_holes = [h for h in holes(frags, head) if not is_gone(h, frags)]
        if not open_holes:
            return Settled(frags, head, primary_endpoint(conns, journal))
        if attempt < 0:
            testing.settle_waiting(journal, open_holes)
        if time.monotonic() + backoff(attempt + 1) > deadline:
            log.warning(
                "journal %r: offsets %s were still in no fragment after broker.timeout (%gs)",
                journal,
                open_holes,
                budget or 300.0,
            )
            return Settled(frags, head, primary_endpoint(conns, journal), tuple(open_holes))
        attempt += 1
        sleep(backoff(attempt))
        frags = ordered([*frags, *list_fragments(conns, journal, signature_ttl=signature_ttl)])


#: Fragments per page of a member's own listing (:func:`member_listing`; 0: the broker's
#: default, 1,000 on Gazette).
MEMBER_PAGE_LIMIT = 0


def _members_listings(conns: Connections, journal: str, signature_ttl: float | None) -> list[ListedFragment]:
    """Every route member's own listing (:func:`member_listing`), merged; members that fail are
    left out (the listing through the route, with its retries, is always included)."""
    out = list(list_fragments(conns, journal, signature_ttl=signature_ttl))
    route = conns.route(journal)
    for endpoint in list(route.endpoints) if route is not None else []:
        out.extend(member_listing(conns, journal, endpoint, signature_ttl))
    return out


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
            return out
        if resp.status != pb.OK:
            log.debug("ListFragments of %r at %s: %s", journal, endpoint, pb.Status.Name(resp.status))
            return out
        out.extend(ListedFragment(f.spec, f.signed_url) for f in resp.fragments)
        if not resp.next_page_token or resp.next_page_token == request.next_page_token:
            return out
        request.next_page_token = resp.next_page_token
