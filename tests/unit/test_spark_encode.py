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


def _every_type(n: int = 9) -> list[tuple[str, pa.Array]]:
    import datetime
    import decimal

    base = datetime.datetime(2026, 11, 26, 3, 4, 5, 123456)
    texts = ["plain", 'q"uote', "back\\slash", "tab\tnew\nline\x00\x1f", "é😀\u2028", "", "x" * 300, "z", "end"]
    return [
        ("s", pa.array(texts[:n])),
        ("s_null", pa.array([*texts[: n - 1], None])),
        ("large", pa.array(texts[:n], pa.large_string())),
        ("ts", pa.array([base + datetime.timedelta(days=400 * i) for i in range(n)], pa.timestamp("us", "UTC"))),
        ("ntz", pa.array([base - datetime.timedelta(seconds=i) for i in range(n)], pa.timestamp("us"))),
        ("ts_null", pa.array([None, *[base] * (n - 1)], pa.timestamp("us", "UTC"))),
        ("d", pa.array([base.date()] * n, pa.date32())),
        ("dec", pa.array([decimal.Decimal(f"{i}.50") for i in range(n)], pa.decimal128(10, 2))),
        ("b", pa.array([i % 2 == 0 for i in range(n)])),
        ("b_null", pa.array([None if i % 3 else i % 2 == 0 for i in range(n)])),
        ("i", pa.array(range(n), pa.int64())),
        ("i8", pa.array([-128, 127, None, 0, -1, 9, 10, 99, 100][:n], pa.int8())),
        ("i16", pa.array([-(2**15), 2**15 - 1, *range(n - 2)], pa.int16())),
        ("i32", pa.array([-(2**31), None, *range(-3, n - 5)], pa.int32())),
        ("i64", pa.array([-(2**63), 2**63 - 1, None, 10**18, -(10**18) + 1, *range(n - 5)], pa.int64())),
        ("f", pa.array([0.1 * i for i in range(n)])),
        ("f_short", pa.array([12.5, -0.37, 2.0, None, 0.000015, 1e-6, 9999999999.5, 123456789.125, -0.0][:n])),
        ("f_odd", pa.array([float("nan"), float("inf"), -float("inf"), 1e-7, 1e10, 5e-324, 1e300, 0.0, 1 / 3][:n])),
        ("f32", pa.array([1.5, 0.1, None, *range(n - 3)], pa.float32())),
        (
            "ts_old",
            pa.array(
                [-(10**15), -1, 0, None, 1, 86_400_000_000 - 1, -62135596800000000, 253402300799999999, 7][:n],
                pa.timestamp("us", "UTC"),
            ),
        ),
        ("ts_far", pa.array([-62135596800000001, 253402300800000000, *[0] * (n - 2)], pa.timestamp("us"))),
        ("ms", pa.array(range(n), pa.timestamp("ms"))),
        ("d_null", pa.array([None, -1, 0, 1, -719162, 2932896, 19000, 11016, 59][:n], pa.date32())),
        ("d_far", pa.array([-719163, *[0] * (n - 1)], pa.date32())),
        ("bin", pa.array([bytes([i]) * i for i in range(n)], pa.binary())),
        ("st", pa.array([{"a": i, "b": texts[i]} for i in range(n)])),
        ("l", pa.array([[texts[i]] * (i % 3) for i in range(n)])),
        ("m", pa.array([[("k", i)] for i in range(n)], pa.map_(pa.string(), pa.int64()))),
    ]


@pytest.mark.parametrize("start", [0, 3, 9])
@pytest.mark.parametrize("with_prefix", [False, True])
def test_the_c_joiner_writes_the_same_bytes_as_arrow(monkeypatch, start, with_prefix):
    """json_lines through the C extension's join and through Arrow's joins, byte for byte."""
    pytest.importorskip("pyspark_gazette._jsonscan")
    from pyspark_gazette.native import NATIVE_ENV

    columns = [(name, arr.slice(start)) for name, arr in _every_type()]
    prefix = pa.array([f'{{"_meta":{{"uuid":"u{i}"}}' for i in range(9)]).slice(start) if with_prefix else None
    monkeypatch.delenv(NATIVE_ENV, raising=False)
    c_data, c_offsets = json_lines(columns, prefix)
    monkeypatch.setenv(NATIVE_ENV, "0")
    a_data, a_offsets = json_lines(columns, prefix)
    assert bytes(c_data) == bytes(a_data)
    assert c_offsets.tolist() == a_offsets.tolist()
    assert len(c_offsets) == 10 - start  # start 9: no rows
    assert [json.loads(m)["s"] for m in messages((c_data, c_offsets))] == columns[0][1].to_pylist()


