"""Message framings: encode, incremental decode, torn messages, desync, Arrow line splitting."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyspark_gazette.errors import DesyncError, FramingError, MessageDecodeError, UnexpectedEOFError
from pyspark_gazette.message import (
    CSV,
    FIXED_MAGIC,
    LINES,
    NDJSON,
    PROTOBUF_FIXED,
    ArrowLineDecoder,
    framing_by_name,
    framing_for_content_type,
    split_lines_arrow,
)


def feed_in_pieces(framing, data: bytes, sizes, start=0, **kw):
    dec = framing.decoder(start, **kw)
    out, i, k = [], 0, 0
    while i < len(data):
        n = sizes[k % len(sizes)] or 1
        out.extend(dec.feed(data[i : i + n]))
        i, k = i + n, k + 1
    out.extend(dec.finish())
    return out, dec


# --------------------------------------------------------------------------------------------
# Selection by content type.


@pytest.mark.parametrize(
    "ct, framing",
    [
        ("application/x-ndjson", NDJSON),
        ("application/x-protobuf-fixed", PROTOBUF_FIXED),
        ("text/csv", CSV),
        ("text/plain", LINES),
        ("Text/CSV; charset=utf-8", CSV),
    ],
)
def test_framing_for_content_type(ct, framing):
    assert framing_for_content_type(ct) is framing
    assert framing_by_name(framing.name) is framing


@pytest.mark.parametrize("ct", ["application/x-gazette-recoverylog", "application/json", ""])
def test_unknown_content_type(ct):
    with pytest.raises(FramingError, match="no framing"):
        framing_for_content_type(ct)
    with pytest.raises(FramingError, match="unknown framing"):
        framing_by_name("xml")


# --------------------------------------------------------------------------------------------
# ndjson / lines


def test_ndjson_encode():
    assert NDJSON.encode(b'{"a":1}') == b'{"a":1}\n'
    with pytest.raises(FramingError, match="newline"):
        NDJSON.encode(b'{"a":\n1}')


@pytest.mark.parametrize("framing", [NDJSON, LINES])
def test_line_decoder_offsets_across_chunks(framing):
    msgs = [b'{"Msg": "Hello, Gazette!"}', b"{}", b'{"x":[1,2,3]}', b""]
    data = framing.encode_all(msgs)
    expect, off = [], 1000
    for m in msgs:
        expect.append((off, m))
        off += len(m) + 1
    for sizes in ([1], [3, 5], [7], [len(data)], [2, 100]):
        got, dec = feed_in_pieces(framing, data, sizes, start=1000)
        assert got == expect, sizes
        assert dec.offset == 1000 + len(data) and dec.buffered == 0


def test_ndjson_torn_final_line_is_unexpected_eof():
    dec = NDJSON.decoder(10)
    assert dec.feed(b'{"a":1}\n{"b"') == [(10, b'{"a":1}')]
    assert dec.buffered == 4
    with pytest.raises(UnexpectedEOFError, match="offset 18"):
        dec.finish()


def test_ndjson_accepts_bytearray_and_memoryview():
    dec = NDJSON.decoder(0)
    assert dec.feed(bytearray(b"a\nb")) == [(0, b"a")]
    assert dec.feed(memoryview(b"c\n")) == [(2, b"bc")]


# --------------------------------------------------------------------------------------------
# csv


def test_csv_encode():
    assert CSV.encode(b"a,b") == b"a,b\n"
    assert CSV.encode(b"a,b\r\n") == b"a,b\n"
    assert CSV.encode(b'"x\ny",2\n') == b'"x\ny",2\n'
    with pytest.raises(FramingError, match="quote"):
        CSV.encode(b'"a,b')


def test_csv_quoted_newlines_and_crlf():
    data = b'uuid,v\r\n"multi\nline ""q""",2\nplain,3\n'
    expect = [(0, b"uuid,v"), (8, b'"multi\nline ""q""",2'), (29, b"plain,3")]
    for sizes in ([1], [4], [9, 2], [len(data)]):
        got, _ = feed_in_pieces(CSV, data, sizes)
        assert got == expect, sizes


