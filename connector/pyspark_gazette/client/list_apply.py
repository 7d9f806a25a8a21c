"""List, Apply and ListFragments.

``list_journals`` consumes the List stream (v0.100+ brokers split a listing into messages of up to
1,000 journals, Gazette's main after v0.103.0 of 25; older brokers answer with a single message,
which reads the same way).
``apply`` / ``apply_in_batches`` send journal spec changes; ``list_fragments`` pages through
a journal's fragments until the broker's ``next_page_token`` is 0.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import grpc

from pyspark_gazette.client.conn import CONNECT_ATTEMPTS, Connections, backoff, translate_rpc_error
from pyspark_gazette.errors import (
    EtcdTransactionFailedError,
    GazetteError,
    JournalNotFoundError,
    ProtocolError,
    SpecRefusedError,
    TransportError,
    error_for_status,
)
from pyspark_gazette.protocol import pb
from pyspark_gazette.protocol.journal_names import base_journal
from pyspark_gazette.protocol.labels import names_selector, to_selector

log = logging.getLogger(__name__)

#: Etcd's limit of operations in one transaction; ``apply_in_batches`` stays below it.
MAX_CHANGES_PER_APPLY = 128
#: ListFragments calls in flight at once in :func:`list_fragments_many`.
LIST_FRAGMENTS_WINDOW = 128


@dataclasses.dataclass(frozen=True)
class JournalInfo:
    """One journal of a listing: its spec, Etcd revisions and current route."""

    spec: pb.JournalSpec
    mod_revision: int
    create_revision: int
    route: pb.Route

    @property
    def name(self) -> str:
        return self.spec.name

    def labels(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for label in self.spec.labels.labels:
            out.setdefault(label.name, []).append(label.value)
        return out

    def label(self, name: str, default: str = "") -> str:
        for label in self.spec.labels.labels:
            if label.name == name:
                return label.value
        return default


def list_journals(
    conns: Connections,
    selector: str | pb.LabelSelector | None = None,
    *,
    attempts: int | None = CONNECT_ATTEMPTS,
    what: str = "List",
) -> list[JournalInfo]:
    """All journals matching ``selector`` (label-selector syntax or a ``LabelSelector``).

    gRPC ``UNAVAILABLE`` (a broker restarting) is retried ``attempts`` times with the usual
    backoff; other errors are raised. ``what`` names the call when nothing answers.
    """
    return conns.retry_unavailable(what, lambda: _list_once(conns, selector), attempts=attempts)


def _list_once(conns: Connections, selector: str | pb.LabelSelector | None) -> list[JournalInfo]:
    request = pb.ListRequest(selector=to_selector(selector))
    out: list[JournalInfo] = []
    endpoint = conns.address
    try:
        stream = conns.stub(endpoint).List(request, **conns.call_kwargs())
        for i, resp in enumerate(stream):
            if i == 0:
                if resp.status != pb.OK:
                    raise error_for_status(resp.status, "List failed", response=resp)
                conns.saw_header(resp.header)
            elif not resp.journals:
                raise ProtocolError("List: empty continuation message outside of watch mode")
            for j in resp.journals:
                info = JournalInfo(j.spec, j.mod_revision, j.create_revision, j.route)
                out.append(info)
                if j.route.endpoints:
                    conns.update_route(j.spec.name, pb.Header(route=j.route))
    except grpc.RpcError as e:
        if _unavailable(e):
            conns.endpoint_failed(None, endpoint)  # the next bootstrap address is asked next
        raise translate_rpc_error(e, "List") from e
    return out


def watch_journals(conns: Connections, selector: str | pb.LabelSelector | None = None) -> Iterator[list[JournalInfo]]:
    """Yield a full snapshot of matching journals each time the set changes (List watch mode).

    The stream stays open; close the generator to end it. :class:`JournalListWatch` keeps the
    latest snapshot on a thread of its own instead.
    """
    request = pb.ListRequest(selector=to_selector(selector), watch=True)
    try:
        stream = conns.stub().List(request, **_watch_kwargs(conns))
        try:
            for snapshot, _ in _snapshots(conns, stream):
                yield snapshot
        finally:
            stream.cancel()
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.CANCELLED:
            raise translate_rpc_error(e, "List watch") from e


def _watch_kwargs(conns: Connections) -> dict:
    return {k: v for k, v in conns.call_kwargs().items() if k != "timeout"}  # a watch has no deadline


def _snapshots(
    conns: Connections, stream: Iterable[pb.ListResponse], *, routes: bool = False
) -> Iterator[tuple[list[JournalInfo], int]]:
    """The snapshots of a List watch ``stream``, each with the Etcd revision of its header.
    ``routes``: the client learns each journal's route from them too."""
    snapshot: list[JournalInfo] = []
    revision, first = 0, True
    for resp in stream:
        if _is_delimiter(resp):
            yield snapshot, revision
            snapshot, first = [], True
            continue
        if first:
            if resp.status != pb.OK:
                raise error_for_status(resp.status, "List watch failed", response=resp)
            conns.saw_header(resp.header)
            revision, first = resp.header.etcd.revision, False
        for j in resp.journals:
            snapshot.append(JournalInfo(j.spec, j.mod_revision, j.create_revision, j.route))
            if routes and j.route.endpoints:
                conns.update_route(j.spec.name, pb.Header(route=j.route))


