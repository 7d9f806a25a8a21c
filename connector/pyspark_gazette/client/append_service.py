"""Batched, pipelined, ordered appends: :class:`AppendService` (Gazette's ``AppendService``).

Many small writes to a journal are coalesced into few Append RPCs:

* each journal has a FIFO chain of :class:`AsyncAppend` links, and one dispatch thread that
  sends the links in order, one RPC each;
* :meth:`AppendService.start_append` hands the caller the chain's tail, locked for that caller,
  so concurrent writers join the *same* pending RPC; a new link is started when the tail is
  already being sent, holds more than 64 MiB, has different request parameters (registers,
  offset), or when the caller's dependencies are not a subset of the tail's;
* back-pressure: when the tail is full and waits behind another link, a new writer waits for
  room (the link ahead to finish) instead of starting a third link, so a writer faster than its
  broker holds at most two full links per journal (Gazette's service lets the chain grow; Kafka's
  producer blocks when its buffer is full, as this does);
* a link buffers its content in memory up to :data:`SPOOL_BYTES`, and beyond that in a
  temporary file on local disk (Gazette buffers every link in a file, to bound memory; the
  in-memory start spares the common small link two copies through the kernel); while one link's
  RPC is in flight, new writes fill the next link, which is the pipelining batch;
* the caller writes, then :meth:`AsyncAppend.release` marks its bytes committed to the batch, or
  :meth:`AsyncAppend.rollback` (or an exception inside ``with``) drops exactly its bytes.

Errors, as in Gazette: CANCELLED/DEADLINE_EXCEEDED, FRAGMENT_STORE_UNHEALTHY,
INDEX_HAS_GREATER_OFFSET, JOURNAL_NOT_FOUND, NOT_ALLOWED, REGISTER_MISMATCH and
WRONG_APPEND_OFFSET (and protocol violations), and auth refusals (UNAUTHENTICATED,
PERMISSION_DENIED) are **terminal**: the link fails, and so does
every later append to that journal for the life of the service. Every other error (gRPC
transport errors, routing statuses) is retried with :func:`~pyspark_gazette.client.conn.backoff`
forever by default, or ``max_attempts`` times, or until the retries of one append have gone on
for the client's ``broker_timeout`` (then :class:`~pyspark_gazette.errors.BrokerTimeoutError`,
terminal like the others). Deviation from Go: Gazette retries terminal
errors forever when ``check_registers`` is set (a hack for Flow recovery logs); this service
surfaces them, because a Spark task must fail rather than hang. A failed dependency fails the
append that depends on it.
"""

from __future__ import annotations

import collections
import logging
import tempfile
import threading
import time
from collections.abc import Iterable
from typing import Any

from pyspark_gazette.client.appender import Appender, append_request
from pyspark_gazette.client.conn import APPEND_CHUNK_BYTES, Connections, backoff
from pyspark_gazette.errors import (
    AuthRefusedError,
    BrokerTimeoutError,
    CancelledError,
    FragmentStoreUnhealthyError,
    GazetteError,
    IndexHasGreaterOffsetError,
    JournalNotFoundError,
    NotAllowedError,
    ProtocolError,
    RegisterMismatchError,
    TransportError,
    WrongAppendOffsetError,
)
from pyspark_gazette.protocol import pb

log = logging.getLogger(__name__)

#: A link stops taking new writes once it buffers this much (Gazette: 64 MiB).
MAX_BATCH_BYTES = 64 << 20
#: A link holds this much in memory (references to immutable writes, copies of the others); past
#: it, its content moves to a temporary file. A journal's chain has one link being sent and one
#: filling, so memory stays within twice this per journal.
SPOOL_BYTES = 16 << 20


def _frozen(data: bytes | bytearray | memoryview) -> memoryview:
    """``data`` as a view nobody can change afterwards: no copy of ``bytes`` or of a view into
    ``bytes`` (what the encoder writes), a copy of anything mutable (the caller may reuse it)."""
    if type(data) is bytes:
        return memoryview(data)
    if isinstance(data, memoryview) and type(data.obj) is bytes and data.contiguous:
        return data.cast("B") if data.format != "B" else data
    return memoryview(bytes(data))


