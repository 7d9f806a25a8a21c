"""FragmentReader: offsets, exact end, checksums, and errors that name the fragment."""

from __future__ import annotations

import hashlib
import io

import pytest

from pyspark_gazette.errors import (
    FragmentChecksumError,
    FragmentDecodeError,
    FragmentTooLongError,
    FragmentTooShortError,
    StoreError,
)
from pyspark_gazette.fragments import ZERO_SUM, FragmentReader, FragmentRef, compress_bytes
from pyspark_gazette.protocol import pb

CODECS = [pb.NONE, pb.GZIP, pb.ZSTANDARD, pb.SNAPPY, pb.GZIP_OFFLOAD_DECOMPRESSION]
CONTENT = b"".join(b'{"n": %d, "pad": "%s"}\n' % (i, b"x" * (i % 50)) for i in range(40_000))
BEGIN = 1_000_000  # fragments rarely start at 0


def ref_for(content: bytes, codec: int, *, begin: int = BEGIN, end: int | None = None, sum_hex: str | None = None):
    return FragmentRef(
        journal="examples/clicks",
        begin=begin,
        end=begin + len(content) if end is None else end,
        sum=hashlib.sha1(content).hexdigest() if sum_hex is None else sum_hex,
        codec=codec,
        path_postfix="date=2026-11-22",
    )


def reader(content: bytes, ref: FragmentRef, offset=None, **kw) -> FragmentReader:
    return FragmentReader(io.BytesIO(compress_bytes(ref.codec, content)), ref, offset, **kw)


def assert_names_fragment(error, ref: FragmentRef):
    text = str(error)
    assert "examples/clicks" in text
    assert f"[{ref.begin}, {ref.end})" in text
    assert ref.content_path in text
    assert error.journal == ref.journal and error.fragment == ref.content_path


@pytest.mark.parametrize("codec", CODECS)
def test_reads_whole_fragment_and_verifies(codec):
    ref = ref_for(CONTENT, codec)
    with reader(CONTENT, ref, verify_sha1=True) as r:
        assert r.offset == BEGIN
        assert r.read() == CONTENT
        assert r.offset == ref.end
        assert r.read() == b"" and r.read(10) == b""


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("skip", [0, 1, 65_536, 777_777, len(CONTENT) - 1, len(CONTENT)])
def test_offset_skips_content(codec, skip):
    ref = ref_for(CONTENT, codec)
    with reader(CONTENT, ref, BEGIN + skip, verify_sha1=True) as r:
        assert r.offset == BEGIN + skip
        chunks = list(r.iter_chunks(100_000))
        assert all(0 < len(c) <= 100_000 for c in chunks)
        assert b"".join(chunks) == CONTENT[skip:]
        assert r.offset == ref.end


def test_read_n_returns_exactly_n_until_the_end():
    ref = ref_for(CONTENT, pb.SNAPPY)
    with reader(CONTENT, ref) as r:
        got = []
        while chunk := r.read(333_333):
            got.append(chunk)
            assert r.offset == BEGIN + sum(map(len, got))
        assert [len(c) for c in got[:-1]] == [333_333] * (len(got) - 1)
        assert b"".join(got) == CONTENT


@pytest.mark.parametrize("offset", [BEGIN - 1, BEGIN + len(CONTENT) + 1])
def test_offset_outside_fragment_is_rejected(offset):
    with pytest.raises(ValueError, match="outside fragment"):
        reader(CONTENT, ref_for(CONTENT, pb.NONE), offset)


@pytest.mark.parametrize("codec", CODECS)
def test_short_file(codec):
    ref = ref_for(CONTENT, codec, end=BEGIN + len(CONTENT) + 10)
    r = reader(CONTENT, ref)
    with pytest.raises(FragmentTooShortError, match="10 bytes before the fragment end") as info:
        r.read()
    assert_names_fragment(info.value, ref)
    assert f"at offset {BEGIN + len(CONTENT)}" in str(info.value)


@pytest.mark.parametrize("codec", CODECS)
def test_short_file_while_skipping(codec):
    ref = ref_for(CONTENT[:100], codec, end=BEGIN + 500)
    with pytest.raises(FragmentTooShortError, match="while skipping to offset") as info:
        reader(CONTENT[:100], ref, BEGIN + 400).read(1)
    assert_names_fragment(info.value, ref)


