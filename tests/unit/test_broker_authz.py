"""Unit tests of the servicer's auth glue (pyspark_gazette.broker.authz) with stand-in contexts."""

from __future__ import annotations

import base64
import threading
import time

import grpc
import pytest

from pyspark_gazette.broker.authz import Authorizer, _ExpiryCanceller
from pyspark_gazette.protocol.auth import LIST, READ, KeySet, mint_token

KEY = base64.b64encode(b"authz-unit-key").decode()


class Aborted(Exception):
    pass


class FakeContext:
    """The parts of grpc.ServicerContext the authorizer uses."""

    def __init__(self, metadata=()):
        self.metadata = list(metadata)
        self.callbacks: list = []
        self.cancelled = threading.Event()
        self.aborted: tuple | None = None

    def invocation_metadata(self):
        return self.metadata

    def abort(self, code, details):
        self.aborted = (code, details)
        raise Aborted(details)

    def add_callback(self, cb):
        self.callbacks.append(cb)
        return True

    def cancel(self):
        self.cancelled.set()

    def finish(self):
        for cb in self.callbacks:
            cb()


def test_without_keys_everything_is_admitted_and_nothing_scheduled():
    auth = Authorizer(None)
    ctx = FakeContext()
    assert auth.verify(ctx, READ, "Read") is None and not ctx.callbacks and not auth.enabled


def test_codes_for_bad_tokens_and_missing_capabilities():
    auth = Authorizer(KeySet.parse(KEY))
    try:
        ctx = FakeContext()
        with pytest.raises(Aborted):
            auth.verify(ctx, READ, "Read")
        assert ctx.aborted[0] == grpc.StatusCode.UNAUTHENTICATED and ctx.aborted[1].startswith("Read: missing")
        ctx = FakeContext([("authorization", f"Bearer {mint_token(KEY, LIST)}")])
        with pytest.raises(Aborted):
            auth.verify(ctx, READ, "Read")
        assert ctx.aborted[0] == grpc.StatusCode.UNAUTHENTICATED and "READ" in ctx.aborted[1]
        ctx = FakeContext([("authorization", f"Bearer {mint_token(KEY, READ)}")])
        assert auth.verify(ctx, READ, "Read").capability == READ
        assert len(ctx.callbacks) == 1  # the expiry watch, removed when the RPC ends
        ctx.finish()
    finally:
        auth.stop()


def test_expired_calls_are_cancelled_and_finished_ones_are_not():
    canceller = _ExpiryCanceller()
    try:
        soon, later, done = FakeContext(), FakeContext(), FakeContext()
        canceller.schedule(done, time.time() + 0.2)
        done.finish()  # ended before its token expired
        canceller.schedule(later, time.time() + 3600)
        canceller.schedule(soon, time.time() + 0.2)
        assert soon.cancelled.wait(10)
        assert not later.cancelled.is_set() and not done.cancelled.is_set()
    finally:
        canceller.stop()


def test_the_heap_is_compacted_as_calls_finish():
    canceller = _ExpiryCanceller()
    try:
        contexts = [FakeContext() for _ in range(500)]
        for ctx in contexts:
            canceller.schedule(ctx, time.time() + 3600)
        for ctx in contexts[:-3]:
            ctx.finish()
        assert canceller._live == 3
        assert len(canceller._heap) <= 2 * 64
    finally:
        canceller.stop()
