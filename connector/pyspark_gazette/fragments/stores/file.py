"""The ``file://`` store: fragment files under a local root directory, on the disk directly
(``.partial-*`` files renamed into place and fsynced; paths confined to the root)."""

from __future__ import annotations

import builtins
import io
import os
import urllib.parse
import uuid
from collections.abc import Mapping
from typing import Any, BinaryIO

from pyspark_gazette._fs import fsync_dir
from pyspark_gazette.errors import redact_url
from pyspark_gazette.fragments.names import FragmentRef
from pyspark_gazette.fragments.paths import confined_path
from pyspark_gazette.fragments.stores.base import (
    HEALTH_PROBE,
    PARTIAL_PREFIX,
    FragmentStore,
    StoreBackend,
    copy_stream,
    register_store,
)


class FileStore(FragmentStore):
    """Fragment files under ``file_root`` (default ``/``), like the broker's ``--broker.file-root``."""

    def __init__(self, url: str, *, file_root: str | None = None, storage_options: Mapping[str, Any] | None = None):
        super().__init__(url, file_root=file_root, storage_options=storage_options)
        self._root = os.path.abspath(file_root or "/")
        self._disk_path(self.parsed.prefix)  # reject a URL path escaping the root

    def _location(self, key: str) -> str:
        return self._disk_path(key)

    def _disk_path(self, key: str) -> str:
        """The real path of ``key`` under the file root (``..`` and symlinks out of it refused)."""
        return confined_path(self._root, key, source=self.url)

    def _open(self, location: str, ref: FragmentRef) -> BinaryIO:
        return open(location, "rb")  # noqa: SIM115 - the caller owns the stream

    def _put(self, location: str, source: BinaryIO, ref: FragmentRef) -> int:
        return self._put_file(location, source)

    def _delete(self, location: str) -> None:
        os.remove(location)

    def signed_url(self, ref: FragmentRef, ttl_seconds: float) -> str:
        key = self.object_path(ref)
        return "file://" + urllib.parse.quote("/" + key, safe="/$&+,:;=@")

    def health(self) -> str:
        try:
            base = self._location(self.parsed.prefix)
            probe = self._location(self.parsed.prefix + HEALTH_PROBE)
            os.makedirs(base, exist_ok=True)
            os.listdir(base)
            self._put_file(probe, io.BytesIO(b""))
            os.remove(probe)
            return ""
        except Exception as e:
            return redact_url(f"fragment store {self.url} is unhealthy: {type(e).__name__}: {e}")

    @staticmethod
    def _put_file(path: str, source: BinaryIO) -> int:
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        partial = os.path.join(directory, f"{PARTIAL_PREFIX}{uuid.uuid4().hex}")
        try:
            with open(partial, "wb") as out:
                copy_stream(source, out)
                out.flush()
                os.fsync(out.fileno())
            os.replace(partial, path)
            fsync_dir(directory)  # the rename itself must survive a crash before we report success
        except BaseException:
            try:
                os.remove(partial)
            except OSError:
                pass
            raise
        return int(os.stat(path).st_mtime)

    def _list_files(self, base: str) -> builtins.list[tuple[str, int]]:
        out: builtins.list[tuple[str, int]] = []
        for directory, _dirs, files in os.walk(base):
            for name in files:
                path = os.path.join(directory, name)
                try:
                    mtime = int(os.stat(path).st_mtime)
                except FileNotFoundError:  # removed while listing
                    continue
                out.append((os.path.relpath(path, base).replace(os.sep, "/"), mtime))
        return out


register_store(StoreBackend("file", FileStore))
