"""The fragment store interface: :class:`FragmentStore`, and the table of backends by scheme.

A store URL names a bucket (or container) and a prefix (facts sheet 4.3,
:mod:`pyspark_gazette.protocol.store_urls`); a fragment lives at ``prefix + content_path`` with the
URL's ``find``/``replace`` rewrite applied (facts sheet 4.2). Each scheme has its backend, a
subclass of :class:`FragmentStore` in its own module (:mod:`.file`, :mod:`.s3`, :mod:`.gcs`,
:mod:`.azure`), registered in :data:`STORES` by :func:`register_store`; ``FragmentStore(url)``
builds the backend of the URL's scheme (as pyiceberg's ``SCHEME_TO_FILE_IO``).

A backend implements a small interface: :meth:`FragmentStore._new_filesystem` (its fsspec
filesystem), and where it differs from the fsspec defaults here, ``_location`` (object key to
filesystem path), ``_open`` (a readable stream of the stored bytes), ``_put_options``, ``_sign``
(a signed URL), or whole operations (the file store works on the disk directly).

Storage failures are translated here: a missing object is :class:`FragmentNotFoundError`,
anything else :class:`StoreError` (retriable), invalid URLs :class:`StoreURLError`. Messages
never carry credentials or URL signatures.
"""

from __future__ import annotations

import builtins
import copy
import datetime as _dt
import importlib
import io
import logging
import os
import posixpath
import shutil
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO, cast

from pyspark_gazette.errors import (
    FragmentNameError,
    FragmentNotFoundError,
    GazetteError,
    StoreError,
    redact_url,
)
from pyspark_gazette.fragments.names import FragmentRef
from pyspark_gazette.fragments.paths import check_content_path
from pyspark_gazette.fragments.reader import FragmentReader
from pyspark_gazette.protocol import pb
from pyspark_gazette.protocol.store_urls import StoreURL, parse_store_url

logger = logging.getLogger(__name__)

#: Bytes copied at a time when storing a fragment.
COPY_CHUNK = 8 << 20
#: Bytes of one ranged read of a stored fragment.
READ_BLOCK = 8 << 20
PARTIAL_PREFIX = ".partial-"
HEALTH_PROBE = ".gazette-store-health-check"


@dataclass(frozen=True)
class StoreBackend:
    """One scheme's backend: its :class:`FragmentStore` subclass, the package its filesystem needs
    and the pip extra that installs it, the scope of its storage options (``s3`` for ``s3.key``),
    and the data source options that set them (``(option key, storage option)`` pairs)."""

    scheme: str
    store: type[FragmentStore]
    package: str | None = None
    extra: str | None = None
    option_scope: str | None = None
    settings: tuple[tuple[str, str], ...] = ()


#: The backends by scheme (:func:`register_store`).
STORES: dict[str, StoreBackend] = {}


def register_store(backend: StoreBackend) -> StoreBackend:
    """Make ``backend`` the store of its scheme; returns it."""
    STORES[backend.scheme] = backend
    return backend


def store_class(scheme: str) -> type[FragmentStore]:
    """The :class:`FragmentStore` subclass serving ``scheme``."""
    try:
        return STORES[scheme].store
    except KeyError:
        raise StoreError(f"no fragment store backend for scheme {scheme!r}") from None


def _restore_store(url: str, file_root: str | None, storage_options: dict[str, Any]) -> FragmentStore:
    return FragmentStore(url, file_root=file_root, storage_options=storage_options)


_FS_CACHE: dict[tuple[Any, ...], Any] = {}
_FS_CACHE_LOCK = threading.Lock()


