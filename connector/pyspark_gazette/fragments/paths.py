"""Confinement of ``file://`` fragment paths to their file root.

A ``file://`` store URL, a signed ``file://`` fragment URL and a fragment's content path all
come from outside (a spec, a broker's response, a listing), yet each names a file below a
directory we chose: the file root. :func:`confined_path` is the one gate every such path goes
through. It refuses, with a :class:`~pyspark_gazette.errors.StoreURLError` naming the (redacted)
source:

* ``..`` segments that climb above the root (after percent-decoding, which callers do first,
  so ``%2e%2e`` is caught too);
* absolute paths are *not* an escape: like Gazette, they are taken relative to the root;
* symbolic links anywhere along the path that resolve outside the root (checked on the real
  path, so a link planted inside the root cannot point at ``/etc``);
* NUL bytes.

:func:`check_content_path` additionally keeps a fragment inside its journal's directory, so a
journal named ``../other`` or a ``path_postfix`` of ``../../x`` cannot reach another journal's
files or leave the store's prefix.

Known limit: the check and the later ``open`` are not atomic; someone who can create symlinks
inside the root between the two can still race it. The root should be writable only by the
broker.
"""

from __future__ import annotations

import os
import posixpath

from pyspark_gazette.errors import StoreURLError, redact_url


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def confined_path(root: str, relative: str, *, source: str) -> str:
    """``root`` joined with ``relative`` (leading ``/`` ignored), refusing any escape.

    Returns the resolved real path (symlinks followed), which is inside the real root.
    ``source`` (a URL or description, redacted here) names where ``relative`` came from.
    """
    if "\x00" in relative:
        raise StoreURLError(f"path of {redact_url(source)!r} contains a NUL byte")
    abs_root = os.path.abspath(root)
    lexical = os.path.normpath(abs_root + os.sep + relative)
    if not _within(lexical, abs_root):
        raise StoreURLError(f"path {relative!r} of {redact_url(source)!r} escapes the file root {abs_root!r}")
    real_root = os.path.realpath(abs_root)
    real = os.path.realpath(lexical)
    if not _within(real, real_root):
        raise StoreURLError(
            f"path {relative!r} of {redact_url(source)!r} escapes the file root {abs_root!r} through a symbolic link"
        )
    return real


def check_content_path(journal: str, content_path: str, *, source: str) -> None:
    """Refuse a fragment content path that leaves its journal's directory (``..`` in the
    journal name or the path postfix, or an absolute journal name)."""
    base = posixpath.normpath(journal)
    if journal.startswith("/") or base == ".." or base.startswith("../") or not content_path.startswith(base + "/"):
        raise StoreURLError(
            f"fragment path {content_path!r} of journal {journal!r} escapes the journal's directory "
            f"in {redact_url(source)!r}"
        )
