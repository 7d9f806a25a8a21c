"""RetryReader and AppendService decision tables, with scripted stand-ins for one RPC.

The embedded broker cannot produce every status (routing statuses need a cluster), so these
unit tests replace the single-RPC classes (Reader, Appender) with scripts of outcomes.
"""

from __future__ import annotations

import threading

import pytest

from pyspark_gazette.client import append_service as svc_mod
from pyspark_gazette.client import reader as reader_mod
from pyspark_gazette.client.conn import ClientConfig, Connections
from pyspark_gazette.errors import (
    CancelledError,
    FragmentTooShortError,
    GazetteError,
    InsufficientJournalBrokersError,
    JournalNotFoundError,
    NotAllowedError,
    NotJournalBrokerError,
    OffsetJumpError,
    OffsetNotYetAvailableError,
    RegisterMismatchError,
    SuspendedError,
    TransportError,
    WrongAppendOffsetError,
)
from pyspark_gazette.protocol import pb


class ScriptedReader:
    """Stands in for Reader: each instance plays the next outcome list of the script."""

    script: list[list] = []
    made: list[ScriptedReader] = []

    def __init__(self, conns, journal, offset=0, *, end_offset=0, block=False, do_not_proxy=None, **_):
        self.request = pb.ReadRequest(
            journal=journal, offset=offset, end_offset=end_offset, block=block, do_not_proxy=bool(do_not_proxy)
        )
        self.offset = offset
        self.write_head = 0
        self.direct_bytes = 0
        self.outcomes = list(ScriptedReader.script.pop(0)) if ScriptedReader.script else []
        ScriptedReader.made.append(self)

    @property
    def journal(self):
        return self.request.journal

    def read(self, max_bytes=-1):
        if not self.outcomes:
            return b""  # the stream ended
        out = self.outcomes.pop(0)
        if isinstance(out, BaseException):
            raise out
        self.offset += len(out)
        return out

    def close(self):
        pass


@pytest.fixture
def scripted(monkeypatch):
    sleeps: list[float] = []
    monkeypatch.setattr(reader_mod, "Reader", ScriptedReader)
    monkeypatch.setattr(reader_mod.time, "sleep", sleeps.append)
    ScriptedReader.script, ScriptedReader.made = [], []
    return sleeps


def retry_reader(**kw):
    return reader_mod.RetryReader(Connections(ClientConfig("http://h:1")), "a/j", 0, **kw)


def test_routing_errors_are_retried_with_backoff(scripted):
    ScriptedReader.script = [
        [InsufficientJournalBrokersError()],
        [NotJournalBrokerError()],
        [TransportError("Read", "UNAVAILABLE")],
        [NotAllowedError()],  # retried forever, like Gazette's RetryReader
        [b"data"],
    ]
    r = retry_reader()
    assert r.read() == b"data"
    assert scripted == [0.05, 0.05, 0.1, 0.1]
    assert r.attempt == 0  # reset by a successful read


def test_journal_not_found_is_retried_three_times_then_surfaced(scripted):
    ScriptedReader.script = [[JournalNotFoundError()] for _ in range(4)]
    r = retry_reader()
    with pytest.raises(JournalNotFoundError):
        r.read()
    assert len(ScriptedReader.made) == 4


@pytest.mark.parametrize(
    "error",
    [
        SuspendedError(),
        CancelledError("Read", "DEADLINE_EXCEEDED"),
        OffsetJumpError("a/j", 0, 10),
        FragmentTooShortError("short", journal="a/j", begin=0, end=10),
    ],
)
def test_surfaced_errors(scripted, error):
    ScriptedReader.script = [[error]]
    with pytest.raises(type(error)):
        retry_reader().read()
    assert scripted == []


def test_offset_not_yet_available_surfaces_only_when_not_blocking(scripted):
    ScriptedReader.script = [[OffsetNotYetAvailableError()]]
    with pytest.raises(OffsetNotYetAvailableError):
        retry_reader().read()
    ScriptedReader.script = [[OffsetNotYetAvailableError()], [b"later"]]
    assert retry_reader(block=True).read() == b"later"
    assert scripted == []  # restarted quietly


def test_a_cleanly_closed_stream_restarts_at_once_from_the_current_offset(scripted):
    ScriptedReader.script = [[b"abc"], [b"de"]]
    r = retry_reader(end_offset=5, block=True)
    assert r.read() == b"abc"
    assert r.read() == b"de"  # the first stream ended after "abc"
    assert ScriptedReader.made[1].request.offset == 3 and scripted == []  # no backoff
    assert r.read() == b"" and r.eof


