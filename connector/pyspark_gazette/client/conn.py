"""Connections to brokers: addresses, channels, auth metadata, routes, error translation.

A :class:`ClientConfig` is a frozen value of primitives, so it pickles to Spark executors;
each process builds its own :class:`Connections` from it. Channels are cached per endpoint and
shared by every call of that process.

Routing follows Gazette's Go client: responses carry a ``Header.route``; appends go to the
route's primary endpoint and reads to a member endpoint (the same zone first) once a route is
known, otherwise to the bootstrap address, whose broker proxies.

Bootstrap addresses: the configured address may list several brokers, comma-separated (Kafka's
``bootstrap.servers`` habit). Calls without a route go to the current one; when it fails with
``UNAVAILABLE`` (:meth:`Connections.endpoint_failed`) the next configured address takes its
place, or, with one address configured, an endpoint learned from a route, so a dead broker
costs one failed attempt rather than every retry up to ``broker_timeout``.

Etcd revisions: the largest Etcd revision of the response headers a :class:`Connections` has
seen (List, Apply, Read, Append, ListFragments) goes out as ``min_etcd_revision`` in its Read and
Append requests (:meth:`Connections.read_request`, :attr:`Connections.etcd_revision`). A broker
that has it (Gazette's main after v0.103.0) first waits until its own view of Etcd has caught up
with what this client already saw, so a journal just created or listed is never answered
JOURNAL_NOT_FOUND by a broker that lags; older brokers and the embedded broker ignore the field.

A revision is only worth asking for while the cluster's Etcd still has it. When Etcd's revision
goes back (restored from a snapshot, a development stack recreated under a running notebook),
a broker asked to wait for a revision that will not come waits until the call's deadline, and a
Read has none. So the client forgets the revision it remembers, with a WARNING saying why, when:
a header names another Etcd cluster (``cluster_id``); an Apply commits at a lower revision (a
transaction's revision is Etcd's own, current one); or a check finds the cluster below it. The
check (:meth:`Connections.min_etcd_revision`, before a Read or Append asks for the revision) runs
when a header since showed a lower revision (a broker lagging by milliseconds, or Etcd gone
back) or when no header has confirmed the revision for :data:`REVISION_CHECK_AFTER` seconds: a
List asking the broker to reach the revision first (``watch_resume``, honoured by every Gazette
the project tests) within :data:`ETCD_CATCH_UP` seconds. A check that cannot tell leaves the
calls of the next :data:`REVISION_CHECK_AFTER` seconds asking for no revision.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from pyspark_gazette.errors import (
    AuthRefusedError,
    BrokerUnreachableError,
    CancelledError,
    GazetteError,
    TransportError,
)
from pyspark_gazette.protocol import pb, pb_grpc
from pyspark_gazette.protocol.journal_names import base_journal
from pyspark_gazette.protocol.labels import names_selector

log = logging.getLogger(__name__)

#: gRPC receive limit of Gazette's Go client (16 MiB); sends are chunked far below the
#: brokers' 4 MiB default receive limit.
MAX_RECEIVE_BYTES = 16 << 20
#: Largest content chunk we put in one AppendRequest (the broker accepts up to 4 MiB).
APPEND_CHUNK_BYTES = 1 << 20

_T = TypeVar("_T")

#: Attempts a unary call (List, Apply) makes while gRPC answers ``UNAVAILABLE``, about 7 s of
#: :func:`backoff`; also every call's limit while nothing has answered the client yet
#: (:meth:`Connections.unreachable`), whatever its ``broker_timeout``.
CONNECT_ATTEMPTS = 8

#: Seconds a broker has to reach the Etcd revision the client remembers when it is checked
#: (:meth:`Connections.min_etcd_revision`): a broker's view of Etcd trails Etcd by milliseconds,
#: so a broker still below it after this long is taken for a cluster whose revision went back.
ETCD_CATCH_UP = 5.0
#: Seconds without a response header confirming the remembered Etcd revision after which it is
#: checked before a Read or Append asks for it (a notebook's next cell, after the cluster may
#: have been recreated).
REVISION_CHECK_AFTER = 30.0


@dataclasses.dataclass(frozen=True)
class ClientConfig:
    """How to reach a Gazette cluster.

    ``address``: ``http://host:port`` (cleartext gRPC), ``https://host:port`` (TLS),
    ``unix:///path`` or a bare ``host:port``. An ``http`` address without a port uses 8080,
    the port Gazette's docs and gazctl use. Several brokers of one cluster may be given,
    comma-separated (:attr:`addresses`): any of them bootstraps the client.
    ``auth_token``: a bearer JWT sent as ``authorization`` metadata on every call; never
    logged, never part of ``repr``.
    ``file_root``: local mount of the brokers' ``file://`` fragment stores, for direct reads of
    ``file://`` fragment URLs (gazctl ``--file-root``). Without it such fragments are read
    through the broker.
    ``direct_reads``: read persisted fragments straight from their store (signed URL) rather
    than through the broker.
    ``zone``: prefer route members of this zone for reads.
    ``broker_timeout``: seconds a :class:`~pyspark_gazette.client.reader.RetryReader` or an
    append of the :class:`~pyspark_gazette.client.append_service.AppendService` keeps retrying
    without progress before it fails with :class:`~pyspark_gazette.errors.BrokerTimeoutError`
    (``None``: forever; the Spark option ``broker.timeout`` defaults to 5 minutes). While no
    broker has answered the client yet, calls give up sooner (:meth:`Connections.unreachable`).
    ``reached``: the address is known to answer (a Spark task of a query whose planning reached
    it): a broker down when the client starts is waited for ``broker_timeout``, as a restart.
    """

    address: str
    auth_token: str | None = dataclasses.field(default=None, repr=False)
    file_root: str | None = None
    direct_reads: bool = True
    zone: str = ""
    timeout: float | None = None
    broker_timeout: float | None = None
    reached: bool = False

    def __post_init__(self) -> None:
        for address in split_addresses(self.address):  # validate early
            parse_address(address)

    @property
    def addresses(self) -> tuple[str, ...]:
        """The configured bootstrap addresses, in order."""
        return split_addresses(self.address)


def split_addresses(address: str) -> tuple[str, ...]:
    """The addresses of a comma-separated list (one address: itself); empty items are refused."""
    parts = tuple(a.strip() for a in (address or "").split(","))
    if len(parts) > 1 and not all(parts):
        raise ValueError(f"broker address list {address!r} has an empty item")
    return parts


@dataclasses.dataclass(frozen=True)
class Target:
    """A parsed broker address: the gRPC target string and whether it uses TLS."""

    target: str
    secure: bool


def parse_address(address: str) -> Target:
    """Parse a broker address (see :class:`ClientConfig`) into a gRPC target."""
    if not address or not address.strip():
        raise ValueError("broker address is empty (expected e.g. http://127.0.0.1:8080)")
    address = address.strip()
    if "://" not in address:
        if ":" not in address:
            raise ValueError(f"broker address {address!r} has no port (expected host:port or http://host:port)")
        return Target(address, False)
    url = urllib.parse.urlsplit(address)
    if url.scheme == "unix":
        path = url.path if not url.netloc else f"/{url.netloc}{url.path}"
        return Target(f"unix:{path}", False)
    if url.scheme not in ("http", "https"):
        raise ValueError(f"broker address {address!r}: scheme must be http, https or unix")
    if not url.hostname:
        raise ValueError(f"broker address {address!r} has no host")
    try:
        port = url.port or (443 if url.scheme == "https" else 8080)
    except ValueError as e:
        raise ValueError(f"broker address {address!r}: {e}") from None
    host = url.hostname if ":" not in url.hostname else f"[{url.hostname}]"
    return Target(f"{host}:{port}", url.scheme == "https")


def _held_to(since: float, timeout: float) -> bool:
    """Whether a call started at ``since`` (``time.monotonic()``) ran to about its ``timeout``:
    one that ends CANCELLED or empty then was ended by the broker's side of its deadline."""
    return time.monotonic() - since >= 0.9 * timeout


