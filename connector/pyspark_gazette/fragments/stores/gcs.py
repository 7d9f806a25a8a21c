"""The ``gs://`` store (gcsfs): Google Cloud Storage and its emulators; offloaded-gzip
fragments are read as stored, and URLs are signed locally with a service-account key."""

from __future__ import annotations

import datetime as _dt
import http.client
import logging
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from pyspark_gazette.errors import StoreError, redact_url
from pyspark_gazette.fragments.stores.base import (
    FragmentStore,
    StoreBackend,
    import_store_package,
    register_store,
    scheme_options,
)
from pyspark_gazette.protocol.store_urls import StoreURL

logger = logging.getLogger(__name__)

_GCS_OPEN_BACKOFF = (0.5, 1.0, 2.0, 4.0)
_GCS_TOKEN_MODES = ("anon", "browser", "cache", "cloud", "google_default")


class GCSStore(FragmentStore):
    """Fragments in a GCS bucket."""

    @staticmethod
    def _new_filesystem(url: StoreURL, options: dict[str, Any]) -> Any:
        gcsfs_core = import_store_package(url.scheme, "gcsfs.core")
        return gcsfs_core.GCSFileSystem(**_gcs_options(options))

    gzip_put_options = {"fixed_key_metadata": {"content_encoding": "gzip"}}

    def _sign(self, key: str, expires: int) -> str:
        return self._sign_gcs(key, expires)

    def _open_stored(self, location: str) -> Any:
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


register_store(
    StoreBackend(
        "gs",
        GCSStore,
        package="gcsfs",
        extra="gcs",
        option_scope="gs",
        settings=(("store.gcs.endpoint", "endpoint_url"), ("store.gcs.credentialsFile", "token")),
    )
)
