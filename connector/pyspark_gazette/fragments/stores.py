"""Fragment stores: parse store URLs, and put, list, open, sign and delete fragment files.

A store URL names a bucket (or container) and a prefix (facts sheet 4.3); a fragment lives at
``prefix + content_path`` with the URL's ``find``/``replace`` rewrite applied (facts sheet 4.2).
``file://`` stores map under a local root directory and use the filesystem directly; remote
schemes go through fsspec (s3fs for ``s3``, gcsfs for ``gs``, adlfs for ``azure``/``azure-ad``).

Storage failures are translated here: a missing object is :class:`FragmentNotFoundError`,
anything else :class:`StoreError` (retriable), invalid URLs :class:`StoreURLError`. Messages
never carry credentials or URL signatures.

Size (~800 lines, over the house's ~500): :class:`FragmentStore` is one class over five schemes,
and the translation of every storage failure into the three errors above must stay in one place
beside the scheme-specific filesystem set-up it depends on.
"""

from __future__ import annotations

import builtins
import datetime as _dt
import http.client
import io
import logging
import os
import posixpath
import shutil
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO, cast

from pyspark_gazette._fs import fsync_dir
from pyspark_gazette.errors import (
    FragmentNameError,
    FragmentNotFoundError,
    GazetteError,
    StoreError,
    StoreURLError,
    redact_url,
)
from pyspark_gazette.fragments.names import FragmentRef
from pyspark_gazette.fragments.paths import check_content_path, confined_path
from pyspark_gazette.fragments.reader import FragmentReader
from pyspark_gazette.fragments.urls import FragmentURLStream, open_fragment_url
from pyspark_gazette.protocol import pb

__all__ = [
    "EXTRAS",
    "FragmentStore",
    "FragmentURLStream",
    "StoreURL",
    "open_fragment_url",
    "parse_store_url",
    "require_package",
    "scheme_options",
]

logger = logging.getLogger(__name__)

SCHEMES = ("s3", "gs", "azure", "azure-ad", "file")
_COMMON_QUERY_KEYS = frozenset({"find", "replace"})
QUERY_KEYS: dict[str, frozenset[str]] = {
    "s3": _COMMON_QUERY_KEYS | {"profile", "endpoint", "acl", "storageclass", "sse", "ssekmskeyid", "region"},
    "gs": _COMMON_QUERY_KEYS,
    "azure": _COMMON_QUERY_KEYS,
    "azure-ad": _COMMON_QUERY_KEYS,
    "file": _COMMON_QUERY_KEYS,
}
_FS_PACKAGES = {"s3": "s3fs", "gs": "gcsfs", "azure": "adlfs", "azure-ad": "adlfs"}
# The pip extra that installs each scheme's package: pip install 'pyspark-gazette[<extra>]'.
EXTRAS = {"s3": "s3", "gs": "gcs", "azure": "azure", "azure-ad": "azure"}
# storage_options keys scoped to one scheme: "gs.token" applies to gs:// stores only.
_OPTION_SCOPES = {"s3": "s3", "gs": "gs", "azure": "azure", "azure-ad": "azure"}
_GCS_OPEN_BACKOFF = (0.5, 1.0, 2.0, 4.0)
_GCS_TOKEN_MODES = ("anon", "browser", "cache", "cloud", "google_default")
_COPY_CHUNK = 8 << 20
_READ_BLOCK = 8 << 20
PARTIAL_PREFIX = ".partial-"
HEALTH_PROBE = ".gazette-store-health-check"


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


def _restore_store(url: str, file_root: str | None, storage_options: dict[str, Any]) -> FragmentStore:
    return FragmentStore(url, file_root=file_root, storage_options=storage_options)


_FS_CACHE: dict[tuple[Any, ...], Any] = {}
_FS_CACHE_LOCK = threading.Lock()


