"""The C extension's kinds and range checks (pyspark_gazette._jsonscan, sources in _native/)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from pyspark_gazette import native

ext = native.module
needs_ext = pytest.mark.skipif(ext is None, reason="the C extension is not built")


@needs_ext
def test_the_extension_exports_the_kinds_python_falls_back_to():
    assert ext.SCAN_KINDS == native.SCAN_KINDS_FALLBACK
    assert ext.PART_KINDS == native.PART_KINDS_FALLBACK
    assert native.SCAN_KINDS == ext.SCAN_KINDS and native.PART_KINDS == ext.PART_KINDS


def test_typed_reads_and_writes_take_their_kinds_from_native():
    from pyspark.sql.types import DateType, StringType

    from pyspark_gazette.spark.read import typed_native
    from pyspark_gazette.spark.write import encode

    assert typed_native.NATIVE_KINDS[StringType] == native.SCAN_KINDS["string"]
    assert typed_native.NATIVE_KINDS[DateType] == native.SCAN_KINDS["date"]
    assert (typed_native.SCAN_STRUCT, typed_native.SCAN_LIST) == (
        native.SCAN_KINDS["struct"],
        native.SCAN_KINDS["list"],
    )
    assert (encode._RAW, encode._DECIMAL) == (native.PART_KINDS["raw"], native.PART_KINDS["decimal"])


def _records(*texts: bytes) -> tuple[bytes, bytes]:
    offsets = np.cumsum([0, *map(len, texts)]).astype(np.int32)
    return offsets.tobytes(), b"".join(texts)


@needs_ext
def test_scan_refuses_an_array_offset_whose_buffer_size_overflows():
    offsets, data = _records(b'{"x": 1}')
    plan = [(b"x", native.SCAN_KINDS["long"])]
    with pytest.raises(OverflowError, match="offset"):
        ext.scan(plan, None, offsets, data, sys.maxsize - 1, 1, False)
    with pytest.raises(OverflowError, match="offset"):
        ext.scan(plan, None, offsets, data, sys.maxsize // 8, 1, True)
    assert ext.scan(plan, None, offsets, data, 0, 1, False)[:2] == (b"\x00", 1)


@needs_ext
def test_scan_leaves_a_number_with_over_a_million_fraction_digits_to_python():
    double = native.SCAN_KINDS["double"]
    many_digits = b'{"x": 0.' + b"1" * ((1 << 20) + 5000) + b"}"
    many_zeros = b'{"x": 0.' + b"0" * ((1 << 20) + 1) + b"1}"
    offsets, data = _records(b'{"x": 0.25}', many_digits, many_zeros, b'{"x": 0.' + b"0" * 1000 + b"1}")
    status, rows, _ = ext.scan([(b"x", double)], None, offsets, data, 0, 4, False)
    assert (status, rows) == (b"\x00\x02\x02\x00", 2)


@needs_ext
def test_join_refuses_an_array_offset_whose_buffer_size_overflows():
    values = np.array([1, 2], dtype=np.int64).tobytes()
    with pytest.raises(OverflowError, match="array offset"):
        ext.join((b"{", (native.PART_KINDS["int"], values, sys.maxsize - 1, 8, None), b"}"), 1)
    with pytest.raises(OverflowError, match="too many rows"):
        ext.join((b"{}",), sys.maxsize // 2)
    assert ext.join((b"[", (native.PART_KINDS["int"], values, 1, 8, None), b"]"), 1)[0] == b"[2]"


@needs_ext
@pytest.mark.parametrize("days", [-719163, 2932897, -(2**31), 2**31 - 1])
def test_join_leaves_dates_outside_years_1_to_9999_to_arrow(days):
    date, micros = native.PART_KINDS["date"], native.PART_KINDS["micros"]
    dates = np.array([0, days], dtype=np.int32).tobytes()
    assert ext.join((b"[", (date, dates, 0, None), b"]"), 2) == 1
    if abs(days) < 10**8:  # the int64 microseconds of the day
        stamps = np.array([0, days * 86_400_000_000], dtype=np.int64).tobytes()
        assert ext.join((b"[", (micros, stamps, 0, True, None), b"]"), 2) == 1
    assert ext.join((b"[", (date, dates, 0, None), b"]"), 1)[0] == b'["1970-01-01"]'
