"""Atomic appends: one Append RPC (:class:`Appender`) and the one-shot :func:`append`.

An Append stream is: the parameters message (journal, registers, offset; never content), any
number of content-only chunks, one empty message that commits, then a half-close. Ending the
stream without the empty message rolls the append back: nothing of it becomes visible.

The broker sequences an append *before* reading its content and aborts clients that do not
sustain its minimum append rate (64 KiB/s by default), so an :class:`Appender` starts its RPC
on the first :meth:`~Appender.write` (or at :meth:`~Appender.close` for a zero-byte append);
write promptly once started, or prepare the content first and use :func:`append`.

Dead connections: a broker whose connection dies without a reset reaching us (a lost RST, a
host that vanished, a frozen process) would leave an append waiting for its response until
HTTP/2 keepalive notices (every 5.5 minutes: Go servers refuse more frequent pings). So an
append that has waited :data:`PROBE_AFTER` seconds without progress asks the same connection a
cheap question (a List of its journal): any answer, even a refusal, shows the connection is
alive and the wait goes on; none within :data:`PROBE_TIMEOUT` seconds means it is dead. The
probe's bytes also arm the kernel's ``TCP_USER_TIMEOUT`` (gRPC sets it to its keepalive timeout,
20 s), which fails the connection if its host is gone. The channel is then dropped (the next call
opens a new connection) and the append fails with gRPC ``UNAVAILABLE`` (retried by
:func:`append`, like any ``UNAVAILABLE``; the broker rolls back an append whose commit never
arrived, but one whose response alone was lost may have committed).
"""

from __future__ import annotations

import io
import logging
import queue
import threading
import time
from collections.abc import Iterator
from typing import IO, Any

import grpc

from pyspark_gazette import testing
from pyspark_gazette.client.conn import APPEND_CHUNK_BYTES, Connections, backoff, translate_rpc_error
from pyspark_gazette.errors import (
    BrokerTimeoutError,
    CancelledError,
    GazetteError,
    InsufficientJournalBrokersError,
    NoJournalPrimaryBrokerError,
    NotJournalPrimaryBrokerError,
    ProtocolError,
    TransportError,
    error_for_status,
)
from pyspark_gazette.protocol import RATE_ABORT_TEXT, pb
from pyspark_gazette.protocol.journal_names import base_journal
from pyspark_gazette.protocol.labels import names_selector

log = logging.getLogger(__name__)

_END = object()

#: Seconds an append waits without progress (a content chunk taken, the response) before it
#: checks that its connection still answers.
PROBE_AFTER = 10.0
#: Seconds the check waits for an answer before the connection is presumed dead.
PROBE_TIMEOUT = 15.0


def append_request(
    journal: str,
    *,
    offset: int = 0,
    check_registers: pb.LabelSelector | None = None,
    union_registers: pb.LabelSet | None = None,
    subtract_registers: pb.LabelSet | None = None,
    suspend: int = 0,
    do_not_proxy: bool = False,
    min_etcd_revision: int = 0,
) -> pb.AppendRequest:
    """The first AppendRequest of an append to ``journal`` (the one both appenders send)."""
    req = pb.AppendRequest(
        journal=journal, offset=offset, do_not_proxy=do_not_proxy, min_etcd_revision=min_etcd_revision
    )
    req.suspend = suspend  # type: ignore[assignment]
    if check_registers is not None:
        req.check_registers.CopyFrom(check_registers)
    if union_registers is not None:
        req.union_registers.CopyFrom(union_registers)
    if subtract_registers is not None:
        req.subtract_registers.CopyFrom(subtract_registers)
    return req


#: The first byte of a serialized ``AppendRequest`` holding only ``content`` (field 4, bytes).
_CONTENT_TAG = b"\x22"


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def content_message(chunk: bytes | memoryview) -> bytes:
    """``AppendRequest(content=chunk).SerializeToString()``, made with one copy of ``chunk``
    (the protobuf message would copy it twice more: into the message, then out of it)."""
    return b"".join((_CONTENT_TAG, _varint(len(chunk)), chunk))


