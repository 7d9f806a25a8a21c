"""Read-committed Sequencer: one test per row of facts sheet 5.4, replays, checkpoints."""

from __future__ import annotations

import json
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyspark_gazette.errors import SequencerError
from pyspark_gazette.message import NIL_UUID, TICK, Envelope, Flags, Outcome, Sequencer, build_uuid

A = bytes.fromhex("010000000001")
B = bytes.fromhex("030000000003")
OUT, C, K = Flags.OUTSIDE_TXN, Flags.CONTINUE_TXN, Flags.ACK_TXN
T0 = 1_000_000 * TICK


class Journal:
    """Assigns consecutive [begin, end) offsets, 10 bytes per message."""

    def __init__(self, name: str = "jj", start: int = 0):
        self.name, self.offset, self.log = name, start, []

    def __call__(self, producer: bytes, clock: int, flags: int, message=None) -> Envelope:
        env = Envelope(self.name, self.offset, self.offset + 10, producer, clock, flags, message)
        self.offset += 10
        self.log.append(env)
        return env

    def between(self, begin: int, end: int) -> list[Envelope]:
        return [e for e in self.log if e.begin >= begin and e.end <= end]


def c(n: int) -> int:
    return T0 + n * TICK


def drain(seq: Sequencer, **kw) -> list[str]:
    return [e.message for e in seq.dequeue(**kw)]


def queue(seq: Sequencer, env: Envelope, expect: Outcome) -> list[str]:
    assert seq.queue(env) is expect
    return drain(seq)


# --------------------------------------------------------------------------------------------
# One test per row of the table.


def test_row_clock_zero_always_commits_without_dedup():
    seq, j = Sequencer(), Journal()
    assert queue(seq, j(bytes(6), 0, OUT, "a"), Outcome.OUTSIDE_COMMIT) == ["a"]
    assert queue(seq, j(bytes(6), 0, OUT, "a-again"), Outcome.OUTSIDE_COMMIT) == ["a-again"]
    # A nil UUID has clock 0, whatever its "flags".
    assert queue(seq, Envelope.from_uuid("jj", 20, 30, NIL_UUID, "nil"), Outcome.OUTSIDE_COMMIT) == ["nil"]
    assert queue(seq, j(bytes(6), 0, C, "zero-continue"), Outcome.OUTSIDE_COMMIT) == ["zero-continue"]
    assert seq.checkpoint()["producers"] == []  # Not indexed.


def test_row_first_time_producer_seen():
    seq, j = Sequencer(), Journal()
    # min = max = clock - 1: a first CONTINUE begins a span, a first OUTSIDE commits.
    assert queue(seq, j(A, c(5), C, "a1"), Outcome.CONTINUE_BEGIN_SPAN) == []
    assert queue(seq, j(B, c(5), OUT, "b1"), Outcome.OUTSIDE_COMMIT) == ["b1"]
    state = {(p["producer"], p["last_ack"], p["begin"]) for p in seq.checkpoint()["producers"]}
    assert state == {(A.hex(), c(5) - 1, 0), (B.hex(), c(5), -1)}


def test_row_outside_duplicate_ignored():
    seq, j = Sequencer(), Journal()
    assert queue(seq, j(A, c(1), OUT, "a1"), Outcome.OUTSIDE_COMMIT) == ["a1"]
    assert queue(seq, j(A, c(1), OUT, "a1-dup"), Outcome.OUTSIDE_ALREADY_ACKED) == []
    assert queue(seq, j(A, c(0), OUT, "older"), Outcome.OUTSIDE_ALREADY_ACKED) == []
    assert seq.offsets == {"jj": 30}


def test_row_outside_commits_and_discards_pending_span(caplog):
    seq, j = Sequencer(), Journal()
    assert queue(seq, j(A, c(1), C, "a1"), Outcome.CONTINUE_BEGIN_SPAN) == []
    with caplog.at_level(logging.ERROR):
        assert queue(seq, j(A, c(2), OUT, "a2"), Outcome.OUTSIDE_COMMIT) == ["a2"]
    assert "discards a pending CONTINUE_TXN span" in caplog.text
    # The discarded span stays discarded: a later ACK of it is a rollback.
    assert queue(seq, j(A, c(1), K, "ack"), Outcome.ACK_ROLLBACK) == []


