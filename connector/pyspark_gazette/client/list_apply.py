"""List, Apply and ListFragments.

``list_journals`` consumes the List stream (v0.100+ brokers split a listing into messages of 25
journals; older brokers answer with a single message, which reads the same way).
``apply`` / ``apply_in_batches`` send journal spec changes; ``list_fragments`` pages through
a journal's fragments until the broker's ``next_page_token`` is 0.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable, Iterator, Sequence

import grpc

from pyspark_gazette.client.conn import Connections, translate_rpc_error
from pyspark_gazette.errors import JournalNotFoundError, ProtocolError, error_for_status
from pyspark_gazette.protocol import pb
from pyspark_gazette.protocol.journal_names import base_journal
from pyspark_gazette.protocol.labels import to_selector

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
    conns: Connections, selector: str | pb.LabelSelector | None = None, *, attempts: int = 8
) -> list[JournalInfo]:
    """All journals matching ``selector`` (label-selector syntax or a ``LabelSelector``).

    gRPC ``UNAVAILABLE`` (a broker restarting) is retried ``attempts`` times with the usual
    backoff; other errors are raised.
    """
    return conns.retry_unavailable("List", lambda: _list_once(conns, selector), attempts=attempts)


def _list_once(conns: Connections, selector: str | pb.LabelSelector | None) -> list[JournalInfo]:
    request = pb.ListRequest(selector=to_selector(selector))
    out: list[JournalInfo] = []
    try:
        stream = conns.stub().List(request, **conns.call_kwargs())
        for i, resp in enumerate(stream):
            if i == 0:
                if resp.status != pb.OK:
                    raise error_for_status(resp.status, "List failed", response=resp)
            elif not resp.journals:
                raise ProtocolError("List: empty continuation message outside of watch mode")
            for j in resp.journals:
                info = JournalInfo(j.spec, j.mod_revision, j.create_revision, j.route)
                out.append(info)
                if j.route.endpoints:
                    conns.update_route(j.spec.name, pb.Header(route=j.route))
    except grpc.RpcError as e:
        raise translate_rpc_error(e, "List") from e
    return out


def watch_journals(conns: Connections, selector: str | pb.LabelSelector | None = None) -> Iterator[list[JournalInfo]]:
    """Yield a full snapshot of matching journals each time the set changes (List watch mode).

    The stream stays open; close the generator to end it.
    """
    request = pb.ListRequest(selector=to_selector(selector), watch=True)
    snapshot: list[JournalInfo] = []
    first = True
    try:
        stream = conns.stub().List(request, **{k: v for k, v in conns.call_kwargs().items() if k != "timeout"})
        try:
            for resp in stream:
                if _is_delimiter(resp):
                    yield snapshot
                    snapshot, first = [], True
                    continue
                if first:
                    if resp.status != pb.OK:
                        raise error_for_status(resp.status, "List watch failed", response=resp)
                    first = False
                snapshot.extend(JournalInfo(j.spec, j.mod_revision, j.create_revision, j.route) for j in resp.journals)
        finally:
            stream.cancel()
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.CANCELLED:
            raise translate_rpc_error(e, "List watch") from e


def _is_delimiter(resp: pb.ListResponse) -> bool:
    # The end of a snapshot is an empty ListResponse; a snapshot's first message always has a
    # header with a non-zero revision, even when it lists no journals.
    return not resp.journals and resp.header.etcd.revision == 0


def get_journal(conns: Connections, journal: str) -> JournalInfo:
    """The journal's spec and route; :class:`JournalNotFoundError` when it does not exist."""
    name = base_journal(journal)
    sel = pb.LabelSelector(include=pb.LabelSet(labels=[pb.Label(name="name", value=name)]))
    for info in list_journals(conns, sel):
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

    ``EtcdTransactionFailedError`` when an ``expect_mod_revision`` does not match; invalid
    specs come back as a :class:`~pyspark_gazette.errors.TransportError` with the broker's text
    (``code`` ``UNKNOWN``: both brokers send a request's validation error as a plain error).
    """
    request = pb.ApplyRequest(changes=[c.to_proto() if isinstance(c, Change) else c for c in changes])
    resp = conns.unary("Apply", conns.stub().Apply, request)
    if resp.status != pb.OK:
        raise error_for_status(resp.status, "Apply failed", response=resp)
    return resp.header.etcd.revision


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


def list_fragments(
    conns: Connections,
    journal: str,
    *,
    begin_mod_time: int = 0,
    end_mod_time: int = 0,
    signature_ttl: float | None = None,
    page_limit: int = 0,
    do_not_proxy: bool = False,
) -> list[ListedFragment]:
    """Every fragment of ``journal`` in ascending ``begin`` order, following all pages.

    Mod-time filters behave exactly as the broker codes them (facts sheet 3.3): fragments with
    ``mod_time < begin_mod_time`` are dropped, and when ``end_mod_time`` is set, unpersisted
    fragments and those with ``mod_time > end_mod_time`` are dropped.
    ``signature_ttl`` (seconds) asks for a signed GET URL per persisted fragment.
    """
    return list(
        iter_fragments(
            conns,
            journal,
            begin_mod_time=begin_mod_time,
            end_mod_time=end_mod_time,
            signature_ttl=signature_ttl,
            page_limit=page_limit,
            do_not_proxy=do_not_proxy,
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
    )
    if signature_ttl:
        request.signatureTTL.seconds = int(signature_ttl)
        request.signatureTTL.nanos = int(round((signature_ttl - int(signature_ttl)) * 1e9))

    def once() -> pb.FragmentsResponse:
        endpoint = conns.read_endpoint(journal)
        try:
            return conns.stub(endpoint).ListFragments(request, **conns.call_kwargs())
        except grpc.RpcError:
            # A route member that stopped answering (a killed broker): ask the configured
            # address next, which knows Gazette's current route.
            if endpoint != conns.config.address:
                conns.forget_route(journal)
            raise

    while True:
        resp = conns.retry_unavailable("ListFragments", once)
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
) -> Iterator[tuple[str, list[ListedFragment]]]:
    """``(journal, list_fragments(journal))`` for each journal, in order, with up to ``window``
    first-page requests in flight at once.

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
        except grpc.RpcError:
            if endpoint != conns.config.address:
                conns.forget_route(journal)
            resp = None
        if resp is None or resp.status != pb.OK or resp.next_page_token != 0:
            return journal, list_fragments(conns, journal, signature_ttl=signature_ttl)
        conns.update_route(journal, resp.header if resp.HasField("header") else None)
        return journal, [ListedFragment(f.spec, f.signed_url) for f in resp.fragments]

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
