"""The List and Apply RPCs: journal specs out (snapshots and watches) and in (atomic changes)."""

from __future__ import annotations

from collections.abc import Iterator

import grpc

from pyspark_gazette.broker.authz import expired, time_left
from pyspark_gazette.broker.core import BrokerCore
from pyspark_gazette.broker.specs import SpecError, validate_apply
from pyspark_gazette.errors import StoreURLError
from pyspark_gazette.protocol import pb
from pyspark_gazette.protocol.auth import Claims
from pyspark_gazette.protocol.labels import META_NAME, META_PREFIX, matches, validate_selector

#: Journals per List response: Gazette v0.103.0 sends at most 1,000 (maxJournalsPerListResponse).
LIST_PAGE = 1000


def serve_list(
    core: BrokerCore, request: pb.ListRequest, context: grpc.ServicerContext, claims: Claims | None
) -> Iterator[pb.ListResponse]:
    """List: one snapshot of the matching journals, or (``watch``) one after every change. With
    ``watch_resume``, as Gazette, not before the revision after its own (a unary List too: it
    waits for it until the call's deadline)."""
    try:
        validate_selector(request.selector)
    except ValueError as e:
        context.abort(grpc.StatusCode.UNKNOWN, f"selector: {e}")
    min_revision = request.watch_resume.etcd.revision + 1 if request.HasField("watch_resume") else 0
    wake = lambda: core._notify_changed()  # noqa: E731
    if not request.watch:
        if min_revision > core.registry.state.revision:
            context.add_callback(wake)
            expires = None if claims is None else claims.exp
            with core.changed:
                while (
                    context.is_active()
                    and not core.stopping
                    and not expired(expires)
                    and core.registry.state.revision < min_revision
                ):
                    core.changed.wait(time_left(expires))
            if core.registry.state.revision < min_revision:
                return  # cancelled, past its deadline, or the broker stopping
        yield from _snapshot(core, request.selector, claims)
        return
    context.add_callback(wake)
    seen_revision = -1
    last_key = None
    expires = None if claims is None else claims.exp
    while True:
        with core.changed:
            while context.is_active() and not core.stopping and not expired(expires):
                revision = core.registry.state.revision
                if revision >= min_revision and revision != seen_revision:
                    break
                core.changed.wait(time_left(expires))
            if not context.is_active() or core.stopping or expired(expires):
                return  # at the token's expiry the watch ends cleanly, as Gazette's
        revision, entries = core.registry.snapshot()
        seen_revision = revision
        matched = _matched(entries, request.selector, claims)
        key = (len(matched), max((e.mod_revision for e in matched), default=0))
        if key == last_key:
            continue
        last_key = key
        yield from _pages(core, matched, revision)
        yield pb.ListResponse()


def _snapshot(core: BrokerCore, selector: pb.LabelSelector, claims: Claims | None) -> Iterator[pb.ListResponse]:
    revision, entries = core.registry.snapshot()
    yield from _pages(core, _matched(entries, selector, claims), revision)


def _matched(entries, selector: pb.LabelSelector, claims: Claims | None) -> list:
    """The entries ``selector`` (and the token) lists. A selector that names its journals
    (``name`` values, as a read of named journals sends) is matched against those alone: a
    List of a few named journals does not match the selector against every journal."""
    named = _names(selector)
    if named is not None:
        entries = [e for e in entries if e.spec.name in named]
    return [e for e in entries if _listed(selector, claims, e.spec)]


def _names(selector: pb.LabelSelector) -> set[str] | None:
    """The only journal names ``selector`` can select (its exact ``name`` includes), or None. A
    ``prefix`` include is another value of ``name`` (a name prefix, as Gazette rewrites it), so
    with one the selector names no journals exactly."""
    named = [label for label in selector.include.labels if label.name in (META_NAME, META_PREFIX)]
    if not named or any(label.name == META_PREFIX or label.prefix or not label.value for label in named):
        return None
    return {label.value for label in named}


def _pages(core: BrokerCore, entries, revision: int) -> Iterator[pb.ListResponse]:
    route = core.headers.route()
    journals = [
        pb.ListResponse.Journal(
            spec=e.spec, mod_revision=e.mod_revision, create_revision=e.create_revision, route=route
        )
        for e in entries
    ]
    first = pb.ListResponse(
        status=pb.OK, header=core.headers.header(with_route=False, revision=revision), journals=journals[:LIST_PAGE]
    )
    yield first
    for i in range(LIST_PAGE, len(journals), LIST_PAGE):
        yield pb.ListResponse(journals=journals[i : i + LIST_PAGE])


def _listed(selector: pb.LabelSelector, claims: Claims | None, spec: pb.JournalSpec) -> bool:
    """List's filter: the request's selector, intersected with the token's (as Gazette)."""
    if not matches(selector, spec.labels, journal_name=spec.name):
        return False
    return claims is None or claims.covers(spec.name, spec.labels)


def serve_apply(
    core: BrokerCore, request: pb.ApplyRequest, context: grpc.ServicerContext, claims: Claims | None
) -> pb.ApplyResponse:
    """Apply: validate the changes, check the token covers each journal, apply them atomically."""
    try:
        validate_apply(request)
    except SpecError as e:
        context.abort(grpc.StatusCode.UNKNOWN, str(e))
    for change in request.changes:
        for url in change.upsert.fragment.stores if change.HasField("upsert") else ():
            try:
                core.stores.get(url)  # a file:// store must lie under the file root
            except StoreURLError as e:
                context.abort(grpc.StatusCode.UNKNOWN, f"journal {change.upsert.name!r}: {e}")
    if claims is not None:
        for change in request.changes:
            if change.HasField("upsert"):
                name, covered = change.upsert.name, claims.covers(change.upsert.name, change.upsert.labels)
            else:
                name, covered = change.delete, claims.covers(change.delete)
            if not covered:
                context.abort(
                    grpc.StatusCode.UNAUTHENTICATED,
                    f"Apply: not authorized to {name!r}: the token's selector does not cover it",
                )
    ok, revision = core.apply(list(request.changes))
    status = pb.OK if ok else pb.ETCD_TRANSACTION_FAILED
    return pb.ApplyResponse(status=status, header=core.headers.header(with_route=False, revision=revision))
