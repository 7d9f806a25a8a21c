"""Fragment store URLs (facts sheet 4.3; Gazette's ``broker/protocol/fragment_store.go``): the
schemes, each scheme's query arguments, and how a URL parses into bucket, prefix and arguments.

These are rules of the protocol: the broker (journal specs), the CLI and the Spark template all
check store URLs here; :mod:`pyspark_gazette.fragments.stores` maps each scheme to its backend.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

from pyspark_gazette.errors import StoreURLError, redact_url

SCHEMES = ("s3", "gs", "azure", "azure-ad", "file")
_COMMON_QUERY_KEYS = frozenset({"find", "replace"})
QUERY_KEYS: dict[str, frozenset[str]] = {
    "s3": _COMMON_QUERY_KEYS | {"profile", "endpoint", "acl", "storageclass", "sse", "ssekmskeyid", "region"},
    "gs": _COMMON_QUERY_KEYS,
    "azure": _COMMON_QUERY_KEYS,
    "azure-ad": _COMMON_QUERY_KEYS,
    "file": _COMMON_QUERY_KEYS,
}


#: What Go's ``url.Parse`` refuses and Python's ``urlsplit`` lets through (Gazette's
#: ``FragmentStore.Validate`` parses with Go): control bytes anywhere, a ``%`` not followed by two
#: hex digits in the host or path, a host character outside RFC 3986's (non-ASCII is allowed), and
#: a port that is not all digits.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_HOST_ASCII_ESCAPE = re.compile(r"%(?!25)[0-7][0-9A-Fa-f]")
_HOST_CHARS = re.compile(r"(?:[A-Za-z0-9\-_.~!$&'()*+,;=:\[\]<>\"%]|[^\x00-\x7f])*")


def _go_url_problem(url: str, parts: urllib.parse.SplitResult) -> str | None:
    """Why Go's ``url.Parse`` refuses ``url`` where :func:`urllib.parse.urlsplit` did not, or None."""
    if _CONTROL.search(url):
        return "control characters are not allowed"
    host = parts.netloc.rpartition("@")[2]
    for where, text in (("host", host), ("path", parts.path)):
        bad = _BAD_ESCAPE.search(text)
        if bad:
            return f"invalid escape {text[bad.start() : bad.start() + 3]!r} in the {where}"
    ascii_escape = _HOST_ASCII_ESCAPE.search(host)  # a host may %-encode only non-ASCII bytes (and %25)
    if ascii_escape:
        return f"invalid escape {ascii_escape.group()!r} in the host"
    if not _HOST_CHARS.fullmatch(host):
        return f"invalid character in host {host!r}"
    if not host.startswith("["):
        colon = host.rfind(":")
        if colon >= 0 and not host[colon + 1 :].isdigit() and host[colon + 1 :] != "":
            return f"invalid port {host[colon:]!r} after host"
    return None


@dataclass(frozen=True)
class StoreURL:
    """A parsed fragment store URL. ``bucket`` is the URL host (empty for ``file``), ``prefix``
    the path without its leading ``/`` (ending in ``/`` unless empty) and ``query`` the
    arguments as ``(lowercase key, value)`` pairs."""

    scheme: str
    bucket: str
    prefix: str
    query: tuple[tuple[str, str], ...] = ()

    def get(self, key: str, default: str = "") -> str:
        for k, v in self.query:
            if k == key:
                return v
        return default

    def rewrite(self, content_path: str) -> str:
        """Apply the ``find``/``replace`` rule to the first occurrence in ``content_path``."""
        find = self.get("find")
        return content_path.replace(find, self.get("replace"), 1) if find else content_path


def parse_store_url(url: str) -> StoreURL:
    """Parse and validate a fragment store URL (facts sheet 4.3); raises :class:`StoreURLError`."""

    def bad(why: str) -> StoreURLError:
        return StoreURLError(f"invalid fragment store URL {redact_url(url)!r}: {why}")

    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as e:
        raise bad(str(e)) from e
    scheme = parts.scheme.lower()
    if not scheme:
        raise bad("not an absolute URL")
    problem = _go_url_problem(url, parts)
    if problem:
        raise bad(problem)
    if scheme not in SCHEMES:
        raise bad(f"unsupported scheme {scheme!r} (expected one of {', '.join(SCHEMES)})")
    if parts.fragment:
        raise bad("URL fragments ('#...') are not allowed")
    if scheme == "file":
        if parts.netloc:
            raise bad("a file:// store URL has no host (write file:///path/)")
    elif not parts.hostname:
        raise bad("missing bucket (the URL host)")
    path = urllib.parse.unquote(parts.path)
    if not path.endswith("/"):
        raise bad("path must end in '/'")
    allowed = QUERY_KEYS[scheme]
    query: list[tuple[str, str]] = []
    for key, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
        key = key.lower()
        if key not in allowed:
            raise bad(f"unknown query argument {key!r} for {scheme} (allowed: {', '.join(sorted(allowed))})")
        if any(k == key for k, _ in query):
            raise bad(f"query argument {key!r} is given more than once")
        query.append((key, value))
    if scheme == "azure-ad":  # azure-ad://<tenant>/<account>/<container>/<prefix>
        segments = path[1:].split("/")
        if not segments[0]:
            raise bad("missing storage account (azure-ad://tenant/account/container/prefix/)")
        if len(segments) < 2 or not segments[1]:
            raise bad("missing storage container (azure-ad://tenant/account/container/prefix/)")
    bucket = parts.netloc if scheme != "file" else ""
    return StoreURL(scheme=scheme, bucket=bucket, prefix=path[1:], query=tuple(query))
