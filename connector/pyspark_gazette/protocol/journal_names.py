"""Rules of Gazette's ``Journal`` type (``journal_spec_extensions.go``, ``validator.go``).

A journal name is a clean, non-rooted path of 4 to 512 bytes (UTF-8) of Unicode letters and
numbers plus ``-_+/.=%`` (Gazette's ``ValidatePathComponent`` with its path symbols). A journal
field of a request may carry a ``;meta`` suffix (``name;meta``), which names the same journal:
:func:`split_meta` and :func:`base_journal` strip it. Every layer (options, client, broker, CLI)
uses these rules; the broker adds only its store-safety rule on top (no leading ``..``).
"""

from __future__ import annotations

import posixpath
import unicodedata

from pyspark_gazette.errors import SpecError

#: Gazette's ``TokenSymbols``: the runes a token may hold besides letters and numbers.
TOKEN_SYMBOLS = "-_+/."
#: Gazette's ``pathSymbols``: tokens plus ``=`` and ``%``, the runes of journal names.
PATH_SYMBOLS = TOKEN_SYMBOLS + "=%"
MIN_JOURNAL_NAME_LEN, MAX_JOURNAL_NAME_LEN = 4, 512


def split_meta(journal: str) -> tuple[str, str]:
    """``"a/b;x"`` -> ``("a/b", ";x")`` (Gazette's ``Journal.SplitMeta``)."""
    name, sep, meta = journal.partition(";")
    return name, sep + meta


def base_journal(journal: str) -> str:
    """The journal a journal field names: its ``;meta`` suffix stripped."""
    return journal.split(";", 1)[0]


def _letter_or_number(c: str) -> bool:
    # Go's unicode.IsLetter || unicode.IsNumber: general categories L* and N*.
    return unicodedata.category(c)[0] in "LN"


def validate_journal_name(name: str) -> None:
    """Raise :class:`~pyspark_gazette.errors.SpecError` unless ``name`` is a valid journal name."""
    size = len(name.encode("utf-8", "surrogatepass"))  # Go's len(): bytes
    if not (MIN_JOURNAL_NAME_LEN <= size <= MAX_JOURNAL_NAME_LEN):
        raise SpecError(
            f"invalid journal name {name!r}: length must be {MIN_JOURNAL_NAME_LEN}..{MAX_JOURNAL_NAME_LEN} (got {size})"
        )
    bad = sorted({c for c in name if not (_letter_or_number(c) or c in PATH_SYMBOLS)})
    if bad:
        raise SpecError(f"invalid journal name {name!r}: characters {''.join(bad)!r} are not allowed")
    if name.startswith("/"):
        raise SpecError(f"invalid journal name {name!r}: must not begin with '/'")
    if posixpath.normpath(name) != name:
        raise SpecError(f"invalid journal name {name!r}: must be a clean path (expected {posixpath.normpath(name)!r})")
