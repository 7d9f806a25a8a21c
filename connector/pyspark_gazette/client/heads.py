"""Write heads of many journals: a concurrent sweep, and a watcher that keeps them current.

Gazette has no call that returns many journals' write heads: List carries specs and routes
(nothing that changes on an append) and a Read or ListFragments names one journal. So:

* :func:`write_head` asks one journal with a single metadata-only Read at offset ``-1``, sent
  straight to a route member when the route is known (List records every listed journal's
  route), and falls back to a :class:`~pyspark_gazette.client.reader.RetryReader` (retries,
  route changes, broker timeouts) on anything but a plain answer.
* :func:`route_heads` does that for many journals, :data:`SWEEP_WINDOW` Reads in flight at
  once, started without a thread each (measured at 5,000 journals on a real broker, a window of
  calls costs half to a third of what a pool of threads each making one call at a time does).
* :class:`HeadWatcher` keeps one **blocking** metadata-only Read open per watched journal at its
  last known write head. A broker answers such a read as soon as content at that offset is
  committed, with the new write head (Gazette's ``Index.Query``; the embedded broker the same),
  and the watcher re-arms the read there. Reading the heads of watched journals is then a
  dictionary look-up: an idle journal costs nothing between triggers. The watches of every
  watcher in the process run on one asyncio event loop (``grpc.aio``) in a daemon thread that
  lives as long as the process: grpc.aio binds its completion queue to the first loop that uses
  it, so a second loop (a query restarted in the same driver) must not replace a closed one. A watch that fails (broker restart,
  route change, journal deleted) forgets its journal, which the caller then sweeps again.
  Each open watch holds a stream on a broker: Gazette's Go brokers hold a goroutine each, the
  embedded broker a waiting worker thread each (up to its ``max_workers``, 16,384 by default).

A watched head can lag an append by the time its answer takes to arrive (a round trip); it is
never ahead of the broker's write head.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import grpc

from pyspark_gazette import testing
from pyspark_gazette.client.conn import Connections, backoff, open_aio_channel, parse_address
from pyspark_gazette.client.reader import RetryReader
from pyspark_gazette.errors import CancelledError, JournalNotFoundError, OffsetNotYetAvailableError
from pyspark_gazette.protocol import pb, pb_grpc

log = logging.getLogger(__name__)
_T = TypeVar("_T")

#: Metadata reads in flight at once in :func:`route_heads`.
SWEEP_WINDOW = 128


def write_head(conns: Connections, journal: str) -> int:
    """The write head of ``journal`` (see the module docstring)."""
    request = conns.read_request(journal, offset=-1, metadata_only=True)
    endpoint = conns.read_endpoint(journal)
    try:
        responses = list(conns.stub(endpoint).Read(request, **conns.call_kwargs()))
    except grpc.RpcError as e:
        conns.endpoint_failed(journal, endpoint if e.code() == grpc.StatusCode.UNAVAILABLE else None)
        responses = []
    if len(responses) == 1:
        resp = responses[0]
        if resp.HasField("header"):
            conns.update_route(journal, resp.header)
        if resp.status in (pb.OK, pb.OFFSET_NOT_YET_AVAILABLE):
            return resp.write_head
        if resp.status == pb.JOURNAL_NOT_FOUND:
            raise JournalNotFoundError(journal=journal)
    return _write_head_retrying(conns, journal)


#: Attempts of a write-head Read the broker cancelled, when the client has no ``broker_timeout``.
CANCELLED_ATTEMPTS = 8


def _write_head_retrying(conns: Connections, journal: str) -> int:
    """The write head by a :class:`~pyspark_gazette.client.reader.RetryReader` (which retries
    UNAVAILABLE and routing statuses), retrying also a Read the broker CANCELLED: a gRPC server
    cancels calls it could not take up in time (a busy embedded broker, a Go broker shedding
    load), which passes like UNAVAILABLE does. Retried with :func:`~pyspark_gazette.client.conn.backoff`
    for the client's ``broker_timeout`` (:data:`CANCELLED_ATTEMPTS` attempts without one)."""
    attempt, since = 0, time.monotonic()
    while True:
        # At the head nothing covers the offset: the broker answers OFFSET_NOT_YET_AVAILABLE with
        # the write head, which the reader keeps.
        try:
            with RetryReader(conns, journal, -1, metadata_only=True, do_not_proxy=False) as r:
                try:
                    r.read()
                except OffsetNotYetAvailableError:
                    pass
                return r.write_head
        except CancelledError as e:
            budget = conns.config.broker_timeout
            waited = time.monotonic() - since
            if (budget and waited >= budget) or (not budget and attempt + 1 >= CANCELLED_ATTEMPTS):
                raise
            log.info("write head of %s: %s; retrying (attempt %d)", journal, e, attempt + 1)
            time.sleep(backoff(attempt))
            attempt += 1


