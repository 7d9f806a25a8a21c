"""Fragment codecs against files written by the standard tools and by independent writers."""

from __future__ import annotations

import gzip
import io
import json
import random
import shutil
import struct
import subprocess
import zlib

import cramjam
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyspark_gazette.errors import FragmentDecodeError, FragmentError
from pyspark_gazette.fragments import GZIP_MEMBER_SIZE, Compressor, compress_bytes, decompress_bytes, open_decompressor
from pyspark_gazette.protocol import pb
from required_tools import missing_tool, require_tool

CODECS = [pb.NONE, pb.GZIP, pb.ZSTANDARD, pb.SNAPPY, pb.GZIP_OFFLOAD_DECOMPRESSION]
COMPRESSED = [pb.GZIP, pb.ZSTANDARD, pb.SNAPPY, pb.GZIP_OFFLOAD_DECOMPRESSION]
SNAPPY_STREAM_ID = b"\xff\x06\x00\x00sNaPpY"


def ndjson(n_events: int, seed: int = 7) -> bytes:
    rnd = random.Random(seed)
    lines = [
        json.dumps(
            {"user": rnd.randrange(10_000), "page": f"/p/{rnd.randrange(300)}", "seq": i, "ok": rnd.random() < 0.9}
        )
        for i in range(n_events)
    ]
    return ("\n".join(lines) + "\n").encode()


DATA = ndjson(60_000)  # ~4 MiB: several gzip members, many snappy chunks


def tool(*argv: str, data: bytes) -> bytes:
    if shutil.which(argv[0]) is None:
        missing_tool(f"{argv[0]} CLI is not installed")
    return subprocess.run(list(argv), input=data, capture_output=True, check=True).stdout


def read_all(stream, size: int) -> bytes:
    parts = []
    while chunk := stream.read(size):
        parts.append(chunk)
    return b"".join(parts)


# -- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("data", [b"", b"x", DATA], ids=["empty", "one-byte", "ndjson"])
def test_round_trip(codec, data):
    blob = compress_bytes(codec, data)
    assert decompress_bytes(codec, blob) == data
    with open_decompressor(codec, io.BytesIO(blob)) as d:
        assert read_all(d, 65_537) == data


@pytest.mark.parametrize("codec", CODECS)
def test_read_n_is_exact_and_read1_is_bounded(codec):
    d = open_decompressor(codec, io.BytesIO(compress_bytes(codec, DATA)))
    assert d.read(0) == b""
    assert d.read(100_000) == DATA[:100_000]
    got = d.read1(5000)
    assert 0 < len(got) <= 5000 and got == DATA[100_000 : 100_000 + len(got)]
    rest = d.read()
    assert got + rest == DATA[100_000:]
    assert d.read(10) == b"" and d.read1(10) == b""


@pytest.mark.parametrize("codec", CODECS)
def test_small_writes_equal_one_write(codec):
    out = io.BytesIO()
    c = Compressor(codec, out)
    for i in range(0, len(DATA), 7777):
        c.write(DATA[i : i + 7777])
    c.write(b"")
    c.close()
    c.close()  # idempotent
    assert not out.closed, "close() finalises but leaves the output open"
    assert decompress_bytes(codec, out.getvalue()) == DATA
    with pytest.raises(ValueError):
        c.write(b"more")


def test_compressor_rejects_unknown_codecs():
    with pytest.raises(ValueError, match="INVALID"):
        Compressor(pb.INVALID, io.BytesIO())


def test_decompressor_rejects_unknown_codecs():
    with pytest.raises(FragmentDecodeError, match="CODEC_42"):
        open_decompressor(42, io.BytesIO(b""))


# -- file layouts ------------------------------------------------------------------------------


def gzip_members(blob: bytes) -> list[bytes]:
    members = []
    while blob:
        d = zlib.decompressobj(31)
        members.append(d.decompress(blob))
        assert d.eof
        blob = d.unused_data
    return members


def test_gzip_closes_a_member_after_each_mebibyte_of_writes():
    out = io.BytesIO()
    with Compressor(pb.GZIP, out) as c:
        for i in range(0, len(DATA), 100_000):
            c.write(DATA[i : i + 100_000])
    members = gzip_members(out.getvalue())
    assert len(members) == len(DATA) // GZIP_MEMBER_SIZE + 1
    assert all(GZIP_MEMBER_SIZE <= len(m) < GZIP_MEMBER_SIZE + 100_000 for m in members[:-1])
    assert b"".join(members) == DATA


def test_gzip_offload_is_a_single_member():
    assert gzip_members(compress_bytes(pb.GZIP_OFFLOAD_DECOMPRESSION, DATA)) == [DATA]