class ScriptedAppender:
    script: list = []
    sent: list[bytes] = []
    endpoint = ""  # never started: the retry forgets the route, no endpoint in particular

    def __init__(self, conns, journal, **params):
        self.journal = journal
        self.request = pb.AppendRequest(journal=journal)
        self.buf = b""

    def write(self, data):
        self.buf += data

    def close(self):
        out = ScriptedAppender.script.pop(0)
        if isinstance(out, BaseException):
            raise out
        ScriptedAppender.sent.append(self.buf)
        return pb.Fragment(journal=self.journal, begin=0, end=len(self.buf))

    def abort(self):
        pass


@pytest.fixture
def appender_script(monkeypatch):
    sleeps: list[float] = []
    monkeypatch.setattr(svc_mod, "Appender", ScriptedAppender)
    real_sleep = svc_mod.time.sleep

    def sleep(seconds: float) -> None:
        # time.sleep is process-wide: record only this test's journals' dispatch threads, so a
        # thread another test left behind (a client retrying a stopped broker) keeps sleeping.
        if threading.current_thread().name in ("gazette-append-a/j", "gazette-append-b/j"):
            sleeps.append(seconds)
        else:
            real_sleep(seconds)

    monkeypatch.setattr(svc_mod.time, "sleep", sleep)
    ScriptedAppender.script, ScriptedAppender.sent = [], []
    return sleeps


def test_append_service_retries_transient_errors_and_sends_the_same_bytes(appender_script):
    ScriptedAppender.script = [TransportError("Append", "UNAVAILABLE"), InsufficientJournalBrokersError(), "ok"]
    svc = svc_mod.AppendService(Connections(ClientConfig("http://h:1")))
    aa = svc.append("a/j", b"payload\n")
    assert aa.wait(10).end == 8
    assert ScriptedAppender.sent == [b"payload\n"] and appender_script == [0.05, 0.05]


@pytest.mark.parametrize(
    "error",
    [
        JournalNotFoundError(),
        NotAllowedError(),
        RegisterMismatchError(),
        WrongAppendOffsetError(),
        CancelledError("Append", "CANCELLED"),
    ],
)
def test_append_service_terminal_errors_fail_the_journal(appender_script, error):
    ScriptedAppender.script = [error, "ok"]
    svc = svc_mod.AppendService(Connections(ClientConfig("http://h:1")))
    with pytest.raises(type(error)):
        svc.append("a/j", b"x").wait(10)
    with pytest.raises(type(error)):
        svc.start_append("a/j")
    assert appender_script == []  # not retried
    assert svc.append("b/j", b"y").wait(10).end == 1  # other journals are unaffected


def test_append_service_bounded_attempts(appender_script):
    ScriptedAppender.script = [TransportError("Append", "UNAVAILABLE")] * 3
    svc = svc_mod.AppendService(Connections(ClientConfig("http://h:1")), max_attempts=3)
    with pytest.raises(TransportError):
        svc.append("a/j", b"x").wait(10)
    assert len(appender_script) == 2


class GatedAppender(ScriptedAppender):
    """A ScriptedAppender whose RPCs finish only once the test opens the gate."""

    gate = threading.Event()
    sending = threading.Event()  # set when an RPC is in flight (sealed, waiting on the gate)

    def close(self):
        GatedAppender.sending.set()
        assert GatedAppender.gate.wait(30), "the test never opened the gate"
        ScriptedAppender.sent.append(self.buf)
        return pb.Fragment(journal=self.journal, begin=0, end=len(self.buf))


def test_a_writer_waits_for_room_when_a_full_link_waits_behind_one_in_flight(monkeypatch):
    """Back-pressure: at most two links per journal (one being sent, one full); a third writer
    waits until the first finishes, then its bytes go in a new link, in order."""
    monkeypatch.setattr(svc_mod, "Appender", GatedAppender)
    ScriptedAppender.sent = []
    GatedAppender.gate, GatedAppender.sending = threading.Event(), threading.Event()
    svc = svc_mod.AppendService(Connections(ClientConfig("http://h:1")), max_batch_bytes=4)
    first = svc.append("a/j", b"aaaa")  # sent at once; its RPC waits on the gate
    assert GatedAppender.sending.wait(10) and first._sealed
    chain = svc._chains["a/j"]
    second = svc.append("a/j", b"bbbb")  # fills the next link to max_batch_bytes
    assert second is not first
    third: list = []
    writer = threading.Thread(target=lambda: third.append(svc.append("a/j", b"cccc")))
    writer.start()
    with chain.cond:  # the third writer waits for room, adding no link
        assert chain.cond.wait_for(lambda: svc.waits_for_room >= 1, 10)
        assert list(chain.links) == [first, second] and not third
    GatedAppender.gate.set()
    writer.join(10)
    assert not writer.is_alive() and third[0] is not second
    svc.flush(10)
    assert ScriptedAppender.sent == [b"aaaa", b"bbbb", b"cccc"]