def backoff(attempt: int) -> float:
    """Gazette's retry backoff by attempt number: -1 -> 0, 0-1 -> 50 ms, 2-3 -> 100 ms,
    4-5 -> 1 s, then 5 s."""
    if attempt < 0:
        return 0.0
    if attempt < 2:
        return 0.05
    if attempt < 4:
        return 0.1
    if attempt < 6:
        return 1.0
    return 5.0


def translate_rpc_error(err: grpc.RpcError, what: str) -> GazetteError:
    """Turn a ``grpc.RpcError`` into our :class:`TransportError` (or :class:`CancelledError`,
    :class:`AuthRefusedError`)."""
    code = err.code() if hasattr(err, "code") else None
    details = err.details() if hasattr(err, "details") else str(err)
    name = code.name if code is not None else "UNKNOWN"
    if code in (grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED):
        return CancelledError(what, name, details or "")
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        return AuthRefusedError(what, name, details or "")
    return TransportError(what, name, details or "")


#: The Append RPC's method (protocol.proto's ``service Journal``).
APPEND_METHOD = "/protocol.Journal/Append"


def _serialize_append(message: pb.AppendRequest | bytes) -> bytes:
    return message if isinstance(message, bytes) else message.SerializeToString()


class JournalStub(pb_grpc.JournalStub):
    """The generated stub, and ``AppendSerialized``: Append taking each request either as an
    ``AppendRequest`` or already serialized (the appender's content chunks, see
    :func:`~pyspark_gazette.client.appender.content_message`)."""

    def __init__(self, channel: grpc.Channel):
        super().__init__(channel)
        self.AppendSerialized = channel.stream_unary(
            APPEND_METHOD, request_serializer=_serialize_append, response_deserializer=pb.AppendResponse.FromString
        )