class JournalListWatch:
    """The journals a selector matches, kept current by a List watch on a thread of its own.

    :meth:`listing` is the latest snapshot, or ``None`` before the first one arrives and while the
    watch is down (a broker restarting, the stream ended at an auth token's ``exp``): callers List
    then. A broken watch is opened again after :func:`backoff`; a snapshot older (by Etcd revision)
    than one already taken, from a broker that lags another, is not taken. Thread-safe;
    :meth:`close` ends it.

    A stream over many journals lists them once per trigger otherwise: at 10,000 journals that
    one List is most of ``latestOffset`` (docs/scale.md).
    """

    def __init__(self, conns: Connections, selector: str | pb.LabelSelector | None = None):
        self._conns = conns
        self._request = pb.ListRequest(selector=to_selector(selector), watch=True)
        self._cond = threading.Condition()
        self._listing: list[JournalInfo] | None = None
        self._revision = 0
        self._call: Any = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="gazette-list-watch", daemon=True)
        self._thread.start()

    def __enter__(self) -> JournalListWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def listing(self) -> list[JournalInfo] | None:
        """The latest snapshot (``None`` while there is none: see the class docstring)."""
        with self._cond:
            return self._listing

    def wait(self, ready: Callable[[list[JournalInfo]], bool], timeout: float) -> list[JournalInfo] | None:
        """The first snapshot for which ``ready`` is true, waiting up to ``timeout`` seconds for
        one; ``None`` at the timeout or when closed."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or (self._listing is not None and ready(self._listing)), timeout)
            return self._listing if self._listing is not None and ready(self._listing) else None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            call, self._listing = self._call, None
            self._cond.notify_all()
        if call is not None:
            call.cancel()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=30)

    def _run(self) -> None:
        attempt = 0
        while True:
            endpoint = self._conns.address
            with self._cond:
                if self._closed:
                    return
                call = self._call = self._conns.stub(endpoint).List(self._request, **_watch_kwargs(self._conns))
            try:
                for snapshot, revision in _snapshots(self._conns, call, routes=True):
                    with self._cond:
                        if revision >= self._revision:
                            self._listing, self._revision = snapshot, revision
                            self._cond.notify_all()
                    attempt = 0
                log.debug("List watch ended by the broker; opening it again")
            except grpc.RpcError as e:
                if _unavailable(e):
                    self._conns.endpoint_failed(None, endpoint)  # the next bootstrap address next
                log.debug("List watch failed: %s", e.code())
            except GazetteError as e:
                log.debug("List watch failed: %s", e)
            finally:
                call.cancel()
            with self._cond:
                self._call, self._listing = None, None
                self._cond.notify_all()
                if not self._closed:
                    self._cond.wait(backoff(min(attempt, 4)))
            attempt += 1


def _is_delimiter(resp: pb.ListResponse) -> bool:
    # The end of a snapshot is an empty ListResponse; a snapshot's first message always has a
    # header with a non-zero revision, even when it lists no journals.
    return not resp.journals and resp.header.etcd.revision == 0


def get_journals(conns: Connections, journals: Iterable[str]) -> dict[str, JournalInfo]:
    """The spec and route of each named journal that exists, by name, from one List (a journal
    missing from the answer does not exist, or is outside an auth token's selector)."""
    selector = names_selector(journals)
    names = {label.value for label in selector.include.labels}
    if not names:
        return {}
    what = f"List of journal {next(iter(names))!r}" if len(names) == 1 else f"List of {len(names)} journals"
    return {i.name: i for i in list_journals(conns, selector, what=what) if i.name in names}


def get_journal(conns: Connections, journal: str) -> JournalInfo:
    """The journal's spec and route; :class:`JournalNotFoundError` when it does not exist."""
    name = base_journal(journal)
    sel = names_selector([name])
    for info in list_journals(conns, sel, what=f"List of journal {name!r}"):
        if info.name == name:
            return info
    raise JournalNotFoundError(journal=name)


@dataclasses.dataclass(frozen=True)
class Change:
    """One Apply change: an upsert of ``spec`` or a delete of ``delete``.

    ``expect_mod_revision``: 0 = must not exist (create), > 0 = must match, -1 = no check.
    """

    expect_mod_revision: int = 0
    upsert: pb.JournalSpec | None = None
    delete: str | None = None

    def to_proto(self) -> pb.ApplyRequest.Change:
        if (self.upsert is None) == (self.delete is None):
            raise ValueError("a Change needs exactly one of upsert or delete")
        if self.delete is not None:
            return pb.ApplyRequest.Change(expect_mod_revision=self.expect_mod_revision, delete=self.delete)
        return pb.ApplyRequest.Change(expect_mod_revision=self.expect_mod_revision, upsert=self.upsert)


def apply(conns: Connections, changes: Sequence[Change | pb.ApplyRequest.Change]) -> int:
    """Apply ``changes`` in one transaction; returns the Etcd revision of the transaction.

    A change the broker refuses as invalid (its spec, a delete's name) is a
    :class:`~pyspark_gazette.errors.SpecRefusedError` naming the journal and the broker's reason
    (both brokers send a request's validation error as gRPC ``UNKNOWN``). An ``expect_mod_revision``
    that does not match is :class:`EtcdTransactionFailedError`, naming the journals whose
    revision is not the expected one (looked up after the failure).
    """
    request = pb.ApplyRequest(changes=[c.to_proto() if isinstance(c, Change) else c for c in changes])
    try:
        resp: pb.ApplyResponse = conns.unary("Apply", "Apply", request)
    except TransportError as e:
        refused = _refusal(request, e)
        if refused is None:
            raise
        raise refused from None
    if resp.status == pb.ETCD_TRANSACTION_FAILED:
        raise EtcdTransactionFailedError(_stale_revisions(conns, request), response=resp)
    if resp.status != pb.OK:
        raise error_for_status(resp.status, "Apply failed", response=resp)
    conns.saw_header(resp.header, transaction=True)
    return resp.header.etcd.revision


#: Texts of Apply failures that are not about the request: Gazette returns Etcd's own errors
#: and an ended context as gRPC UNKNOWN, as it does a request's validation error.
_NOT_THE_REQUEST = ("etcdserver:", "context canceled", "context deadline exceeded", "rpc error:")
_CHANGE_INDEX = re.compile(r"^changes\[(\d+)\]", re.IGNORECASE)  # Gazette: "Changes[3].Upsert..."


def _change_name(change: pb.ApplyRequest.Change) -> str:
    return change.upsert.name if change.HasField("upsert") else change.delete


def _refusal(request: pb.ApplyRequest, err: TransportError) -> SpecRefusedError | None:
    """The broker's refusal of an invalid change as a SpecRefusedError, or None for other failures."""
    if type(err) is not TransportError or err.code not in ("UNKNOWN", "INVALID_ARGUMENT") or not err.details:
        return None  # auth refusals, timeouts and transport failures say what they are
    if err.details.startswith(_NOT_THE_REQUEST):
        return None
    changes = list(request.changes)
    index = _CHANGE_INDEX.match(err.details)
    if index and int(index.group(1)) < len(changes):
        change = changes[int(index.group(1))]
    elif len(changes) == 1:
        change = changes[0]
    else:  # the embedded broker names the journal in its text
        named = [c for c in changes if _change_name(c) and repr(_change_name(c)) in err.details]
        change = named[0] if named else None
    if change is None:
        return SpecRefusedError("", err.details, changes=len(changes))
    return SpecRefusedError(_change_name(change), err.details, delete=not change.HasField("upsert"))


def _stale_revisions(conns: Connections, request: pb.ApplyRequest) -> str:
    """Which changes' ``expect_mod_revision`` did not match: a message naming their journals."""
    expected = {_change_name(c): c.expect_mod_revision for c in request.changes if c.expect_mod_revision != -1}
    generic = "a journal's revision is not what its change expected (created, changed or deleted since)"
    if not expected:
        return generic
    try:
        current = {info.name: info.mod_revision for info in list_journals(conns, names_selector(expected))}
    except GazetteError:
        return generic
    stale = [(name, rev, current.get(name, 0)) for name, rev in expected.items() if current.get(name, 0) != rev]
    if not stale:
        return "a journal's revision was not what its change expected when applied (it is now: retry)"
    said = "; ".join(
        f"journal {name!r} "
        + ("does not exist" if now == 0 else f"is at revision {now}")
        + (", the change expected it not to exist" if rev == 0 else f", the change expected revision {rev}")
        for name, rev, now in stale
    )
    return f"{said} (created, changed or deleted since)"


def apply_in_batches(conns: Connections, changes: Sequence[Change], size: int = MAX_CHANGES_PER_APPLY) -> list[int]:
    """Apply ``changes`` in transactions of at most ``size`` changes each.

    A failure stops at the failing batch: earlier batches stay applied (as in Gazette's
    ``ApplyJournalsInBatches``). Returns the revision of each applied batch.
    """
    if size <= 0:
        raise ValueError("batch size must be positive")
    return [apply(conns, changes[i : i + size]) for i in range(0, len(changes), size)]


@dataclasses.dataclass(frozen=True)
class ListedFragment:
    """A fragment of a ListFragments response and its signed URL ('' unless requested)."""

    spec: pb.Fragment
    signed_url: str = dataclasses.field(default="", repr=False)
    #: Found by a listing of the journal's fragment store, not in any broker's listing (yet): a
    #: read plans it from the store directly (:mod:`pyspark_gazette.client.settle`).
    stored: bool = False


#: Fragments per ListFragments page of a whole listing without signed URLs (Gazette's maximum).
WHOLE_LISTING_PAGE = 10_000


def list_fragments(
    conns: Connections,
    journal: str,
    *,
    begin_mod_time: int = 0,
    end_mod_time: int = 0,
    signature_ttl: float | None = None,
    page_limit: int = 0,
    do_not_proxy: bool = False,
    start: int = 0,
    attempts: int | None = CONNECT_ATTEMPTS,
) -> list[ListedFragment]:
    """Every fragment of ``journal`` in ascending ``begin`` order, following all pages; with
    ``start``, those beginning at or after it (Gazette's page token is a begin offset).

    Mod-time filters behave exactly as the broker codes them (facts sheet 3.3): fragments with
    ``mod_time < begin_mod_time`` are dropped, and when ``end_mod_time`` is set, unpersisted
    fragments and those with ``mod_time > end_mod_time`` are dropped.
    ``signature_ttl`` (seconds) asks for a signed GET URL per persisted fragment.
    ``attempts``: as :meth:`~pyspark_gazette.client.conn.Connections.retry_unavailable`'s (None:
    a broker restarting is waited for ``broker_timeout``).
    """
    if not page_limit and not signature_ttl:
        # A whole listing in pages of Gazette's largest (10,000), not its default 1,000: a
        # journal of many fragments costs a tenth of the round trips. Signed URLs make each
        # fragment several times larger, so those listings keep the default page.
        page_limit = WHOLE_LISTING_PAGE
    return list(
        iter_fragments(
            conns,
            journal,
            begin_mod_time=begin_mod_time,
            end_mod_time=end_mod_time,
            signature_ttl=signature_ttl,
            page_limit=page_limit,
            do_not_proxy=do_not_proxy,
            start=start,
            attempts=attempts,
        )
    )


def iter_fragments(
    conns: Connections,
    journal: str,
    *,
    begin_mod_time: int = 0,
    end_mod_time: int = 0,
    signature_ttl: float | None = None,
    page_limit: int = 0,
    do_not_proxy: bool = False,
    start: int = 0,
    attempts: int | None = CONNECT_ATTEMPTS,
) -> Iterable[ListedFragment]:
    """Like :func:`list_fragments`, one page at a time."""
    if not 0 <= page_limit <= 10_000:
        raise ValueError(f"page_limit must be 0..10000, not {page_limit}")
    request = pb.FragmentsRequest(
        journal=journal,
        begin_mod_time=begin_mod_time,
        end_mod_time=end_mod_time,
        page_limit=page_limit,
        do_not_proxy=do_not_proxy,
        next_page_token=start,
    )
    if signature_ttl:
        request.signatureTTL.seconds = int(signature_ttl)
        request.signatureTTL.nanos = int(round((signature_ttl - int(signature_ttl)) * 1e9))

    def once() -> pb.FragmentsResponse:
        # A route member that stopped answering (a killed broker) is forgotten: the bootstrap
        # address is asked next, which knows Gazette's current route.
        return conns.on_endpoint(
            journal, conns.read_endpoint(journal), lambda s: s.ListFragments(request, **conns.call_kwargs())
        )

    while True:
        resp = conns.retry_unavailable("ListFragments", once, attempts=attempts)
        conns.update_route(journal, resp.header if resp.HasField("header") else None)
        if resp.status != pb.OK:
            raise error_for_status(resp.status, "ListFragments failed", journal=journal, response=resp)
        for f in resp.fragments:
            yield ListedFragment(f.spec, f.signed_url)
        if resp.next_page_token == 0:
            return
        if resp.next_page_token <= request.next_page_token:
            raise ProtocolError(f"ListFragments of {journal!r}: page token did not advance ({resp.next_page_token})")
        request.next_page_token = resp.next_page_token


def list_fragments_many(
    conns: Connections,
    journals: Sequence[str],
    *,
    signature_ttl: float | None = None,
    window: int = LIST_FRAGMENTS_WINDOW,
    primary_heads: dict[str, int] | None = None,
) -> Iterator[tuple[str, list[ListedFragment]]]:
    """``(journal, list_fragments(journal))`` for each journal, in order, with up to ``window``
    first-page requests in flight at once.

    ``primary_heads``: filled with the write head of each journal whose whole listing its
    primary answered (:func:`primary_answered`): a Gazette broker's write head is the end of
    its fragment index, the set ListFragments lists, so the listing's end is the head the
    primary reported when it answered, with no metadata Read needed to learn it.

    The requests are started as gRPC futures (no thread each: at 5,000 journals this costs half
    to a third of a pool of threads making one call each) and sent to a route member when the
    route is known. A journal whose first answer is not a complete OK page (an error, another
    page, another status) is listed again by :func:`list_fragments` (retries, routes, paging),
    so errors are raised in journal order, as that would.
    """
    if window <= 1:
        for journal in journals:
            yield journal, list_fragments(conns, journal, signature_ttl=signature_ttl)
        return
    kwargs = conns.call_kwargs()
    calls: collections.deque = collections.deque()

    def take() -> tuple[str, list[ListedFragment]]:
        journal, endpoint, future = calls.popleft()
        try:
            resp = future.result() if future is not None else None
        except grpc.RpcError as e:
            conns.endpoint_failed(journal, endpoint if _unavailable(e) else None)
            resp = None
        if resp is None or resp.status != pb.OK or resp.next_page_token != 0:
            return journal, list_fragments(conns, journal, signature_ttl=signature_ttl)
        conns.update_route(journal, resp.header if resp.HasField("header") else None)
        listed = [ListedFragment(f.spec, f.signed_url) for f in resp.fragments]
        if primary_heads is not None and resp.HasField("header") and primary_answered(resp.header):
            primary_heads[journal] = max((f.spec.end for f in listed), default=0)
        return journal, listed

    try:
        for journal in journals:
            request = pb.FragmentsRequest(journal=journal)
            if signature_ttl:
                request.signatureTTL.seconds = int(signature_ttl)
                request.signatureTTL.nanos = int(round((signature_ttl - int(signature_ttl)) * 1e9))
            endpoint = conns.read_endpoint(journal)
            try:
                future = conns.stub(endpoint).ListFragments.future(request, **kwargs)
            except grpc.RpcError:
                future = None
            calls.append((journal, endpoint, future))
            if len(calls) >= window:
                yield take()
        while calls:
            yield take()
    finally:
        for _, _, future in calls:
            if future is not None:
                future.cancel()


def primary_answered(header: pb.Header) -> bool:
    """Whether the broker that answered (the header's ``process_id``) is the primary of the
    header's route. A broker that proxies a call returns the member's answer, with its header."""
    route = header.route
    return 0 <= route.primary < len(route.members) and route.members[route.primary] == header.process_id


def _unavailable(e: grpc.RpcError) -> bool:
    return hasattr(e, "code") and e.code() == grpc.StatusCode.UNAVAILABLE
