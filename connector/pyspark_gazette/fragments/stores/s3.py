"""The ``s3://`` store (s3fs): S3 and S3-compatible servers (MinIO, moto), with the URL's
``endpoint``, ``region``, ``profile``, ``acl``, ``storageclass``, ``sse`` and ``ssekmskeyid``."""

from __future__ import annotations

from typing import Any

from pyspark_gazette.fragments.names import FragmentRef
from pyspark_gazette.fragments.stores.base import FragmentStore, StoreBackend, import_store_package, register_store
from pyspark_gazette.protocol.store_urls import StoreURL


class S3Store(FragmentStore):
    """Fragments in an S3 bucket."""

    @staticmethod
    def _new_filesystem(url: StoreURL, options: dict[str, Any]) -> Any:
        s3fs = import_store_package(url.scheme, "s3fs")
        return s3fs.S3FileSystem(**_s3_options(url, options))

    gzip_put_options = {"ContentEncoding": "gzip"}

    def _put_options(self, ref: FragmentRef) -> dict[str, Any]:
        options = super()._put_options(ref)
        for query_key, s3_key in (
            ("storageclass", "StorageClass"),
            ("sse", "ServerSideEncryption"),
            ("ssekmskeyid", "SSEKMSKeyId"),
        ):
            if value := self.parsed.get(query_key):
                options[s3_key] = value
        if acl := self.parsed.get("acl"):
            options["acl"] = acl
        return options


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


register_store(
    StoreBackend(
        "s3",
        S3Store,
        package="s3fs",  # a core dependency: no extra
        option_scope="s3",
        settings=(
            ("store.s3.endpoint", "endpoint_url"),
            ("store.s3.region", "region"),
            ("store.s3.accessKeyId", "key"),
            ("store.s3.secretAccessKey", "secret"),
            ("store.s3.sessionToken", "token"),
            ("store.s3.profile", "profile"),
            ("store.s3.anonymous", "anon"),
        ),
    )
)
