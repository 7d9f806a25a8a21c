"""Gazette message UUIDs: layout, check vector, clocks, publisher, JSON helpers."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyspark_gazette.errors import UUIDError
from pyspark_gazette.message import (
    NIL_UUID,
    TICK,
    Flags,
    TransactionalPublisher,
    build_uuid,
    clock_from_unix,
    clock_to_unix,
    extract_uuid_json,
    get_clock,
    get_flags,
    get_producer,
    get_uuid_at,
    new_producer_id,
    parse_uuid,
    set_uuid_at,
    tick,
)

PRODUCER = bytes.fromhex("010203040506")


def test_check_vector():
    # Facts sheet 5.2: "plus 2 ticks" are v0.101+ ticks of 160 (1 µs each), counter stays 0.
    clock = tick(clock_from_unix(1567304621, 981273734), 2)
    assert clock == clock_from_unix(1567304621, 981273734) + 2 * TICK
    u = build_uuid(PRODUCER, clock, 682)
    assert str(u) == "83fc2f95-cc5f-11e9-82aa-010203040506"
    assert parse_uuid(u) == (PRODUCER, clock, 682)
    assert u.version == 1 and u.variant == uuid.RFC_4122


def test_pre_v0101_ticks_would_set_the_counter():
    # Two ticks of +1 (Gazette < v0.101) land in the 4-bit counter: bytes 8-9 read 8aaa.
    clock = clock_from_unix(1567304621, 981273734) + 2
    u = build_uuid(PRODUCER, clock, 682)
    assert str(u) == "83fc2f81-cc5f-11e9-8aaa-010203040506"
    assert parse_uuid(u)[1] == clock


def test_clock_unix_round_trip():
    clock = clock_from_unix(1567304621, 981273734)
    assert clock_to_unix(clock) == (1567304621, 981273700)  # 100 ns resolution
    assert clock_to_unix(tick(clock)) == (1567304621, 981274700)
    assert clock & 0xF == 0
    with pytest.raises(UUIDError, match="before the UUID epoch"):
        clock_from_unix(-20_000_000_000)


@settings(max_examples=300, deadline=None)
@given(
    producer=st.binary(min_size=6, max_size=6),
    clock=st.integers(min_value=0, max_value=2**64 - 1),
    flags=st.integers(min_value=0, max_value=1023),
)
def test_build_parse_round_trip(producer, clock, flags):
    u = build_uuid(producer, clock, flags)
    assert u.version == 1 and u.variant == uuid.RFC_4122
    for form in (u, str(u), u.bytes, str(u).encode()):
        assert parse_uuid(form) == (producer, clock, flags)
    assert get_clock(u) == clock and get_flags(u) == flags and get_producer(u) == producer


def test_build_uuid_validation():
    with pytest.raises(UUIDError, match="6 bytes"):
        build_uuid(b"12345", 1, 0)
    with pytest.raises(UUIDError, match="uint64"):
        build_uuid(PRODUCER, 2**64, 0)
    with pytest.raises(UUIDError, match="10 bits"):
        build_uuid(PRODUCER, 1, 1024)


@pytest.mark.parametrize(
    "bad, why",
    [
        ("not-a-uuid", "not a UUID"),
        ("83fc2f95-cc5f-41e9-82aa-010203040506", "version 4"),
        ("83fc2f95-cc5f-11e9-c2aa-010203040506", "variant"),
        (b"\xff" * 5, "not a UUID"),
        (b"\xff" * 20, "not a UUID"),
        (str(NIL_UUID), "version 0"),
        (12345, "not a UUID"),
    ],
)
def test_parse_uuid_rejects(bad, why):
    with pytest.raises(UUIDError, match=why):
        parse_uuid(bad)


def test_nil_uuid_allowed_on_request():
    assert parse_uuid(NIL_UUID, allow_nil=True) == (bytes(6), 0, 0)
    assert get_clock(NIL_UUID) == 0


def test_new_producer_id():
    ids = {new_producer_id() for _ in range(50)}
    assert len(ids) == 50
    assert all(len(p) == 6 and p[0] & 0x01 for p in ids)


# --------------------------------------------------------------------------------------------
# TransactionalPublisher


def test_publisher_flags_and_monotonic_clocks():
    now = [1_700_000_000_000_000_000]
    pub = TransactionalPublisher(PRODUCER, time_ns=lambda: now[0])
    a, b = pub.uncommitted(), pub.committed()
    now[0] -= 10**9  # The wall clock steps back: clocks still rise by one tick.
    c = pub.ack()
    parsed = [parse_uuid(u) for u in (a, b, c)]
    assert [p[2] for p in parsed] == [Flags.CONTINUE_TXN, Flags.OUTSIDE_TXN, Flags.ACK_TXN]
    assert all(p[0] == PRODUCER for p in parsed)
    assert parsed[1][1] == parsed[0][1] + TICK and parsed[2][1] == parsed[1][1] + TICK
    assert pub.clock == parsed[2][1]
    now[0] += 5 * 10**9  # The wall clock jumps ahead: clocks follow it.
    assert get_clock(pub.committed()) == clock_from_unix(1_700_000_004, 0)


def test_publisher_acks_per_journal():
    pub = TransactionalPublisher()
    assert pub.producer[0] & 0x01
    u1 = pub.uncommitted("a/one")
    pub.uncommitted("b/two")
    pub.uncommitted("a/one")
    assert pub.pending_journals == ["a/one", "b/two"]
    acks = pub.acks()
    assert list(acks) == ["a/one", "b/two"]
    assert all(get_flags(u) == Flags.ACK_TXN for u in acks.values())
    assert all(get_clock(u) > get_clock(u1) for u in acks.values())
    assert pub.acks() == {}


def test_publisher_rejects_bad_producer():
    with pytest.raises(UUIDError):
        TransactionalPublisher(b"abc")


# --------------------------------------------------------------------------------------------
# JSON helpers


U = build_uuid(PRODUCER, clock_from_unix(1_700_000_000), Flags.ACK_TXN)


def test_set_and_get_uuid_at():
    doc = set_uuid_at({"x": 1}, U)
    assert doc == {"x": 1, "_meta": {"uuid": str(U)}}
    assert get_uuid_at(doc) == U
    assert get_uuid_at({"x": 1}) is None
    assert get_uuid_at({"_meta": 5}) is None
    doc = set_uuid_at({"a/b": {}}, U, "/a~1b/id")
    assert doc == {"a/b": {"id": str(U)}} and get_uuid_at(doc, "/a~1b/id") == U
    assert get_uuid_at({"l": [{"u": str(U)}]}, "/l/0/u") == U


def test_uuid_at_errors():
    with pytest.raises(UUIDError, match="not a UUID"):
        get_uuid_at({"_meta": {"uuid": "nope"}})
    with pytest.raises(UUIDError, match="not a UUID string"):
        get_uuid_at({"_meta": {"uuid": 7}})
    with pytest.raises(ValueError, match="must start with"):
        get_uuid_at({}, "uuid")
    with pytest.raises(ValueError, match="root"):
        set_uuid_at({}, U, "")
    with pytest.raises(ValueError, match="cannot set"):
        set_uuid_at({"_meta": 3}, U)


@pytest.mark.parametrize(
    "raw",
    [
        '{"_meta":{"uuid":"%s"},"x":1}',
        '{"x": 1, "_meta": {"uuid": "%s"}}',
        '{ "y": {"_meta": {"uuid": "00000000-0000-1000-8000-000000000000"}}, "_meta" : { "uuid" : "%s" } }',
        '{"s": "\\"_meta\\":{\\"uuid\\":\\"x\\"}", "_meta": {"uuid": "%s"}}',
        '{"_meta": {"other": 1, "uuid": "%s"}}',
        '{"l": [{"_meta": {"uuid": "00000000-0000-1000-8000-000000000000"}}], "_meta": {"uuid": "%s"}}',
    ],
)
def test_extract_uuid_json(raw):
    data = (raw % U).encode()
    assert extract_uuid_json(data) == U
    assert extract_uuid_json(data) == get_uuid_at(json.loads(data))


def test_extract_uuid_json_absent_and_malformed():
    assert extract_uuid_json(b'{"x": 1}') is None
    assert extract_uuid_json(b'{"y": {"_meta": {"uuid": "%s"}}}' % str(U).encode()) is None
    with pytest.raises(UUIDError, match="malformed JSON"):
        extract_uuid_json(b'{"x": ')
    with pytest.raises(UUIDError, match="not a UUID"):
        extract_uuid_json(b'{"_meta": {"uuid": "zzz"}}')
    assert extract_uuid_json(b'{"uuid": "%s"}' % str(U).encode(), "/uuid") == U


def test_extract_uuid_proto_reads_bytes_and_string_fields():
    from pyspark_gazette.message import extract_uuid_proto

    u = uuid.UUID("83fc2f95-cc5f-11e9-82aa-010203040506")
    # field 2 varint 300, field 3 fixed64, field 4 fixed32, field 1 bytes(16), field 5 string.
    msg = b"\x10\xac\x02" + b"\x19" + bytes(8) + b"\x25" + bytes(4) + b"\x0a\x10" + u.bytes + b"\x2a\x02hi"
    assert extract_uuid_proto(msg, 1) == u
    assert extract_uuid_proto(msg, 7) is None
    text = str(u).encode()
    assert extract_uuid_proto(b"\x3a" + bytes([len(text)]) + text, 7) == u
    # The last occurrence of a field wins, as in protobuf.
    other = uuid.UUID(int=1 << 76 | 0x8000 << 48)
    assert extract_uuid_proto(b"\x0a\x10" + u.bytes + b"\x0a\x10" + other.bytes, 1) == other


@pytest.mark.parametrize(
    "raw, why",
    [
        (b"\x0a\x10" + bytes(5), "truncated"),
        (b"\x0a\x03abc", "not a UUID"),
        (b"\x0b", "wire type 3"),
        (b"\x10\xff", "bad varint"),
    ],
)
def test_extract_uuid_proto_refuses_malformed_messages(raw, why):
    from pyspark_gazette.message import extract_uuid_proto

    with pytest.raises(UUIDError, match=why):
        extract_uuid_proto(raw, 1)


def test_clock_to_micros_of_the_check_vector():
    """The facts-sheet UUID's clock (Unix 1567304621.981273734 plus 2 ticks of 1 µs) is that time
    in microseconds, as Spark's TimestampType holds it."""
    from pyspark_gazette.message import clock_to_micros, get_clock

    clock = get_clock("83fc2f95-cc5f-11e9-82aa-010203040506")
    assert clock_to_micros(clock) == 1567304621_981273 + 2
    assert clock_to_micros(clock_from_unix(0)) == 0
    assert clock_to_micros(clock_from_unix(1_800_000_000, 5_000)) == 1_800_000_000_000_005
