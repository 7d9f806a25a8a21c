"""Helpers over the generated protocol messages: SHA1 sums, codecs, statuses, label sets."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pyspark_gazette.protocol._gen import protocol_pb2 as pb

#: Largest content chunk a broker sends in one ReadResponse (2^15 - 32, broker/read_api.go).
MAX_READ_CHUNK = 32_736

#: What a broker says when it aborts an appender below its minimum append rate (facts sheet 3.2);
#: clients recognise the abort by it.
RATE_ABORT_TEXT = "didn't sustain the minimum append data rate"

CODEC_NAMES: dict[int, str] = {v.number: v.name for v in pb.CompressionCodec.DESCRIPTOR.values}
_CODEC_BY_NAME = {name: number for number, name in CODEC_NAMES.items()}
_CODEC_ALIASES = {"ZSTD": "ZSTANDARD", "GZ": "GZIP", "RAW": "NONE", "SZ": "SNAPPY"}


def codec_name(codec: int) -> str:
    """``pb.ZSTANDARD`` -> ``"ZSTANDARD"``; unknown values become ``"CODEC_<n>"``."""
    return CODEC_NAMES.get(codec, f"CODEC_{codec}")


def codec_from_name(name: str) -> int:
    """Parse a codec name (``"zstandard"``, ``"ZSTD"``, ``"gzip"``...) into its enum value."""
    key = name.strip().upper().replace("-", "_")
    key = _CODEC_ALIASES.get(key, key)
    if key not in _CODEC_BY_NAME or key == "INVALID":
        raise ValueError(
            f"unknown compression codec {name!r} (expected one of {', '.join(sorted(set(CODEC_NAMES.values()) - {'INVALID'}))})"
        )
    return _CODEC_BY_NAME[key]


def status_name(status: int) -> str:
    try:
        return pb.Status.Name(status)
    except ValueError:
        return f"STATUS_{status}"


def sha1sum_from_digest(digest: bytes) -> pb.SHA1Sum:
    """Split a 20-byte SHA1 digest into the protocol's (fixed64, fixed64, fixed32) parts."""
    if len(digest) != 20:
        raise ValueError(f"a SHA1 digest has 20 bytes, not {len(digest)}")
    return pb.SHA1Sum(
        part1=int.from_bytes(digest[0:8], "big"),
        part2=int.from_bytes(digest[8:16], "big"),
        part3=int.from_bytes(digest[16:20], "big"),
    )


def sha1sum_to_digest(s: pb.SHA1Sum) -> bytes:
    """The 20-byte digest of a protocol SHA1Sum (all zero for an empty fragment)."""
    return s.part1.to_bytes(8, "big") + s.part2.to_bytes(8, "big") + s.part3.to_bytes(4, "big")


def sha1sum_from_hex(text: str) -> pb.SHA1Sum:
    return sha1sum_from_digest(bytes.fromhex(text))


def sha1sum_to_hex(s: pb.SHA1Sum) -> str:
    # The digest's bytes in order, as hex: part1 and part2 are 8 bytes each, part3 the last 4
    # (one format call: planning converts one sum per listed fragment).
    return f"{s.part1:016x}{s.part2:016x}{s.part3:08x}"


def label_set(labels: Mapping[str, str | Iterable[str]] | Iterable[tuple[str, str]]) -> pb.LabelSet:
    """Build a LabelSet sorted by (name, value) and unique, as Gazette requires.

    Accepts ``{"name": "value"}``, ``{"name": ["v1", "v2"]}`` or ``[("name", "value"), ...]``.
    """
    pairs: set[tuple[str, str]] = set()
    items = labels.items() if isinstance(labels, Mapping) else labels
    for name, value in items:
        if isinstance(value, str):
            pairs.add((name, value))
        else:
            pairs.update((name, v) for v in value)
    return pb.LabelSet(labels=[pb.Label(name=n, value=v) for n, v in sorted(pairs)])


def labels_to_dict(ls: pb.LabelSet) -> dict[str, list[str]]:
    """``LabelSet`` -> ``{name: [values...]}`` in the set's order."""
    out: dict[str, list[str]] = {}
    for label in ls.labels:
        out.setdefault(label.name, []).append(label.value)
    return out