class FragmentStore:
    """Fragment files under one store URL.

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

    def __init__(self, url: str, *, file_root: str | None = None, storage_options: Mapping[str, Any] | None = None):
        self.url = url
        self.parsed = parse_store_url(url)
        self.file_root = file_root
        self._storage_options = dict(storage_options or {})
        self._fs_obj: tuple[int, Any] | None = None
        self._udk: tuple[_dt.datetime, Any] | None = None  # azure-ad: (expiry, user delegation key)
        self._udk_lock = threading.Lock()
        if self.parsed.scheme == "file":
            self._root = os.path.abspath(file_root or "/")
            self._disk_path(self.parsed.prefix)  # reject a URL path escaping the root

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
        """Where ``key`` lives for the filesystem: a disk path, or ``bucket/key`` for fsspec."""
        scheme = self.parsed.scheme
        if scheme == "file":
            return self._disk_path(key)
        if scheme == "azure-ad":  # azure-ad://<tenant>/<account>/<container>/<prefix>
            return key.split("/", 1)[1] if "/" in key else key
        return f"{self.parsed.bucket}/{key}"

    def _disk_path(self, key: str) -> str:
        """The real path of ``key`` under the file root (``..`` and symlinks out of it refused)."""
        return confined_path(self._root, key, source=self.url)

    # -- operations ------------------------------------------------------------------------

    def open_raw(self, ref: FragmentRef) -> BinaryIO:
        """The stored (still compressed) bytes of ``ref``, as a readable stream."""
        location = self._location(self.object_path(ref))
        try:
            if self.parsed.scheme == "file":
                return open(location, "rb")  # noqa: SIM115 - the caller owns the stream
            if self.parsed.scheme == "gs" and ref.codec == pb.GZIP_OFFLOAD_DECOMPRESSION:
                return cast(BinaryIO, _StoreStream(self._open_gcs_stored(location), ref))
            if self.parsed.scheme in ("azure", "azure-ad") and ref.codec == pb.GZIP_OFFLOAD_DECOMPRESSION:
                return cast(BinaryIO, _StoreStream(_AzureStoredReader(self._fs, location), ref))
            f = self._fs.open(location, "rb", block_size=_READ_BLOCK, cache_type="readahead")
            return cast(BinaryIO, _StoreStream(f, ref))
        except (FileNotFoundError, PermissionError, IsADirectoryError) as e:
            raise self._not_found(ref, e) from e
        except GazetteError:
            raise
        except Exception as e:
            raise self._store_error(f"opening fragment {ref.describe()}", e) from e

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
                if self.parsed.scheme == "file":
                    return self._put_file(location, source)
                with self._fs.open(location, "wb", **self._put_options(ref)) as out:
                    shutil.copyfileobj(source, out, _COPY_CHUNK)
                return _mod_time(self._fs.info(location))
        except GazetteError:
            raise
        except Exception as e:
            raise self._store_error(f"storing fragment {ref.describe()}", e) from e

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
            if self.parsed.scheme == "file":
                os.remove(location)
            else:
                self._fs.rm_file(location)
        except FileNotFoundError:
            pass
        except GazetteError:
            raise
        except Exception as e:
            raise self._store_error(f"deleting fragment {ref.describe()}", e) from e

    def signed_url(self, ref: FragmentRef, ttl_seconds: float) -> str:
        """A URL that reads ``ref`` for ``ttl_seconds``: presigned for cloud stores; for file
        stores ``file://`` + URL path + content path, *without* the file root, as Gazette does."""
        key = self.object_path(ref)
        if self.parsed.scheme == "file":
            return "file://" + urllib.parse.quote("/" + key, safe="/$&+,:;=@")
        expires = max(1, int(-(-ttl_seconds // 1)))
        try:
            if self.parsed.scheme == "gs":
                return self._sign_gcs(key, expires)
            if self.parsed.scheme == "azure-ad":
                return self._sign_azure_ad(key, expires)
            return str(self._fs.sign(self._location(key), expiration=expires))
        except GazetteError:
            raise
        except Exception as e:
            raise self._store_error(f"signing a URL for fragment {ref.describe()}", e) from e

    def _open_gcs_stored(self, location: str) -> Any:
        """One streaming GET of a whole GCS object, asking for the stored bytes.

        Retries: HTTP 408, 429 and 5xx answers and connection failures are retried after 0.5,
        1, 2 and 4 s (as gcsfs would); 403/404 and a failure after the last retry surface.

        GZIP_OFFLOAD_DECOMPRESSION objects carry ``Content-Encoding: gzip``, and GCS (like its
        emulators) transcodes them on download and then ignores byte ranges, which breaks
        gcsfs's ranged, auto-decompressing reads. With ``Accept-Encoding: gzip`` GCS serves the
        stored gzip; a server that transcodes anyway is fine too: the offload decoder sniffs
        the gzip magic.
        """
        bucket, _, key = location.partition("/")
        endpoint = gcs_emulator_host(scheme_options("gs", self._storage_options)) or "https://storage.googleapis.com"
        url = (
            f"{endpoint.rstrip('/')}/download/storage/v1/b/{urllib.parse.quote(bucket, safe='')}"
            f"/o/{urllib.parse.quote(key, safe='')}?alt=media"
        )
        for attempt, backoff in enumerate((*_GCS_OPEN_BACKOFF, None)):
            headers = {"Accept-Encoding": "gzip"}
            self._fs.credentials.apply(headers)
            request = urllib.request.Request(url, headers=headers, method="GET")
            try:
                return urllib.request.urlopen(request, timeout=60)  # noqa: S310 - http(s) only
            except urllib.error.HTTPError as e:
                e.close()
                if e.code == 404:
                    raise FileNotFoundError(f"HTTP 404 {e.reason}") from None
                if e.code == 403:
                    raise PermissionError(f"HTTP 403 {e.reason}") from None
                failure: OSError = OSError(f"HTTP {e.code} {e.reason}")
                retriable = e.code in (408, 429) or e.code >= 500
            except (OSError, http.client.HTTPException) as e:
                failure, retriable = OSError(f"{type(e).__name__}: {e}"), True
            if not retriable or backoff is None:
                raise failure
            logger.debug(
                "GET of %s failed (attempt %d, retry in %gs): %s", redact_url(url), attempt + 1, backoff, failure
            )
            time.sleep(backoff)
        raise AssertionError("unreachable")

    def _sign_azure_ad(self, key: str, expires: int) -> str:
        """A read-only SAS signed with a user-delegation key, as Gazette's ``azure-ad`` store
        does: the key is fetched with the service principal's credentials, cached and renewed
        when less than an hour of its two hours is left (so, as in Gazette, a URL stops working
        when its key expires, even if its own expiry is later)."""
        from azure.storage.blob import BlobSasPermissions, generate_blob_sas

        options = _azure_options(self.parsed, scheme_options(self.parsed.scheme, self._storage_options))
        account = str(options["account_name"])
        container, _, blob = self._location(key).partition("/")
        now = _dt.datetime.now(_dt.timezone.utc)
        with self._udk_lock:
            if self._udk is None or self._udk[0] - now < _dt.timedelta(hours=1):
                self._udk = (now + _dt.timedelta(hours=2), self._user_delegation_key(account, options, now))
            udk = self._udk[1]
        sas = generate_blob_sas(
            account,
            container,
            blob,
            user_delegation_key=udk,
            permission=BlobSasPermissions(read=True),
            expiry=now + _dt.timedelta(seconds=expires),
            protocol="https",
        )
        return f"https://{account}.blob.core.windows.net/{container}/{urllib.parse.quote(blob, safe='/$&+,:;=@')}?{sas}"

    @staticmethod
    def _user_delegation_key(account: str, options: Mapping[str, Any], now: _dt.datetime) -> Any:
        from azure.identity import ClientSecretCredential
        from azure.storage.blob import BlobServiceClient

        missing = [k for k in ("client_id", "client_secret") if not options.get(k)]
        if missing:
            raise StoreError("signing azure-ad:// URLs needs AZURE_CLIENT_ID and AZURE_CLIENT_SECRET, as in Gazette")
        credential = ClientSecretCredential(options["tenant_id"], options["client_id"], options["client_secret"])
        with BlobServiceClient(f"https://{account}.blob.core.windows.net", credential=credential) as service:
            return service.get_user_delegation_key(now, now + _dt.timedelta(hours=2))

    def _sign_gcs(self, key: str, expires: int) -> str:
        """A V4 signed GET URL, signed locally with a service-account key as Gazette requires:
        the ``signing_credentials`` option (a key file path or its parsed JSON), else the
        ``token`` option when it is one, else ``GOOGLE_APPLICATION_CREDENTIALS``. With an
        emulator endpoint the URL points at the emulator."""
        options = scheme_options("gs", self._storage_options)
        source = options.get("signing_credentials")
        if (
            source is None
            and isinstance(options.get("token"), (dict, str))
            and options["token"] not in _GCS_TOKEN_MODES
        ):
            source = options["token"]
        if source is None:
            source = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
        if not source:
            raise StoreError(
                f"cannot sign a URL for store {redact_url(self.url)}: signing gs:// URLs needs a service-account "
                "key (GOOGLE_APPLICATION_CREDENTIALS or the signing_credentials storage option), as in Gazette"
            )
        from google.cloud import storage  # a dependency of gcsfs
        from google.oauth2 import service_account

        if isinstance(source, dict):
            credentials = service_account.Credentials.from_service_account_info(source)
        else:
            credentials = service_account.Credentials.from_service_account_file(str(source))
        # An anonymous client makes no calls: the URL is signed locally with ``credentials``.
        blob = storage.Client.create_anonymous_client().bucket(self.parsed.bucket).blob(key)
        return str(
            blob.generate_signed_url(
                expiration=_dt.timedelta(seconds=expires),
                method="GET",
                version="v4",
                credentials=credentials,
                api_access_endpoint=gcs_emulator_host(options),
            )
        )

    def health(self) -> str:
        """``""`` if the store can be listed and written, else a description of the failure."""
        try:
            base = self._location(self.parsed.prefix)
            probe = self._location(self.parsed.prefix + HEALTH_PROBE)
            if self.parsed.scheme == "file":
                os.makedirs(base, exist_ok=True)
                os.listdir(base)
                self._put_file(probe, io.BytesIO(b""))
                os.remove(probe)
                return ""
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
            self._fs_obj = (pid, _filesystem(self.parsed, self._storage_options))
        return self._fs_obj[1]

    def _put_options(self, ref: FragmentRef) -> dict[str, Any]:
        offload = ref.codec == pb.GZIP_OFFLOAD_DECOMPRESSION
        if self.parsed.scheme == "gs":
            return {"fixed_key_metadata": {"content_encoding": "gzip"}} if offload else {}
        if self.parsed.scheme in ("azure", "azure-ad"):
            return {"content_settings": {"content_encoding": "gzip"}} if offload else {}
        if self.parsed.scheme != "s3":
            return {}
        options: dict[str, Any] = {}
        for query_key, s3_key in (
            ("storageclass", "StorageClass"),
            ("sse", "ServerSideEncryption"),
            ("ssekmskeyid", "SSEKMSKeyId"),
        ):
            if value := self.parsed.get(query_key):
                options[s3_key] = value
        if acl := self.parsed.get("acl"):
            options["acl"] = acl
        if ref.codec == pb.GZIP_OFFLOAD_DECOMPRESSION:
            options["ContentEncoding"] = "gzip"
        return options

    @staticmethod
    def _put_file(path: str, source: BinaryIO) -> int:
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        partial = os.path.join(directory, f"{PARTIAL_PREFIX}{uuid.uuid4().hex}")
        try:
            with open(partial, "wb") as out:
                shutil.copyfileobj(source, out, _COPY_CHUNK)
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
        """(path relative to ``base``, mod_time) of every file below ``base``."""
        out: builtins.list[tuple[str, int]] = []
        if self.parsed.scheme == "file":
            for directory, _dirs, files in os.walk(base):
                for name in files:
                    path = os.path.join(directory, name)
                    try:
                        mtime = int(os.stat(path).st_mtime)
                    except FileNotFoundError:  # removed while listing
                        continue
                    out.append((os.path.relpath(path, base).replace(os.sep, "/"), mtime))
            return out
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


class _StoreStream(io.BufferedIOBase):
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


class _AzureStoredReader(io.RawIOBase):
    """The stored bytes of an Azure blob, in ranged reads with the SDK's decompression off.

    The Azure SDK gunzips the body of a blob stored with ``Content-Encoding: gzip`` (as
    GZIP_OFFLOAD_DECOMPRESSION fragments are), which corrupts adlfs's ranged reads of it; here
    each block is fetched as stored and the fragment decoder decompresses the whole stream.
    """

    def __init__(self, fs: Any, location: str) -> None:
        super().__init__()
        self._fs = fs
        self._container, _, self._blob = location.partition("/")
        self._size = int(fs.info(location)["size"])
        self._pos = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        from fsspec.asyn import sync

        want = self._size - self._pos if size is None or size < 0 else min(size, self._size - self._pos)
        if want <= 0:
            return b""
        want = min(want, _READ_BLOCK)

        async def fetch() -> bytes:
            async with self._fs.service_client.get_blob_client(self._container, self._blob) as blob:
                stream = await blob.download_blob(offset=self._pos, length=want, decompress=False)
                return bytes(await stream.readall())

        try:
            data = sync(self._fs.loop, fetch)
        except Exception as e:
            if type(e).__name__ == "ResourceNotFoundError":
                raise FileNotFoundError(str(e)) from e
            raise OSError(f"{type(e).__name__}: {e}") from e
        self._pos += len(data)
        return data

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


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


def _filesystem(url: StoreURL, storage_options: Mapping[str, Any]) -> Any:
    """The fsspec filesystem of a store, cached per process, scheme and options."""
    key = (os.getpid(), url.scheme, url.bucket, url.query, repr(sorted(storage_options.items(), key=lambda kv: kv[0])))
    with _FS_CACHE_LOCK:
        fs = _FS_CACHE.get(key)
        if fs is None:
            fs = _FS_CACHE[key] = _new_filesystem(url, dict(storage_options))
        return fs


def require_package(scheme: str) -> None:
    """Raise :class:`StoreError` naming the pip extra when ``scheme``'s fsspec package is missing."""
    package = _FS_PACKAGES.get(scheme)
    if package is None:
        return
    try:
        __import__(package)
    except ImportError as e:
        raise _missing_package(scheme) from e


def _missing_package(scheme: str) -> StoreError:
    return StoreError(
        f"{scheme}:// fragment stores need the {_FS_PACKAGES[scheme]!r} package, which is not installed: "
        f"pip install 'pyspark-gazette[{EXTRAS[scheme]}]'"
    )


def scheme_options(scheme: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The storage options for one scheme: unscoped keys, plus ``<scope>.<key>`` keys of the
    scheme's scope (``s3``, ``gs`` or ``azure``) with the scope removed."""
    scope = _OPTION_SCOPES.get(scheme, scheme) + "."
    out = {k: v for k, v in options.items() if not any(k.startswith(p + ".") for p in _OPTION_SCOPES.values())}
    out.update({k[len(scope) :]: v for k, v in options.items() if k.startswith(scope)})
    return out


def _new_filesystem(url: StoreURL, options: dict[str, Any]) -> Any:
    options = scheme_options(url.scheme, options)
    try:
        if url.scheme == "s3":
            import s3fs

            return s3fs.S3FileSystem(**_s3_options(url, options))
        if url.scheme == "gs":
            import gcsfs.core

            return gcsfs.core.GCSFileSystem(**_gcs_options(options))
        import adlfs

        return adlfs.AzureBlobFileSystem(**_azure_options(url, options))
    except ImportError as e:
        raise _missing_package(url.scheme) from e


def gcs_emulator_host(options: Mapping[str, Any]) -> str | None:
    """The GCS endpoint override (``endpoint_url`` option, else ``STORAGE_EMULATOR_HOST``) as a
    URL, or None for Google's endpoint."""
    host = options.get("endpoint_url") or os.environ.get("STORAGE_EMULATOR_HOST") or ""
    if host in ("", "default"):
        return None
    return str(host) if "://" in str(host) else f"http://{host}"


def _gcs_options(options: dict[str, Any]) -> dict[str, Any]:
    options = {k: v for k, v in options.items() if k != "signing_credentials"}
    endpoint = gcs_emulator_host(options)
    if endpoint:
        # Emulators do not authenticate (the Go client goes unauthenticated too).
        options["endpoint_url"] = endpoint
        options.setdefault("token", "anon")
        options.setdefault("project", "emulator")
    if not options.get("project") and os.environ.get("GOOGLE_CLOUD_PROJECT"):
        options["project"] = os.environ["GOOGLE_CLOUD_PROJECT"]
    options.setdefault("skip_instance_cache", True)
    return options


def _azure_options(url: StoreURL, options: dict[str, Any]) -> dict[str, Any]:
    """adlfs settings: explicit options first, then Gazette's variables, then adlfs's own
    (``AZURE_STORAGE_CONNECTION_STRING``, ``AZURE_STORAGE_SAS_TOKEN``, ...)."""
    if url.scheme == "azure":
        if not options.get("connection_string"):
            options.setdefault("account_name", os.environ.get("AZURE_ACCOUNT_NAME") or None)
            if not options.get("sas_token"):
                options.setdefault("account_key", os.environ.get("AZURE_ACCOUNT_KEY") or None)
    else:  # azure-ad://<tenant>/<account>/<container>/...
        options.setdefault("tenant_id", url.bucket)
        options.setdefault("account_name", url.prefix.split("/", 1)[0])
        options.setdefault("client_id", os.environ.get("AZURE_CLIENT_ID") or None)
        options.setdefault("client_secret", os.environ.get("AZURE_CLIENT_SECRET") or None)
    options.setdefault("skip_instance_cache", True)
    return {k: v for k, v in options.items() if v is not None}


def _s3_options(url: StoreURL, options: dict[str, Any]) -> dict[str, Any]:
    client_kwargs: dict[str, Any] = dict(options.pop("client_kwargs", None) or {})
    config_kwargs: dict[str, Any] = dict(options.pop("config_kwargs", None) or {})
    endpoint = options.pop("endpoint_url", None) or url.get("endpoint") or None
    region = options.pop("region", None) or url.get("region") or None
    if endpoint:
        # A custom endpoint (MinIO, moto, ...) means path-style addressing, as in Gazette.
        config_kwargs.setdefault("s3", {}).setdefault("addressing_style", "path")
    config_kwargs.setdefault("signature_version", "s3v4")  # presigned URLs use SigV4, like Gazette
    if region:
        client_kwargs["region_name"] = region
    if url.get("profile") and "profile" not in options:
        options["profile"] = url.get("profile")
    options.setdefault("use_listings_cache", False)
    options.setdefault("skip_instance_cache", True)
    return {**options, "endpoint_url": endpoint, "client_kwargs": client_kwargs, "config_kwargs": config_kwargs}