class _Spool:
    """A link's content: references to the writes (copies of mutable ones), moved to a temporary
    file once they outgrow ``limit``."""

    def __init__(self, limit: int = SPOOL_BYTES):
        self._limit = limit
        self._pieces: list[memoryview] | None = []
        self._file: Any = None
        self.size = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        n = len(data) if not isinstance(data, memoryview) else data.nbytes
        if self._pieces is not None and self.size + n > self._limit:
            self._file = tempfile.TemporaryFile(prefix="gazette-append-", buffering=8 << 10)
            for piece in self._pieces:
                self._file.write(piece)
            self._pieces = None
        if self._pieces is not None:
            if n:
                self._pieces.append(_frozen(data))
        else:
            self._file.write(data)
        self.size += n

    def truncate(self, size: int) -> None:
        """Drop everything after the first ``size`` bytes."""
        if self._pieces is not None:
            excess = self.size - size
            while excess > 0:
                last = self._pieces[-1]
                if len(last) <= excess:
                    self._pieces.pop()
                    excess -= len(last)
                else:
                    self._pieces[-1] = last[: len(last) - excess]
                    excess = 0
        else:
            self._file.flush()
            self._file.seek(size)
            self._file.truncate()
        self.size = size

    def chunks(self, size: int, chunk: int) -> Iterable[bytes | memoryview]:
        """The first ``size`` bytes, in pieces of at most ``chunk`` bytes: views of what was
        written while it is in memory (a chunk ends where a write did), else read from the file."""
        if self._pieces is not None:
            left = min(size, self.size)
            for piece in self._pieces:
                for at in range(0, len(piece), chunk):
                    if left <= 0:
                        return
                    part = piece[at : at + min(chunk, left)]
                    left -= len(part)
                    yield part
            return
        self._file.flush()
        self._file.seek(0)
        left = size
        while left > 0:
            data = self._file.read(min(chunk, left))
            if not data:
                return
            yield data
            left -= len(data)

    def close(self) -> None:
        self._pieces = None
        if self._file is not None:
            self._file.close()


TERMINAL_ERRORS = (
    AuthRefusedError,
    CancelledError,
    FragmentStoreUnhealthyError,
    IndexHasGreaterOffsetError,
    JournalNotFoundError,
    NotAllowedError,
    RegisterMismatchError,
    WrongAppendOffsetError,
    ProtocolError,
)