def test_csv_torn_record():
    dec = CSV.decoder(0)
    assert dec.feed(b'a,b\n"open\n') == [(0, b"a,b")]
    with pytest.raises(UnexpectedEOFError):
        dec.finish()


# --------------------------------------------------------------------------------------------
# protobuf-fixed


def test_fixed_encode_header():
    payload = bytes(range(20))
    framed = PROTOBUF_FIXED.encode(payload)
    assert framed[:8] == bytes.fromhex("6633933614000000")
    assert framed[8:] == payload
    assert PROTOBUF_FIXED.encode(b"") == FIXED_MAGIC + b"\0\0\0\0"


def test_fixed_decode_across_chunks():
    msgs = [b"", b"a", b"hello world", bytes(300)]
    data = PROTOBUF_FIXED.encode_all(msgs)
    expect, off = [], 5
    for m in msgs:
        expect.append((off, m))
        off += 8 + len(m)
    for sizes in ([1], [3], [7, 9], [len(data)]):
        got, dec = feed_in_pieces(PROTOBUF_FIXED, data, sizes, start=5)
        assert got == expect
        assert dec.skipped == []


@pytest.mark.parametrize("tail", [b"\x66", b"\x66\x33\x93\x36\x05", bytes(7), b"\n\n"])
def test_fixed_torn_header_is_unexpected_eof(tail):
    dec = PROTOBUF_FIXED.decoder(0)
    dec.feed(PROTOBUF_FIXED.encode(b"x") + tail)
    with pytest.raises(UnexpectedEOFError):
        dec.finish()


def test_fixed_torn_payload_is_unexpected_eof():
    with pytest.raises(UnexpectedEOFError, match="offset 0"):
        PROTOBUF_FIXED.decode_all(PROTOBUF_FIXED.encode(b"hello")[:-1])


def test_fixed_single_trailing_newline_is_clean_eof():
    data = PROTOBUF_FIXED.encode(b"x") + b"\n"
    assert PROTOBUF_FIXED.decode_all(data) == [(0, b"x")]
    assert PROTOBUF_FIXED.decode_all(b"") == []


def test_fixed_desync_skips_to_next_magic():
    a, b = PROTOBUF_FIXED.encode(b"first"), PROTOBUF_FIXED.encode(b"second")
    garbage = b"not a header!"
    data = a + garbage + b
    got, dec = feed_in_pieces(PROTOBUF_FIXED, data, [len(data)], start=100)
    assert got == [(100, b"first"), (100 + len(a) + len(garbage), b"second")]
    assert dec.skipped == [(100 + len(a), len(garbage))]


def test_fixed_desync_without_magic_keeps_last_three_bytes():
    dec = PROTOBUF_FIXED.decoder(0)
    assert dec.feed(b"x" * 21) == []
    assert dec.skipped == [(0, 18)] and dec.buffered == 3
    # The kept bytes may start a magic word that completes in the next chunk.
    dec2 = PROTOBUF_FIXED.decoder(0)
    framed = PROTOBUF_FIXED.encode(b"ok")
    assert dec2.feed(b"y" * 10 + framed[:3]) == []
    assert dec2.feed(framed[3:]) == [(10, b"ok")]
    assert dec2.skipped == [(0, 10)]


def test_fixed_desync_pieces_follow_buffering():
    # Gazette's own test: 21 garbage bytes with a 16-byte buffer come back as 13 then 8. Here
    # the scan sees what is buffered at each feed, so 16 + 5 bytes give the same split.
    dec = PROTOBUF_FIXED.decoder(0)
    garbage = bytes(range(1, 22))
    framed = PROTOBUF_FIXED.encode(b"m")
    assert dec.feed(garbage[:16]) == []
    assert dec.feed(garbage[16:] + framed) == [(21, b"m")]
    assert dec.skipped == [(0, 13), (13, 8)]


