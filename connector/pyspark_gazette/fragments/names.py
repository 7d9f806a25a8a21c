"""Fragment content names and :class:`FragmentRef`, the picklable description of one fragment.

A fragment file is named ``<begin>-<end>-<sha1><ext>`` (facts sheet 4.1): offsets as 16
zero-padded lowercase hex digits, the SHA1 of the uncompressed content as 40 hex characters,
and an extension naming the codec. The file lives at ``journal/path_postfix/<name>`` under the
store's prefix (:attr:`FragmentRef.content_path`).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from pyspark_gazette.errors import FragmentNameError, redact_url
from pyspark_gazette.protocol import codec_name, pb, sha1sum_from_hex, sha1sum_to_hex

#: Default file extension written for each codec. GZIP_OFFLOAD_DECOMPRESSION has none.
EXTENSIONS: dict[int, str] = {
    pb.NONE: ".raw",
    pb.GZIP: ".gz",
    pb.ZSTANDARD: ".zst",
    pb.SNAPPY: ".sz",
    pb.GZIP_OFFLOAD_DECOMPRESSION: "",
}

# Extensions accepted when parsing (lowercased), including the long aliases.
_CODEC_BY_EXTENSION: dict[str, int] = {
    ".raw": pb.NONE,
    ".gz": pb.GZIP,
    ".gzip": pb.GZIP,
    ".zst": pb.ZSTANDARD,
    ".zstandard": pb.ZSTANDARD,
    ".sz": pb.SNAPPY,
    ".snappy": pb.SNAPPY,
    "": pb.GZIP_OFFLOAD_DECOMPRESSION,
    ".gzod": pb.GZIP_OFFLOAD_DECOMPRESSION,
}

ZERO_SUM = "0" * 40
_MAX_OFFSET = (1 << 63) - 1
_HEX_OFFSET = re.compile(r"[0-9a-fA-F]+")
_HEX_SUM = re.compile(r"[0-9a-f]{40}")
_HEX_DIGITS = "0123456789abcdef"


def content_name(begin: int, end: int, sum_hex: str, codec: int) -> str:
    """The file name of a fragment: ``%016x-%016x-<sum><ext>``.

    Raises ``ValueError`` for offsets outside ``0 <= begin <= end < 2**63``, a sum that is not
    40 hex characters, or a codec without a file extension (INVALID or unknown).
    """
    if not 0 <= begin <= end <= _MAX_OFFSET:
        raise ValueError(f"fragment offsets must satisfy 0 <= begin <= end < 2**63, got [{begin}, {end})")
    sum_hex = sum_hex.lower()
    if not _HEX_SUM.fullmatch(sum_hex):
        raise ValueError(f"a fragment sum is 40 hex characters, got {sum_hex!r}")
    if codec not in EXTENSIONS:
        raise ValueError(f"codec {codec_name(codec)} has no fragment file extension")
    return f"{begin:016x}-{end:016x}-{sum_hex}{EXTENSIONS[codec]}"


def parse_content_name(name: str) -> tuple[int, int, str, int]:
    """Parse a content name into ``(begin, end, sum_hex, codec)``.

    Follows Gazette's rules: exactly three ``-`` separated fields, hex offsets with
    ``begin <= end``, a 20-byte hex digest, and a case-insensitive extension (``.raw``;
    ``.gz``/``.gzip``; ``.zst``/``.zstandard``; ``.sz``/``.snappy``; ``.gzod`` or none for
    GZIP_OFFLOAD_DECOMPRESSION). ``sum_hex`` is returned lowercase. Anything else raises
    :class:`FragmentNameError` naming ``name``.
    """

    def bad(why: str) -> FragmentNameError:
        return FragmentNameError(f"invalid fragment content name: {why}", fragment=name)

    parts = name.split("-")
    if len(parts) != 3:
        raise bad(f"expected <begin>-<end>-<sha1><ext> (three '-' separated fields, found {len(parts)})")
    offsets = []
    for label, text in (("begin", parts[0]), ("end", parts[1])):
        if not _HEX_OFFSET.fullmatch(text):
            raise bad(f"{label} offset {text!r} is not hexadecimal")
        value = int(text, 16)
        if value > _MAX_OFFSET:
            raise bad(f"{label} offset {text!r} overflows int64")
        offsets.append(value)
    begin, end = offsets
    if end < begin:
        raise bad(f"end offset {end:#x} is before begin offset {begin:#x}")
    last = parts[2]
    dot = last.rfind(".")
    digest, ext = (last, "") if dot < 0 else (last[:dot], last[dot:])
    if len(digest) != 40 or not _HEX_SUM.fullmatch(digest.lower()):
        raise bad(f"sum {digest!r} is not a 20-byte hex SHA1 digest")
    codec = _CODEC_BY_EXTENSION.get(ext.lower())
    if codec is None:
        raise bad(f"unknown extension {ext!r} (expected one of .raw, .gz, .zst, .sz, .gzod or none)")
    return begin, end, digest.lower(), codec


@dataclass(frozen=True)
class FragmentRef:
    """One fragment of a journal: offsets ``[begin, end)``, content SHA1, codec and location.

    Primitives only, so it pickles to Spark executors. ``sum`` is the lowercase hex SHA1 of
    the uncompressed content, all zeros for an empty fragment. ``backing_store`` is the store
    URL (empty while the fragment is local to a broker) and ``mod_time`` the store's
    last-modified time in Unix seconds (0 until persisted).
    """

    journal: str
    begin: int
    end: int
    sum: str
    codec: int
    backing_store: str = ""
    mod_time: int = 0
    path_postfix: str = ""

    def __post_init__(self) -> None:
        if not 0 <= self.begin <= self.end:
            raise FragmentNameError(f"fragment of {self.journal!r} has invalid offsets [{self.begin}, {self.end})")
        if self.codec not in EXTENSIONS:
            raise FragmentNameError(f"fragment of {self.journal!r} has invalid codec {codec_name(self.codec)}")
        lowered = self.sum.lower()
        # Exactly 40 hex characters (stripping every hex character leaves nothing): as the
        # pattern _HEX_SUM says, at a fraction of a regular expression's cost per fragment.
        if len(lowered) != 40 or lowered.strip(_HEX_DIGITS):
            raise FragmentNameError(f"fragment of {self.journal!r}: sum must be 40 hex characters, got {self.sum!r}")
        if lowered != self.sum:
            object.__setattr__(self, "sum", lowered)

    @property
    def length(self) -> int:
        return self.end - self.begin

    @property
    def content_name(self) -> str:
        return content_name(self.begin, self.end, self.sum, self.codec)

    @property
    def content_path(self) -> str:
        """``journal/path_postfix/content_name``, joined and cleaned like Go's ``path.Join``."""
        return posixpath.normpath(posixpath.join(self.journal, self.path_postfix, self.content_name))

    @property
    def is_persisted(self) -> bool:
        return self.backing_store != "" and self.mod_time != 0

    @classmethod
    def from_proto(cls, fragment: pb.Fragment) -> FragmentRef:
        return cls(
            journal=fragment.journal,
            begin=fragment.begin,
            end=fragment.end,
            sum=sha1sum_to_hex(fragment.sum),
            codec=fragment.compression_codec,
            backing_store=fragment.backing_store,
            mod_time=fragment.mod_time,
            path_postfix=fragment.path_postfix,
        )

    def to_proto(self) -> pb.Fragment:
        return pb.Fragment(
            journal=self.journal,
            begin=self.begin,
            end=self.end,
            sum=sha1sum_from_hex(self.sum),
            compression_codec=self.codec,  # type: ignore[arg-type]
            backing_store=self.backing_store,
            mod_time=self.mod_time,
            path_postfix=self.path_postfix,
        )

    @classmethod
    def from_relative_path(
        cls, journal: str, relative_path: str, *, backing_store: str = "", mod_time: int = 0
    ) -> FragmentRef:
        """Build a ref from a path relative to ``<store prefix><journal>/``: the directory part
        is the path postfix and the base name the content name (raises FragmentNameError)."""
        postfix, _, name = relative_path.rpartition("/")
        begin, end, sum_hex, codec = parse_content_name(name)
        return cls(journal, begin, end, sum_hex, codec, backing_store, mod_time, postfix)

    def describe(self) -> str:
        """Short human description for messages: journal, offsets, codec and content path."""
        where = f" in {redact_url(self.backing_store)}" if self.backing_store else ""
        return f"{self.journal}@[{self.begin}, {self.end}) {codec_name(self.codec)} {self.content_path}{where}"
