"""The ``azure://`` and ``azure-ad://`` stores (adlfs): Azure Blob Storage with an account key,
SAS or connection string (``azure``), or a service principal signing with user-delegation keys
(``azure-ad://<tenant>/<account>/<container>/<prefix>``), as Gazette's two Azure stores."""

from __future__ import annotations

import datetime as _dt
import io
import os
import threading
import urllib.parse
from collections.abc import Mapping
from typing import Any

from pyspark_gazette.errors import StoreError
from pyspark_gazette.fragments.stores.base import (
    READ_BLOCK,
    FragmentStore,
    StoreBackend,
    import_store_package,
    register_store,
    scheme_options,
)
from pyspark_gazette.protocol.store_urls import StoreURL


class AzureStore(FragmentStore):
    """Fragments in an Azure Blob Storage container (``azure://<container>/<prefix>``)."""

    @staticmethod
    def _new_filesystem(url: StoreURL, options: dict[str, Any]) -> Any:
        adlfs = import_store_package(url.scheme, "adlfs")
        return adlfs.AzureBlobFileSystem(**_azure_options(url, options))

    gzip_put_options = {"content_settings": {"content_encoding": "gzip"}}

    def _open_stored(self, location: str) -> Any:
        return _AzureStoredReader(self._fs, location)


class AzureADStore(AzureStore):
    """``azure-ad://<tenant>/<account>/<container>/<prefix>``: a service principal's store."""

    def __init__(self, url: str, *, file_root: str | None = None, storage_options: Mapping[str, Any] | None = None):
        super().__init__(url, file_root=file_root, storage_options=storage_options)
        self._udk: tuple[_dt.datetime, Any] | None = None  # (expiry, user delegation key)
        self._udk_lock = threading.Lock()

    def _location(self, key: str) -> str:
        # azure-ad://<tenant>/<account>/<container>/<prefix>
        return key.split("/", 1)[1] if "/" in key else key

    def _sign(self, key: str, expires: int) -> str:
        return self._sign_azure_ad(key, expires)

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
        want = min(want, READ_BLOCK)

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


register_store(
    StoreBackend(
        "azure",
        AzureStore,
        package="adlfs",
        extra="azure",
        option_scope="azure",
        settings=(
            ("store.azure.accountName", "account_name"),
            ("store.azure.accountKey", "account_key"),
            ("store.azure.sasToken", "sas_token"),
            ("store.azure.connectionString", "connection_string"),
        ),
    )
)
register_store(StoreBackend("azure-ad", AzureADStore, package="adlfs", extra="azure", option_scope="azure"))
