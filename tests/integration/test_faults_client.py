"""Slow clients (issue #7): an appender that stalls mid-append is aborted by the broker's minimum
append rate, nothing of it becomes visible, and the client's retry does not duplicate content.

The broker allows one second of credit, then ``min_append_rate`` bytes/s (facts sheet 3.2). A
"stall" here is real: the content source blocks in ``read()`` until the broker has rolled the
append back (its ``rate_aborts`` counter moved), so no test waits on a clock of its own.
"""

from __future__ import annotations

import io
import threading
import time

import pytest

from pyspark_gazette.client import ClientConfig, Connections, append
from pyspark_gazette.client.appender import Appender
from pyspark_gazette.errors import TransportError
from pyspark_gazette.protocol import pb

RATE = 64 * 1024


def wait_until(condition, timeout: float = 30.0) -> bool:
    """Poll ``condition`` until it holds or ``timeout`` passes (there is no event to wait on)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


class StallingSource(io.RawIOBase):
    """Serves ``data`` in pieces of ``piece`` bytes; on its first pass it blocks after the
    first piece until ``release()`` is true. Later passes (after ``seek(0)``) never stall."""

    def __init__(self, data: bytes, piece: int, release):
        self._data, self._piece, self._release = data, piece, release
        self._pos = 0
        self.passes = 0
        self.stalls = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, pos: int, whence: int = 0) -> int:
        assert whence == 0
        self._pos = pos
        if pos == 0:
            self.passes += 1
        return pos

    def tell(self) -> int:
        return self._pos

    def read(self, n: int = -1) -> bytes:
        if self._pos == self._piece and self.passes == 1 and self.stalls == 0:
            self.stalls += 1
            assert wait_until(self._release), "the broker never aborted the stalled append"
        n = self._piece if n < 0 else min(n, self._piece)
        out = self._data[self._pos : self._pos + n]
        self._pos += len(out)
        return out


@pytest.fixture
def rate_broker(make_broker, gz):
    """The harness with a broker that enforces RATE bytes/s."""
    gz.restart(min_append_rate=RATE)
    return gz


@pytest.fixture
def conns(rate_broker):
    c = Connections(ClientConfig(rate_broker.broker.address))
    yield c
    c.close()


def lines(n: int, tag: str) -> bytes:
    return b"".join(f'{{"n":{i},"tag":"{tag}"}}\n'.encode() for i in range(n))


def test_stalled_appender_is_aborted_and_leaves_nothing(rate_broker, conns):
    gz = rate_broker
    j = gz.create("slow/stall").name
    core = gz.broker.core
    assert gz.append(j, b"first\n").status == pb.OK
    app = Appender(conns, j)
    app.write(b"partial-message-without-newline")  # starts the RPC; then the client stalls
    assert wait_until(lambda: core.rate_aborts == 1)
    # While the stalled append held the journal nobody else could append; now others can.
    assert gz.append(j, b"second\n").commit.begin == len(b"first\n")
    with pytest.raises(TransportError) as err:
        app.close()
    assert err.value.code == "UNKNOWN" and j in str(err.value)  # gazette v0.103.0 answers UNKNOWN
    assert "minimum append data rate" in str(err.value)
    assert gz.content(j) == b"first\nsecond\n"  # no byte of the stalled append


def test_concurrent_append_waits_for_the_abort_then_commits(rate_broker, conns):
    gz = rate_broker
    j = gz.create("slow/queue").name
    app = Appender(conns, j)
    app.write(b"stalled")
    result: list[pb.AppendResponse] = []
    other = threading.Thread(target=lambda: result.append(gz.append(j, b"queued\n")))
    other.start()
    assert wait_until(lambda: gz.broker.core.rate_aborts == 1)
    other.join(30)
    assert result and result[0].status == pb.OK and result[0].commit.begin == 0
    with pytest.raises(TransportError):
        app.close()
    assert gz.content(j) == b"queued\n"


def test_append_retry_after_a_rate_abort_writes_exactly_one_copy(rate_broker, conns):
    gz = rate_broker
    j = gz.create("slow/retry").name
    data = lines(2000, "once")
    source = StallingSource(data, 4096, release=lambda: gz.broker.core.rate_aborts >= 1)
    commit = append(conns, j, source)
    assert source.stalls == 1 and source.passes == 2  # stalled once, retried once
    assert gz.broker.core.rate_aborts == 1
    assert (commit.begin, commit.end) == (0, len(data))
    assert gz.content(j) == data  # exactly one copy
    assert gz.read(j, len(data))[-1].status == pb.OFFSET_NOT_YET_AVAILABLE


def test_rate_abort_is_not_retried_without_retries(rate_broker, conns):
    """``max_attempts=1`` surfaces the abort as a clear error instead of retrying."""
    gz = rate_broker
    j = gz.create("slow/once").name
    source = StallingSource(lines(500, "x"), 4096, release=lambda: gz.broker.core.rate_aborts >= 1)
    with pytest.raises(TransportError) as err:
        append(conns, j, source, max_attempts=1)
    assert "minimum append data rate" in str(err.value) and j in str(err.value)
    assert gz.content(j) == b""


def test_retry_reader_at_its_end_offset_is_done_without_an_rpc(gz):
    """A read restarted exactly at ``end_offset`` (the broker died right after the last chunk)
    ends at once: asking a broker to block at the write head would never be answered."""
    from pyspark_gazette.client import RetryReader

    j = gz.create("slow/end").name
    gz.append(j, b"0123456789")
    conns = Connections(ClientConfig(gz.broker.address))
    try:
        with RetryReader(conns, j, 10, end_offset=10, block=True) as r:
            assert r.read() == b"" and r.eof
        with RetryReader(conns, j, 4, end_offset=10, block=True) as r:
            assert r.read() == b"456789" and r.read() == b"" and r.eof
    finally:
        conns.close()
