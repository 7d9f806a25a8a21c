"""Fragment stores: one backend per scheme behind :class:`FragmentStore` (see :mod:`.base`).

``FragmentStore(url)`` builds the backend of the URL's scheme from :data:`STORES`:
:mod:`.s3` (s3fs), :mod:`.gcs` (gcsfs), :mod:`.azure` (adlfs: ``azure``, ``azure-ad``) and
:mod:`.file` (the disk). Store URL rules are the protocol's
(:mod:`pyspark_gazette.protocol.store_urls`).
"""

from __future__ import annotations

from pyspark_gazette.fragments.stores.azure import AzureADStore, AzureStore
from pyspark_gazette.fragments.stores.base import (
    HEALTH_PROBE,
    PARTIAL_PREFIX,
    STORES,
    FragmentStore,
    StoreBackend,
    register_store,
    require_package,
    scheme_options,
    store_class,
)
from pyspark_gazette.fragments.stores.file import FileStore
from pyspark_gazette.fragments.stores.gcs import GCSStore, gcs_emulator_host
from pyspark_gazette.fragments.stores.s3 import S3Store
from pyspark_gazette.fragments.urls import FragmentURLStream, open_fragment_url
from pyspark_gazette.protocol.store_urls import QUERY_KEYS, SCHEMES, StoreURL, parse_store_url

#: The pip extra that installs each scheme's package: pip install 'pyspark-gazette[<extra>]'.
EXTRAS = {b.scheme: b.extra for b in STORES.values() if b.extra}

if set(STORES) != set(SCHEMES):  # a scheme of the protocol without a backend, or the reverse
    raise ImportError(f"fragment store backends {sorted(STORES)} do not match the store URL schemes {sorted(SCHEMES)}")

__all__ = [
    "EXTRAS",
    "HEALTH_PROBE",
    "PARTIAL_PREFIX",
    "QUERY_KEYS",
    "SCHEMES",
    "STORES",
    "AzureADStore",
    "AzureStore",
    "FileStore",
    "FragmentStore",
    "FragmentURLStream",
    "GCSStore",
    "S3Store",
    "StoreBackend",
    "StoreURL",
    "gcs_emulator_host",
    "open_fragment_url",
    "parse_store_url",
    "register_store",
    "require_package",
    "scheme_options",
    "store_class",
]
