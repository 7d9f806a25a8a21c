"""Open a signed fragment URL for a direct read, like the Go client's ``OpenFragmentURL``.

``http``/``https`` URLs are fetched with one HTTP/1.1 GET. The ``Accept-Encoding`` header keeps
stores from transcoding behind our back: ``gzip`` for GZIP fragments, ``identity`` for
GZIP_OFFLOAD_DECOMPRESSION (the store may decompress those itself; if it did not, the response
says ``Content-Encoding: gzip`` and the bytes must be gunzipped, see
:attr:`FragmentURLStream.codec`). ``file://`` URLs, which a broker signs relative to its own
file root, are read from under the caller's ``file_root`` mount of the same storage.
"""

from __future__ import annotations

import http.client
import io
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from pyspark_gazette.errors import FragmentNotFoundError, StoreError, StoreURLError, redact_url
from pyspark_gazette.fragments.paths import confined_path
from pyspark_gazette.protocol import pb


class FragmentURLStream(io.BufferedIOBase):
    """The raw (still compressed) bytes of a fragment URL.

    ``content_encoding`` is the response's ``Content-Encoding`` (lowercase, ``""`` if none or
    for files) and ``codec`` the codec to decode the bytes with: GZIP when a
    GZIP_OFFLOAD_DECOMPRESSION fragment arrives still gzip-encoded, else the fragment's codec.
    Read failures raise :class:`StoreError`; the URL in messages has its signature redacted.
    """

    def __init__(self, body: Any, url: str, codec: int, content_encoding: str = "") -> None:
        super().__init__()
        self._body = body
        self.url = redact_url(url)
        self.content_encoding = content_encoding
        gzipped = codec == pb.GZIP_OFFLOAD_DECOMPRESSION and content_encoding == "gzip"
        self.codec = pb.GZIP if gzipped else codec

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        if self.closed:
            raise ValueError("read of a closed fragment URL stream")
        try:
            return self._body.read(-1 if size is None or size < 0 else size)
        except (OSError, http.client.HTTPException) as e:
            raise StoreError(f"reading fragment URL {self.url}: {type(e).__name__}: {redact_url(str(e))}") from e

    def read1(self, size: int = -1) -> bytes:
        return self.read(size)

    def close(self) -> None:
        if not self.closed:
            try:
                self._body.close()
            finally:
                super().close()

    def __repr__(self) -> str:
        return f"FragmentURLStream({self.url!r}, content_encoding={self.content_encoding!r})"


def open_fragment_url(url: str, codec: int, *, file_root: str | None = None, timeout: float = 60) -> FragmentURLStream:
    """Open the raw bytes of a signed fragment URL (see the module docs).

        A non-200 answer raises :class:`FragmentNotFoundError` for 403 and 404 (the object is gone
        or the signature expired) and :class:`StoreError` otherwise, as do connection failures.
        ``file://`` URLs need ``file_root``; without it a :class:`StoreError` says to read through
        the broker instead. A ``file://`` path escaping ``file_root`` (``..``, ``%2e%2e``, a symlink
    out of it) raises :class:`StoreURLError`.
    """
    safe_url = redact_url(url)
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme == "file":
        return _open_file_url(url, codec, file_root)
    if scheme not in ("http", "https"):
        raise StoreURLError(f"cannot open fragment URL {safe_url!r}: unsupported scheme {scheme!r}")
    encoding = "identity" if codec == pb.GZIP_OFFLOAD_DECOMPRESSION else "gzip"
    request = urllib.request.Request(url, headers={"Accept-Encoding": encoding}, method="GET")
    try:
        response = urllib.request.urlopen(request, timeout=timeout)  # noqa: S310 - http(s) only
    except urllib.error.HTTPError as e:
        e.close()
        if e.code in (403, 404):
            raise FragmentNotFoundError(f"fragment URL answered HTTP {e.code} {e.reason}", fragment=safe_url) from None
        raise StoreError(f"fragment URL {safe_url} answered HTTP {e.code} {e.reason}") from None
    except (OSError, http.client.HTTPException, ValueError) as e:
        raise StoreError(f"cannot fetch fragment URL {safe_url}: {type(e).__name__}: {redact_url(str(e))}") from None
    if response.status != 200:
        response.close()
        raise StoreError(f"fragment URL {safe_url} answered HTTP {response.status} {response.reason}, expected 200")
    content_encoding = (response.headers.get("Content-Encoding") or "").strip().lower()
    return FragmentURLStream(response, url, codec, content_encoding)


def _open_file_url(url: str, codec: int, file_root: str | None) -> FragmentURLStream:
    safe_url = redact_url(url)
    if file_root is None:
        raise StoreError(
            f"cannot read fragment URL {safe_url} directly: file:// URLs are relative to the broker's file "
            "root; give a file_root where the same storage is mounted, or let the broker proxy the read "
            "(do not set do_not_proxy)"
        )
    parts = urllib.parse.urlsplit(url)
    if parts.netloc:
        raise StoreURLError(f"fragment URL {safe_url!r} has a host; file:// fragment URLs have none")
    # Percent-decoding first, so %2e%2e is a '..' that the confinement sees.
    path = confined_path(file_root, urllib.parse.unquote(parts.path), source=url)
    try:
        body = open(path, "rb")  # noqa: SIM115 - owned by the returned stream
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError) as e:
        # The message says it all; the OSError's traceback would only repeat the path (Spark
        # prints the whole chain in a task failure).
        raise FragmentNotFoundError(
            f"fragment file {path!r} is missing ({type(e).__name__})", fragment=safe_url
        ) from None
    except OSError as e:
        raise StoreError(f"cannot open fragment file {path!r}: {type(e).__name__}: {e.strerror or e}") from None
    return FragmentURLStream(body, url, codec)
