"""Vectorised encoding of Arrow columns into framed journal content (spark/write/encode.py), without Spark."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from pyspark_gazette.errors import FramingError
from pyspark_gazette.message import CSV, FIXED_MAGIC, LINES, NDJSON, PROTOBUF_FIXED, build_uuid
from pyspark_gazette.spark.write.encode import frame_values, framed, json_lines, uuid_strings


def where(i):
    return f"row {i}"


def messages(framed_content):
    data, offsets = framed_content
    data = bytes(data)
    return [data[a:b] for a, b in zip(offsets[:-1], offsets[1:], strict=True)]


def test_encoder_matches_json_dumps_on_tricky_values():
    """The vectorised encoder against json.dumps, on sliced arrays too."""
    strings = ["plain", 'q"uote', "back\\slash", "tab\tnew\nline\x00\x1f", "é😀\u2028", "", None]
    table = pa.table(
        {
            "s": pa.array(strings),
            "n": pa.array([1, None, -(2**63), 2**63 - 1, 0, 7, 8]),
            "f": pa.array([0.1, 1e300, -0.0, float("inf"), None, 2.5, 3.0]),
            "l": pa.array([['a"b'], [], None, ["\n"], ["x", None], None, []]),
        }
    )
    for start in range(3):
        part = table.slice(start)
        data, offsets = json_lines([(name, part.column(name).combine_chunks()) for name in part.column_names])
        lines = bytes(data).split(b"\n")[:-1]
        assert len(lines) == len(offsets) - 1 == part.num_rows
        for line, row in zip(lines, part.to_pylist(), strict=True):
            doc = json.loads(line)
            if row["f"] == float("inf"):
                row["f"] = "Infinity"
            assert doc == row
    producer = bytes.fromhex("030507090b0d")
    got = uuid_strings(producer, 0xFEDCBA9876543210, 4, 160, 2).to_pylist()
    assert got == [str(build_uuid(producer, 0xFEDCBA9876543210 + i * 160, 2)) for i in range(4)]


@pytest.mark.parametrize("framing", [NDJSON, LINES], ids=str)
def test_newline_framings_end_each_value_with_a_newline(framing):
    assert messages(frame_values(pa.array(['{"a":1}', "x"]), framing, where)) == [b'{"a":1}\n', b"x\n"]
    assert messages(frame_values(pa.array([b"\x00\xff"]), framing, where)) == [b"\x00\xff\n"]


@pytest.mark.parametrize("framing", [NDJSON, LINES], ids=str)
def test_a_value_with_a_newline_is_refused_by_line_framings(framing):
    with pytest.raises(FramingError, match="row 1 has a value containing a newline"):
        frame_values(pa.array(["ok", "two\nlines"]), framing, where)


def test_a_null_value_is_refused_naming_its_row():
    with pytest.raises(FramingError, match="row 2 has a null value"):
        frame_values(pa.array(["a", "b", None]), NDJSON, where)


def test_csv_allows_a_newline_only_inside_quotes_and_drops_a_trailing_one():
    got = messages(frame_values(pa.array(['a,"x\ny"', "b,c\n", "d,e\r\n"]), CSV, where))
    assert got == [b'a,"x\ny"\n', b"b,c\n", b"d,e\n"]
    with pytest.raises(FramingError, match="row 0 is a csv value with a newline outside quotes"):
        frame_values(pa.array(["a\nb"]), CSV, where)
    with pytest.raises(FramingError, match="row 0 is a csv record with an unbalanced double quote"):
        frame_values(pa.array(['a,"b']), CSV, where)


def test_protobuf_fixed_prefixes_the_magic_and_little_endian_length():
    got = messages(frame_values(pa.array([b"abc", b""]), PROTOBUF_FIXED, where))
    assert got == [FIXED_MAGIC + (3).to_bytes(4, "little") + b"abc", FIXED_MAGIC + bytes(4)]
    assert messages(frame_values(pa.array(["\u00e9"]), PROTOBUF_FIXED, where)) == [
        FIXED_MAGIC + (2).to_bytes(4, "little") + "\u00e9".encode()
    ]


def test_framed_offsets_start_at_zero_on_a_slice():
    data, offsets = framed(pa.array(["aa", "b", "ccc"]).slice(1))
    assert bytes(data) == b"bccc" and offsets.tolist() == [0, 1, 4]
    with pytest.raises(ValueError, match="nulls"):
        framed(pa.array(["a", None]))


def test_json_lines_with_a_prefix_puts_it_first():
    data, _ = json_lines(
        [("n", pa.array([1, 2]))], prefix=pa.array(['{"_meta":{"uuid":"u1"}', '{"_meta":{"uuid":"u2"}'])
    )
    assert [json.loads(line) for line in bytes(data).splitlines()] == [
        {"_meta": {"uuid": "u1"}, "n": 1},
        {"_meta": {"uuid": "u2"}, "n": 2},
    ]