def concurrently(fn: Callable[[str], _T], names: Sequence[str], threads: int) -> dict[str, _T]:
    """``fn(name)`` for every name, ``threads`` calls at a time; the first error (in name order)
    is raised and the calls not yet started are dropped."""
    if len(names) <= 1 or threads <= 1:
        return {n: fn(n) for n in names}
    pool = ThreadPoolExecutor(max_workers=min(threads, len(names)), thread_name_prefix="gazette-sweep")
    try:
        futures = [pool.submit(fn, n) for n in names]
        return {n: f.result() for n, f in zip(names, futures, strict=True)}
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


class HeadMode(enum.Enum):
    """Whom :func:`route_heads` asks for a journal's write head.

    Gazette reports a broker's write head as the end of its fragment index: a member that
    joined the route after the last appends (even one that became primary) reports less until
    the members that acknowledged them persist, and those members report them. So the modes
    that ask several members keep the largest answer. A journal of one member (every journal
    of the embedded broker) costs one Read in every mode.
    """

    #: One Read to any member (the read endpoint); every journal gets a head or an error.
    MEMBER = "member"
    #: One Read to the primary when its route is known (the write head no acknowledged append
    #: lies beyond: :mod:`pyspark_gazette.client.settle`).
    PRIMARY = "primary"
    #: The primary and every other member of a known route, in the same window; the largest.
    EVERY_MEMBER = "every_member"
    #: The other members only (the caller has the primary's answer); a journal none of them
    #: answered is left out.
    OTHER_MEMBERS = "other_members"
    #: One member at a time, the primary first; after a failed call the bootstrap address (its
    #: answer names the route), then each member not asked yet; the largest answer, counting a
    #: returned fragment's end. A journal no member answered plainly is left out (the caller
    #: keeps what it knows). For a few journals whose head must be confirmed.
    CONFIRMED = "confirmed"