@pytest.mark.parametrize("codec", CODECS)
def test_long_file(codec):
    ref = ref_for(CONTENT, codec, end=BEGIN + len(CONTENT) - 1)
    chunks = []
    with pytest.raises(FragmentTooLongError, match="past the fragment end") as info:
        for chunk in reader(CONTENT, ref).iter_chunks(4096):
            chunks.append(chunk)
    assert_names_fragment(info.value, ref)
    assert len(b"".join(chunks)) < len(CONTENT) - 1, "the last chunk is withheld when the end check fails"


@pytest.mark.parametrize("codec", CODECS)
def test_checksum_mismatch(codec):
    ref = ref_for(CONTENT, codec, sum_hex=hashlib.sha1(b"other").hexdigest())
    with pytest.raises(FragmentChecksumError, match=hashlib.sha1(CONTENT).hexdigest()) as info:
        reader(CONTENT, ref, BEGIN + 5000, verify_sha1=True).read()
    assert_names_fragment(info.value, ref)
    # Go does not check the SHA1; neither do we unless asked.
    assert reader(CONTENT, ref, BEGIN + 5000).read() == CONTENT[5000:]


def test_checksum_covers_discarded_bytes():
    corrupt = b"X" + CONTENT[1:]
    ref = ref_for(CONTENT, pb.ZSTANDARD)
    with pytest.raises(FragmentChecksumError):
        reader(corrupt, ref, BEGIN + 10, verify_sha1=True).read()


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("sum_hex", [ZERO_SUM, hashlib.sha1(b"").hexdigest()])
def test_empty_fragment(codec, sum_hex):
    ref = ref_for(b"", codec, sum_hex=sum_hex)
    with reader(b"", ref, verify_sha1=True) as r:
        assert r.read() == b""
        assert list(r.iter_chunks()) == []


def test_zero_sum_on_non_empty_fragment_fails_verification():
    ref = ref_for(CONTENT[:10], pb.NONE, sum_hex=ZERO_SUM)
    with pytest.raises(FragmentChecksumError):
        reader(CONTENT[:10], ref, verify_sha1=True).read()


@pytest.mark.parametrize("codec", [pb.GZIP, pb.ZSTANDARD, pb.SNAPPY])
def test_decode_errors_name_the_fragment(codec):
    blob = compress_bytes(codec, CONTENT)
    ref = ref_for(CONTENT, codec)
    with pytest.raises(FragmentDecodeError) as info:
        FragmentReader(io.BytesIO(blob[: len(blob) // 2]), ref).read()
    assert_names_fragment(info.value, ref)


def test_failure_at_open_closes_raw():
    class Failing(io.BytesIO):
        def read(self, n=-1):
            raise ConnectionResetError("reset")

    raw = Failing()
    with pytest.raises(StoreError, match="reset"):
        FragmentReader(raw, ref_for(CONTENT, pb.GZIP_OFFLOAD_DECOMPRESSION))  # sniffs the gzip magic at open
    assert raw.closed


def test_source_failures_become_store_errors():
    class Failing(io.RawIOBase):
        def readable(self):
            return True

        def read(self, n=-1):
            raise TimeoutError("read timed out")

    ref = ref_for(CONTENT, pb.NONE)
    with pytest.raises(StoreError, match="read timed out") as info:
        FragmentReader(Failing(), ref).read(10)
    assert ref.content_path in str(info.value)
    assert isinstance(info.value.__cause__, TimeoutError)


def test_close_closes_raw_and_blocks_reads():
    raw = io.BytesIO(compress_bytes(pb.GZIP, CONTENT))
    r = FragmentReader(raw, ref_for(CONTENT, pb.GZIP))
    assert r.read(10) == CONTENT[:10]
    r.close()
    r.close()
    assert raw.closed and r.closed
    with pytest.raises(ValueError, match="closed"):
        r.read(1)


def test_iter_chunks_rejects_bad_sizes():
    with pytest.raises(ValueError):
        list(reader(CONTENT, ref_for(CONTENT, pb.NONE)).iter_chunks(0))


def test_a_failed_reader_keeps_failing():
    ref = ref_for(CONTENT, pb.NONE, end=BEGIN + len(CONTENT) + 1)
    r = reader(CONTENT, ref)
    with pytest.raises(FragmentTooShortError) as first:
        r.read()
    with pytest.raises(FragmentTooShortError) as again:
        r.read(1)
    assert again.value is first.value