class Connections:
    """Per-process channels, stubs, auth metadata and the route cache of one cluster."""

    def __init__(self, config: ClientConfig):
        self.config = config
        self._lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}
        self._stubs: dict[str, JournalStub] = {}
        self._routes: dict[str, pb.Route] = {}
        self._closed = False
        self._bootstrap = config.addresses[0]
        #: Times the bootstrap address moved on after a failure (:meth:`endpoint_failed`).
        self.bootstrap_moves = 0
        #: Whether a broker has answered a call of this client (:meth:`unreachable`).
        self.answered = config.reached
        #: The largest Etcd revision of a response header seen (:meth:`saw_header`); 0: none yet.
        self.etcd_revision = 0
        #: The Etcd header that carried it (its cluster id, member id and raft term).
        self._etcd = pb.Header.Etcd()
        #: ``time.monotonic()`` of the last header at or above :attr:`etcd_revision`.
        self._revision_confirmed = 0.0
        #: A lower revision a header of the same cluster showed since (None: none).
        self._revision_doubt: int | None = None
        self._revision_check = threading.Lock()  # one check at a time
        #: ``time.monotonic()`` of the last check that could not tell (None: none).
        self._revision_check_failed: float | None = None

    def __repr__(self) -> str:
        return f"Connections(address={self.config.address!r})"

    @property
    def address(self) -> str:
        """The bootstrap address calls without a route go to (see the module docstring)."""
        return self._bootstrap

    # -- channels ----------------------------------------------------------------------------

    def stub(self, endpoint: str | None = None) -> JournalStub:
        """The stub of ``endpoint``'s channel, made once per channel (a stub builds a callable per
        RPC: making one per call cost more than the call itself when planning many journals)."""
        endpoint = endpoint or self._bootstrap
        stub = self._stubs.get(endpoint)
        if stub is None:
            channel = self.channel(endpoint)
            with self._lock:
                stub = self._stubs.get(endpoint)
                if stub is None or self._channels.get(endpoint) is not channel:
                    stub = self._stubs[endpoint] = JournalStub(channel)
        return stub

    def channel(self, endpoint: str) -> grpc.Channel:
        with self._lock:
            if self._closed:
                raise GazetteError("journal client is closed")
            ch = self._channels.get(endpoint)
            if ch is None:
                ch = self._channels[endpoint] = _open_channel(parse_address(endpoint))
            return ch

    def drop_channel(self, endpoint: str) -> None:
        """Close ``endpoint``'s channel (its connection was found dead); the next call opens a new one."""
        with self._lock:
            ch = self._channels.pop(endpoint, None)
            self._stubs.pop(endpoint, None)
        if ch is not None:
            ch.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            channels, self._channels = list(self._channels.values()), {}
            self._stubs = {}
        for ch in channels:
            ch.close()

    def metadata(self) -> list[tuple[str, str]] | None:
        token = self.config.auth_token
        if callable(token):  # a token that renews itself (e.g. flow/hosted.py's BrokerToken)
            token = token()
        return [("authorization", f"Bearer {token}")] if token else None

    def call_kwargs(self, timeout: float | None = None) -> dict[str, Any]:
        kw: dict[str, Any] = {}
        md = self.metadata()
        if md:
            kw["metadata"] = md
        t = timeout if timeout is not None else self.config.timeout
        if t is not None:
            kw["timeout"] = t
        return kw

    # -- Etcd revisions ----------------------------------------------------------------------

    @property
    def etcd_cluster_id(self) -> int:
        """The Etcd cluster id of the header that carried :attr:`etcd_revision` (0: none)."""
        return self._etcd.cluster_id

    def saw_header(self, header: pb.Header, *, transaction: bool = False) -> None:
        """A response header: later Reads and Appends ask for its Etcd revision when it is the
        largest seen. ``transaction``: the header of an Apply, whose revision is Etcd's current
        one. See the module docstring for when the remembered revision is forgotten."""
        etcd = header.etcd
        if etcd.revision <= 0:
            return
        forgot = None
        with self._lock:
            known = self._etcd.cluster_id
            if known and etcd.cluster_id and etcd.cluster_id != known:
                forgot = (
                    f"a broker answered from another Etcd cluster (cluster id {etcd.cluster_id:x}, "
                    f"was {known:x}; revision {etcd.revision})"
                )
            elif transaction and etcd.revision < self.etcd_revision:
                forgot = f"Etcd committed an Apply at revision {etcd.revision}, so its revision went back"
            if forgot is not None or etcd.revision >= self.etcd_revision:
                forgotten = self.etcd_revision
                self.etcd_revision = etcd.revision
                self._etcd.CopyFrom(etcd)
                self._revision_confirmed = time.monotonic()
                self._revision_doubt = None
                self._revision_check_failed = None
            elif self._revision_doubt is None or etcd.revision < self._revision_doubt:
                self._revision_doubt = etcd.revision
        if forgot is not None:
            self._warn_forgotten(forgotten, forgot)

    def saw_revision(self, revision: int) -> None:
        """A response carried Etcd ``revision`` and nothing else of its header (tests)."""
        self.saw_header(pb.Header(etcd=pb.Header.Etcd(revision=revision)))

    def _warn_forgotten(self, revision: int, why: str) -> None:
        log.warning(
            "the client of %s no longer asks brokers for Etcd revision %d (min_etcd_revision), "
            "which it saw before: %s; Etcd was restored from an older snapshot, or the cluster recreated",
            self.config.address,
            revision,
            why,
        )

    def min_etcd_revision(self, journal: str) -> int:
        """The ``min_etcd_revision`` a Read or Append of ``journal`` sends: :attr:`etcd_revision`,
        checked first when a header since showed a lower one or none has confirmed it for
        :data:`REVISION_CHECK_AFTER` seconds (module docstring). 0 when a check could not tell
        (a broker restarting, a token without the LIST capability): then for the next
        :data:`REVISION_CHECK_AFTER` seconds no check is made and 0 is sent, unless a header
        confirms the revision meanwhile."""
        if not self._revision_doubtful():
            return self.etcd_revision
        with self._revision_check:
            if not self._revision_doubtful():  # another thread checked meanwhile
                return self.etcd_revision
            failed = self._revision_check_failed
            if failed is not None and time.monotonic() - failed < REVISION_CHECK_AFTER:
                return 0
            return self._check_revision(journal)

    def _revision_doubtful(self) -> bool:
        return self.etcd_revision > 1 and (
            self._revision_doubt is not None or time.monotonic() - self._revision_confirmed >= REVISION_CHECK_AFTER
        )

    def _check_revision(self, journal: str) -> int:
        """Ask a broker for ``journal``'s listing once its view of Etcd has reached the remembered
        revision (``watch_resume``: Gazette waits for the revision after it), within
        :data:`ETCD_CATCH_UP` seconds (``broker_timeout`` when shorter)."""
        with self._lock:
            wanted = self.etcd_revision
            resume = pb.Header.Etcd()
            resume.CopyFrom(self._etcd)
        resume.revision = wanted - 1
        name = base_journal(journal)
        request = pb.ListRequest(
            selector=names_selector([name]),
            watch_resume=pb.Header(etcd=resume),
        )
        budget = self.config.broker_timeout
        timeout = min(ETCD_CATCH_UP, budget) if budget else ETCD_CATCH_UP
        asked = time.monotonic()
        try:
            first = next(iter(self.stub().List(request, **self.call_kwargs(timeout))))
        except grpc.RpcError as e:
            # A List held until its deadline ends DEADLINE_EXCEEDED, or, when the broker's side
            # of the deadline ends it first, CANCELLED or cleanly with no message (docs/protocol.md).
            if e.code() != grpc.StatusCode.DEADLINE_EXCEEDED and not (
                e.code() == grpc.StatusCode.CANCELLED and _held_to(asked, timeout)
            ):
                log.debug("checking Etcd revision %d for %s failed: %s", wanted, name, e)
                return self._check_failed()
            reached = None
        except StopIteration:
            if not _held_to(asked, timeout):
                return self._check_failed()
            reached = None
        else:
            reached = first.header.etcd.revision if first.status == pb.OK else None
            if reached is None:
                return self._check_failed()
            if reached >= wanted or (first.header.etcd.cluster_id != resume.cluster_id and resume.cluster_id):
                self.saw_header(first.header)  # confirmed (or another cluster: forgotten there)
                return self.etcd_revision
        with self._lock:
            if self.etcd_revision != wanted:  # a header moved it meanwhile
                return self.etcd_revision
            self.etcd_revision = reached or 0
            if reached:
                self._etcd.CopyFrom(first.header.etcd)
            self._revision_confirmed = time.monotonic()
            self._revision_doubt = None
        self._warn_forgotten(
            wanted,
            f"broker {self.address} did not reach it within {timeout:g}s"
            if reached is None
            else f"broker {self.address} answered at revision {reached} without waiting for it",
        )
        return self.etcd_revision

    def _check_failed(self) -> int:
        """A check learned nothing: this call, and those of the next REVISION_CHECK_AFTER
        seconds, ask for no revision (:meth:`min_etcd_revision`)."""
        self._revision_check_failed = time.monotonic()
        return 0

    def read_request(self, journal: str, **fields: Any) -> pb.ReadRequest:
        """A ReadRequest of ``journal`` that asks the broker to have seen :attr:`etcd_revision`
        (:meth:`min_etcd_revision`)."""
        return pb.ReadRequest(journal=journal, min_etcd_revision=self.min_etcd_revision(journal), **fields)

    # -- routes ------------------------------------------------------------------------------

    def update_route(self, journal: str, header: pb.Header | None) -> None:
        """Remember the route a response header names (ignored when it has no endpoints), and
        its Etcd revision."""
        if header is None:
            return
        self.answered = True
        self.saw_header(header)
        if not header.HasField("route"):
            return
        route = header.route
        if route.endpoints and len(route.endpoints) == len(route.members):
            with self._lock:
                self._routes[base_journal(journal)] = route

    def forget_route(self, journal: str) -> None:
        with self._lock:
            self._routes.pop(base_journal(journal), None)

    def endpoint_failed(self, journal: str | None, endpoint: str | None) -> None:
        """A call of ``journal`` to ``endpoint`` failed at the transport: forget the journal's
        route, and when ``endpoint`` is the bootstrap address, move the bootstrap on to the next
        configured address, or (one configured) to a route endpoint learned from any journal."""
        if journal is not None:
            self.forget_route(journal)
        if endpoint is None:
            return
        with self._lock:
            if endpoint != self._bootstrap:
                return
            configured = self.config.addresses
            if len(configured) > 1:
                nxt = (
                    configured[(configured.index(endpoint) + 1) % len(configured)]
                    if endpoint in configured
                    else configured[0]
                )
            else:
                learned = sorted({e for r in self._routes.values() for e in r.endpoints if e != endpoint})
                nxt = learned[0] if learned else configured[0]
            if nxt != self._bootstrap:
                log.info("broker %s is unavailable; bootstrapping through %s", self._bootstrap, nxt)
                self._bootstrap = nxt
                self.bootstrap_moves += 1

    def route(self, journal: str) -> pb.Route | None:
        with self._lock:
            return self._routes.get(base_journal(journal))

    def append_endpoint(self, journal: str) -> str:
        """The primary's endpoint when a route is known, else the configured address."""
        route = self.route(journal)
        if route is not None and 0 <= route.primary < len(route.endpoints):
            return route.endpoints[route.primary]
        return self._bootstrap

    def read_endpoint(self, journal: str) -> str:
        """A member endpoint (same zone first, then the primary) or the configured address."""
        route = self.route(journal)
        if route is None or not route.endpoints:
            return self._bootstrap
        if self.config.zone:
            for member, endpoint in zip(route.members, route.endpoints, strict=False):
                if member.zone == self.config.zone:
                    return endpoint
        if 0 <= route.primary < len(route.endpoints):
            return route.endpoints[route.primary]
        return route.endpoints[0]

    # -- retries -----------------------------------------------------------------------------

    def unreachable(
        self, what: str, err: Exception, attempt: int, since: float, *, final: bool = False
    ) -> BrokerUnreachableError | None:
        """The error to give up with when retrying ``err``, the failure of ``attempt`` (from 0)
        of a call failing since ``since`` (``time.monotonic()``), would wait on an address where
        nothing answers; else None. ``final``: the caller gives up anyway (its own attempts are
        spent), and only wants the error named.

        The one rule for every call of a client no broker has answered yet (:attr:`answered`):
        ``UNAVAILABLE`` is retried :data:`CONNECT_ATTEMPTS` times, as List does, or for
        ``broker_timeout`` when that is shorter, then fails naming the configured address. Once a
        broker has answered, the address is right and retries go on for ``broker_timeout``.
        """
        if self.answered or not isinstance(err, TransportError) or err.code != "UNAVAILABLE":
            return None
        waited = time.monotonic() - since
        budget = self.config.broker_timeout
        cut = budget is not None and budget > 0 and waited >= budget
        if not final and attempt + 1 < CONNECT_ATTEMPTS and not cut:
            return None
        # gRPC's innermost cause: "Connection refused", "Domain name not found", ...
        reason = err.details.rsplit(": ", 1)[-1].strip().rstrip("]") or err.details
        gone = BrokerUnreachableError(
            what,
            self.config.address,
            reason,
            attempts=attempt + 1,
            seconds=waited,
            budget=budget if cut and attempt + 1 < CONNECT_ATTEMPTS else None,
        )
        gone.__cause__ = err
        return gone

    def unary(self, what: str, rpc: str, request: Any, *, attempts: int | None = CONNECT_ATTEMPTS) -> Any:
        """Call the unary RPC named ``rpc`` of the bootstrap broker with :meth:`retry_unavailable`."""

        def call() -> Any:
            return self.on_endpoint(None, None, lambda s: getattr(s, rpc)(request, **self.call_kwargs()))

        return self.retry_unavailable(what, call, attempts=attempts)

    def on_endpoint(self, journal: str | None, endpoint: str | None, call: Callable[[pb_grpc.JournalStub], _T]) -> _T:
        """``call`` with the stub of ``endpoint`` (``None``: the bootstrap address); a gRPC
        failure is reported to :meth:`endpoint_failed` (``UNAVAILABLE`` only, unless ``journal``
        is given: then any failure forgets its route) and re-raised."""
        endpoint = endpoint or self._bootstrap
        try:
            result = call(self.stub(endpoint))
            self.answered = True
            return result
        except grpc.RpcError as e:
            code = e.code() if hasattr(e, "code") else None
            if code == grpc.StatusCode.UNAVAILABLE or journal is not None:
                self.endpoint_failed(journal, endpoint if code == grpc.StatusCode.UNAVAILABLE else None)
            raise

    def retry_unavailable(self, what: str, call: Callable[[], _T], *, attempts: int | None = CONNECT_ATTEMPTS) -> _T:
        """Run ``call``, retrying gRPC ``UNAVAILABLE`` (a broker restarting) up to ``attempts``
        times with :func:`backoff`; gRPC errors are translated, other errors raised at once.
        ``attempts=None``: for ``broker_timeout`` (forever when it is None), as an append or a
        read does; while nothing has answered the client, :meth:`unreachable` still cuts it short.

        When the failed call moved the bootstrap address on (:meth:`on_endpoint`), the next
        address is tried at once, without backoff or an attempt spent, until each configured
        address has been tried once in a row.
        """
        attempt = 0
        tried = 1
        since = time.monotonic()
        while True:
            bootstrap = self._bootstrap
            try:
                try:
                    return call()
                except grpc.RpcError as e:
                    raise translate_rpc_error(e, what) from e
            except TransportError as err:
                if err.code != "UNAVAILABLE":
                    raise
                if self._bootstrap != bootstrap and tried < max(2, len(self.config.addresses)):
                    tried += 1
                    log.debug("%s: %s; trying %s", what, err, self._bootstrap)
                    continue
                tried = 1
                budget = self.config.broker_timeout
                spent = (
                    attempt + 1 >= attempts
                    if attempts is not None
                    else budget is not None and time.monotonic() - since + backoff(attempt) > budget
                )
                gone = self.unreachable(what, err, attempt, since, final=spent)
                if gone is not None:
                    raise gone from err
                if spent:
                    raise
                log.log(logging.DEBUG if attempts is not None else logging.WARNING, "%s: %s; retrying", what, err)
                time.sleep(backoff(attempt))
                attempt += 1


#: Keepalive pings on a connection with open calls, to notice a broker that vanished without
#: closing it (a blocking Read may idle for hours). Go gRPC servers, Gazette's included, refuse
#: pings closer than 5 minutes apart while no data flows: after three they close the connection
#: (GOAWAY ``too_many_pings``), failing every call on it, appends included. So just over that.
KEEPALIVE_MS = 330_000

_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
    ("grpc.max_send_message_length", 64 << 20),
    ("grpc.enable_http_proxy", 0),
    ("grpc.keepalive_time_ms", KEEPALIVE_MS),
]


def open_aio_channel(target: Target) -> grpc.aio.Channel:
    """An asyncio channel with the options of :class:`Connections`' channels (create it on the
    event loop that uses it)."""
    if target.secure:
        return grpc.aio.secure_channel(target.target, grpc.ssl_channel_credentials(), options=_CHANNEL_OPTIONS)
    return grpc.aio.insecure_channel(target.target, options=_CHANNEL_OPTIONS)


def _open_channel(target: Target) -> grpc.Channel:
    options = _CHANNEL_OPTIONS
    if target.secure:
        return grpc.secure_channel(target.target, grpc.ssl_channel_credentials(), options=options)
    return grpc.insecure_channel(target.target, options=options)