def test_the_c_joiner_refuses_buffers_too_small_and_offsets_outside_the_data():
    native = pytest.importorskip("pyspark_gazette._jsonscan")
    arr = pa.array(["ab", 'c"'])
    _, offsets, data = arr.buffers()
    assert native.join((b"<", (2, offsets, data, 0, False, None), b">"), 2)[0] == bytearray(b'<"ab"><"c\\"">')
    assert native.join((b"<", (1, offsets, data, 0, False, None), b">"), 2)[0] == bytearray(b'<ab><c">')
    with pytest.raises(ValueError, match="too small"):
        native.join(((1, offsets, data, 0, False, None),), 3)
    with pytest.raises(ValueError, match="too small"):
        native.join(((3, pa.array([1, 2], pa.int64()).buffers()[1], 1, 8, None),), 2)
    bad = pa.py_buffer(pa.array([0, 5, 9], pa.int32()).buffers()[1])
    with pytest.raises(ValueError, match="outside the data"):
        native.join(((1, bad, data, 0, False, None),), 2)
    with pytest.raises(ValueError, match="unknown part kind"):
        native.join(((99, bad),), 1)


def test_the_c_joiner_writes_floats_as_arrows_cast_or_hands_them_back():
    """Random float64s of few decimals, of every magnitude and random bit patterns: what the C
    extension writes is Arrow's text (NaN and the infinities as Spark's strings); a value it
    cannot write makes join name the part instead; json_lines' answer is Arrow's text either way."""
    native = pytest.importorskip("pyspark_gazette._jsonscan")
    import math

    import numpy as np

    def arrow_text(v: float) -> str:
        if math.isnan(v):
            return '"NaN"'
        if math.isinf(v):
            return '"Infinity"' if v > 0 else '"-Infinity"'
        return pa.array([v]).cast(pa.string())[0].as_py()

    rng = np.random.default_rng(20261126)
    scale = 10.0 ** rng.integers(0, 7, 4000)
    few = np.rint(rng.uniform(-1e9, 1e9, 4000) * scale) / scale
    tiny = rng.integers(1, 10**6, 2000) / 10.0 ** rng.integers(0, 12, 2000)
    bits = rng.integers(0, 2**63, 2000, dtype=np.uint64).view(np.float64)
    written = 0
    for v in np.concatenate([few, tiny, bits, [0.0, -0.0, math.nan, math.inf, -math.inf, 1e-6, 1e10]]):
        got = native.join(((7, pa.array([v]).buffers()[1], 0, None),), 1)
        if isinstance(got, int):
            assert got == 0
        else:
            written += 1
            assert bytes(got[0]).decode() == arrow_text(v), v
    assert written > 5000  # the common forms are written in C
    mixed = pa.array(np.concatenate([few[:50], bits[:50], tiny[:50]]))
    want = [f'{{"f":{arrow_text(v)}}}\n'.encode() for v in mixed.to_pylist()]
    assert messages(json_lines([("f", mixed)])) == want