def test_a_writer_waiting_for_room_gets_the_journals_error(monkeypatch):
    """A writer waiting for room is woken by the journal's terminal error and raises it."""

    class FailingGated(GatedAppender):
        def close(self):
            GatedAppender.sending.set()
            assert GatedAppender.gate.wait(30)
            raise NotAllowedError()

    monkeypatch.setattr(svc_mod, "Appender", FailingGated)
    GatedAppender.gate, GatedAppender.sending = threading.Event(), threading.Event()
    svc = svc_mod.AppendService(Connections(ClientConfig("http://h:1")), max_batch_bytes=4)
    first = svc.append("a/j", b"aaaa")
    assert GatedAppender.sending.wait(10) and first._sealed
    chain = svc._chains["a/j"]
    svc.append("a/j", b"bbbb")
    raised: list = []

    def write():
        try:
            svc.append("a/j", b"cccc")
        except NotAllowedError as e:
            raised.append(e)

    writer = threading.Thread(target=write)
    writer.start()
    with chain.cond:
        assert chain.cond.wait_for(lambda: svc.waits_for_room >= 1, 10)
    GatedAppender.gate.set()
    writer.join(10)
    assert not writer.is_alive() and len(raised) == 1


def _full_chain(max_batch: int) -> svc_mod._Chain:
    """A chain of two links, the tail full (``max_batch`` bytes) behind the head."""
    chain = svc_mod._Chain()
    request = pb.AppendRequest(journal="a/j")
    key = request.SerializeToString(deterministic=True)
    with chain.cond:
        head = chain.join(request, key, frozenset(), max_batch)
    assert head.take()
    head.write(b"h")
    head.release()
    head.seal()
    with chain.cond:
        tail = chain.join(request, key, frozenset(), max_batch)
    assert tail is not head and tail.take()
    tail.write(b"x" * max_batch)
    tail.release()
    return chain


@pytest.mark.parametrize("wake", ["head sent", "closed", "journal failed"])
def test_wait_for_room_blocks_while_the_tail_is_full_behind_the_head(wake):
    """The chain's back-pressure on its own: a writer waits while a full tail waits behind the
    head, and is let through when the head leaves the chain, or stopped by the service closing or
    the journal's terminal error."""
    chain = _full_chain(4)
    outcome: list = []

    def writer():
        with chain.cond:
            try:
                chain.wait_for_room(4)
                outcome.append("room")
            except Exception as e:  # noqa: BLE001 - the test checks which
                outcome.append(e)

    t = threading.Thread(target=writer)
    t.start()
    with chain.cond:
        assert chain.cond.wait_for(lambda: chain.waits_for_room == 1, 10)
        assert not outcome  # it waits, holding no link
        if wake == "head sent":
            chain.links.popleft()
            chain.cond.notify_all()
        elif wake == "journal failed":
            chain.error = NotAllowedError()
            chain.cond.notify_all()
    if wake == "closed":
        chain.close()
    t.join(10)
    assert not t.is_alive()
    if wake == "head sent":
        assert outcome == ["room"]
    elif wake == "closed":
        assert isinstance(outcome[0], GazetteError) and "closed" in str(outcome[0])
    else:
        assert isinstance(outcome[0], NotAllowedError)


def test_wait_for_room_does_not_wait_for_a_tail_that_is_next_to_be_sent():
    """One link only, however full, is the next sent: a writer starts the next link at once."""
    chain = svc_mod._Chain()
    request = pb.AppendRequest(journal="a/j")
    with chain.cond:
        only = chain.join(request, request.SerializeToString(deterministic=True), frozenset(), 4)
    assert only.take()
    only.write(b"x" * 4)
    only.release()
    with chain.cond:
        chain.wait_for_room(4)
    assert chain.waits_for_room == 0
