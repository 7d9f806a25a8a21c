"""Content names and FragmentRef (facts sheet 4.1, 4.2)."""

from __future__ import annotations

import hashlib
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyspark_gazette.errors import FragmentNameError
from pyspark_gazette.fragments import EXTENSIONS, ZERO_SUM, FragmentRef, content_name, parse_content_name
from pyspark_gazette.protocol import pb, sha1sum_to_hex

EXAMPLE = "0000000000000000-000000000000001b-84e511ae015b7b3aea825d67fb1c4ba38c74849d.sz"
EXAMPLE_SUM = "84e511ae015b7b3aea825d67fb1c4ba38c74849d"
CODECS = [pb.NONE, pb.GZIP, pb.ZSTANDARD, pb.SNAPPY, pb.GZIP_OFFLOAD_DECOMPRESSION]


def test_facts_sheet_example_round_trips():
    assert hashlib.sha1(b'{"Msg": "Hello, Gazette!"}\n').hexdigest() == EXAMPLE_SUM
    assert parse_content_name(EXAMPLE) == (0, 27, EXAMPLE_SUM, pb.SNAPPY)
    assert content_name(0, 27, EXAMPLE_SUM, pb.SNAPPY) == EXAMPLE


def test_default_extensions():
    assert EXTENSIONS == {
        pb.NONE: ".raw",
        pb.GZIP: ".gz",
        pb.ZSTANDARD: ".zst",
        pb.SNAPPY: ".sz",
        pb.GZIP_OFFLOAD_DECOMPRESSION: "",
    }
    assert content_name(1, 2, EXAMPLE_SUM, pb.GZIP_OFFLOAD_DECOMPRESSION).endswith(EXAMPLE_SUM)


@pytest.mark.parametrize(
    ("ext", "codec"),
    [
        (".raw", pb.NONE),
        (".RAW", pb.NONE),
        (".gz", pb.GZIP),
        (".gzip", pb.GZIP),
        (".GZip", pb.GZIP),
        (".zst", pb.ZSTANDARD),
        (".zstandard", pb.ZSTANDARD),
        (".ZST", pb.ZSTANDARD),
        (".sz", pb.SNAPPY),
        (".snappy", pb.SNAPPY),
        (".SZ", pb.SNAPPY),
        ("", pb.GZIP_OFFLOAD_DECOMPRESSION),
        (".gzod", pb.GZIP_OFFLOAD_DECOMPRESSION),
        (".GZOD", pb.GZIP_OFFLOAD_DECOMPRESSION),
    ],
)
def test_extension_aliases_are_case_insensitive(ext, codec):
    assert parse_content_name(f"00000000000000ff-0000000000000fff-{EXAMPLE_SUM}{ext}") == (
        255,
        4095,
        EXAMPLE_SUM,
        codec,
    )


def test_uppercase_hex_is_accepted_and_normalised():
    begin, end, sum_hex, codec = parse_content_name(f"00000000000000FF-0000000000000FFF-{EXAMPLE_SUM.upper()}.gz")
    assert (begin, end, sum_hex, codec) == (255, 4095, EXAMPLE_SUM, pb.GZIP)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("0000000000000000-000000000000001b.sz", "three '-' separated fields"),
        (f"0-1-2-{EXAMPLE_SUM}.sz", "three '-' separated fields"),
        (f"000000000000000g-000000000000001b-{EXAMPLE_SUM}.sz", "begin offset"),
        (f"0000000000000000--{EXAMPLE_SUM}.sz", "end offset"),
        (f"0x10-0x20-{EXAMPLE_SUM}.sz", "begin offset"),
        (f"+1-2-{EXAMPLE_SUM}.sz", "begin offset"),
        (f"8000000000000000-8000000000000001-{EXAMPLE_SUM}.sz", "overflows int64"),
        (f"0000000000000010-000000000000000f-{EXAMPLE_SUM}.sz", "before begin"),
        ("0000000000000000-000000000000001b-84e511ae015b7b3aea825d67fb1c4ba38c7484.sz", "20-byte"),
        ("0000000000000000-000000000000001b-84e511ae015b7b3aea825d67fb1c4ba38c74849d00.sz", "20-byte"),
        ("0000000000000000-000000000000001b-zze511ae015b7b3aea825d67fb1c4ba38c74849d.sz", "20-byte"),
        (f"0000000000000000-000000000000001b-{EXAMPLE_SUM}.lz4", "unknown extension '.lz4'"),
        (f"0000000000000000-000000000000001b-{EXAMPLE_SUM}.", "unknown extension '.'"),
        (f"0000000000000000-000000000000001b-{EXAMPLE_SUM}.tar.gz", "20-byte"),
        ("", "three '-' separated fields"),
        (".partial-1234", "three '-' separated fields"),
    ],
)
def test_bad_names_are_rejected_with_the_name(name, why):
    with pytest.raises(FragmentNameError) as info:
        parse_content_name(name)
    assert why in str(info.value)
    assert info.value.fragment == name
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("args", "why"),
    [
        ((-1, 0, EXAMPLE_SUM, pb.NONE), "0 <= begin"),
        ((5, 4, EXAMPLE_SUM, pb.NONE), "0 <= begin"),
        ((0, 1, "abc", pb.NONE), "40 hex"),
        ((0, 1, EXAMPLE_SUM, pb.INVALID), "INVALID"),
        ((0, 1, EXAMPLE_SUM, 99), "CODEC_99"),
    ],
)
def test_content_name_rejects_bad_input(args, why):
    with pytest.raises(ValueError, match=why):
        content_name(*args)