@pytest.mark.parametrize("precision, scale", [(38, 0), (38, 2), (23, 2), (10, 9), (38, 18), (38, 38), (5, 5)])
def test_the_c_joiner_writes_decimals_as_arrows_cast_or_hands_them_back(precision, scale):
    """decimal128s of every size (38-digit values beyond 64 bits too), of both signs: what the C
    extension writes is Arrow's text; a value Arrow writes with an exponent ("1E-10") makes
    join name the part instead; json_lines' answer is Arrow's text either way."""
    native = pytest.importorskip("pyspark_gazette._jsonscan")
    import decimal
    import random

    rng = random.Random(precision * 100 + scale)
    unscaled = [0, 1, -1, 10**precision - 1, -(10**precision - 1), 10 ** (precision - 1)]
    unscaled += [
        rng.randrange(1 - 10 ** rng.randint(1, precision), 10 ** rng.randint(1, precision)) for _ in range(400)
    ]
    values = [decimal.Decimal(f"{u}E-{scale}") for u in unscaled]  # exact, whatever the context's precision
    arr = pa.array(values, pa.decimal128(precision, scale))
    written = 0
    for v in range(len(arr)):
        one = arr.slice(v, 1)
        got = native.join(((8, one.buffers()[1], one.offset, scale, None),), 1)
        want = one.cast(pa.string())[0].as_py()
        if isinstance(got, int):
            assert got == 0 and "E" in want, want
        else:
            written += 1
            assert bytes(got[0]).decode() == want
    assert written == sum("E" not in t for t in arr.cast(pa.string()).to_pylist()) > 0  # every other value
    with_nulls = pa.array([*values[:20], None], pa.decimal128(precision, scale))
    want = [f'{{"d":{t}}}\n'.encode() for t in with_nulls.cast(pa.string()).fill_null("null").to_pylist()]
    assert messages(json_lines([("d", with_nulls)])) == want


def test_the_c_joiner_escapes_random_strings_as_the_arrow_path(monkeypatch):
    """Strings of every length up to 40 around the 8- and 16-byte steps of the C escaper, with
    quotes, backslashes, control characters and multi-byte characters anywhere (and nulls), in
    slices: the bytes json_lines writes through the C extension are the Arrow path's."""
    pytest.importorskip("pyspark_gazette._jsonscan")
    import random

    from pyspark_gazette.native import NATIVE_ENV

    rng = random.Random(20261126)
    alphabet = ["a", "b", "Z", "0", " ", '"', "\\", "\n", "\t", "\x00", "\x1f", "\x7f", "é", "😀", "/"]
    weights = [30, 30, 10, 10, 5, 2, 2, 1, 1, 1, 1, 1, 2, 1, 2]

    def text() -> str | None:
        if rng.random() < 0.03:
            return None
        return "".join(rng.choices(alphabet, weights, k=rng.randrange(0, 41)))

    values = [text() for _ in range(3000)]
    for start in (0, 1, 7):
        columns = [("s", pa.array(values).slice(start)), ("t", pa.array(values[::-1], pa.large_string()).slice(start))]
        monkeypatch.delenv(NATIVE_ENV, raising=False)
        c_data, c_offsets = json_lines(columns)
        monkeypatch.setenv(NATIVE_ENV, "0")
        a_data, a_offsets = json_lines(columns)
        assert bytes(c_data) == bytes(a_data)
        assert c_offsets.tolist() == a_offsets.tolist()
        assert [json.loads(m)["s"] for m in messages((c_data, c_offsets))] == values[start:]


@pytest.mark.parametrize("native", ["1", "0"])
def test_null_type_columns_are_written_as_null_by_both_joiners(monkeypatch, native):
    """A NullType column (``lit(None)``) has no buffers: the C joiner takes its JSON text, so both
    paths write ``{"x":null}``, sliced or not."""
    from pyspark_gazette.native import NATIVE_ENV

    if native == "1":
        pytest.importorskip("pyspark_gazette._jsonscan")
    monkeypatch.setenv(NATIVE_ENV, native)
    nulls = pa.nulls(4)
    assert messages(json_lines([("x", nulls)])) == [b'{"x":null}\n'] * 4
    assert messages(json_lines([("x", nulls.slice(1)), ("y", pa.array([1, None, 3]))])) == [
        b'{"x":null,"y":1}\n',
        b'{"x":null,"y":null}\n',
        b'{"x":null,"y":3}\n',
    ]
    prefix = pa.array(['{"_meta":{"uuid":"u"}'] * 2)
    assert messages(json_lines([("x", pa.nulls(2))], prefix)) == [b'{"_meta":{"uuid":"u"},"x":null}\n'] * 2
