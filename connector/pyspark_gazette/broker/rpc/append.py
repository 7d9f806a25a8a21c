"""The Append RPC: stream shape, preconditions, flow control, commit and acknowledgement.

Stream shape (facts sheet 3.2): a first message with the parameters and no content, then
content-only chunks, then one empty message (commit), then the client half-closes. Content on
the first message, other fields on a chunk, or any message after the commit is a gRPC error
(UNKNOWN, as Gazette's plain validation errors reach clients); EOF before the commit rolls the append back and is a gRPC error (ABORTED).
Either way nothing of the append becomes visible.

Flow control: once the append holds the journal, the client must keep sending at least
``min_append_rate`` bytes/s after one second of initial credit, or the append is rolled back
with UNKNOWN "append stream: client stream didn't sustain the minimum append data rate", code
and text as gazette v0.103.0's. A reader
thread pulls the request stream into a small buffer so the handler can wait for the next chunk
with a deadline (a wait on an event, not polling).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import NoReturn

import grpc

from pyspark_gazette import testing
from pyspark_gazette.broker.core import BrokerCore
from pyspark_gazette.broker.fragment.spool import Spool
from pyspark_gazette.broker.journal import Journal, apply_registers
from pyspark_gazette.broker.specs import check_journal_field
from pyspark_gazette.protocol import RATE_ABORT_TEXT, pb, sha1sum_from_digest
from pyspark_gazette.protocol.durations import duration_seconds
from pyspark_gazette.protocol.journal_names import base_journal
from pyspark_gazette.protocol.labels import validate_label_set, validate_selector

log = logging.getLogger(__name__)

RATE_ERROR = f"append stream: client stream {RATE_ABORT_TEXT}"  # as gazette v0.103.0 words it
INITIAL_CREDIT_SECONDS = 1.0
BUFFERED_MESSAGES = 8
FULL = pb.JournalSpec.Suspend.FULL
PARTIAL = pb.JournalSpec.Suspend.PARTIAL
NONE = pb.JournalSpec.Suspend.NONE


class _Timeout(Exception):
    pass


_EOF = object()


class RequestSource:
    """Reads a request iterator on its own thread into a bounded buffer.

    The thread also hashes the content of every message after the first into :attr:`sha1`
    (the commit's per-append sum), so that work overlaps with the handler's spool writes.
    """

    def __init__(self, iterator):
        self._iterator = iterator
        self.sha1 = hashlib.sha1()
        self._cond = threading.Condition()
        self._buf: deque = deque()
        self._closed = False
        self._thread = threading.Thread(target=self._pump, name="gazette-append-reader", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        item: object
        try:
            first = True
            for req in self._iterator:
                if first:
                    first = False
                else:
                    content = req.content
                    if content:
                        self.sha1.update(content)
                    req = (req, content)
                with self._cond:
                    while len(self._buf) >= BUFFERED_MESSAGES and not self._closed:
                        self._cond.wait()
                    if self._closed:
                        return
                    self._buf.append(req)
                    self._cond.notify_all()
            item = _EOF
        except BaseException as e:  # the RPC was cancelled or failed
            item = e
        with self._cond:
            self._buf.append(item)
            self._cond.notify_all()

    def get(self, deadline: float | None):
        """The next request, ``_EOF``, or an exception instance; raises _Timeout past ``deadline``."""
        with self._cond:
            while not self._buf:
                if deadline is None:
                    self._cond.wait()
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _Timeout()
                self._cond.wait(left)
            item = self._buf.popleft()
            self._cond.notify_all()
            return item

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._buf.clear()
            self._cond.notify_all()


def _is_content_only(req: pb.AppendRequest) -> bool:
    return not (
        req.journal
        or req.do_not_proxy
        or req.offset
        or req.suspend
        or req.min_etcd_revision
        or req.HasField("header")
        or req.HasField("check_registers")
        or req.HasField("union_registers")
        or req.HasField("subtract_registers")
    )


def _rate_abort(core: BrokerCore, journal: str, received: int, context: grpc.ServicerContext) -> NoReturn:
    """Roll back (by the caller's ``finally``) and fail an append below the minimum rate."""
    core.rate_aborts += 1
    log.warning("append to %r rolled back after %d bytes: %s", journal, received, RATE_ERROR)
    context.abort(grpc.StatusCode.UNKNOWN, RATE_ERROR)  # Gazette's plain Go error: UNKNOWN
    raise AssertionError("context.abort returned")  # for type checkers: abort raises


def serve_append(
    core: BrokerCore,
    request_iterator,
    context: grpc.ServicerContext,
    *,
    covers: Callable[[Journal], bool] | None = None,
) -> pb.AppendResponse:
    """Serve one Append; ``covers`` (auth) says whether the caller's token covers a journal,
    one it does not is answered JOURNAL_NOT_FOUND, as one that does not exist."""
    source = RequestSource(request_iterator)
    try:
        return _serve(core, source, context, covers)
    finally:
        source.close()


def _serve(
    core: BrokerCore, source: RequestSource, context: grpc.ServicerContext, covers: Callable[[Journal], bool] | None
) -> pb.AppendResponse:
    """One Append, stage by stage: the first request, the journal, (holding the journal's append
    lock) the preconditions and the content up to the commit, then durability and the response."""
    headers = core.headers
    req = _first_request(source, context)
    name = base_journal(req.journal)
    journal = core.journal(name)
    if journal is None or (covers is not None and not covers(journal)):
        return pb.AppendResponse(status=pb.JOURNAL_NOT_FOUND, header=headers.header())
    # A fully suspended journal answers SUSPENDED to all but an append that resumes it.
    if journal.spec.suspend.level == FULL and req.suspend != pb.AppendRequest.SUSPEND_RESUME:
        return pb.AppendResponse(status=pb.SUSPENDED, header=headers.header())
    journal.listed.wait()

    def status(code: pb.Status, **extra) -> pb.AppendResponse:
        return pb.AppendResponse(status=code, header=headers.header(), **extra)

    with journal.append_lock:
        refused, max_offset = _preconditions(core, journal, req, context, status)
        if refused is not None:
            return refused
        received = _receive(core, journal, req, source, context, status, max_offset)
        if isinstance(received, pb.AppendResponse):
            return received
        spool, begin, end, registers, chunks = received
    journal.wait_durable(spool, end)  # group commit: sync outside the append lock
    commit = pb.Fragment(
        journal=name,
        begin=begin,
        end=end,
        sum=sha1sum_from_digest(source.sha1.digest()),
        compression_codec=spool.codec,  # type: ignore[arg-type]
    )
    return status(pb.OK, commit=commit, registers=registers, total_chunks=chunks)


def _first_request(source: RequestSource, context: grpc.ServicerContext) -> pb.AppendRequest:
    """The first AppendRequest, checked: no content, a valid journal, offset and registers."""
    first = source.get(None)
    if first is _EOF:
        context.abort(grpc.StatusCode.UNKNOWN, "expected a first AppendRequest with the journal")
    if isinstance(first, BaseException):
        context.abort(grpc.StatusCode.CANCELLED, "append stream failed before its first message")
    req: pb.AppendRequest = first
    if req.content:
        context.abort(grpc.StatusCode.UNKNOWN, "the first AppendRequest must not carry content")
    if not req.journal:
        context.abort(grpc.StatusCode.UNKNOWN, "the first AppendRequest must name the journal")
    if req.offset < 0:
        context.abort(grpc.StatusCode.UNKNOWN, f"invalid append offset {req.offset}")
    check_journal_field(req.journal, context)
    try:
        if req.HasField("check_registers"):
            validate_selector(req.check_registers)
        for field in ("union_registers", "subtract_registers"):
            if req.HasField(field):
                validate_label_set(getattr(req, field))
    except ValueError as e:
        context.abort(grpc.StatusCode.UNKNOWN, f"registers: {e}")
    return req


def _preconditions(
    core: BrokerCore,
    journal: Journal,
    req: pb.AppendRequest,
    context: grpc.ServicerContext,
    status: Callable[..., pb.AppendResponse],
) -> tuple[pb.AppendResponse | None, int]:
    """(the refusal, or None to go on; the journal's max offset), under the append lock:
    registers, the append offset and the suspension mode."""
    if journal.closed:
        context.abort(grpc.StatusCode.UNAVAILABLE, f"journal {journal.name!r} is closing")
    if req.HasField("check_registers") and not journal.check_registers(req.check_registers):
        return status(pb.REGISTER_MISMATCH, registers=journal.seq_registers), 0
    head = journal.pipeline_head()
    suspend = journal.spec.suspend if journal.spec.HasField("suspend") else pb.JournalSpec.Suspend()
    # A journal resumed from a suspension goes on at its suspension offset (Gazette rolls its
    # spool forward there): offsets never restart, even when no fragment is left below it.
    head = max(head, suspend.offset)
    with journal.cond:
        max_offset = max(head, journal.index.remote_end())
    if req.offset == 0 and head != max_offset and journal.writable:
        return status(pb.INDEX_HAS_GREATER_OFFSET), max_offset
    if req.offset != 0 and req.offset != max_offset:
        return status(pb.WRONG_APPEND_OFFSET), max_offset
    mode = req.suspend
    if mode in (pb.AppendRequest.SUSPEND_IF_FLUSHED, pb.AppendRequest.SUSPEND_NOW):
        return _suspend(core, journal, suspend.level, mode, max_offset, status), max_offset
    if suspend.level != NONE and mode == pb.AppendRequest.SUSPEND_NO_RESUME:
        return status(pb.SUSPENDED), max_offset
    if suspend.level != NONE and mode == pb.AppendRequest.SUSPEND_RESUME:
        core.set_suspend(journal, NONE, max_offset)
    return None, max_offset


#: Gazette's flush interval when a spec has none: a journal is idle after this long unwritten.
DEFAULT_FLUSH_SECONDS = 24 * 3600


def _suspend(
    core: BrokerCore, journal: Journal, level: int, mode: int, head: int, status: Callable[..., pb.AppendResponse]
) -> pb.AppendResponse | None:
    """An append asking to suspend the journal (SUSPEND_IF_FLUSHED, or SUSPEND_NOW regardless of
    idleness), as Gazette's append FSM does it: a journal with an empty fragment index is fully
    suspended (reads and listings then answer SUSPENDED); else one not suspended whose fragments
    are all persisted, and older than its flush interval, is partially suspended (its spool is
    rolled and persisted; it still serves reads). The answer is SUSPENDED when the journal is
    (now) suspended; None (an ordinary empty append) when IF_FLUSHED finds it in use."""
    with journal.cond:
        fragments = journal.index.all(journal.local_refs())
    if level != FULL and not fragments:
        core.set_suspend(journal, FULL, head)
        return status(pb.SUSPENDED)
    if level == NONE:
        flush = duration_seconds(journal.spec.fragment.flush_interval) or DEFAULT_FLUSH_SECONDS
        last = fragments[-1].mod_time
        dirty = last == 0 or last > time.time() - flush
        if dirty and mode == pb.AppendRequest.SUSPEND_IF_FLUSHED:
            return None
        spool = journal.current
        if spool is not None and spool.seq_end > spool.begin:
            journal.roll(spool.seq_end)  # the persister stores it: a suspended journal has no spool
        core.set_suspend(journal, PARTIAL, head)
    return status(pb.SUSPENDED)


def _receive(
    core: BrokerCore,
    journal: Journal,
    req: pb.AppendRequest,
    source: RequestSource,
    context: grpc.ServicerContext,
    status: Callable[..., pb.AppendResponse],
    max_offset: int,
) -> pb.AppendResponse | tuple[Spool, int, int, pb.LabelSet, int]:
    """Spool the content chunks at the minimum rate up to the commit message and commit them
    (``(spool, begin, end, registers, chunks)``), or roll them back (a refusal or an abort)."""
    name = journal.name
    mode = req.suspend
    now = time.time()
    spool = journal.maybe_roll(now, target=max_offset)
    begin = spool.seq_end
    sha_state = spool.sha1_state()
    rate = core.min_append_rate
    started = time.monotonic() + INITIAL_CREDIT_SECONDS
    received = chunks = 0
    done = False
    try:
        while True:
            deadline = started + received / rate if rate > 0 else None
            try:
                msg = source.get(deadline)
            except _Timeout:
                _rate_abort(core, name, received, context)
            if msg is _EOF:
                context.abort(grpc.StatusCode.ABORTED, "append stream ended without a commit message (rolled back)")
            if isinstance(msg, BaseException):
                context.abort(grpc.StatusCode.CANCELLED, "append stream failed (rolled back)")
            msg, content = msg
            if not _is_content_only(msg):
                context.abort(grpc.StatusCode.UNKNOWN, "expected Content chunk")
            if not content:
                break  # the commit message
            if not journal.writable:
                return status(pb.NOT_ALLOWED)
            if mode in (
                pb.AppendRequest.SUSPEND_KEEP,
                pb.AppendRequest.SUSPEND_IF_FLUSHED,
                pb.AppendRequest.SUSPEND_NOW,
            ):
                return status(pb.NOT_ALLOWED)  # as Gazette: these carry no content
            spool.write(content)
            received += len(content)
            chunks += 1
            if chunks == 1 and core.hold_dir is not None:
                testing.hold_rpc(core, "append", name)
        msg = source.get(started + received / rate if rate > 0 else None)
        if msg is not _EOF:
            context.abort(grpc.StatusCode.UNKNOWN, "expected EOF after the commit message")
        if received == 0 and (req.HasField("union_registers") or req.HasField("subtract_registers")):
            context.abort(grpc.StatusCode.UNKNOWN, "register modification requires non-empty Append")
        registers = journal.seq_registers
        if received:
            registers = apply_registers(registers, req.union_registers, req.subtract_registers)
            journal.commit(spool, registers, now)
        end = spool.seq_end
        done = True
    except _Timeout:
        _rate_abort(core, name, received, context)
    finally:
        if not done:
            spool.rollback(begin, sha_state)
    return spool, begin, end, registers, chunks