def test_row_continue_already_acked():
    seq, j = Sequencer(), Journal()
    queue(seq, j(A, c(1), C, "a1"), Outcome.CONTINUE_BEGIN_SPAN)
    assert queue(seq, j(A, c(2), K, "ack"), Outcome.ACK_COMMIT_RING) == ["a1", "ack"]
    assert queue(seq, j(A, c(1), C, "a1-dup"), Outcome.CONTINUE_ALREADY_ACKED) == []
    assert queue(seq, j(A, c(2), C, "at-ack"), Outcome.CONTINUE_ALREADY_ACKED) == []


def test_row_continue_duplicate_in_open_span():
    seq, j = Sequencer(), Journal()
    queue(seq, j(A, c(1), C, "a1"), Outcome.CONTINUE_BEGIN_SPAN)
    queue(seq, j(A, c(2), C, "a2"), Outcome.CONTINUE_EXTEND_SPAN)
    assert queue(seq, j(A, c(2), C, "a2-dup"), Outcome.CONTINUE_DUPLICATE) == []
    assert queue(seq, j(A, c(1), C, "a1-dup"), Outcome.CONTINUE_DUPLICATE) == []
    assert queue(seq, j(A, c(3), K, "ack"), Outcome.ACK_COMMIT_RING) == ["a1", "a2", "ack"]


def test_row_continue_begins_or_extends_span():
    seq, j = Sequencer(), Journal()
    assert seq.queue(j(A, c(1), C, "a1")) is Outcome.CONTINUE_BEGIN_SPAN
    assert seq.queue(j(A, c(2), C, "a2")) is Outcome.CONTINUE_EXTEND_SPAN
    assert not seq.pending_commit and seq.has_pending()
    assert seq.offsets == {"jj": 20}
    assert seq.checkpoint()["producers"] == [{"journal": "jj", "producer": A.hex(), "last_ack": c(1) - 1, "begin": 0}]


def test_row_ack_below_last_ack_is_a_logged_rollback(caplog):
    seq, j = Sequencer(), Journal()
    queue(seq, j(A, c(5), OUT, "a5"), Outcome.OUTSIDE_COMMIT)
    queue(seq, j(A, c(6), C, "a6"), Outcome.CONTINUE_BEGIN_SPAN)
    with caplog.at_level(logging.ERROR):
        assert queue(seq, j(A, c(3), K, "old-ack"), Outcome.ACK_ROLLBACK) == []
    assert "loss of exactly-once" in caplog.text
    # minClock was reset to the old ACK: clock 4 is new again, the span is gone.
    assert queue(seq, j(A, c(4), OUT, "a4"), Outcome.OUTSIDE_COMMIT) == ["a4"]


def test_row_ack_equal_to_last_ack_rolls_back_span():
    seq, j = Sequencer(), Journal()
    queue(seq, j(A, c(1), C, "a1"), Outcome.CONTINUE_BEGIN_SPAN)
    queue(seq, j(A, c(2), K, "ack"), Outcome.ACK_COMMIT_RING)
    queue(seq, j(A, c(3), C, "a3"), Outcome.CONTINUE_BEGIN_SPAN)
    assert queue(seq, j(A, c(2), K, "ack-again"), Outcome.ACK_ROLLBACK) == []
    assert not seq.has_pending()
    # The rolled-back message is not committed by a later ACK.
    assert queue(seq, j(A, c(4), K, "ack2"), Outcome.ACK_EMPTY) == ["ack2"]


def test_row_empty_ack_commits_itself():
    seq, j = Sequencer(), Journal()
    assert queue(seq, j(A, c(1), K, "ack"), Outcome.ACK_EMPTY) == ["ack"]
    assert seq.offsets == {"jj": 10}


def test_row_ack_commits_from_ring_and_drops_larger_clocks():
    seq, j = Sequencer(), Journal()
    queue(seq, j(A, c(1), C, "a1"), Outcome.CONTINUE_BEGIN_SPAN)
    queue(seq, j(B, c(1), C, "b1"), Outcome.CONTINUE_BEGIN_SPAN)
    queue(seq, j(A, c(2), C, "a2"), Outcome.CONTINUE_EXTEND_SPAN)
    queue(seq, j(A, c(4), C, "a4"), Outcome.CONTINUE_EXTEND_SPAN)
    # The ACK's clock (3) commits a1, a2; a4 (clock 4 > 3) is rolled back.
    assert queue(seq, j(A, c(3), K, "ackA"), Outcome.ACK_COMMIT_RING) == ["a1", "a2", "ackA"]
    assert seq.offsets == {"jj": 50}
    # B's interleaved span is untouched.
    assert queue(seq, j(B, c(2), K, "ackB"), Outcome.ACK_COMMIT_RING) == ["b1", "ackB"]
    # A's rolled back a4 is not committed by A's next ACK.
    assert queue(seq, j(A, c(5), K, "ackA2"), Outcome.ACK_EMPTY) == ["ackA2"]