def route_heads(
    conns: Connections, names: Sequence[str], mode: HeadMode = HeadMode.MEMBER, window: int = SWEEP_WINDOW
) -> dict[str, int]:
    """The write head of every journal of ``names``, asked as ``mode`` says (:class:`HeadMode`):
    the one home of the rule "ask the route's members for their write heads, keep the largest".

    Except in :attr:`HeadMode.CONFIRMED`, up to ``window`` Reads are in flight: they are started
    without a thread each (gRPC runs a call as soon as it is made) and their answers taken in
    order; a journal whose first Read's answer is not a plain write head is asked again with
    :func:`write_head`'s retrying fallback, so the first error (in name order) is raised. The
    other members' failures are left out (the journal keeps the largest plain answer).
    """
    if mode is HeadMode.CONFIRMED:
        return {n: h for n in names if (h := _confirmed_head(conns, n)) is not None}
    if window <= 1 and mode is HeadMode.MEMBER:
        return {n: write_head(conns, n) for n in names}
    window = max(window, 1)
    kwargs = conns.call_kwargs()
    calls: collections.deque = collections.deque()  # (journal, endpoint, call, first of the journal)
    out: dict[str, int] = {}
    held = testing.armed_journals("heads")

    def take() -> None:
        journal, endpoint, call, first = calls.popleft()
        try:
            responses = list(call) if call is not None else []
        except grpc.RpcError as e:
            if first:
                conns.endpoint_failed(journal, endpoint if e.code() == grpc.StatusCode.UNAVAILABLE else None)
            responses = []
        if len(responses) == 1 and responses[0].status in (pb.OK, pb.OFFSET_NOT_YET_AVAILABLE):
            resp = responses[0]
            if first and resp.HasField("header"):
                conns.update_route(journal, resp.header)
            out[journal] = max(out.get(journal, 0), resp.write_head)
        elif first:
            out[journal] = max(out.get(journal, 0), write_head(conns, journal))

    def start(journal: str, endpoint: str, first: bool) -> None:
        request = conns.read_request(journal, offset=-1, metadata_only=True)
        try:
            call = conns.stub(endpoint).Read(request, **kwargs)
        except grpc.RpcError:
            call = None
        calls.append((journal, endpoint, call, first))
        if len(calls) >= window:
            take()

    try:
        for journal in names:
            endpoint = conns.read_endpoint(journal) if mode is HeadMode.MEMBER else conns.append_endpoint(journal)
            route = conns.route(journal) if mode in (HeadMode.EVERY_MEMBER, HeadMode.OTHER_MEMBERS) else None
            others = [e for e in route.endpoints if e != endpoint] if route is not None else []
            if mode is HeadMode.OTHER_MEMBERS:
                for other in others:
                    start(journal, other, False)
                continue
            if journal in held:
                testing.rpc_hold("heads", journal, endpoint)
            start(journal, endpoint, True)
            for other in others:
                start(journal, other, False)
        while calls:
            take()
    finally:
        for _, _, call, _ in calls:
            if call is not None:
                call.cancel()
    return out


def _confirmed_head(conns: Connections, journal: str) -> int | None:
    """:attr:`HeadMode.CONFIRMED` for one journal: the largest write head ``journal``'s route
    members report, the primary first, or ``None`` when no plain answer came. A metadata-only
    Read at ``-1`` goes to the primary's endpoint when the route is known; else (or after a
    failed call) to the bootstrap address, whose answer names the route; then to each member not
    asked yet.

    Every member is asked because Gazette reports a broker's write head as the end of its
    fragment index, not of its spool: a member that joined the route after the last appends
    (even one that became primary, after Gazette's allocator moved the journal) reports less
    until the others persist, while a member that was in the appends' pipeline reports them."""
    endpoint = conns.append_endpoint(journal)
    best = None
    asked: set[str] = set()
    while endpoint and endpoint not in asked:
        asked.add(endpoint)
        head = _metadata_head(conns, journal, endpoint)
        if head is not None:
            best = max(best or 0, head)
        route = conns.route(journal)
        # After a failed call the route is forgotten: the bootstrap address comes next.
        members = [primary_endpoint(conns, journal), *(route.endpoints if route is not None else ())]
        members.append(conns.append_endpoint(journal))
        endpoint = next((e for e in members if e and e not in asked), "")
    return best


def _metadata_head(conns: Connections, journal: str, endpoint: str) -> int | None:
    request = conns.read_request(journal, offset=-1, metadata_only=True)
    try:
        responses = list(conns.stub(endpoint).Read(request, **conns.call_kwargs(conns.config.timeout or 30.0)))
    except grpc.RpcError as e:
        conns.endpoint_failed(journal, endpoint if e.code() == grpc.StatusCode.UNAVAILABLE else None)
        return None
    if len(responses) == 1 and responses[0].status in (pb.OK, pb.OFFSET_NOT_YET_AVAILABLE):
        resp = responses[0]
        if resp.HasField("header"):
            conns.update_route(journal, resp.header)
        return max(resp.write_head, resp.fragment.end if resp.HasField("fragment") else 0)
    return None


def primary_endpoint(conns: Connections, journal: str) -> str:
    route = conns.route(journal)
    if route is not None and 0 <= route.primary < len(route.endpoints):
        return route.endpoints[route.primary]
    return ""


_loop_lock = threading.Lock()
_shared_loop: tuple[int, asyncio.AbstractEventLoop] | None = None  # (pid, loop)