def test_fixed_strict_raises_desync_and_recovers():
    a, b = PROTOBUF_FIXED.encode(b"first"), PROTOBUF_FIXED.encode(b"second")
    dec = PROTOBUF_FIXED.decoder(0, strict=True)
    with pytest.raises(DesyncError) as info:
        dec.feed(a + b"GARBAGE!!" + b)
    assert info.value.skipped == b"GARBAGE!!"
    assert "offset 13" in str(info.value)
    # Messages decoded before the desync come with the next call, then the rest.
    assert dec.feed(b"") == [(0, b"first"), (22, b"second")]
    assert dec.finish() == []


def test_fixed_max_message_size_treats_huge_length_as_desync():
    dec = PROTOBUF_FIXED.decoder(0)
    dec.max_message_size = 10
    good = PROTOBUF_FIXED.encode(b"ok")
    data = FIXED_MAGIC + (1 << 30).to_bytes(4, "little") + good
    assert dec.feed(data) == [(8, b"ok")]
    assert dec.skipped == [(0, 8)]


# --------------------------------------------------------------------------------------------
# Fuzz: every decoder either decodes or raises a FramingError subclass.


@pytest.mark.parametrize("framing", [NDJSON, LINES, CSV, PROTOBUF_FIXED])
@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200), cut=st.integers(min_value=1, max_value=50), strict=st.booleans())
def test_fuzz_decoders(framing, data, cut, strict):
    dec = framing.decoder(7, strict=strict)
    got = []
    try:
        for i in range(0, len(data), cut):
            try:
                got.extend(dec.feed(data[i : i + cut]))
            except DesyncError:
                pass
        while True:
            try:
                got.extend(dec.finish())
                break
            except DesyncError:
                continue
    except FramingError:
        return
    for offset, payload in got:
        assert 7 <= offset < 7 + len(data)
        assert isinstance(payload, bytes)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=20), st.integers(min_value=1, max_value=64))
def test_fuzz_fixed_round_trip(msgs, cut):
    data = PROTOBUF_FIXED.encode_all(msgs)
    got, dec = feed_in_pieces(PROTOBUF_FIXED, data, [cut])
    assert [p for _, p in got] == msgs
    assert dec.skipped == []


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=20), st.integers(1, 64))
def test_fuzz_ndjson_round_trip(msgs, cut):
    data = NDJSON.encode_all(msgs)
    got, _ = feed_in_pieces(NDJSON, data, [cut])
    assert [p for _, p in got] == msgs


# --------------------------------------------------------------------------------------------
# Arrow


def test_split_lines_arrow():
    batch = split_lines_arrow(b'{"a":1}\n\n{"b":2}\npartial', 100)
    assert batch.offsets.to_pylist() == [100, 108, 109]
    assert batch.values.to_pylist() == [b'{"a":1}', b"", b'{"b":2}']
    assert batch.consumed == 17
    assert len(batch) == 3
    rb = batch.to_record_batch()
    assert rb.num_rows == 3 and rb.schema.names == ["offset", "value"]
    assert len(split_lines_arrow(b"no newline")) == 0
    data = b"a\nbb\nccc\n"
    for scratch in (np.ones(3, dtype=bool), np.ones(100, dtype=bool)):  # too small: ignored
        again = split_lines_arrow(data, 5, scratch=scratch)
        assert again.values.to_pylist() == [b"a", b"bb", b"ccc"] and again.offsets.to_pylist() == [5, 7, 10]
    assert len(split_lines_arrow(b"")) == 0


def test_split_lines_arrow_strip_cr():
    batch = split_lines_arrow(b"a\r\n\r\nb\rc\n", 0, strip_cr=True)
    assert batch.values.to_pylist() == [b"a", b"", b"b\rc"]
    assert batch.offsets.to_pylist() == [0, 3, 5]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=100).map(lambda b: b.replace(b"x", b"\n")), st.integers(0, 10**12), st.booleans())
def test_fuzz_split_lines_arrow_matches_decoder(data, base, strip_cr):
    batch = split_lines_arrow(data, base, strip_cr=strip_cr)
    batch.values.validate(full=True)
    expect = NDJSON.decoder(base).feed(data)
    if strip_cr:
        expect = [(o, p[:-1] if p.endswith(b"\r") else p) for o, p in expect]
    assert list(zip(batch.offsets.to_pylist(), batch.values.to_pylist(), strict=True)) == expect