class FragmentStore:
    """Fragment files under one store URL (the backend of its scheme; see the module docstring).

    ``file_root`` (default ``/``) is the local directory ``file://`` URLs are rooted at, like
    the broker's ``--broker.file-root``. ``storage_options`` go to the fsspec filesystem and
    may override the environment's credentials and settings; a key scoped ``s3.``, ``gs.`` or
    ``azure.`` reaches that scheme only (see :func:`scheme_options`). s3: ``key``, ``secret``,
    ``token``, ``anon``, ``endpoint_url``, ``region``; gs: ``token``, ``endpoint_url`` (else
    ``STORAGE_EMULATOR_HOST``), ``signing_credentials`` (a service-account key for signed URLs);
    azure: ``account_name``, ``account_key``, ``sas_token``, ``connection_string`` (else
    Gazette's ``AZURE_ACCOUNT_NAME``/``AZURE_ACCOUNT_KEY``); anything else is passed through. Filesystems
    are created lazily and cached per process and options; pickling a store carries only its
    constructor arguments, so stores built on the driver work in Spark executors.
    """

    def __new__(cls, url: str, **kwargs: Any) -> FragmentStore:
        if cls is FragmentStore:
            cls = store_class(parse_store_url(url).scheme)
        return super().__new__(cls)

    def __init__(self, url: str, *, file_root: str | None = None, storage_options: Mapping[str, Any] | None = None):
        self.url = url
        self.parsed = parse_store_url(url)
        self.file_root = file_root
        self._storage_options = dict(storage_options or {})
        self._fs_obj: tuple[int, Any] | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore_store, (self.url, self.file_root, self._storage_options))

    def __repr__(self) -> str:
        return f"FragmentStore({redact_url(self.url)!r})"

    # -- paths -----------------------------------------------------------------------------

    def object_path(self, ref: FragmentRef) -> str:
        """The object key of ``ref`` in the bucket: ``prefix + content_path`` after find/replace.

        A content path leaving its journal's directory (``..`` in the journal name or path
        postfix) is refused with :class:`StoreURLError`.
        """
        content_path = ref.content_path
        check_content_path(ref.journal, content_path, source=self.url)
        return self.parsed.prefix + self.parsed.rewrite(content_path)

    def _location(self, key: str) -> str:
        """Where ``key`` lives for the filesystem: ``bucket/key`` for fsspec."""
        return f"{self.parsed.bucket}/{key}"

    # -- operations ------------------------------------------------------------------------

    def open_raw(self, ref: FragmentRef) -> BinaryIO:
        """The stored (still compressed) bytes of ``ref``, as a readable stream."""
        location = self._location(self.object_path(ref))
        try:
            return self._open(location, ref)
        except (FileNotFoundError, PermissionError, IsADirectoryError) as e:
            raise self._not_found(ref, e) from e
        except GazetteError:
            raise
        except Exception as e:
            raise self._store_error(f"opening fragment {ref.describe()}", e) from e

    def _open(self, location: str, ref: FragmentRef) -> BinaryIO:
        if ref.codec == pb.GZIP_OFFLOAD_DECOMPRESSION:
            f = self._open_stored(location)
        else:
            f = self._fs.open(location, "rb", block_size=READ_BLOCK, cache_type="readahead")
        return cast(BinaryIO, StoreStream(f, ref))

    def _open_stored(self, location: str) -> Any:
        """A GZIP_OFFLOAD_DECOMPRESSION object's stored bytes, as uploaded (``Content-Encoding:
        gzip``): a backend whose service or SDK would gunzip them on the way reads them here."""
        return self._fs.open(location, "rb", block_size=READ_BLOCK, cache_type="readahead")

    def open_reader(self, ref: FragmentRef, offset: int | None = None, *, verify_sha1: bool = False) -> FragmentReader:
        """A :class:`FragmentReader` of ``ref``'s content from ``offset`` (default ``ref.begin``)."""
        return FragmentReader(self.open_raw(ref), ref, offset, verify_sha1=verify_sha1)

    def put(self, ref: FragmentRef, src: BinaryIO | str | os.PathLike[str]) -> int:
        """Store the (already compressed) file ``src`` as ``ref``; returns its mod_time (Unix s).

        File stores write a ``.partial-*`` file beside the target and rename it into place.
        GZIP_OFFLOAD_DECOMPRESSION files are uploaded with ``Content-Encoding: gzip``.
        """
        key = self.object_path(ref)
        location = self._location(key)
        try:
            with _open_source(src) as source:
                return self._put(location, source, ref)
        except GazetteError:
            raise
        except Exception as e:
            raise self._store_error(f"storing fragment {ref.describe()}", e) from e

    def _put(self, location: str, source: BinaryIO, ref: FragmentRef) -> int:
        with self._fs.open(location, "wb", **self._put_options(ref)) as out:
            copy_stream(source, out)
        return _mod_time(self._fs.info(location))

    def list(self, journal: str) -> builtins.list[FragmentRef]:
        """Every fragment of ``journal`` in the store (searched recursively under
        ``prefix + journal + '/'``), sorted by offsets. Unparseable names are logged and skipped."""
        check_content_path(journal, posixpath.normpath(journal) + "/", source=self.url)
        key = self.parsed.prefix + self.parsed.rewrite(journal + "/")
        try:
            entries = self._list_files(self._location(key))
        except GazetteError:
            raise
        except Exception as e:
            raise self._store_error(f"listing journal {journal!r}", e) from e
        refs = []
        for relative, mod_time in entries:
            if relative.endswith("/") or relative.rpartition("/")[2].startswith(PARTIAL_PREFIX):
                continue
            try:
                refs.append(
                    FragmentRef.from_relative_path(journal, relative, backing_store=self.url, mod_time=mod_time)
                )
            except FragmentNameError as e:
                logger.warning(
                    "ignoring file %r of journal %r in store %s: %s", relative, journal, redact_url(self.url), e
                )
        refs.sort(key=lambda r: (r.begin, r.end, r.path_postfix))
        return refs

    def delete(self, ref: FragmentRef) -> None:
        """Remove ``ref`` from the store; a fragment already gone is not an error."""
        location = self._location(self.object_path(ref))
        try:
            self._delete(location)
        except FileNotFoundError:
            pass
        except GazetteError:
            raise
        except Exception as e:
            raise self._store_error(f"deleting fragment {ref.describe()}", e) from e

    def _delete(self, location: str) -> None:
        self._fs.rm_file(location)

    def signed_url(self, ref: FragmentRef, ttl_seconds: float) -> str:
        """A URL that reads ``ref`` for ``ttl_seconds``: presigned for cloud stores; for file
        stores ``file://`` + URL path + content path, *without* the file root, as Gazette does."""
        key = self.object_path(ref)
        expires = max(1, int(-(-ttl_seconds // 1)))
        try:
            return self._sign(key, expires)
        except GazetteError:
            raise
        except Exception as e:
            raise self._store_error(f"signing a URL for fragment {ref.describe()}", e) from e

    def _sign(self, key: str, expires: int) -> str:
        return str(self._fs.sign(self._location(key), expiration=expires))

    def health(self) -> str:
        """``""`` if the store can be listed and written, else a description of the failure."""
        try:
            base = self._location(self.parsed.prefix)
            probe = self._location(self.parsed.prefix + HEALTH_PROBE)
            try:
                self._fs.ls(base, detail=False)
            except FileNotFoundError:
                pass  # an empty prefix is healthy; a missing bucket fails the write below
            self._fs.pipe_file(probe, b"")
            try:
                self._fs.rm_file(probe)
            except Exception:  # the probe may stay; writes work
                logger.debug("could not remove store health probe %s", redact_url(probe))
            return ""
        except Exception as e:
            return redact_url(f"fragment store {self.url} is unhealthy: {type(e).__name__}: {e}")

    # -- internals -------------------------------------------------------------------------

    @property
    def _fs(self) -> Any:
        # Remembered with the pid: a forked child must not use its parent's event loop thread.
        pid = os.getpid()
        if self._fs_obj is None or self._fs_obj[0] != pid:
            self._fs_obj = (pid, _filesystem(self.parsed, self._storage_options, type(self)._new_filesystem))
        return self._fs_obj[1]

    @staticmethod
    def _new_filesystem(url: StoreURL, options: dict[str, Any]) -> Any:
        """A new fsspec filesystem for ``url`` with the scheme's ``options`` (a backend's own)."""
        raise NotImplementedError

    #: The ``open`` keyword arguments that upload with ``Content-Encoding: gzip`` (a backend's own).
    gzip_put_options: Mapping[str, Any] = {}

    def _put_options(self, ref: FragmentRef) -> dict[str, Any]:
        """``open`` keyword arguments for uploading ``ref``: GZIP_OFFLOAD_DECOMPRESSION fragments
        are stored with ``Content-Encoding: gzip``."""
        offload = ref.codec == pb.GZIP_OFFLOAD_DECOMPRESSION
        return copy.deepcopy(dict(self.gzip_put_options)) if offload else {}

    def _list_files(self, base: str) -> builtins.list[tuple[str, int]]:
        """(path relative to ``base``, mod_time) of every file below ``base``."""
        out: builtins.list[tuple[str, int]] = []
        base = base.rstrip("/") + "/"
        try:
            found = self._fs.find(base, detail=True, withdirs=False)
        except FileNotFoundError:
            return out
        for path, info in found.items():
            if not path.startswith(base) or info.get("type") == "directory":
                continue
            out.append((path[len(base) :], _mod_time(info)))
        return out

    def _not_found(self, ref: FragmentRef, e: BaseException) -> FragmentNotFoundError:
        why = "access denied" if isinstance(e, PermissionError) else "no such file"
        return FragmentNotFoundError(
            f"fragment file not found in store {redact_url(self.url)} ({why})",
            journal=ref.journal,
            begin=ref.begin,
            end=ref.end,
            fragment=ref.content_path,
        )

    def _store_error(self, what: str, e: BaseException) -> StoreError:
        return StoreError(redact_url(f"{what} in store {self.url}: {type(e).__name__}: {e}"))


class StoreStream(io.BufferedIOBase):
    """A remote file opened for reading, translating storage failures into our errors."""

    def __init__(self, f: Any, ref: FragmentRef) -> None:
        super().__init__()
        self._f = f
        self._ref = ref

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        try:
            return bytes(self._f.read(-1 if size is None else size))
        except FileNotFoundError as e:
            raise FragmentNotFoundError(
                "fragment file disappeared while reading",
                journal=self._ref.journal,
                begin=self._ref.begin,
                end=self._ref.end,
                fragment=self._ref.content_path,
            ) from e
        except GazetteError:
            raise
        except Exception as e:  # OSError, and the SDKs' own errors once their retries are spent
            if self.closed:
                raise
            raise StoreError(redact_url(f"reading fragment {self._ref.describe()}: {type(e).__name__}: {e}")) from e

    read1 = read

    def close(self) -> None:
        if not self.closed:
            try:
                self._f.close()
            finally:
                super().close()


class _open_source:
    """Context manager yielding a readable binary stream for a path or an open stream (which
    is left open)."""

    def __init__(self, src: BinaryIO | str | os.PathLike[str]) -> None:
        self._src = src
        self._owned: BinaryIO | None = None

    def __enter__(self) -> BinaryIO:
        if isinstance(self._src, (str, os.PathLike)):
            self._owned = open(self._src, "rb")  # noqa: SIM115
            return self._owned
        return self._src

    def __exit__(self, *exc: object) -> None:
        if self._owned is not None:
            self._owned.close()


def _mod_time(info: Mapping[str, Any]) -> int:
    """Unix seconds of an fsspec info dict's last-modified time (s3fs, gcsfs, adlfs, local)."""
    for key in ("LastModified", "last_modified", "mtime", "updated", "created"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, _dt.datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=_dt.timezone.utc)
            return int(value.timestamp())
        if isinstance(value, (int, float)):
            return int(value)
        if isinstance(value, str):
            parsed = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=_dt.timezone.utc)
            return int(parsed.timestamp())
    return 0


def _filesystem(url: StoreURL, storage_options: Mapping[str, Any], new: Any) -> Any:
    """The fsspec filesystem of a store (``new(url, scheme options)`` makes one), cached per
    process, scheme and options."""
    key = (os.getpid(), url.scheme, url.bucket, url.query, repr(sorted(storage_options.items(), key=lambda kv: kv[0])))
    with _FS_CACHE_LOCK:
        fs = _FS_CACHE.get(key)
        if fs is None:
            fs = _FS_CACHE[key] = new(url, scheme_options(url.scheme, dict(storage_options)))
        return fs


def require_package(scheme: str) -> None:
    """Raise :class:`StoreError` naming the pip extra when ``scheme``'s fsspec package is missing."""
    backend = STORES.get(scheme)
    package = backend.package if backend else None
    if package is None:
        return
    import_store_package(scheme, package)


def import_store_package(scheme: str, module: str) -> Any:
    """Import ``module`` (``scheme``'s fsspec package or one of its modules), or raise
    :class:`StoreError` naming the pip extra that installs it (the package itself for a store of
    the core, whose package is missing only after an install with ``--no-deps``)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        backend = STORES[scheme]
        what = f"'pyspark-gazette[{backend.extra}]'" if backend.extra else f"'{backend.package}'"
        raise StoreError(
            f"{scheme}:// fragment stores need the {backend.package!r} package, which is not installed: "
            f"pip install {what}"
        ) from e


def copy_stream(source: BinaryIO, out: Any) -> None:
    """Copy ``source`` to its end into ``out`` in :data:`COPY_CHUNK` pieces."""
    shutil.copyfileobj(source, out, COPY_CHUNK)


def scheme_options(scheme: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The storage options for one scheme: unscoped keys, plus ``<scope>.<key>`` keys of the
    scheme's scope (``s3``, ``gs`` or ``azure``) with the scope removed."""
    scopes = {b.scheme: b.option_scope for b in STORES.values() if b.option_scope}
    scope = scopes.get(scheme, scheme) + "."
    out = {k: v for k, v in options.items() if not any(k.startswith(p + ".") for p in scopes.values())}
    out.update({k[len(scope) :]: v for k, v in options.items() if k.startswith(scope)})
    return out


#: The former name, which the unit tests of the stores still import.
_StoreStream = StoreStream