def _watch_loop() -> asyncio.AbstractEventLoop:
    """The process's event loop for watches (see the module docstring), started on first use
    (again in a forked child, which has the parent's loop object but not its thread)."""
    global _shared_loop
    with _loop_lock:
        if _shared_loop is None or _shared_loop[0] != os.getpid():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="gazette-heads", daemon=True).start()
            _shared_loop = (os.getpid(), loop)
        return _shared_loop[1]


class HeadWatcher:
    """Write heads of journals kept current by blocking metadata-only Reads (module docstring).

    :meth:`watch` starts watching journals from heads the caller learned (a sweep);
    :meth:`heads` returns the current heads of the watched journals it is asked about;
    :meth:`unwatch` and :meth:`close` end watches. Thread-safe.
    """

    def __init__(self, conns: Connections):
        self._conns = conns
        self._lock = threading.Lock()
        self._heads: dict[str, int] = {}
        self._tasks: dict[str, asyncio.Task] = {}
        self._closed = False
        self._loop = _watch_loop()
        self._channels: dict[str, grpc.aio.Channel] = {}  # used on the loop only

    def __enter__(self) -> HeadWatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def heads(self, names: Sequence[str]) -> dict[str, int]:
        """The known heads of the watched journals among ``names`` (others are left out)."""
        with self._lock:
            return {n: self._heads[n] for n in names if n in self._heads}

    def watched(self) -> set[str]:
        with self._lock:
            return set(self._heads)

    def watch(self, heads: dict[str, int]) -> None:
        """Watch each journal of ``heads`` from its given write head (journals already watched
        keep their watch)."""
        with self._lock:
            if self._closed:
                return
            new = {j: h for j, h in heads.items() if j not in self._heads}
            self._heads.update(new)
        if new:
            asyncio.run_coroutine_threadsafe(self._start(new), self._loop).result()

    def unwatch(self, names: Sequence[str]) -> None:
        with self._lock:
            for n in names:
                self._heads.pop(n, None)
        asyncio.run_coroutine_threadsafe(self._cancel(list(names)), self._loop).result()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            names = list(self._heads)
            self._heads.clear()
        asyncio.run_coroutine_threadsafe(self._shutdown(names), self._loop).result(timeout=30)

    # -- on the loop -------------------------------------------------------------------------

    async def _start(self, heads: dict[str, int]) -> None:
        for journal, head in heads.items():
            if journal not in self._tasks:
                self._tasks[journal] = asyncio.get_running_loop().create_task(self._watch(journal, head))

    async def _cancel(self, names: list[str]) -> None:
        tasks = [t for t in (self._tasks.pop(n, None) for n in names) if t is not None]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _shutdown(self, names: list[str]) -> None:
        await self._cancel(list(self._tasks))
        for ch in self._channels.values():
            await ch.close()
        self._channels.clear()

    def _stub(self, endpoint: str) -> pb_grpc.JournalStub:
        ch = self._channels.get(endpoint)
        if ch is None:
            ch = self._channels[endpoint] = open_aio_channel(parse_address(endpoint))
        return pb_grpc.JournalStub(ch)

    async def _watch(self, journal: str, head: int) -> None:
        md = self._conns.metadata()
        kwargs = {"metadata": md} if md else {}
        try:
            while True:
                request = self._conns.read_request(journal, offset=head, block=True, metadata_only=True)
                call = self._stub(self._conns.read_endpoint(journal)).Read(request, **kwargs)
                resp = await call.read()
                call.cancel()
                if resp is grpc.aio.EOF or resp.status != pb.OK:
                    log.debug("head watch of %r ended: %s", journal, getattr(resp, "status", "EOF"))
                    return
                if resp.HasField("header"):
                    self._conns.update_route(journal, resp.header)
                new = max(resp.write_head, resp.fragment.end, head)
                if new == head:  # nothing new is covered: the broker would answer at once again
                    return
                head = new
                with self._lock:
                    if journal not in self._heads:
                        return
                    self._heads[journal] = head
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a broker went away, a route moved: the caller sweeps it again
            log.debug("head watch of %r failed: %s", journal, e)
        finally:
            if self._tasks.get(journal) is asyncio.current_task():  # not cancelled by unwatch
                del self._tasks[journal]
                with self._lock:
                    self._heads.pop(journal, None)