def test_row_ack_partly_in_ring_needs_replay():
    seq, j = Sequencer(ring_size=3), Journal()
    queue(seq, j(A, c(1), C, "a1"), Outcome.CONTINUE_BEGIN_SPAN)
    queue(seq, j(B, c(1), OUT, "b1"), Outcome.OUTSIDE_COMMIT)
    queue(seq, j(A, c(2), C, "a2"), Outcome.CONTINUE_EXTEND_SPAN)
    queue(seq, j(B, c(2), OUT, "b2"), Outcome.OUTSIDE_COMMIT)  # Evicts a1 from the ring.
    assert seq.queue(j(A, c(3), K, "ack")) is Outcome.ACK_COMMIT_REPLAY
    assert seq.replay_range() == ("jj", 0, 20)
    with pytest.raises(SequencerError, match="replay"):
        list(seq.dequeue())
    seq.replay(j.between(0, 20))  # Holds b1 too: other producers are skipped.
    assert drain(seq) == ["a1", "a2", "ack"]
    assert seq.offsets == {"jj": 50}
    assert seq.replay_range() is None


# --------------------------------------------------------------------------------------------
# Dequeue behaviour.


def test_acks_can_be_skipped():
    seq, j = Sequencer(), Journal()
    seq.queue(j(A, c(1), C, "a1"))
    seq.queue(j(A, c(2), K, "ack"))
    envs = list(seq.dequeue(include_acks=False))
    assert [e.message for e in envs] == ["a1"]
    assert not any(e.is_ack for e in envs)
    assert seq.offsets == {"jj": 20}


def test_queue_while_commit_pending_is_an_error():
    seq, j = Sequencer(), Journal()
    seq.queue(j(A, c(1), OUT, "a1"))
    with pytest.raises(SequencerError, match="dequeue"):
        seq.queue(j(A, c(2), OUT, "a2"))
    with pytest.raises(SequencerError, match="checkpoint"):
        seq.checkpoint()


def test_abandoned_dequeue_resumes_with_unprocessed_message():
    seq, j = Sequencer(), Journal()
    for n in (1, 2, 3):
        seq.queue(j(A, c(n), C, f"a{n}"))
    seq.queue(j(A, c(4), K, "ack"))
    it = seq.dequeue()
    assert next(it).message == "a1"
    assert next(it).message == "a2"
    it.close()  # a2 was not acknowledged by asking for the next message.
    assert drain(seq) == ["a2", "a3", "ack"]


def test_unknown_flags_are_treated_as_outside(caplog):
    seq, j = Sequencer(), Journal()
    with caplog.at_level(logging.ERROR):
        assert queue(seq, j(A, c(1), 0x3, "odd"), Outcome.OUTSIDE_COMMIT) == ["odd"]
    assert "unexpected UUID flags" in caplog.text


def test_envelope_from_uuid():
    u = build_uuid(A, c(7), Flags.ACK_TXN)
    env = Envelope.from_uuid("jj", 1, 2, u, "m")
    assert (env.producer, env.clock, env.flags, env.is_ack) == (A, c(7), K, True)


def test_replay_validation():
    seq, j = Sequencer(ring_size=1), Journal()
    seq.queue(j(A, c(1), C, "a1"))
    seq.queue(j(A, c(2), C, "a2"))
    seq.queue(j(A, c(3), K, "ack"))
    assert seq.replay_range() == ("jj", 0, 20)
    seq.replay([Envelope("other", 0, 10, A, c(1), C)])
    with pytest.raises(SequencerError, match="wrong|journal"):
        drain(seq)
    seq.replay([Envelope("jj", 10, 30, A, c(2), C)])
    with pytest.raises(SequencerError, match="past 20"):
        drain(seq)
    # Duplicates and clock-0 messages (committed on their own) inside a replay are skipped.
    dup = Envelope("jj", 10, 15, A, c(1), C, "a1-dup")
    zero = Envelope("jj", 10, 10, A, 0, OUT, "zero")
    seq.replay([j.log[0], zero, dup, Envelope("jj", 15, 20, A, c(2), C, "a2")])
    assert drain(seq) == ["a1", "a2", "ack"]


