"""Authorization of each RPC the embedded broker serves (the gRPC side of :mod:`.auth`).

With auth keys configured, every RPC first verifies the caller's bearer token and the
capability its kind needs (as Gazette's ``VerifiedJournalServer``):

==========================================  ===========
RPC                                         capability
==========================================  ===========
List                                        LIST
Apply                                       APPLY
Read, ListFragments, FragmentStoreHealth    READ
Append                                      APPEND
Replicate                                   REPLICATE
==========================================  ===========

Outcomes, as Gazette's (checked against gazette v0.103.0 in ``tests/oracle/test_auth_oracle.py``):

* a missing, malformed, badly signed, expired or not-yet-valid token: gRPC ``UNAUTHENTICATED``;
* a valid token without the capability: gRPC ``UNAUTHENTICATED`` too, naming the capability;
* Read, Append and ListFragments of a journal the token's selector does not cover: the
  protocol status ``JOURNAL_NOT_FOUND``, so a token never reveals which journals exist outside it;
* Apply of a journal outside the selector: gRPC ``UNAUTHENTICATED`` naming the journal. Upserts
  are matched with the new spec's labels plus its ``name``; deletes by name alone;
* List returns the journals matching both the request's selector and the token's.

The token's expiry bounds the RPC, as Gazette's deadline at ``exp`` does: a Read or a List
serves what is there and, where it would wait past ``exp``, ends cleanly (status OK: Gazette
suppresses its own deadline on these long-lived streams). Any other call made with a token past
``exp`` (accepted within the leeway) fails with ``DEADLINE_EXCEEDED``, as Gazette's; one still
running when ``exp`` passes is cancelled (``CANCELLED``: a gRPC server cannot set another
thread's call to a deadline status). The client restarts a cleanly ended Read and is then
refused with ``UNAUTHENTICATED`` once the 5 s leeway has passed.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time

import grpc

from pyspark_gazette.protocol.auth import Claims, KeySet, PermissionDeniedError, TokenError, verify_bearer

log = logging.getLogger(__name__)


class Authorizer:
    """Verifies calls for the servicer. Without keys it admits everything (``verify`` gives None)."""

    def __init__(self, keys: KeySet | None):
        self.keys = keys
        self._expiry = _ExpiryCanceller() if keys is not None else None

    @property
    def enabled(self) -> bool:
        return self.keys is not None

    def verify(
        self, context: grpc.ServicerContext, capability: int, rpc: str, *, ends_at_expiry: bool = False
    ) -> Claims | None:
        """The caller's claims, or abort the RPC with ``UNAUTHENTICATED``.

        Schedules the call's cancellation for when the token expires, unless ``ends_at_expiry``:
        the handler (a blocking Read, a List watch) then ends itself cleanly at ``claims.exp``.
        """
        if self.keys is None:
            return None
        values = [v for k, v in (context.invocation_metadata() or ()) if k == "authorization"]
        try:
            claims = verify_bearer(values, self.keys)
            claims.require(capability, rpc)
        except TokenError as e:
            log.info("%s refused: %s", rpc, e)
            context.abort(grpc.StatusCode.UNAUTHENTICATED, f"{rpc}: {e}")
        except PermissionDeniedError as e:
            log.info("%s refused: %s", rpc, e)
            context.abort(grpc.StatusCode.UNAUTHENTICATED, str(e))
        assert self._expiry is not None
        if not ends_at_expiry:
            if claims.exp <= time.time():  # accepted within the leeway, but its deadline is gone
                context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, f"{rpc}: context deadline exceeded")
            self._expiry.schedule(context, claims.exp)
        return claims

    def stop(self) -> None:
        if self._expiry is not None:
            self._expiry.stop()


class _ExpiryCanceller:
    """One thread cancelling RPCs whose tokens expired (a heap of deadlines, started lazily).

    An RPC that ends first empties its entry; the heap is compacted when most entries are
    empty, so it holds about as many entries as RPCs in flight.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, list]] = []
        self._live = 0
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def schedule(self, context: grpc.ServicerContext, deadline: float) -> None:
        entry: list = [context]

        def done() -> None:
            with self._cond:
                if entry:
                    entry.clear()
                    self._live -= 1
                    if len(self._heap) > 64 and len(self._heap) > 2 * self._live:
                        self._heap = [e for e in self._heap if e[2]]
                        heapq.heapify(self._heap)

        with self._cond:
            if self._stopped:
                return
            heapq.heappush(self._heap, (deadline, next(self._seq), entry))
            self._live += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="gazette-token-expiry", daemon=True)
                self._thread.start()
            self._cond.notify()
        if not context.add_callback(done):
            done()  # the RPC is already over

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped:
                    if self._heap and not self._heap[0][2]:
                        heapq.heappop(self._heap)  # that RPC ended already
                        continue
                    now = time.time()
                    if self._heap and self._heap[0][0] <= now:
                        break
                    self._cond.wait(self._heap[0][0] - now if self._heap else None)
                if self._stopped:
                    return
                _, _, entry = heapq.heappop(self._heap)
                context = entry[0]
            log.info("cancelling an RPC: its token expired")
            context.cancel()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify()


def expired(deadline: float | None) -> bool:
    """Whether a token's expiry (``None``: no token) has passed."""
    return deadline is not None and time.time() >= deadline


def time_left(deadline: float | None) -> float | None:
    """How long a wait may last before a token's expiry (``None``: unbounded)."""
    return None if deadline is None else max(0.0, deadline - time.time())
