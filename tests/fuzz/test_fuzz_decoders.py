"""Fuzzing the decoders of untrusted bytes: fragment names, codecs, fragment files, framings.

Inputs are random, or valid encodings with random damage (bit flips, cuts, insertions), which
reach deeper into each decoder than random bytes do. Every input must decode or raise one of
our errors (see conftest.py); where a decode succeeds, what it returns is checked too.
"""

from __future__ import annotations

import hashlib
import io

import pyarrow as pa
from fuzzing import EXAMPLES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyspark_gazette.errors import FragmentChecksumError, FramingError
from pyspark_gazette.fragments.codecs import compress_bytes, decompress_bytes, open_decompressor
from pyspark_gazette.fragments.names import FragmentRef, content_name, parse_content_name
from pyspark_gazette.fragments.reader import FragmentReader
from pyspark_gazette.message.arrow import ArrowLineDecoder
from pyspark_gazette.message.framing import FRAMINGS, framing_by_name, framing_for_content_type
from pyspark_gazette.protocol import pb

FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
CODECS = [pb.NONE, pb.GZIP, pb.ZSTANDARD, pb.SNAPPY, pb.GZIP_OFFLOAD_DECOMPRESSION]
HEX = "0123456789abcdefABCDEF"


@st.composite
def damaged(draw, data: bytes) -> bytes:
    """``data`` with a few random edits: flipped bits, a cut, inserted or deleted bytes."""
    out = bytearray(data)
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "delete"]))
        at = draw(st.integers(0, len(out)))
        if kind == "flip" and at < len(out):
            out[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "cut":
            del out[at:]
        elif kind == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del out[at : at + draw(st.integers(1, 8))]
    return bytes(out)


def name_like() -> st.SearchStrategy[str]:
    field = st.text(HEX, min_size=0, max_size=18)
    digest = st.text(HEX, min_size=38, max_size=42)
    ext = st.sampled_from(["", ".raw", ".gz", ".gzip", ".zst", ".ZSTANDARD", ".sz", ".snappy", ".gzod", ".x", "."])
    structured = st.builds(lambda a, b, c, e: f"{a}-{b}-{c}{e}", field, field, digest, ext)
    valid = st.builds(
        lambda b, n, d, c: content_name(b, b + n, d.hex(), c),
        st.integers(0, 1 << 62),
        st.integers(0, 1 << 40),
        st.binary(min_size=20, max_size=20),
        st.sampled_from([pb.NONE, pb.GZIP, pb.ZSTANDARD, pb.SNAPPY, pb.GZIP_OFFLOAD_DECOMPRESSION]),
    )
    edited = st.tuples(valid, st.integers(0, 90), st.text(max_size=3)).map(
        lambda t: t[0][: t[1]] + t[2] + t[0][t[1] + 1 :]
    )
    return st.one_of(st.text(max_size=80), structured, valid, edited)


@FUZZ
@given(name_like())
def test_fragment_content_names(fuzz, name):
    parsed = fuzz.run("fragments.parse_content_name", lambda: parse_content_name(name))
    if isinstance(parsed, tuple):
        begin, end, digest, codec = parsed
        assert 0 <= begin <= end
        # A name that parses names the same fragment when written back (case and alias aside).
        assert parse_content_name(content_name(begin, end, digest, codec)) == parsed


@FUZZ
@given(journal=st.text(max_size=20), path=st.text(max_size=120) | name_like(), store=st.text(max_size=30))
def test_fragment_relative_paths(fuzz, journal, path, store):
    ref = fuzz.run(
        "fragments.from_relative_path", lambda: FragmentRef.from_relative_path(journal, path, backing_store=store)
    )
    if isinstance(ref, FragmentRef):
        assert parse_content_name(ref.content_name) == parse_content_name(path.rpartition("/")[2])
        assert ref.path_postfix == path.rpartition("/")[0]


@FUZZ
@given(
    begin=st.integers(-(1 << 63), (1 << 63) - 1),
    end=st.integers(-(1 << 63), (1 << 63) - 1),
    digest=st.binary(min_size=20, max_size=20),
    codec=st.integers(-1, 8),
)
def test_fragment_refs_from_listings(fuzz, begin, end, digest, codec):
    from pyspark_gazette.protocol import sha1sum_from_digest

    frag = pb.Fragment(journal="a/b", begin=begin, end=end, compression_codec=codec, sum=sha1sum_from_digest(digest))
    ref = fuzz.run("fragments.FragmentRef.from_proto", lambda: FragmentRef.from_proto(frag))
    if isinstance(ref, FragmentRef):
        assert ref.to_proto() == frag


@FUZZ
@given(codec=st.sampled_from(CODECS), data=st.binary(max_size=4096))
def test_codecs_random_bytes(fuzz, codec, data):
    out = fuzz.run(f"codecs.random[{pb.CompressionCodec.Name(codec)}]", lambda: decompress_bytes(codec, data))
    if codec == pb.NONE:
        assert out == data


@FUZZ
@given(codec=st.sampled_from(CODECS), content=st.binary(max_size=3000), data=st.data(), chunk=st.integers(1, 700))
def test_codecs_damaged_files(fuzz, codec, content, data, chunk):
    """Valid files with random damage, read in small pieces as the executors do."""
    raw = data.draw(damaged(compress_bytes(codec, content)))

    def read_all() -> bytes:
        parts = []
        with open_decompressor(codec, io.BytesIO(raw)) as d:
            while piece := d.read1(chunk):
                parts.append(piece)
        return b"".join(parts)

    out = fuzz.run(f"codecs.damaged[{pb.CompressionCodec.Name(codec)}]", read_all)
    if raw == compress_bytes(codec, content):
        assert out == content


@FUZZ
@given(
    codec=st.sampled_from(CODECS),
    content=st.binary(min_size=1, max_size=3000),
    data=st.data(),
    begin=st.integers(0, 1 << 40),
    verify=st.booleans(),
)
def test_fragment_reader_damaged_files(fuzz, codec, content, data, begin, verify):
    """A fragment file must decode to exactly its declared length; with SHA1 checks, to its sum."""
    raw = data.draw(damaged(compress_bytes(codec, content)))
    declared = data.draw(st.sampled_from([len(content), len(content) - 1, len(content) + 1]))
    ref = FragmentRef("fuzz/journal", begin, begin + max(0, declared), hashlib.sha1(content).hexdigest(), codec)
    offset = data.draw(st.integers(ref.begin, ref.end))

    def read() -> bytes:
        with FragmentReader(io.BytesIO(raw), ref, offset, verify_sha1=verify) as r:
            return b"".join(r.iter_chunks(257))

    out = fuzz.run(f"fragments.FragmentReader[{pb.CompressionCodec.Name(codec)}]", read)
    if isinstance(out, bytes):
        assert len(out) == ref.end - offset
        if verify:
            assert out == content[offset - begin :]
    elif isinstance(out, FragmentChecksumError):
        assert "fuzz/journal" in str(out)


@FUZZ
@given(
    name=st.sampled_from(sorted(FRAMINGS)),
    data=st.binary(max_size=600),
    cuts=st.lists(st.integers(1, 64), max_size=12),
    strict=st.booleans(),
    start=st.integers(0, 1 << 50),
)
def test_framing_decoders_random_bytes(fuzz, name, data, cuts, strict, start):
    framing = framing_by_name(name)

    def decode() -> list:
        dec = framing.decoder(start, strict=strict)
        out, rest = [], data
        for n in cuts:
            out += dec.feed(rest[:n])
            rest = rest[n:]
        out += dec.feed(rest)
        out += dec.finish()
        for offset, payload in out:
            assert start <= offset < start + len(data)
            try:
                framing.decode_message(payload, offset)
            except FramingError:
                pass
        return out

    out = fuzz.run(f"framing.decoder[{name}]", decode)
    if isinstance(out, list):
        offsets = [o for o, _ in out]
        assert offsets == sorted(set(offsets))


@FUZZ
@given(
    payloads=st.lists(st.binary(max_size=60), max_size=10),
    data=st.data(),
    name=st.sampled_from(sorted(FRAMINGS)),
)
def test_framing_decoders_damaged_streams(fuzz, payloads, data, name):
    framing = framing_by_name(name)
    if name in ("ndjson", "lines", "csv"):
        payloads = [p.replace(b"\n", b"").replace(b"\r", b"") for p in payloads]
    if name == "csv":
        payloads = [p.replace(b'"', b"") for p in payloads]
    good = framing.encode_all(payloads)
    raw = data.draw(damaged(good))
    out = fuzz.run(f"framing.damaged[{name}]", lambda: framing.decode_all(raw))
    if raw == good and name != "csv":
        assert [p for _, p in out] == [framing.decode_all(framing.encode(p))[0][1] for p in payloads]


@FUZZ
@given(data=st.binary(max_size=400).map(lambda b: b.replace(b"\x00", b"\n")), cuts=st.lists(st.integers(1, 50)))
def test_arrow_line_decoder_matches_line_decoder(fuzz, data, cuts):
    """The vectorised line splitter returns what the reference line decoder does."""

    def both() -> tuple[list, list]:
        fast = ArrowLineDecoder(7)
        ref = framing_by_name("lines").decoder(7)
        got, want, rest = [], [], data
        for n in [*cuts, len(data)]:
            batch = fast.feed(rest[:n])
            got += zip(batch.offsets.to_pylist(), batch.values.to_pylist(), strict=True)
            want += ref.feed(rest[:n])
            rest = rest[n:]
        fast.finish()
        return got, want

    out = fuzz.run("framing.ArrowLineDecoder", both)
    if isinstance(out, tuple):
        got, want = out
        assert got == want


@FUZZ
@given(st.text(max_size=60))
def test_framing_for_content_types(fuzz, ct):
    fuzz.run("framing.for_content_type", lambda: framing_for_content_type(ct))
    fuzz.run("framing.by_name", lambda: framing_by_name(ct))


def test_values_are_arrow_binary():
    """Guard for the differential test above: the fast decoder yields binary values."""
    batch = ArrowLineDecoder(0).feed(b"a\nb\n")
    assert batch.values.type == pa.binary() and batch.offsets.to_pylist() == [0, 2]