def test_replay_not_needed_is_an_error():
    seq = Sequencer()
    with pytest.raises(SequencerError, match="no replay"):
        seq.replay([])
    with pytest.raises(SequencerError):
        Sequencer(ring_size=0)


def test_sequence_helper_with_replay_reader():
    j = Journal()
    envs = [
        j(A, c(1), C, "a1"),
        j(B, c(1), OUT, "b1"),
        j(A, c(2), C, "a2"),
        j(B, c(2), OUT, "b2"),
        j(A, c(3), K, "ack"),
    ]
    calls = []

    def reader(journal, begin, end):
        calls.append((journal, begin, end))
        return j.between(begin, end)

    seq = Sequencer(ring_size=2)
    got = [e.message for e in seq.sequence(envs, reader, include_acks=False)]
    assert got == ["b1", "b2", "a1", "a2"]
    assert calls == [("jj", 0, 40)]
    with pytest.raises(SequencerError, match="replay_reader"):
        list(Sequencer(ring_size=1).sequence([j(A, c(9), C), j(A, c(10), C), j(A, c(11), K)]))


# --------------------------------------------------------------------------------------------
# Checkpoints.


def test_checkpoint_restore_commits_open_transaction_via_replay():
    j = Journal()
    seq = Sequencer(ring_size=16)
    seq.queue(j(A, c(1), C, "a1"))
    assert drain_queue(seq, j(B, c(1), OUT, "b1")) == ["b1"]
    seq.queue(j(A, c(2), C, "a2"))
    state = json.loads(json.dumps(seq.checkpoint()))  # Must be JSON-able.
    assert state["offsets"] == {"jj": 30}
    assert {p["producer"]: p["begin"] for p in state["producers"]} == {A.hex(): 0, B.hex(): -1}

    # A new micro-batch, possibly another process: resume reading at the offsets.
    seq2 = Sequencer(ring_size=16, initial=state)
    assert seq2.offsets == {"jj": 30}
    assert seq2.has_pending()
    seq2.queue(j(A, c(3), C, "a3"))
    assert seq2.queue(j(A, c(4), K, "ack")) is Outcome.ACK_COMMIT_REPLAY
    assert seq2.replay_range() == ("jj", 0, 30)
    seq2.replay(j.between(0, 30))
    assert drain(seq2) == ["a1", "a2", "a3", "ack"]
    assert seq2.offsets == {"jj": 50}
    # Duplicates of the committed transaction are ignored after the commit.
    assert seq2.queue(j(A, c(2), C, "a2-dup")) is Outcome.CONTINUE_ALREADY_ACKED
    assert seq2.queue(j(B, c(1), OUT, "b1-dup")) is Outcome.OUTSIDE_ALREADY_ACKED


def drain_queue(seq: Sequencer, env: Envelope) -> list[str]:
    seq.queue(env)
    return drain(seq)


def test_checkpoint_restore_after_commit_keeps_dedup():
    j = Journal()
    seq = Sequencer()
    seq.queue(j(A, c(1), C, "a1"))
    seq.queue(j(A, c(2), K, "ack"))
    assert drain(seq) == ["a1", "ack"]
    state = seq.checkpoint()
    assert state["producers"] == [{"journal": "jj", "producer": A.hex(), "last_ack": c(2), "begin": -1}]
    seq2 = Sequencer(initial=state)
    assert seq2.queue(j(A, c(2), K, "ack-again")) is Outcome.ACK_ROLLBACK
    assert seq2.queue(j(A, c(1), C, "a1-again")) is Outcome.CONTINUE_ALREADY_ACKED
    assert drain_queue(seq2, j(A, c(3), OUT, "a3")) == ["a3"]


def test_checkpoint_rollback_of_open_transaction_after_restore():
    j = Journal()
    seq = Sequencer()
    seq.queue(j(A, c(1), OUT, "a1"))
    drain(seq)
    seq.queue(j(A, c(2), C, "a2"))
    seq2 = Sequencer(initial=seq.checkpoint())
    # The producer recovered an older checkpoint and re-sent its ACK of clock 1: roll back.
    assert seq2.queue(j(A, c(1), K, "re-ack")) is Outcome.ACK_ROLLBACK
    assert not seq2.has_pending()


