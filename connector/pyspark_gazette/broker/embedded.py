""":class:`EmbeddedBroker`: run the Gazette-compatible broker inside a Python process.

Usage::

    with EmbeddedBroker("/tmp/gazette-data", file_root="/tmp/gazette-fragments") as broker:
        channel = grpc.insecure_channel(broker.target)
        ...  # any Gazette client, pointed at broker.address

It binds loopback (127.0.0.1) by default, so only this machine can reach it, and says so in its
log; pass ``host="0.0.0.0"`` (and ``auth_keys``) to serve other hosts. ``port=0`` picks a free
port, readable from :attr:`port` and :attr:`address` once started. With ``auth_keys`` every RPC
needs a bearer token (:mod:`pyspark_gazette.protocol.auth`).
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import socket
from concurrent import futures
from typing import Any

import grpc

from pyspark_gazette.broker.authz import Authorizer
from pyspark_gazette.broker.core import DEFAULT_MIN_APPEND_RATE, BrokerCore
from pyspark_gazette.broker.headers import new_process_suffix
from pyspark_gazette.broker.server import JournalServicer
from pyspark_gazette.protocol import pb_grpc
from pyspark_gazette.protocol.auth import KeySet

log = logging.getLogger(__name__)

#: Largest AppendRequest the server accepts (Gazette's default --max-grpc-recv-size).
DEFAULT_MAX_RECEIVE = 4 * 1024 * 1024
#: gRPC worker threads at most. Threads are started only as RPCs need them, and each blocking
#: Read or List watch holds one while it waits (a stream's ``watchWriteHeads`` keeps one open per
#: journal), so this bounds how many calls the broker serves at once, not what it costs idle.
DEFAULT_MAX_WORKERS = 16_384
#: Seconds a call may wait for the server to take it up before gRPC cancels it (see start()).
MAX_UNREQUESTED_SECONDS = 3600


class EmbeddedBroker:
    """A single-node Gazette broker serving ``protocol.Journal`` over gRPC.

    :param data_dir: where spools, commit logs and journal specs live (created if missing).
    :param host: interface to bind; loopback unless you mean otherwise. A wildcard (``0.0.0.0``,
        ``::``) serves every interface and advertises ``advertise_host`` instead.
    :param port: TCP port, 0 for any free port.
    :param file_root: directory that ``file:///`` store URLs are rooted at.
    :param storage_options: extra fsspec/s3fs options for the fragment stores.
    :param min_append_rate: bytes/s an appending client must sustain (after 1 s of credit);
        0 disables the check.
    :param process_suffix: the broker's ``process_id.suffix``; unique per instance by default.
    :param max_workers: gRPC worker threads at most, started as needed (each blocking Read or List
        watch holds one while it waits; see :data:`DEFAULT_MAX_WORKERS`).
    :param max_receive_message_size: largest request message accepted.
    :param persist_timeout: seconds :meth:`stop` waits for spools to be persisted.
    :param hold_dir: fault-injection hook for tests (see :func:`pyspark_gazette.testing.hold_rpc`).
    :param auth_keys: require bearer tokens signed with these keys (Gazette's ``--auth-keys``
        form: base64, separated by whitespace or commas; or a :class:`KeySet`). None: no auth.
    :param advertise_host: the host put in :attr:`address` and response headers' routes; by
        default the bound host, or this machine's host name when bound to a wildcard address.
    """

    def __init__(
        self,
        data_dir: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        file_root: str | None = None,
        storage_options: dict[str, Any] | None = None,
        min_append_rate: int = DEFAULT_MIN_APPEND_RATE,
        process_suffix: str | None = None,
        max_workers: int = DEFAULT_MAX_WORKERS,
        max_receive_message_size: int = DEFAULT_MAX_RECEIVE,
        persist_timeout: float = 30.0,
        hold_dir: str | None = None,
        auth_keys: str | KeySet | None = None,
        advertise_host: str | None = None,
    ):
        self.data_dir = data_dir
        self.host = host
        self._requested_port = port
        self.file_root = file_root
        self.storage_options = storage_options
        self.min_append_rate = min_append_rate
        self.process_suffix = process_suffix or new_process_suffix()
        self.max_workers = max_workers
        self.max_receive_message_size = max_receive_message_size
        self.persist_timeout = persist_timeout
        self.hold_dir = hold_dir
        self.auth_keys = KeySet.parse(auth_keys) if isinstance(auth_keys, str) else auth_keys
        self.advertise_host = advertise_host or (socket.gethostname() if is_wildcard(host) else host)
        self.port: int | None = None
        self.core: BrokerCore | None = None
        self._server: grpc.Server | None = None
        self._authorizer: Authorizer | None = None

    @property
    def address(self) -> str:
        """``http://host:port``, the broker's endpoint as Gazette clients name it (the advertised
        host, never a wildcard address)."""
        if self.port is None:
            raise RuntimeError("the broker is not started")
        host = f"[{self.advertise_host}]" if ":" in self.advertise_host else self.advertise_host
        return f"http://{host}:{self.port}"

    @property
    def target(self) -> str:
        """``host:port`` for ``grpc.insecure_channel``."""
        return self.address[len("http://") :]

    def start(self) -> EmbeddedBroker:
        if self._server is not None:
            raise RuntimeError("the broker is already started")
        _probe_bind(self.host, self._requested_port)
        core = BrokerCore(
            self.data_dir,
            suffix=self.process_suffix,
            file_root=self.file_root,
            storage_options=self.storage_options,
            min_append_rate=self.min_append_rate,
            hold_dir=self.hold_dir,
        )
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="gazette-rpc"),
            options=[
                ("grpc.max_receive_message_length", self.max_receive_message_size),
                ("grpc.max_send_message_length", 16 * 1024 * 1024),
                ("grpc.so_reuseport", 0),
                # gRPC's core cancels a call that waited this long for the Python server's single
                # request loop to take it up (default 30 s): under CPU load that loop gets the GIL
                # rarely, and a burst of calls (a write-head sweep of thousands of journals) came
                # back CANCELLED. Go's gRPC servers have no such limit; a client's own deadline
                # still applies.
                ("grpc.server_max_unrequested_time_in_server", MAX_UNREQUESTED_SECONDS),
            ],
        )
        authorizer = Authorizer(self.auth_keys)
        pb_grpc.add_JournalServicer_to_server(JournalServicer(core, authorizer), server)
        host = f"[{self.host}]" if ":" in self.host else self.host
        try:
            port = server.add_insecure_port(f"{host}:{self._requested_port}")
        except RuntimeError:
            port = 0
        if port == 0:
            core.stop(0)
            authorizer.stop()
            raise OSError(f"could not bind {self.host}:{self._requested_port}")
        self.port = port
        core.headers.endpoint = self.address
        server.start()
        self.core, self._server, self._authorizer = core, server, authorizer
        log.info("gazette broker listening on %s (bound to %s); %s", self.address, self.host, self.exposure())
        return self

    def exposure(self) -> str:
        """One line on who can reach the broker and whether it checks tokens, for logs and the CLI."""
        auth = "bearer tokens required" if self.auth_keys is not None else "no authentication"
        if is_loopback(self.host):
            return f"loopback only: other hosts cannot connect (bind 0.0.0.0 to serve them); {auth}"
        warning = "" if self.auth_keys is not None else " -- anyone who can reach this port can read and write journals"
        return f"reachable from other hosts; {auth}{warning}"

    def stop(self, grace: float | None = 5.0) -> None:
        """Stop serving (in-flight RPCs get ``grace`` seconds), roll and persist spools."""
        server, core = self._server, self.core
        if server is None or core is None:
            return
        core.begin_stop()
        server.stop(grace).wait()
        core.stop(self.persist_timeout)
        if self._authorizer is not None:
            self._authorizer.stop()
        self._server = None

    def refresh(self, journal: str) -> None:
        """List a journal's fragment stores into its index now (tests, notebooks)."""
        if self.core is None:
            raise RuntimeError("the broker is not started")
        self.core.refresh(journal)

    def roll(self, journal: str) -> None:
        """Roll a journal's open spool now, so everything written so far is in rolled fragments
        that the persister takes (the quickstart: nothing is left for a flush-interval boundary
        to persist between its listing and Spark's)."""
        if self.core is None:
            raise RuntimeError("the broker is not started")
        j = self.core.journal(journal)
        if j is None:
            raise KeyError(journal)
        j.roll_for_shutdown()

    def wait_persisted(self, timeout: float = 30.0) -> bool:
        """Wait until every rolled spool has been persisted (or ``timeout`` passed)."""
        if self.core is None:
            raise RuntimeError("the broker is not started")
        return self.core.persister.drain(timeout)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self.address if self.port is not None else "not started"
        return f"EmbeddedBroker({where}, data_dir={self.data_dir!r})"


def is_wildcard(host: str) -> bool:
    """Whether ``host`` binds every interface (``0.0.0.0``, ``::``, empty)."""
    try:
        return not host or ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is reachable only from this machine."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _probe_bind(host: str, port: int) -> None:
    """Raise ``OSError`` naming ``host:port`` and the reason (address in use, not an address of
    this host, permission) when it cannot be bound: gRPC's own bind failure says only that no
    address was added, after logging the reason on stderr in lines of its own."""
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise OSError(errno.EADDRNOTAVAIL, f"cannot listen on {host}:{port}: {e.strerror}") from None
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC binds
        try:
            s.bind(addr)
        except OSError as e:
            hint = " (another broker?)" if e.errno == errno.EADDRINUSE else ""
            raise OSError(e.errno, f"cannot listen on {host}:{port}: {e.strerror}{hint}") from None