def test_arrow_line_decoder_carries_partial_lines():
    dec = ArrowLineDecoder(50)
    first = dec.feed(b"ab\ncd")
    second = dec.feed(b"e\nf\n")
    assert first.offsets.to_pylist() == [50] and first.values.to_pylist() == [b"ab"]
    assert second.offsets.to_pylist() == [53, 57] and second.values.to_pylist() == [b"cde", b"f"]
    dec.finish()
    dec.feed(b"torn")
    with pytest.raises(UnexpectedEOFError, match="offset 59"):
        dec.finish()


# --------------------------------------------------------------------------------------------
# Payload decoding.


def test_decode_message():
    assert NDJSON.decode_message(b'{"a": [1, 2]}') == {"a": [1, 2]}
    with pytest.raises(MessageDecodeError, match="ndjson: invalid JSON at offset 42"):
        NDJSON.decode_message(b'{"a":', 42)
    assert CSV.decode_message(b'id,"multi\nline ""q""",3') == ["id", 'multi\nline "q"', "3"]
    with pytest.raises(MessageDecodeError, match="csv"):
        CSV.decode_message(b"a,b\nc,d")
    with pytest.raises(MessageDecodeError, match="csv"):
        CSV.decode_message(b"\xff,x")
    assert LINES.decode_message("é".encode()) == "é"
    with pytest.raises(MessageDecodeError, match="UTF-8 at offset 3"):
        LINES.decode_message(b"\xff", 3)
    assert PROTOBUF_FIXED.decode_message(b"\x08\x01") == b"\x08\x01"


# --------------------------------------------------------------------------------------------
# The registry: framings as objects carrying their facts.


def test_the_registry_holds_the_four_framings_with_their_facts():
    from pyspark_gazette.message import framings

    facts = {f.name: (f.content_type, f.text, f.line_based, f.newline_split, f.json_documents) for f in framings()}
    assert facts == {
        "ndjson": ("application/x-ndjson", True, True, True, True),
        "protobuf-fixed": ("application/x-protobuf-fixed", False, False, False, False),
        "csv": ("text/csv", True, True, False, False),
        "lines": ("text/plain", True, True, True, False),
    }
    for f in framings():  # framed_size is what encode adds
        assert f.framed_size(3) == len(f.encode(b"abc"))


def test_a_registered_framing_is_found_by_name_and_content_type_then_forgotten():
    import framing_plugin
    from pyspark_gazette.message import framing_by_name, register_framing, unregister_framing

    register_framing(framing_plugin.VARINT)
    try:
        assert framing_by_name("test-varint") is framing_plugin.VARINT
        assert framing_for_content_type("Application/X-Test-Varint; v=1") is framing_plugin.VARINT
        data = framing_plugin.VARINT.encode_all([b"a" * 200, b""])
        assert framing_plugin.VARINT.decode_all(data, 10) == [(10, b"a" * 200), (212, b"")]
        other = type("Other", (framing_plugin.VarintFraming,), {})()  # another framing, same name
        with pytest.raises(FramingError, match="'test-varint', 'application/x-test-varint' already registered"):
            register_framing(other)
    finally:
        unregister_framing(framing_plugin.VARINT)
    with pytest.raises(FramingError, match="unknown framing 'test-varint'"):
        framing_by_name("test-varint")


def test_a_framing_without_vectorised_encoding_frames_arrays_row_by_row():
    import pyarrow as pa

    import framing_plugin
    from pyspark_gazette.message import Framing

    got = framing_plugin.VARINT.encode_array(pa.array(["ab", "c"]), lambda i: f"row {i}")
    assert got.to_pylist() == [b"\x02ab", b"\x01c"]
    with pytest.raises(FramingError, match="row 1: lines: a message payload may not contain a newline"):
        Framing.encode_array(LINES, pa.array(["a", "b\nc"]), lambda i: f"row {i}")  # the base class's path