def test_zstd_frame_has_no_content_size():
    blob = compress_bytes(pb.ZSTANDARD, DATA)
    assert zstandard.get_frame_parameters(blob).content_size == zstandard.CONTENTSIZE_UNKNOWN


def test_snappy_uses_the_framing_format():
    blob = compress_bytes(pb.SNAPPY, DATA)
    assert blob.startswith(SNAPPY_STREAM_ID)
    assert blob.count(SNAPPY_STREAM_ID) == 1
    assert bytes(cramjam.snappy.decompress(blob)) == DATA


# -- files from the standard tools ---------------------------------------------------------------


@pytest.mark.parametrize("argv", [("gzip", "-c"), ("gzip", "-1", "-c", "-n")])
def test_decodes_gzip_cli_output(argv):
    assert decompress_bytes(pb.GZIP, tool(*argv, data=DATA)) == DATA


def test_decodes_concatenated_gzip_members(tmp_path):
    if shutil.which("gzip") is None:
        missing_tool("gzip CLI is not installed")
    (tmp_path / "a").write_bytes(DATA[:1000])
    (tmp_path / "b").write_bytes(DATA[1000:])
    subprocess.run(["gzip", str(tmp_path / "a"), str(tmp_path / "b")], check=True)
    joined = subprocess.run(
        ["cat", str(tmp_path / "a.gz"), str(tmp_path / "b.gz")], capture_output=True, check=True
    ).stdout
    assert len(gzip_members(joined)) == 2
    assert decompress_bytes(pb.GZIP, joined) == DATA
    assert decompress_bytes(pb.GZIP_OFFLOAD_DECOMPRESSION, joined) == DATA


@pytest.mark.parametrize("argv", [("zstd", "-c", "-q"), ("zstd", "-19", "--no-check", "-c", "-q")])
def test_decodes_zstd_cli_output(argv):
    blob = tool(*argv, data=DATA)
    assert decompress_bytes(pb.ZSTANDARD, blob) == DATA
    assert decompress_bytes(pb.ZSTANDARD, blob + blob) == DATA + DATA


def test_decodes_zstd_cli_streaming_output_without_content_size():
    if shutil.which("zstd") is None:
        require_tool("zstd", "the zstd command-line tool writes frames without a content size (apt install zstd)")
    blob = subprocess.run(
        "zstd -c -q --no-content-size", shell=True, input=DATA, capture_output=True, check=True
    ).stdout
    assert zstandard.get_frame_parameters(blob).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert decompress_bytes(pb.ZSTANDARD, blob) == DATA


def test_zstd_skippable_frames_are_skipped():
    skippable = struct.pack("<II", 0x184D2A53, 5) + b"hello"
    blob = skippable + compress_bytes(pb.ZSTANDARD, b"abc") + skippable + compress_bytes(pb.ZSTANDARD, b"def")
    assert decompress_bytes(pb.ZSTANDARD, blob) == b"abcdef"


@pytest.mark.parametrize(
    ("codec", "argv"), [(pb.GZIP, ("gzip", "-d", "-c")), (pb.ZSTANDARD, ("zstd", "-d", "-c", "-q"))]
)
def test_our_output_decodes_with_the_cli(codec, argv):
    assert tool(*argv, data=compress_bytes(codec, DATA)) == DATA


def test_gzip_offload_output_decodes_with_the_cli():
    assert tool("gzip", "-d", "-c", data=compress_bytes(pb.GZIP_OFFLOAD_DECOMPRESSION, DATA)) == DATA


def test_decodes_independent_snappy_framing_writer():
    assert decompress_bytes(pb.SNAPPY, bytes(cramjam.snappy.compress(DATA))) == DATA
    c = cramjam.snappy.Compressor()
    parts = []
    for i in range(0, len(DATA), 50_000):  # flushes after each write: many short runs of chunks
        c.compress(DATA[i : i + 50_000])
        parts.append(bytes(c.flush()))
    parts.append(bytes(c.finish()))
    assert decompress_bytes(pb.SNAPPY, b"".join(parts)) == DATA


# A hand-written framing writer (uncompressed chunks, padding, skippable chunks) checks our chunk
# parsing independently of any library's encoder.


