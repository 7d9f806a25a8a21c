"""Read the content of one fragment file from a journal offset to the fragment's end.

Mirrors the Go client's direct fragment read (facts sheet 7): decompress, discard the bytes
before the requested offset, then serve content up to ``Fragment.end``, where the file must end
exactly. Optionally (unlike Go) the SHA1 of the whole fragment is checked at the end.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import BinaryIO, NoReturn

from pyspark_gazette.errors import (
    FragmentChecksumError,
    FragmentDecodeError,
    FragmentError,
    FragmentTooLongError,
    FragmentTooShortError,
    GazetteError,
    StoreError,
)
from pyspark_gazette.fragments.codecs import open_decoder
from pyspark_gazette.fragments.names import ZERO_SUM, FragmentRef

_EMPTY_SHA1 = hashlib.sha1(b"").hexdigest()
_SKIP_CHUNK = 1 << 20


class FragmentReader:
    """Content of ``fragment`` from ``offset`` (default ``fragment.begin``) to ``fragment.end``.

    ``raw`` is the stored (still compressed) file; the reader owns it and closes it on
    :meth:`close`. Bytes before ``offset`` are decompressed and discarded on the first read.
    ``offset`` is the journal offset of the next byte returned.

    The decompressed file must end exactly at ``fragment.end``: an earlier EOF raises
    :class:`FragmentTooShortError`, more content :class:`FragmentTooLongError`. With
    ``verify_sha1`` the SHA1 of all of ``[begin, end)`` (discarded bytes included) must equal
    ``fragment.sum`` (an empty fragment may carry the all-zero sum), else
    :class:`FragmentChecksumError`. Corrupt files raise :class:`FragmentDecodeError` and
    failures of ``raw`` itself :class:`StoreError`. These checks run when the read reaches
    ``fragment.end``, so the last content is only returned once they passed. Every error names
    the journal, the offsets and the fragment's content path; after one, further reads raise it
    again.
    """

    def __init__(self, raw: BinaryIO, fragment: FragmentRef, offset: int | None = None, *, verify_sha1: bool = False):
        if offset is None:
            offset = fragment.begin
        if not fragment.begin <= offset <= fragment.end:
            raise ValueError(f"offset {offset} is outside fragment {fragment.describe()}")
        self.fragment = fragment
        self.offset = offset
        self._raw = raw
        self._sha1 = hashlib.sha1() if verify_sha1 else None
        self._pos = fragment.begin  # journal offset of the next decompressed byte
        self._skipped = offset == fragment.begin
        self._done = False
        self._closed = False
        self._failure: BaseException | None = None  # a failed reader keeps failing
        try:
            self._decoder = open_decoder(fragment.codec, raw)
        except Exception as e:
            raw.close()
            self._reraise(e)

    # -- public API ------------------------------------------------------------------------

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (all remaining if negative); fewer only at the fragment's end."""
        if n is None or n < 0:
            return b"".join(self.iter_chunks())
        parts = []
        while n > 0 and (chunk := self._read1(n)):
            parts.append(chunk)
            n -= len(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def iter_chunks(self, chunk_size: int = 1 << 20) -> Iterator[bytes]:
        """Remaining content in chunks of at most ``chunk_size`` bytes."""
        if chunk_size <= 0:
            raise ValueError("chunk_size must be positive")
        while chunk := self._read1(chunk_size):
            yield chunk

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._decoder.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> FragmentReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FragmentReader({self.fragment.describe()}, offset={self.offset})"

    # -- internals -------------------------------------------------------------------------

    def _read1(self, n: int) -> bytes:
        if self._closed:
            raise ValueError(f"read of a closed {self!r}")
        if self._failure is not None:
            raise self._failure
        if self._done:
            return b""
        try:
            if not self._skipped:
                self._skip()
            remaining = self.fragment.end - self._pos
            chunk = self._decoder.read1(min(n, remaining)) if remaining else b""
            if remaining and not chunk:
                raise self._error(FragmentTooShortError, f"content ended {remaining} bytes before the fragment end")
            self._advance(chunk)
            if self._pos == self.fragment.end:
                self._finish()
        except Exception as e:
            try:
                self._reraise(e)
            except Exception as failure:
                self._failure = failure
                raise
        self.offset = self._pos
        return chunk

    def _advance(self, chunk: bytes) -> None:
        self._pos += len(chunk)
        if self._sha1 is not None:
            self._sha1.update(chunk)

    def _skip(self) -> None:
        while self._pos < self.offset:
            chunk = self._decoder.read1(min(_SKIP_CHUNK, self.offset - self._pos))
            if not chunk:
                raise self._error(
                    FragmentTooShortError,
                    f"content ended {self.fragment.end - self._pos} bytes before the fragment end "
                    f"while skipping to offset {self.offset}",
                )
            self._advance(chunk)
        self._skipped = True

    def _finish(self) -> None:
        if self._decoder.read1(1):
            raise self._error(FragmentTooLongError, "content continues past the fragment end")
        self._done = True
        if self._sha1 is not None:
            actual = self._sha1.hexdigest()
            expected = self.fragment.sum
            empty_ok = self.fragment.begin == self.fragment.end and expected in (ZERO_SUM, _EMPTY_SHA1)
            if actual != expected and not empty_ok:
                raise self._error(FragmentChecksumError, f"content SHA1 is {actual}, expected {expected}")

    def _error(self, cls: type[FragmentError], message: str) -> FragmentError:
        return cls(
            f"{message} (at offset {self._pos})",
            journal=self.fragment.journal,
            begin=self.fragment.begin,
            end=self.fragment.end,
            fragment=self.fragment.content_path,
        )

    def _reraise(self, e: Exception) -> NoReturn:
        """Give a decode error the fragment's context; turn I/O failures into StoreError."""
        if isinstance(e, FragmentDecodeError) and not e.journal:
            raise self._error(FragmentDecodeError, str(e)) from e
        if isinstance(e, OSError) and not isinstance(e, GazetteError):
            raise StoreError(f"reading fragment {self.fragment.describe()} at offset {self._pos}: {e}") from e
        raise e
