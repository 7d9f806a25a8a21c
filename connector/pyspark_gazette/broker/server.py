"""The ``protocol.Journal`` gRPC servicer: List, Apply, Read, ListFragments, FragmentStoreHealth.

Append lives in :mod:`pyspark_gazette.broker.appender`. Status outcomes (journal not found,
offset not yet available, ...) are protocol responses; malformed requests are gRPC errors with
the reason. Gazette returns a request's ``Validate()`` error as a plain Go error, which gRPC
sends as UNKNOWN; so does this broker (verified against gazette v0.103.0, docs/protocol.md). With auth keys, every RPC is first verified
by :class:`~pyspark_gazette.broker.authz.Authorizer` (see there for the codes).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator

import grpc

from pyspark_gazette.broker import appender
from pyspark_gazette.broker.auth import APPEND, APPLY, LIST, READ, REPLICATE, Claims
from pyspark_gazette.broker.authz import Authorizer
from pyspark_gazette.broker.core import BrokerCore
from pyspark_gazette.broker.journal import Journal
from pyspark_gazette.broker.specs import SpecError, check_journal_field, journal_name, validate_apply
from pyspark_gazette.errors import FragmentError, FragmentNotFoundError, StoreError, StoreURLError, redact_url
from pyspark_gazette.fragments import FragmentRef, open_decompressor, parse_store_url
from pyspark_gazette.protocol import MAX_READ_CHUNK, pb, pb_grpc
from pyspark_gazette.protocol.labels import matches, validate_selector

log = logging.getLogger(__name__)

#: Journals per List response: Gazette v0.103.0 sends at most 1,000 (maxJournalsPerListResponse).
LIST_PAGE = 1000
DEFAULT_PAGE_LIMIT, MAX_PAGE_LIMIT = 1000, 10_000
READ_URL_TTL = 60
FULL = pb.JournalSpec.Suspend.FULL


class JournalServicer(pb_grpc.JournalServicer):
    def __init__(self, core: BrokerCore, authorizer: Authorizer | None = None):
        self.core = core
        self.headers = core.headers
        self.auth = authorizer or Authorizer(None)

    # ---------------------------------------------------------------- List

    def List(self, request: pb.ListRequest, context: grpc.ServicerContext) -> Iterator[pb.ListResponse]:
        claims = self.auth.verify(context, LIST, "List", ends_at_expiry=True)
        try:
            validate_selector(request.selector)
        except ValueError as e:
            context.abort(grpc.StatusCode.UNKNOWN, f"selector: {e}")
        if not request.watch:
            yield from self._snapshot(request.selector, claims)
            return
        core = self.core
        wake = lambda: core._notify_changed()  # noqa: E731
        context.add_callback(wake)
        min_revision = request.watch_resume.etcd.revision + 1 if request.HasField("watch_resume") else 0
        seen_revision = -1
        last_key = None
        expires = None if claims is None else claims.exp
        while True:
            with core.changed:
                while context.is_active() and not core.stopping and not _past(expires):
                    revision = core.registry.state.revision
                    if revision >= min_revision and revision != seen_revision:
                        break
                    core.changed.wait(_until(expires))
                if not context.is_active() or core.stopping or _past(expires):
                    return  # at the token's expiry the watch ends cleanly, as Gazette's
            revision, entries = core.registry.snapshot()
            seen_revision = revision
            matched = [e for e in entries if _listed(request.selector, claims, e.spec)]
            key = (len(matched), max((e.mod_revision for e in matched), default=0))
            if key == last_key:
                continue
            last_key = key
            yield from self._pages(matched, revision)
            yield pb.ListResponse()

    def _snapshot(self, selector: pb.LabelSelector, claims: Claims | None) -> Iterator[pb.ListResponse]:
        revision, entries = self.core.registry.snapshot()
        matched = [e for e in entries if _listed(selector, claims, e.spec)]
        yield from self._pages(matched, revision)

    def _pages(self, entries, revision: int) -> Iterator[pb.ListResponse]:
        route = self.headers.route()
        journals = [
            pb.ListResponse.Journal(
                spec=e.spec, mod_revision=e.mod_revision, create_revision=e.create_revision, route=route
            )
            for e in entries
        ]
        first = pb.ListResponse(
            status=pb.OK, header=self.headers.header(with_route=False, revision=revision), journals=journals[:LIST_PAGE]
        )
        yield first
        for i in range(LIST_PAGE, len(journals), LIST_PAGE):
            yield pb.ListResponse(journals=journals[i : i + LIST_PAGE])

    # ---------------------------------------------------------------- Apply

    def Apply(self, request: pb.ApplyRequest, context: grpc.ServicerContext) -> pb.ApplyResponse:
        claims = self.auth.verify(context, APPLY, "Apply")
        try:
            validate_apply(request)
        except SpecError as e:
            context.abort(grpc.StatusCode.UNKNOWN, str(e))
        for change in request.changes:
            for url in change.upsert.fragment.stores if change.HasField("upsert") else ():
                try:
                    self.core.stores.get(url)  # a file:// store must lie under the file root
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
        ok, revision = self.core.apply(list(request.changes))
        status = pb.OK if ok else pb.ETCD_TRANSACTION_FAILED
        return pb.ApplyResponse(status=status, header=self.headers.header(with_route=False, revision=revision))

    # ---------------------------------------------------------------- Append

    def Append(self, request_iterator, context: grpc.ServicerContext) -> pb.AppendResponse:
        claims = self.auth.verify(context, APPEND, "Append")
        covers = None if claims is None else (lambda j: claims.covers(j.name, j.spec.labels))
        return appender.serve_append(self.core, request_iterator, context, covers=covers)

    def Replicate(self, request_iterator, context):
        self.auth.verify(context, REPLICATE, "Replicate")
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "the embedded broker has no peers to replicate with")

    # ---------------------------------------------------------------- Read

    def _resolve(self, name: str, claims: Claims | None) -> tuple[Journal | None, pb.Status]:
        """The journal and the status to answer with; one the token does not cover is not found."""
        journal = self.core.journal(journal_name(name))
        if journal is None or (claims is not None and not claims.covers(journal.name, journal.spec.labels)):
            return None, pb.JOURNAL_NOT_FOUND
        if journal.spec.HasField("suspend") and journal.spec.suspend.level == FULL:
            return journal, pb.SUSPENDED
        return journal, pb.OK

    def Read(self, request: pb.ReadRequest, context: grpc.ServicerContext) -> Iterator[pb.ReadResponse]:
        claims = self.auth.verify(context, READ, "Read", ends_at_expiry=True)
        expires = None if claims is None else claims.exp
        if request.offset < -1:
            context.abort(grpc.StatusCode.UNKNOWN, f"invalid offset {request.offset} (expected >= -1)")
        if request.end_offset < 0 or (
            request.end_offset and request.offset != -1 and request.end_offset < request.offset
        ):
            context.abort(
                grpc.StatusCode.UNKNOWN, f"invalid end_offset {request.end_offset} (< offset {request.offset})"
            )
        check_journal_field(request.journal, context)
        journal, status = self._resolve(request.journal, claims)
        if journal is not None and status == pb.OK and not journal.readable:
            status = pb.NOT_ALLOWED
        if journal is None or status != pb.OK:
            yield pb.ReadResponse(status=status, header=self.headers.header())
            return
        journal.listed.wait()
        core = self.core

        def wake() -> None:
            with journal.cond:
                journal.cond.notify_all()

        context.add_callback(wake)
        offset = request.offset
        header: pb.Header | None = self.headers.header()
        hold = core.hold_dir is not None
        while True:
            with journal.cond:
                if offset == -1:
                    offset = journal.write_head()
                while True:
                    if core.stopping or journal.closed or not context.is_active():
                        return
                    result = journal.query(offset, request.begin_mod_time)
                    if result is not None or not request.block:
                        break
                    if _past(expires):
                        return  # waiting past the token's expiry: end cleanly, as Gazette's Read
                    journal.cond.wait(_until(expires))
                write_head = journal.write_head()
                spool = journal.spool_for(result.fragment) if result is not None else None
            if result is None:
                yield pb.ReadResponse(
                    status=pb.OFFSET_NOT_YET_AVAILABLE, header=header, offset=offset, write_head=write_head
                )
                return
            frag, offset = result.fragment, result.offset
            url = ""
            if frag.is_persisted:
                try:
                    url = self.core.stores.get(frag.backing_store).signed_url(frag, READ_URL_TTL)
                except Exception as e:
                    log.warning("signing %s failed: %s", frag.describe(), redact_url(str(e)))
            yield pb.ReadResponse(
                status=pb.OK,
                header=header,
                offset=offset,
                write_head=write_head,
                fragment=frag.to_proto(),
                fragment_url=url,
            )
            header = None
            if request.metadata_only or (frag.is_persisted and request.do_not_proxy):
                return
            if request.end_offset and offset >= request.end_offset:
                return
            stop = min(frag.end, request.end_offset) if request.end_offset else frag.end
            if frag.is_persisted:
                chunks = self._stream_remote(frag, offset, stop, context)
            else:
                chunks = _stream_local(spool, offset, stop)
            try:
                for chunk in chunks:
                    yield chunk
                    if hold:
                        hold = False
                        core.hold_for_test("read", journal.name)
            except FileNotFoundError:
                if frag.is_persisted:
                    raise
                continue  # persisted and removed meanwhile: query again
            offset = stop
            if request.end_offset and offset >= request.end_offset:
                return

    def _stream_remote(self, frag: FragmentRef, offset: int, stop: int, context) -> Iterator[pb.ReadResponse]:
        store = self.core.stores.get(frag.backing_store)
        try:
            raw = store.open_raw(frag)
        except FragmentNotFoundError as e:  # deleted or pruned under the index: it stays gone
            context.abort(grpc.StatusCode.DATA_LOSS, redact_url(f"opening fragment {frag.describe()}: {e}"))
        except Exception as e:
            context.abort(grpc.StatusCode.UNAVAILABLE, redact_url(f"opening fragment {frag.describe()}: {e}"))
        pos = offset
        try:
            try:
                reader = open_decompressor(frag.codec, raw)
                skip = offset - frag.begin
                while skip:
                    block = reader.read(min(skip, 1 << 20))
                    if not block:
                        break
                    skip -= len(block)
                while pos < stop and not skip:
                    data = reader.read(min(MAX_READ_CHUNK, stop - pos))
                    if not data:
                        break
                    yield pb.ReadResponse(offset=pos, content=data)
                    pos += len(data)
            except (FragmentError, EOFError) as e:
                # Corrupt stored bytes: DATA_LOSS, which readers do not retry (it never heals).
                what = f"reading fragment {frag.describe()} at offset {pos}: {type(e).__name__}: {e}"
                context.abort(grpc.StatusCode.DATA_LOSS, redact_url(what))
            except (StoreError, OSError) as e:  # the store failed: worth a retry
                what = f"reading fragment {frag.describe()} at offset {pos}: {type(e).__name__}: {e}"
                context.abort(grpc.StatusCode.UNAVAILABLE, redact_url(what))
            if pos < stop:
                context.abort(grpc.StatusCode.DATA_LOSS, f"fragment {frag.describe()} ended at {pos}, before {stop}")
        finally:
            raw.close()

    # ---------------------------------------------------------------- ListFragments

    def ListFragments(self, request: pb.FragmentsRequest, context: grpc.ServicerContext) -> pb.FragmentsResponse:
        claims = self.auth.verify(context, READ, "ListFragments")
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
        journal, status = self._resolve(request.journal, claims)
        if journal is None or status != pb.OK:
            return pb.FragmentsResponse(status=status, header=self.headers.header())
        journal.listed.wait()
        with journal.cond:
            fragments = journal.index.all(journal.local_refs())
        ttl = request.signatureTTL.seconds + request.signatureTTL.nanos / 1e9 if request.HasField("signatureTTL") else 0
        out: list[pb.FragmentsResponse._Fragment] = []
        next_token = 0
        scan = [f for f in fragments if f.begin >= request.next_page_token]
        for f in scan:
            if len(out) == limit:
                next_token = f.begin
                break
            if f.mod_time != 0 and f.mod_time < request.begin_mod_time:
                continue
            if request.end_mod_time != 0 and (f.mod_time == 0 or f.mod_time > request.end_mod_time):
                continue
            url = ""
            if ttl > 0 and f.is_persisted:
                url = self.core.stores.get(f.backing_store).signed_url(f, max(1, int(ttl)))
            out.append(pb.FragmentsResponse._Fragment(spec=f.to_proto(), signed_url=url))
        return pb.FragmentsResponse(
            status=pb.OK, header=self.headers.header(), fragments=out, next_page_token=next_token
        )

    # ---------------------------------------------------------------- FragmentStoreHealth

    def FragmentStoreHealth(self, request: pb.FragmentStoreHealthRequest, context) -> pb.FragmentStoreHealthResponse:
        self.auth.verify(context, READ, "FragmentStoreHealth")
        try:
            parse_store_url(request.fragment_store)
        except ValueError as e:
            context.abort(grpc.StatusCode.UNKNOWN, redact_url(f"fragment_store: {e}"))
        error = self.core.stores.health(request.fragment_store)
        status = pb.FRAGMENT_STORE_UNHEALTHY if error else pb.OK
        return pb.FragmentStoreHealthResponse(
            status=status, header=self.headers.header(with_route=False), store_health_error=error
        )


def _listed(selector: pb.LabelSelector, claims: Claims | None, spec: pb.JournalSpec) -> bool:
    """List's filter: the request's selector, intersected with the token's (as Gazette)."""
    if not matches(selector, spec.labels, journal_name=spec.name):
        return False
    return claims is None or claims.covers(spec.name, spec.labels)


def _stream_local(spool, offset: int, stop: int) -> Iterator[pb.ReadResponse]:
    """Chunks of a local spool's content file, read with pread (raises FileNotFoundError if gone)."""
    fd = os.open(spool.data_path, os.O_RDONLY)
    try:
        pos = offset
        while pos < stop:
            data = os.pread(fd, min(MAX_READ_CHUNK, stop - pos), pos - spool.begin)
            if not data:
                raise OSError(f"spool {spool.data_path} is shorter than its durable end {stop}")
            yield pb.ReadResponse(offset=pos, content=data)
            pos += len(data)
    finally:
        os.close(fd)


def _past(deadline: float | None) -> bool:
    """Whether a token's expiry (``None``: no token) has passed."""
    return deadline is not None and time.time() >= deadline


def _until(deadline: float | None) -> float | None:
    """How long a wait may last before a token's expiry (``None``: unbounded)."""
    return None if deadline is None else max(0.0, deadline - time.time())