@given(
    begin=st.integers(0, 2**63 - 1),
    length=st.integers(0, 2**40),
    digest=st.binary(min_size=20, max_size=20),
    codec=st.sampled_from(CODECS),
)
def test_content_name_round_trip(begin, length, digest, codec):
    end = min(begin + length, 2**63 - 1)
    name = content_name(begin, end, digest.hex(), codec)
    assert len(name.split("-")[0]) >= 16
    assert parse_content_name(name) == (begin, end, digest.hex(), codec)


def _ref(**kw):
    args = {"journal": "examples/foo", "begin": 0, "end": 27, "sum": EXAMPLE_SUM, "codec": pb.SNAPPY}
    args.update(kw)
    return FragmentRef(**args)


def test_fragment_ref_paths_and_properties():
    ref = _ref(path_postfix="date=2019-11-19/hour=22")
    assert ref.length == 27
    assert ref.content_name == EXAMPLE
    assert ref.content_path == f"examples/foo/date=2019-11-19/hour=22/{EXAMPLE}"
    assert _ref().content_path == f"examples/foo/{EXAMPLE}"
    assert _ref(path_postfix="p/").content_path == f"examples/foo/p/{EXAMPLE}"
    assert not ref.is_persisted
    assert not _ref(backing_store="s3://b/p/").is_persisted
    assert not _ref(mod_time=5).is_persisted
    assert _ref(backing_store="s3://b/p/", mod_time=5).is_persisted
    text = _ref(backing_store="file:///x/").describe()
    assert "examples/foo" in text and "[0, 27)" in text and EXAMPLE in text and "SNAPPY" in text


def test_fragment_ref_validates_and_normalises():
    assert _ref(sum=EXAMPLE_SUM.upper()).sum == EXAMPLE_SUM
    with pytest.raises(ValueError, match="40 hex"):
        _ref(sum="1234")
    with pytest.raises(ValueError, match="invalid offsets"):
        _ref(begin=10, end=5)
    with pytest.raises(ValueError, match="invalid codec INVALID"):
        _ref(codec=pb.INVALID)


def test_fragment_ref_proto_round_trip_and_pickle():
    ref = _ref(backing_store="s3://bucket/prefix/", mod_time=1574200000, path_postfix="date=2019-11-19")
    proto = ref.to_proto()
    assert proto.compression_codec == pb.SNAPPY
    assert proto.sum.part1 == 0x84E511AE015B7B3A and proto.sum.part3 == 0x8C74849D
    assert sha1sum_to_hex(proto.sum) == EXAMPLE_SUM
    decoded = pb.Fragment.FromString(proto.SerializeToString())
    assert FragmentRef.from_proto(decoded) == ref
    assert pickle.loads(pickle.dumps(ref)) == ref
    assert FragmentRef.from_proto(pb.Fragment(journal="j", compression_codec=pb.NONE)).sum == ZERO_SUM


def test_from_relative_path_reads_postfix():
    ref = FragmentRef.from_relative_path("a/b", f"date=x/hour=1/{EXAMPLE}", backing_store="file:///", mod_time=3)
    assert (ref.journal, ref.path_postfix, ref.begin, ref.end) == ("a/b", "date=x/hour=1", 0, 27)
    assert ref.content_path == f"a/b/date=x/hour=1/{EXAMPLE}"
    assert FragmentRef.from_relative_path("a", EXAMPLE).path_postfix == ""
    with pytest.raises(FragmentNameError):
        FragmentRef.from_relative_path("a", "date=x/notafragment.txt")