class AsyncAppend:
    """One pending Append RPC of a journal, shared by every writer that joined it."""

    def __init__(
        self, journal: str, request: pb.AppendRequest, dependencies: frozenset[AsyncAppend], cond: threading.Condition
    ):
        self.journal = journal
        self._cond = cond  # the chain's condition: signalled when a writer releases
        self.request = request
        self._key = request.SerializeToString(deterministic=True)
        self.dependencies = dependencies
        self._spool = _Spool()
        self._writer = threading.Lock()  # held by the writer between start_append and release
        self._checkpoint = 0
        self._touched = False
        self._sealed = False
        self._done = threading.Event()
        self._commit: pb.Fragment | None = None
        self._error: BaseException | None = None

    def __repr__(self) -> str:
        return f"AsyncAppend(journal={self.journal!r}, bytes={self._checkpoint}, done={self._done.is_set()})"

    # -- writer side -------------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Buffer ``data`` for this append (the caller must hold the link, see ``start_append``)."""
        try:
            self._spool.write(data)
        except BaseException:
            self.rollback()
            raise

    def release(self) -> None:
        """Commit the caller's writes to the batch and let others (and the dispatcher) in."""
        self._checkpoint = self._spool.size
        self._mark_touched()
        self._writer.release()

    def rollback(self) -> None:
        """Drop everything the caller wrote since it started, and release the link."""
        self._spool.truncate(self._checkpoint)  # also what a failed write left past the size
        self._mark_touched()
        if self._writer.locked():
            self._writer.release()

    def _mark_touched(self) -> None:
        with self._cond:
            self._touched = True
            self._cond.notify_all()

    def __enter__(self) -> AsyncAppend:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is None:
            self.release()
        else:
            self.rollback()

    # -- the link's place in its chain (the callers hold the chain's condition) ----------------

    @property
    def key(self) -> bytes:
        """The request's parameters, serialized: writers join a link only with the same ones."""
        return self._key

    @property
    def size(self) -> int:
        """Bytes released to this link so far."""
        return self._checkpoint

    @property
    def touched(self) -> bool:
        """Whether a writer has released (or rolled back) since the link was made."""
        return self._touched

    def accepts(self, key: bytes, dependencies: frozenset[AsyncAppend], max_batch: int) -> bool:
        """Whether a writer of request ``key`` with ``dependencies`` may join this link."""
        return (
            not self._sealed and self._spool.size < max_batch and self._key == key and dependencies <= self.dependencies
        )

    def full(self, max_batch: int) -> bool:
        """Whether the link takes no more writes until it is sent (it holds ``max_batch`` bytes)."""
        return not self._sealed and self._spool.size >= max_batch

    def take(self) -> bool:
        """Lock the link for the caller's writes; false (and not locked) if it was sealed first."""
        self._writer.acquire()
        if not self._sealed:
            return True
        self._writer.release()
        return False

    def seal(self) -> None:
        """The dispatcher's: wait for a writer in progress, then let no one else join."""
        with self._writer:
            self._sealed = True

    def chunks(self, size: int, chunk: int) -> Iterable[bytes | memoryview]:
        """The first ``size`` bytes of the link, ``chunk`` bytes at a time."""
        return self._spool.chunks(size, chunk)

    # -- results ----------------------------------------------------------------------------

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> pb.Fragment | None:
        """Block until the RPC finished; return its commit (``None`` if it had no content) or
        raise its error."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"append to {self.journal!r} still pending after {timeout}s")
        if self._error is not None:
            raise self._error
        return self._commit

    @property
    def error(self) -> BaseException | None:
        return self._error

    def _finish(self, commit: pb.Fragment | None = None, error: BaseException | None = None) -> None:
        self._commit, self._error = commit, error
        self._spool.close()
        self._done.set()


class _Chain:
    """One journal's links, oldest (in flight) first, and the one condition that guards them. It
    is notified on every change of the chain: a link added, released, sealed or sent, a writer
    waiting for room, the journal's terminal error, the service closing."""

    def __init__(self) -> None:
        self.links: collections.deque[AsyncAppend] = collections.deque()
        self.cond = threading.Condition()
        self.error: BaseException | None = None
        self.closed = False  # the service is closing: no writer waits, the dispatcher stops
        self.thread: threading.Thread | None = None
        #: How often a writer waited for room (back-pressure).
        self.waits_for_room = 0

    def join(self, request: pb.AppendRequest, key: bytes, deps: frozenset[AsyncAppend], max_batch: int) -> AsyncAppend:
        """The link a writer joins: the tail if it accepts it, else a new tail (the caller holds
        ``cond``). A new link inherits the dependencies of a tail with the same parameters, so
        appends keep their order behind what the journal's earlier writes waited for."""
        tail = self.links[-1] if self.links else None
        if tail is not None and tail.accepts(key, deps, max_batch):
            return tail
        inherited = tail.dependencies if tail is not None and tail.key == key else frozenset()
        tail = AsyncAppend(request.journal, request, deps | inherited, self.cond)
        self.links.append(tail)
        self.cond.notify_all()
        return tail

    def wait_for_room(self, max_batch: int) -> None:
        """Back-pressure (the caller holds ``cond``): while the tail is full behind the link in
        flight, a new link would be a third, so wait; then raise the journal's error, if any."""
        if self._full_behind_another(max_batch):
            self.waits_for_room += 1
            self.cond.notify_all()  # a change of the chain: a writer waits for room
            self.cond.wait_for(lambda: not self._full_behind_another(max_batch))
        if self.error is not None:
            raise self.error
        if self.closed:
            raise GazetteError("append service is closed")

    def _full_behind_another(self, max_batch: int) -> bool:
        """Whether the tail is full and not the next to be sent (the caller holds ``cond``)."""
        if self.error is not None or self.closed or len(self.links) < 2:
            return False
        return self.links[-1].full(max_batch)

    def close(self) -> None:
        """The service is closing: wake the writers waiting for room and the dispatcher."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()


class AppendService:
    """Batches and pipelines appends per journal; see the module docstring."""

    def __init__(self, conns: Connections, *, max_attempts: int | None = None, max_batch_bytes: int = MAX_BATCH_BYTES):
        self._conns = conns
        self._max_attempts = max_attempts
        self._max_batch = max_batch_bytes
        self._mu = threading.Lock()
        self._chains: dict[str, _Chain] = {}
        self._closing = False
        #: Bytes and RPCs sent, for metrics.
        self.bytes_appended = 0
        self.rpcs = 0

    def start_append(self, journal: str, *, dependencies: Iterable[AsyncAppend] = (), **params: Any) -> AsyncAppend:
        """The append the caller's writes join, locked for the caller until it releases it.

        ``params`` are those of :class:`~pyspark_gazette.client.appender.Appender` (registers,
        offset, suspend). Raises the journal's terminal error if an earlier append failed. Waits
        while the journal's tail is full behind a link not yet sent (see the module docstring),
        so a caller must not hold another link of this service while it starts one.
        """
        request = append_request(journal, **params)
        key = request.SerializeToString(deterministic=True)
        deps = frozenset(dependencies)
        while True:
            chain = self._chain(journal)
            with chain.cond:
                chain.wait_for_room(self._max_batch)
                link = chain.join(request, key, deps, self._max_batch)
            if link.take():
                return link
            # The dispatcher sealed it meanwhile; join the next link.

    def _chain(self, journal: str) -> _Chain:
        with self._mu:
            if self._closing:
                raise GazetteError("append service is closed")
            chain = self._chains.get(journal)
            if chain is None:
                chain = self._chains[journal] = _Chain()
                chain.thread = threading.Thread(
                    target=self._dispatch, args=(journal, chain), name=f"gazette-append-{journal}", daemon=True
                )
                chain.thread.start()
            return chain

    @property
    def waits_for_room(self) -> int:
        """How often a writer waited for room (back-pressure), over all journals, for metrics."""
        with self._mu:
            chains = list(self._chains.values())
        return sum(chain.waits_for_room for chain in chains)

    def append(self, journal: str, data: bytes, **params: Any) -> AsyncAppend:
        """Convenience: join a batch with ``data`` and release at once."""
        aa = self.start_append(journal, **params)
        with aa:
            aa.write(data)
        return aa

    def pending_except(self, journal: str) -> list[AsyncAppend]:
        """The last pending append of every other journal: write barriers for dependencies."""
        out = []
        with self._mu:
            chains = [(j, c) for j, c in self._chains.items() if j != journal]
        for _, chain in chains:
            with chain.cond:
                if chain.links:
                    out.append(chain.links[-1])
        return out

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every append started so far has finished; raise the first error."""
        with self._mu:
            chains = list(self._chains.values())
        pending: list[AsyncAppend] = []
        for chain in chains:
            with chain.cond:
                pending.extend(chain.links)
        first: BaseException | None = None
        for aa in pending:
            try:
                aa.wait(timeout)
            except BaseException as e:  # noqa: BLE001 - report the first, wait for all
                first = first or e
        if first is not None:
            raise first

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop the dispatch threads."""
        try:
            self.flush(timeout)
        finally:
            with self._mu:
                self._closing = True
                chains = list(self._chains.values())
            for chain in chains:
                chain.close()

    # -- dispatch ---------------------------------------------------------------------------

    def _dispatch(self, journal: str, chain: _Chain) -> None:
        while True:
            with chain.cond:
                chain.cond.wait_for(lambda: chain.links or chain.closed)
                if not chain.links:
                    return
                head = chain.links[0]
                while not head.touched:  # its first writer has not released yet
                    chain.cond.wait()
            head.seal()
            self._send(journal, chain, head)
            with chain.cond:
                chain.links.popleft()
                chain.cond.notify_all()

    def _send(self, journal: str, chain: _Chain, aa: AsyncAppend) -> None:
        """Send one sealed link, retrying as the module docstring says; finish it either way."""
        if not self._finished_without_rpc(journal, chain, aa):
            self._send_with_retries(journal, chain, aa, aa.size)

    def _finished_without_rpc(self, journal: str, chain: _Chain, aa: AsyncAppend) -> bool:
        """Finish ``aa`` at once, and say so, if the journal or a dependency failed, or if it has
        nothing to send (no content, no register check, no offset)."""
        error = chain.error if chain.error is not None else self._failed_dependency(journal, aa)
        if error is not None:
            aa._finish(error=error)
            return True
        if aa.size == 0 and not aa.request.HasField("check_registers") and not aa.request.offset:
            aa._finish(commit=None)
            return True
        return False

    def _send_with_retries(self, journal: str, chain: _Chain, aa: AsyncAppend, size: int) -> None:
        """Attempt the RPC of ``aa``'s first ``size`` bytes until it succeeds or an error ends it."""
        attempt = 0
        failing_since: float | None = None  # monotonic time of the first failed attempt
        while True:
            app = Appender(self._conns, journal)
            try:
                commit = self._attempt(app, aa, size)
            except TERMINAL_ERRORS as e:
                self._fail_journal(chain, aa, e)
                return
            except GazetteError as e:
                failing_since = time.monotonic() if failing_since is None else failing_since
                if self._ends_retries(journal, chain, aa, size, e, attempt, failing_since):
                    return
                self._before_retry(journal, app, size, e, attempt)
                attempt += 1
                continue
            self.bytes_appended += size
            self.rpcs += 1
            aa._finish(commit=commit)
            return

    def _ends_retries(
        self,
        journal: str,
        chain: _Chain,
        aa: AsyncAppend,
        size: int,
        e: GazetteError,
        attempt: int,
        failing_since: float,
    ) -> bool:
        """After a retryable error ``e``: finish ``aa`` (and fail the journal when retrying is
        pointless) and say so, or say the RPC is to be tried again."""
        if (self._max_attempts is not None and attempt + 1 >= self._max_attempts) or self._closing:
            aa._finish(error=e)  # this append's attempts are spent; the journal is not failed
            return True
        terminal = self._gives_up(journal, size, e, attempt, failing_since)
        if terminal is not None:
            self._fail_journal(chain, aa, terminal)
            return True
        return False

    @staticmethod
    def _failed_dependency(journal: str, aa: AsyncAppend) -> GazetteError | None:
        """Wait for ``aa``'s dependencies; the error to fail it with if one of them failed."""
        for dep in aa.dependencies:
            dep._done.wait()
            if dep.error is not None:
                return GazetteError(
                    f"append to {journal!r} failed: a dependency append to {dep.journal!r} failed: {dep.error}"
                )
        return None

    def _attempt(self, app: Appender, aa: AsyncAppend, size: int) -> pb.Fragment | None:
        """One Append RPC of ``aa``'s first ``size`` bytes; aborted if it fails."""
        # Links are keyed by their parameters without it: the revision is the one seen by now.
        aa.request.min_etcd_revision = self._conns.min_etcd_revision(aa.journal)
        app.request = aa.request
        try:
            sent = 0
            for chunk in aa.chunks(size, APPEND_CHUNK_BYTES):
                app.write(chunk)
                sent += len(chunk)
            if sent != size:
                raise GazetteError(f"append buffer of {app.journal!r} is shorter than {size} bytes")
            return app.close()
        except GazetteError:
            app.abort()
            raise

    def _gives_up(
        self, journal: str, size: int, e: GazetteError, attempt: int, failing_since: float
    ) -> GazetteError | None:
        """The journal's terminal error when retrying ``e`` is pointless: nothing answers at the
        configured address, or the retries have gone on past ``broker_timeout``; else None."""
        gone = self._conns.unreachable(f"append of {size} bytes to {journal!r}", e, attempt, failing_since)
        if gone is not None:
            return gone
        now, budget = time.monotonic(), self._conns.config.broker_timeout
        if budget and now - failing_since > budget:
            timeout = BrokerTimeoutError(
                f"append of {size} bytes to {journal!r}",
                "UNAVAILABLE",
                f"no broker took it for {now - failing_since:.0f}s, more than broker.timeout "
                f"({budget:g}s); last error: {e}",
            )
            timeout.__cause__ = e
            return timeout
        return None

    def _before_retry(self, journal: str, app: Appender, size: int, e: GazetteError, attempt: int) -> None:
        """Forget the route (and the endpoint that did not answer), report, and back off."""
        unavailable = isinstance(e, TransportError) and e.code == "UNAVAILABLE"
        self._conns.endpoint_failed(journal, (app.endpoint or None) if unavailable else None)
        log.log(
            logging.WARNING if self._conns.answered else logging.DEBUG,  # a wrong address is one error
            "append of %d bytes to %s failed (attempt %d), retrying: %s",
            size,
            journal,
            attempt,
            e,
        )
        time.sleep(backoff(attempt))

    @staticmethod
    def _fail_journal(chain: _Chain, aa: AsyncAppend, error: BaseException) -> None:
        """A terminal error: it fails ``aa`` and every later append to the journal."""
        with chain.cond:
            chain.error = error
            chain.cond.notify_all()
        aa._finish(error=error)