class Appender:
    """One atomic Append RPC to ``journal``.

    ``offset`` (non-zero) must equal the journal's write head, else WRONG_APPEND_OFFSET.
    ``check_registers`` is a precondition on the journal's registers (an empty register set
    matches any selector); ``union_registers`` / ``subtract_registers`` change them when the
    append commits (they need at least one byte of content).

    ``write`` content, then ``close()`` to commit (returns the commit ``Fragment``: the span
    the append occupies) or ``abort()`` to roll back. Status errors are raised as
    :class:`~pyspark_gazette.errors.StatusError` subclasses (``RegisterMismatchError`` carries
    the journal's current registers).
    """

    def __init__(self, conns: Connections, journal: str, **params: Any):
        self._conns = conns
        self.journal = journal
        self.request = append_request(journal, min_etcd_revision=conns.min_etcd_revision(journal), **params)
        self.response: pb.AppendResponse | None = None
        self.written = 0
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=64)
        self._call: Any = None
        self._done = threading.Event()
        self._closed = False
        self._endpoint = ""

    @property
    def endpoint(self) -> str:
        """The broker this append was sent to ("" before it started)."""
        return self._endpoint

    def __enter__(self) -> Appender:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if self._closed:
            return
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def _messages(self) -> Iterator[pb.AppendRequest | bytes]:
        yield self.request
        while True:
            item = self._queue.get()
            if item is _END:
                return
            yield item

    def _start(self) -> None:
        self._endpoint = self._conns.append_endpoint(self.journal)
        # Content chunks go already serialized (content_message).
        stub = self._conns.stub(self._endpoint)
        self._call = stub.AppendSerialized.future(self._messages(), **self._conns.call_kwargs())

    def _put(self, item: Any) -> None:
        waiting_since = time.monotonic()
        while True:
            try:
                self._queue.put(item, timeout=0.2)
                return
            except queue.Full:
                if self._call.done():
                    self._raise_from_call()
                    raise ProtocolError(f"Append to {self.journal!r} ended before its content was sent") from None
                if time.monotonic() - waiting_since >= PROBE_AFTER:
                    self._check_alive()
                    waiting_since = time.monotonic()

    def _check_alive(self) -> None:
        """Raise ``UNAVAILABLE`` (and drop the channel) when the append's connection no longer
        answers a List of its journal within :data:`PROBE_TIMEOUT` (module docstring)."""
        request = pb.ListRequest(selector=names_selector([self.journal]))
        started = time.monotonic()
        try:
            for _ in self._conns.stub(self._endpoint).List(request, **self._conns.call_kwargs(PROBE_TIMEOUT)):
                break
            return
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                return  # an answer, even a refusal: the connection is alive
        if not self._call.cancel():
            return  # the append's own answer arrived meanwhile
        waited = time.monotonic() - started
        log.warning(
            "append to %s: broker %s did not answer within %.0fs; dropping its connection",
            self.journal,
            self._endpoint,
            waited,
        )
        self._conns.drop_channel(self._endpoint)
        raise TransportError(
            f"Append to {self.journal!r}",
            "UNAVAILABLE",
            f"the connection to {self._endpoint} stopped answering (no reply to a probe within {waited:.0f}s)",
        )

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Send ``data`` as content chunks (empty writes are ignored)."""
        if self._closed:
            raise GazetteError(f"Appender of {self.journal!r} is closed")
        if not data:
            return
        if self._call is None:
            self._start()
        view = memoryview(data).cast("B")
        for i in range(0, len(view), APPEND_CHUNK_BYTES):
            self._put(content_message(view[i : i + APPEND_CHUNK_BYTES]))
        self.written += len(view)

    def close(self) -> pb.Fragment:
        """Commit: send the empty chunk, half-close and validate the response."""
        if self._closed:
            raise GazetteError(f"Appender of {self.journal!r} is closed")
        self._closed = True
        if self._call is None:
            self._start()
        elif self.written:
            self._hold()
        self._put(pb.AppendRequest())
        self._put(_END)
        resp = self._raise_from_call()
        assert resp is not None
        self._conns.update_route(self.journal, resp.header)
        self.response = resp
        if resp.status != pb.OK:
            raise error_for_status(resp.status, "Append failed", journal=self.journal, response=resp)
        commit = resp.commit
        if commit.journal != base_journal(self.journal) or commit.end - commit.begin != self.written:
            raise ProtocolError(
                f"Append to {self.journal!r}: commit [{commit.begin}, {commit.end}) of journal "
                f"{commit.journal!r} does not match the {self.written} bytes written"
            )
        return commit

    def _hold(self) -> None:
        """The ``append`` test hook (:func:`~pyspark_gazette.testing.rpc_hold`), when armed for
        this journal: once gRPC has taken every content chunk (at most 5 s), before the commit."""
        if not testing.hold_armed("append", self.journal):
            return
        deadline = time.monotonic() + 5
        while not self._queue.empty() and not self._call.done() and time.monotonic() < deadline:
            time.sleep(0.01)
        testing.rpc_hold("append", self.journal, self._endpoint, self.written)

    def abort(self) -> None:
        """Roll back: half-close without the commit chunk; nothing of this append is kept."""
        if self._closed:
            return
        self._closed = True
        if self._call is None:
            return
        try:
            self._put(_END)
            self._raise_from_call()
        except (grpc.RpcError, grpc.FutureCancelledError, GazetteError):
            pass  # the broker answers a rollback with an error, as expected (or the connection died)

    def _raise_from_call(self) -> pb.AppendResponse | None:
        try:
            while True:
                try:
                    return self._call.result(timeout=PROBE_AFTER)
                except grpc.FutureTimeoutError:
                    self._check_alive()
        except grpc.FutureCancelledError:
            raise CancelledError(f"Append to {self.journal!r}", "CANCELLED", "the append was cancelled") from None
        except grpc.RpcError as e:
            raise translate_rpc_error(e, f"Append to {self.journal!r}") from e


def rate_aborted(e: TransportError) -> bool:
    """Whether the broker rolled this append back for falling below its minimum append rate."""
    return e.code in ("RESOURCE_EXHAUSTED", "UNKNOWN") and RATE_ABORT_TEXT in e.details


_RETRIED_APPEND = (NotJournalPrimaryBrokerError, NoJournalPrimaryBrokerError, InsufficientJournalBrokersError)


def append(
    conns: Connections,
    journal: str,
    content: bytes | bytearray | memoryview | IO[bytes],
    *,
    max_attempts: int | None = None,
    **params: Any,
) -> pb.Fragment:
    """Append ``content`` atomically and return the commit fragment.

    Retried with backoff, like Gazette's ``client.Append``: gRPC ``UNAVAILABLE``,
    NOT_JOURNAL_PRIMARY_BROKER, NO_JOURNAL_PRIMARY_BROKER and INSUFFICIENT_JOURNAL_BROKERS;
    also (unlike Go's one-shot helper, like its AppendService) the broker's abort of an append
    that fell below its minimum rate, which the broker rolled back, so the retry cannot
    duplicate content. Every other error is raised. A retry after ``UNAVAILABLE`` can repeat an
    append whose response was lost; use registers or an explicit ``offset`` where that matters.
    ``content`` may be bytes or a seekable binary file (re-read from its start on retry).
    Retries stop after ``max_attempts`` attempts, or once they have gone on for the client's
    ``broker_timeout`` (:class:`~pyspark_gazette.errors.BrokerTimeoutError`, naming the journal,
    the broker and the last error); each retry is logged at WARNING, saying what it waits for.
    """
    attempt = 0
    failing_since = time.monotonic()  # no progress until the append commits
    budget = conns.config.broker_timeout
    start = content.tell() if isinstance(content, io.IOBase) else 0
    while True:
        app = Appender(conns, journal, **params)
        try:
            if isinstance(content, (bytes, bytearray, memoryview)):
                app.write(content)
            else:
                content.seek(start)
                while chunk := content.read(APPEND_CHUNK_BYTES):
                    app.write(chunk)
            return app.close()
        except _RETRIED_APPEND + (TransportError,) as e:
            app.abort()
            if isinstance(e, TransportError) and not (e.code == "UNAVAILABLE" or rate_aborted(e)):
                raise
            if max_attempts is not None and attempt + 1 >= max_attempts:
                raise
            gone = conns.unreachable(f"append to {journal!r}", e, attempt, failing_since)
            if gone is not None:
                raise gone from e
            endpoint = app._endpoint or conns.append_endpoint(journal)
            now = time.monotonic()
            if budget and now - failing_since >= budget:
                raise BrokerTimeoutError(
                    f"append to {journal!r}",
                    "UNAVAILABLE",
                    f"broker {endpoint} did not take it for {now - failing_since:.0f}s, more than broker.timeout "
                    f"({budget:g}s); last error: {e}",
                ) from e
            unavailable = isinstance(e, TransportError) and e.code == "UNAVAILABLE"
            conns.endpoint_failed(journal, endpoint if unavailable else None)  # a dead bootstrap moves on
            delay = backoff(attempt)
            if budget:
                delay = max(0.0, min(delay, budget - (now - failing_since)))
            log.log(
                logging.WARNING if conns.answered else logging.DEBUG,  # a wrong address is one error
                "append to %s: waiting for broker %s (attempt %d failed: %s); retrying in %.1fs%s",
                journal,
                endpoint,
                attempt + 1,
                e,
                delay,
                f", for up to {budget:g}s in all" if budget else "",
            )
            time.sleep(delay)
            attempt += 1
        except BaseException:
            app.abort()
            raise