def _crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def _masked_crc(data: bytes) -> bytes:
    crc = _crc32c(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def _chunk(kind: int, body: bytes) -> bytes:
    return bytes([kind]) + len(body).to_bytes(3, "little") + body


def _uncompressed(data: bytes) -> bytes:
    return _chunk(0x01, _masked_crc(data) + data)


def _compressed(data: bytes) -> bytes:
    return _chunk(0x00, _masked_crc(data) + bytes(cramjam.snappy.compress_raw(data)))


def test_crc32c_helper_matches_known_vector():
    assert _crc32c(b"123456789") == 0xE3069283


def test_snappy_hand_built_stream():
    blob = (
        SNAPPY_STREAM_ID
        + _uncompressed(b"hello ")
        + _chunk(0xFE, b"\x00" * 9)  # padding
        + _chunk(0x80, b"skip me")  # reserved skippable
        + _compressed(b"snappy " * 50)
        + SNAPPY_STREAM_ID  # a second stream identifier (concatenated streams)
        + _uncompressed(b"world")
    )
    expected = b"hello " + b"snappy " * 50 + b"world"
    assert decompress_bytes(pb.SNAPPY, blob) == expected

    class Trickle(io.RawIOBase):  # returns 3 bytes per read: chunks straddle reads
        def __init__(self, data):
            self._data = io.BytesIO(data)

        def readable(self):
            return True

        def read(self, n=-1):
            return self._data.read(min(3, n) if n >= 0 else 3)

    with open_decompressor(pb.SNAPPY, Trickle(blob)) as d:
        assert d.read() == expected


@pytest.mark.parametrize(
    ("blob", "why"),
    [
        (_uncompressed(b"no stream identifier"), "stream"),
        (SNAPPY_STREAM_ID + _chunk(0x02, b"reserved unskippable"), "SNAPPY"),
        (SNAPPY_STREAM_ID + _chunk(0x01, b"\x00\x00\x00\x00bad crc"), "checksum"),
        (SNAPPY_STREAM_ID + _chunk(0x00, _masked_crc(b"x") + b"\xff\xff\xff\xff\x0f garbage"), "SNAPPY"),
        (SNAPPY_STREAM_ID + _uncompressed(b"abc")[:-1], "truncated"),
        (SNAPPY_STREAM_ID + b"\x01\x05", "truncated"),
    ],
    ids=["no-stream-id", "reserved-chunk", "bad-crc", "bad-block", "truncated-chunk", "truncated-header"],
)
def test_snappy_malformed(blob, why):
    with pytest.raises(FragmentDecodeError, match=why):
        decompress_bytes(pb.SNAPPY, blob)


# -- offload codec --------------------------------------------------------------------------------


def test_gzip_offload_gunzips_only_gzip_bytes():
    assert decompress_bytes(pb.GZIP_OFFLOAD_DECOMPRESSION, gzip.compress(DATA)) == DATA
    assert decompress_bytes(pb.GZIP_OFFLOAD_DECOMPRESSION, DATA) == DATA  # transcoded by the store
    assert decompress_bytes(pb.GZIP_OFFLOAD_DECOMPRESSION, b"\x1f") == b"\x1f"
    assert decompress_bytes(pb.GZIP_OFFLOAD_DECOMPRESSION, b"") == b""


# -- corrupt input ----------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", COMPRESSED)
@pytest.mark.parametrize("cut", [0.5, 0.99, -1])
def test_truncated_input_is_a_decode_error(codec, cut):
    blob = compress_bytes(codec, DATA)
    keep = len(blob) - 1 if cut == -1 else int(len(blob) * cut)
    with pytest.raises(FragmentDecodeError, match="truncated|ended"):
        decompress_bytes(codec, blob[:keep])


@pytest.mark.parametrize("codec", [pb.GZIP, pb.ZSTANDARD, pb.SNAPPY])
def test_garbage_is_a_decode_error(codec):
    with pytest.raises(FragmentDecodeError):
        decompress_bytes(codec, b"this is not compressed at all, not even a little bit")


@pytest.mark.parametrize("codec", [pb.GZIP, pb.ZSTANDARD, pb.SNAPPY, pb.GZIP_OFFLOAD_DECOMPRESSION])
def test_trailing_garbage_is_a_decode_error(codec):
    with pytest.raises(FragmentDecodeError):
        decompress_bytes(codec, compress_bytes(codec, b"content") + b"trailing junk")


def test_gzip_crc_mismatch_is_a_decode_error():
    blob = bytearray(gzip.compress(DATA[:5000]))
    blob[-8] ^= 0xFF  # CRC32 of the member trailer
    with pytest.raises(FragmentDecodeError, match="CRC"):
        decompress_bytes(pb.GZIP, bytes(blob))


def test_io_errors_of_the_source_are_not_decode_errors():
    class Broken(io.RawIOBase):
        def readable(self):
            return True

        def read(self, n=-1):
            raise ConnectionResetError("peer went away")

    for codec in CODECS:
        with pytest.raises(ConnectionResetError):
            open_decompressor(codec, Broken()).read(10)


# -- streaming, bounded memory ------------------------------------------------------------------------


class CountingReader(io.RawIOBase):
    def __init__(self, data: bytes):
        self._data = io.BytesIO(data)
        self.consumed = 0

    def readable(self):
        return True

    def read(self, n=-1):
        chunk = self._data.read(n)
        self.consumed += len(chunk)
        return chunk


@pytest.mark.parametrize("codec", CODECS)
def test_decoding_streams_the_source(codec):
    data = random.Random(3).randbytes(16 << 20)  # incompressible: file size ~ content size
    src = CountingReader(compress_bytes(codec, data))
    with open_decompressor(codec, src) as d:
        assert d.read(1000) == data[:1000]
        assert src.consumed < 2 << 20, "decoding the first bytes must not read the whole file"
    assert src.closed, "closing the decompressor closes the source"


# -- property tests: any input decodes or raises our error, never anything else ---------------------

_PREFIXES = {
    pb.NONE: [b""],
    pb.GZIP: [b"", b"\x1f\x8b", b"\x1f\x8b\x08", b"\x1f\x8b\x08\x1c"],
    pb.ZSTANDARD: [b"", b"\x28\xb5\x2f\xfd", b"\x28\xb5\x2f\xfd\x00", b"\x50\x2a\x4d\x18"],
    pb.SNAPPY: [b"", SNAPPY_STREAM_ID, SNAPPY_STREAM_ID + b"\x00", SNAPPY_STREAM_ID + b"\x01"],
    pb.GZIP_OFFLOAD_DECOMPRESSION: [b"", b"\x1f\x8b", b"\x1f\x8b\x08\x00"],
}


def _decode_or_our_error(codec: int, blob: bytes) -> None:
    try:
        with open_decompressor(codec, io.BytesIO(blob)) as d:
            while d.read1(4096):
                pass
    except FragmentError:
        pass


@pytest.mark.timeout(120)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(codec=st.sampled_from(CODECS), data=st.data(), tail=st.binary(max_size=2048))
def test_random_bytes_decode_or_raise_our_error(codec, data, tail):
    prefix = data.draw(st.sampled_from(_PREFIXES[codec]))
    _decode_or_our_error(codec, prefix + tail)


_VALID = {codec: compress_bytes(codec, DATA[:20_000]) for codec in COMPRESSED}


@pytest.mark.timeout(120)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(codec=st.sampled_from(COMPRESSED), data=st.data())
def test_corrupted_files_decode_or_raise_our_error(codec, data):
    blob = bytearray(_VALID[codec])
    for _ in range(data.draw(st.integers(1, 4))):
        blob[data.draw(st.integers(0, len(blob) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(blob)))
    _decode_or_our_error(codec, bytes(blob[:cut]))


# -- zstd frame tracking: truncation is detected exactly at frame boundaries ----------------------


@pytest.mark.parametrize("size", [0, 1, 255, 256, 65_791, 65_792, 200_000, 3_000_000])
@pytest.mark.parametrize("checksum", [False, True])
def test_zstd_one_shot_frames_with_content_size(size, checksum):
    data = DATA[:size]
    frame = zstandard.ZstdCompressor(write_checksum=checksum).compress(data)  # single segment, with size
    assert decompress_bytes(pb.ZSTANDARD, frame + frame) == data + data
    with pytest.raises(FragmentDecodeError, match="truncated"):
        decompress_bytes(pb.ZSTANDARD, frame + frame[:-1])


_ZSTD_FRAMES = [
    zstandard.ZstdCompressor(write_checksum=True).compress(DATA[:300]),
    compress_bytes(pb.ZSTANDARD, DATA[300:90_000]),
    struct.pack("<II", 0x184D2A5F, 3) + b"abc",
    zstandard.ZstdCompressor(level=1, write_content_size=False).compress(DATA[90_000:100_000]),
]


@settings(max_examples=200, deadline=None)
@given(cut=st.integers(0, sum(map(len, _ZSTD_FRAMES))))
def test_zstd_cut_anywhere_is_clean_only_at_frame_boundaries(cut):
    blob = b"".join(_ZSTD_FRAMES)
    boundaries = {sum(map(len, _ZSTD_FRAMES[:i])) for i in range(len(_ZSTD_FRAMES) + 1)}
    if cut in boundaries:
        assert DATA.startswith(decompress_bytes(pb.ZSTANDARD, blob[:cut]))
    else:
        with pytest.raises(FragmentDecodeError):
            decompress_bytes(pb.ZSTANDARD, blob[:cut])
