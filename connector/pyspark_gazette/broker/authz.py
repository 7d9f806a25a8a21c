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

Outcomes, and where they differ from Gazette:

* a missing, malformed, badly signed, expired or not-yet-valid token: gRPC ``UNAUTHENTICATED``
  (as Gazette);
* a valid token without the capability: gRPC ``PERMISSION_DENIED`` (Gazette answers
  ``UNAUTHENTICATED`` here too; PERMISSION_DENIED tells "who you are" apart from "what you may do");
* Read, Append and ListFragments of a journal the token's selector does not cover: the
  protocol status ``JOURNAL_NOT_FOUND``, exactly as Gazette, so a token never reveals which
  journals exist outside it;
* Apply of a journal outside the selector: gRPC ``PERMISSION_DENIED`` naming the journal
  (Gazette: ``UNAUTHENTICATED``). Upserts are matched with the new spec's labels plus its
  ``name``; deletes by name alone, as Gazette;
* List returns the journals matching both the request's selector and the token's (Gazette
  intersects the two the same way).

The token's expiry bounds the RPC: when ``exp`` (plus the leeway) passes, the broker cancels
the call, so a blocking Read or a List watch cannot outlive its token (Gazette sets the RPC's
deadline to ``exp``; the client sees ``CANCELLED`` here, ``DEADLINE_EXCEEDED`` there).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time

import grpc

from pyspark_gazette.protocol.auth import LEEWAY, Claims, KeySet, PermissionDeniedError, TokenError, verify_bearer

log = logging.getLogger(__name__)


class Authorizer:
    """Verifies calls for the servicer. Without keys it admits everything (``verify`` gives None)."""

    def __init__(self, keys: KeySet | None):
        self.keys = keys
        self._expiry = _ExpiryCanceller() if keys is not None else None

    @property
    def enabled(self) -> bool:
        return self.keys is not None

    def verify(self, context: grpc.ServicerContext, capability: int, rpc: str) -> Claims | None:
        """The caller's claims, or abort the RPC (UNAUTHENTICATED / PERMISSION_DENIED).

        Schedules the call's cancellation for when the token expires.
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
            context.abort(grpc.StatusCode.PERMISSION_DENIED, str(e))
        assert self._expiry is not None
        self._expiry.schedule(context, claims.exp + LEEWAY)
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
