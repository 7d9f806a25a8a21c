"""The ListFragments RPC: pages of a journal's fragment index, with signed URLs on request."""

from __future__ import annotations

import bisect
import itertools
import operator

import grpc

from pyspark_gazette.broker.core import BrokerCore
from pyspark_gazette.broker.rpc.read import resolve
from pyspark_gazette.broker.specs import check_journal_field
from pyspark_gazette.protocol import pb
from pyspark_gazette.protocol.auth import Claims

DEFAULT_PAGE_LIMIT, MAX_PAGE_LIMIT = 1000, 10_000
_begin = operator.attrgetter("begin")


def serve_list_fragments(
    core: BrokerCore, request: pb.FragmentsRequest, context: grpc.ServicerContext, claims: Claims | None
) -> pb.FragmentsResponse:
    """ListFragments: a page of the journal's fragment index, with signed URLs on request."""
    limit = request.page_limit or DEFAULT_PAGE_LIMIT
    if not 0 < limit <= MAX_PAGE_LIMIT:
        context.abort(
            grpc.StatusCode.UNKNOWN,
            f"invalid page_limit {request.page_limit} (expected 0..{MAX_PAGE_LIMIT})",
        )
    if request.next_page_token < 0:
        context.abort(grpc.StatusCode.UNKNOWN, f"invalid next_page_token {request.next_page_token}")
    if request.end_mod_time and request.end_mod_time < request.begin_mod_time:
        context.abort(grpc.StatusCode.UNKNOWN, "invalid end_mod_time (< begin_mod_time)")
    if request.HasField("signatureTTL") and (request.signatureTTL.seconds, request.signatureTTL.nanos) <= (0, 0):
        context.abort(grpc.StatusCode.UNKNOWN, "invalid signatureTTL (must be > 0s)")
    check_journal_field(request.journal, context)
    journal, status = resolve(core, request.journal, claims)
    if journal is None or status != pb.OK:
        return pb.FragmentsResponse(status=status, header=core.headers.header())
    journal.listed.wait()
    with journal.cond:
        fragments = journal.index.all(journal.local_refs())
    ttl = request.signatureTTL.seconds + request.signatureTTL.nanos / 1e9 if request.HasField("signatureTTL") else 0
    out: list[pb.FragmentsResponse._Fragment] = []
    next_token = 0
    # The page starts at the first fragment beginning at or after the token (the cover set is
    # ordered by begin): found by bisection, so that each page costs its own length, not the index's.
    first = bisect.bisect_left(fragments, request.next_page_token, key=_begin)
    for f in itertools.islice(fragments, first, None):
        if len(out) == limit:
            next_token = f.begin
            break
        if f.mod_time != 0 and f.mod_time < request.begin_mod_time:
            continue
        if request.end_mod_time != 0 and (f.mod_time == 0 or f.mod_time > request.end_mod_time):
            continue
        url = ""
        if ttl > 0 and f.is_persisted:
            url = core.stores.get(f.backing_store).signed_url(f, max(1, int(ttl)))
        out.append(pb.FragmentsResponse._Fragment(spec=f.to_proto(), signed_url=url))
    return pb.FragmentsResponse(status=pb.OK, header=core.headers.header(), fragments=out, next_page_token=next_token)