def test_checkpoint_prune_horizon():
    j = Journal()
    seq = Sequencer()
    old, new = bytes.fromhex("050000000005"), bytes.fromhex("070000000007")
    hour = 3600 * 10_000_000 << 4
    drain_queue(seq, j(old, c(1), OUT, "old"))
    drain_queue(seq, j(new, c(1) + 2 * hour, OUT, "new"))
    other = Journal("kk")
    drain_queue(seq, other(old, c(1), OUT, "old-in-kk"))
    assert len(seq.checkpoint()["producers"]) == 3
    assert len(seq.checkpoint(prune_horizon=3 * 3600)["producers"]) == 3
    state = seq.checkpoint(prune_horizon=3600)
    assert {(p["journal"], p["producer"]) for p in state["producers"]} == {("jj", new.hex()), ("kk", old.hex())}


@pytest.mark.parametrize(
    "state",
    [
        {"version": 2},
        {"producers": [{"journal": "jj"}]},
        {"producers": [{"journal": "jj", "producer": "zz", "last_ack": 1, "begin": -1}]},
        {"producers": [{"journal": "jj", "producer": "0102", "last_ack": 1, "begin": -1}]},
        {"offsets": {"jj": "x"}},
    ],
)
def test_malformed_checkpoint(state):
    with pytest.raises(SequencerError):
        Sequencer(initial=state)


# --------------------------------------------------------------------------------------------
# Property: interleaved producers, duplicates, tiny rings, checkpoints at random points.


@settings(max_examples=200, deadline=None)
@given(data=st.data(), ring_size=st.integers(1, 6))
def test_property_exactly_once_per_producer(data, ring_size):
    producers = [bytes([2 * i + 1, 0, 0, 0, 0, i]) for i in range(3)]
    clocks = dict.fromkeys(producers, T0)
    open_txn: dict[bytes, list[str]] = {p: [] for p in producers}
    expected: dict[bytes, list[str]] = {p: [] for p in producers}
    written: list[Envelope] = []
    last_ack: dict[bytes, Envelope] = {}
    rolled_back: set[str] = set()
    j = Journal()

    for step in range(data.draw(st.integers(0, 40))):
        p = data.draw(st.sampled_from(producers))
        action = data.draw(st.sampled_from(["continue", "continue", "ack", "outside", "dup", "reack"]))
        if action == "reack":
            # The producer recovered its last checkpoint and re-sends its last ACK: the open
            # transaction is rolled back.
            if p in last_ack:
                j(p, last_ack[p].clock, K, last_ack[p].message)
                rolled_back.update(open_txn[p])
                open_txn[p] = []
            continue
        if action == "dup":
            candidates = [e for e in written if e.flags != K and e.message not in rolled_back]
            if candidates:
                e = data.draw(st.sampled_from(candidates))
                j(e.producer, e.clock, e.flags, e.message)
            continue
        clocks[p] += TICK
        name = f"{p[5]}:{step}"
        if action == "continue":
            written.append(j(p, clocks[p], C, name))
            open_txn[p].append(name)
        elif action == "ack":
            written.append(j(p, clocks[p], K, name))
            last_ack[p] = written[-1]
            expected[p] += [*open_txn[p], name]
            open_txn[p] = []
        elif not open_txn[p]:  # OUTSIDE_TXN only between transactions.
            written.append(j(p, clocks[p], OUT, name))
            expected[p].append(name)
            last_ack.pop(p, None)  # Re-sending an ACK older than this would lose exactly-once.

    got: dict[bytes, list[str]] = {p: [] for p in producers}
    seq = Sequencer(ring_size=ring_size)
    i = 0
    while i < len(j.log):
        if data.draw(st.booleans()):
            seq = Sequencer(ring_size=ring_size, initial=json.loads(json.dumps(seq.checkpoint())))
            resume = seq.offsets.get("jj", 0)
            i = next((k for k, e in enumerate(j.log) if e.begin >= resume), len(j.log))
            if i == len(j.log):
                break
        seq.queue(j.log[i])
        rng = seq.replay_range()
        if rng is not None:
            seq.replay(j.between(rng[1], rng[2]))
        for env in seq.dequeue():
            got[env.producer].append(env.message)
        i += 1
    assert got == expected
