"""The one statement of Gazette's producer sequencing rule (message/producer.py): each row of its
table, the state after each outcome, and what is reported."""

from __future__ import annotations

import pytest

from pyspark_gazette.message import Flags, Outcome
from pyspark_gazette.message.producer import ACK_BELOW_LAST_ACK, DISCARDS_SPAN, ProducerState, decide, reports

C, A, OUT = Flags.CONTINUE_TXN, Flags.ACK_TXN, Flags.OUTSIDE_TXN


@pytest.mark.parametrize(
    ("state", "clock", "flags", "outcome"),
    [
        ((10, 10, -1), 9, C, Outcome.CONTINUE_ALREADY_ACKED),
        ((10, 10, -1), 10, C, Outcome.CONTINUE_ALREADY_ACKED),
        ((10, 14, 100), 12, C, Outcome.CONTINUE_DUPLICATE),
        ((10, 14, 100), 14, C, Outcome.CONTINUE_DUPLICATE),
        ((10, 10, -1), 11, C, Outcome.CONTINUE_BEGIN_SPAN),
        ((10, 14, 100), 15, C, Outcome.CONTINUE_EXTEND_SPAN),
        ((10, 14, 100), 9, A, Outcome.ACK_ROLLBACK),
        ((10, 14, 100), 10, A, Outcome.ACK_ROLLBACK),
        ((10, 10, -1), 11, A, Outcome.ACK_EMPTY),
        ((10, 14, 100), 12, A, Outcome.ACK_COMMIT_RING),
        ((10, 14, 100), 10, OUT, Outcome.OUTSIDE_ALREADY_ACKED),
        ((10, 14, 100), 11, OUT, Outcome.OUTSIDE_COMMIT),
        ((10, 10, -1), 11, 0x3, Outcome.OUTSIDE_COMMIT),  # other flags count as OUTSIDE_TXN
    ],
)
def test_each_row_of_the_rule(state, clock, flags, outcome):
    assert decide(ProducerState(*state), clock, flags) is outcome


@pytest.mark.parametrize(
    ("outcome", "after"),
    [
        (Outcome.CONTINUE_BEGIN_SPAN, (10, 20, 500)),
        (Outcome.CONTINUE_EXTEND_SPAN, (10, 20, -1)),
        (Outcome.CONTINUE_DUPLICATE, (10, 10, -1)),
        (Outcome.CONTINUE_ALREADY_ACKED, (10, 10, -1)),
        (Outcome.OUTSIDE_ALREADY_ACKED, (10, 10, -1)),
        (Outcome.ACK_ROLLBACK, (20, 20, -1)),
        (Outcome.ACK_EMPTY, (20, 20, -1)),
        (Outcome.ACK_COMMIT_RING, (20, 20, -1)),
        (Outcome.ACK_COMMIT_REPLAY, (20, 20, -1)),
        (Outcome.OUTSIDE_COMMIT, (20, 20, -1)),
    ],
)
def test_state_after_each_outcome(outcome, after):
    st = ProducerState(10)
    st.apply(outcome, 20, 500)
    assert (st.last_ack, st.max_clock, st.begin) == after


def test_a_producer_first_seen_is_neither_a_duplicate_nor_acknowledged():
    for flags, outcome in ((C, Outcome.CONTINUE_BEGIN_SPAN), (A, Outcome.ACK_EMPTY), (OUT, Outcome.OUTSIDE_COMMIT)):
        assert decide(ProducerState.first_seen(7), 7, flags) is outcome


def test_reports():
    open_span = ProducerState(10, 14, 100)
    assert reports(open_span, 9, A, decide(open_span, 9, A)) == (ACK_BELOW_LAST_ACK,)
    assert reports(open_span, 10, A, decide(open_span, 10, A)) == ()  # an ACK at the last ACK: a rollback
    assert reports(open_span, 15, OUT, decide(open_span, 15, OUT)) == (DISCARDS_SPAN,)
    assert reports(ProducerState(10), 15, OUT, Outcome.OUTSIDE_COMMIT) == ()
    odd = reports(open_span, 15, 0x3, decide(open_span, 15, 0x3))
    assert odd == ("unexpected UUID flags 0x3, treated as OUTSIDE_TXN", DISCARDS_SPAN)
