"""Atomic appends: one Append RPC (:class:`Appender`) and the one-shot :func:`append`.

An Append stream is: the parameters message (journal, registers, offset; never content), any
number of content-only chunks, one empty message that commits, then a half-close. Ending the
stream without the empty message rolls the append back: nothing of it becomes visible.

The broker sequences an append *before* reading its content and aborts clients that do not
sustain its minimum append rate (64 KiB/s by default), so an :class:`Appender` starts its RPC
on the first :meth:`~Appender.write` (or at :meth:`~Appender.close` for a zero-byte append);
write promptly once started, or prepare the content first and use :func:`append`.
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

from pyspark_gazette.client.conn import APPEND_CHUNK_BYTES, Connections, backoff, translate_rpc_error
from pyspark_gazette.errors import (
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

log = logging.getLogger(__name__)

_END = object()


def _params(
    journal: str,
    *,
    offset: int = 0,
    check_registers: pb.LabelSelector | None = None,
    union_registers: pb.LabelSet | None = None,
    subtract_registers: pb.LabelSet | None = None,
    suspend: int = 0,
    do_not_proxy: bool = False,
) -> pb.AppendRequest:
    req = pb.AppendRequest(journal=journal, offset=offset, do_not_proxy=do_not_proxy)
    req.suspend = suspend  # type: ignore[assignment]
    if check_registers is not None:
        req.check_registers.CopyFrom(check_registers)
    if union_registers is not None:
        req.union_registers.CopyFrom(union_registers)
    if subtract_registers is not None:
        req.subtract_registers.CopyFrom(subtract_registers)
    return req


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
        self.request = _params(journal, **params)
        self.response: pb.AppendResponse | None = None
        self.written = 0
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=64)
        self._call: Any = None
        self._done = threading.Event()
        self._closed = False

    def __enter__(self) -> Appender:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if self._closed:
            return
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def _messages(self) -> Iterator[pb.AppendRequest]:
        yield self.request
        while True:
            item = self._queue.get()
            if item is _END:
                return
            yield item

    def _start(self) -> None:
        stub = self._conns.stub(self._conns.append_endpoint(self.journal))
        self._call = stub.Append.future(self._messages(), **self._conns.call_kwargs())

    def _put(self, item: Any) -> None:
        while True:
            try:
                self._queue.put(item, timeout=0.2)
                return
            except queue.Full:
                if self._call.done():
                    self._raise_from_call()
                    raise ProtocolError(f"Append to {self.journal!r} ended before its content was sent") from None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Send ``data`` as content chunks (empty writes are ignored)."""
        if self._closed:
            raise GazetteError(f"Appender of {self.journal!r} is closed")
        if not data:
            return
        if self._call is None:
            self._start()
        view = memoryview(data)
        for i in range(0, len(view), APPEND_CHUNK_BYTES):
            self._put(pb.AppendRequest(content=bytes(view[i : i + APPEND_CHUNK_BYTES])))
        self.written += len(view)

    def close(self) -> pb.Fragment:
        """Commit: send the empty chunk, half-close and validate the response."""
        if self._closed:
            raise GazetteError(f"Appender of {self.journal!r} is closed")
        self._closed = True
        if self._call is None:
            self._start()
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

    def abort(self) -> None:
        """Roll back: half-close without the commit chunk; nothing of this append is kept."""
        if self._closed:
            return
        self._closed = True
        if self._call is None:
            return
        try:
            self._put(_END)
            self._call.result()
        except (grpc.RpcError, GazetteError):
            pass  # the broker answers a rollback with an error, as expected

    def _raise_from_call(self) -> pb.AppendResponse | None:
        try:
            return self._call.result()
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
    """
    attempt = 0
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
            conns.forget_route(journal)
            log.warning("append to %s failed (attempt %d), retrying: %s", journal, attempt, e)
            time.sleep(backoff(attempt))
            attempt += 1
        except BaseException:
            app.abort()
            raise
