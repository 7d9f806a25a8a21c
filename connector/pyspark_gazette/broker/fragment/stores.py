"""Fragment store instances by URL, and the health the broker reports for each.

:class:`Stores` caches one :class:`~pyspark_gazette.fragments.FragmentStore` per store URL
(all storage access goes through :mod:`pyspark_gazette.fragments`) and remembers the last
failure of each, which FragmentStoreHealth reports until an operation on the store succeeds.
"""

from __future__ import annotations

import threading
from typing import Any

from pyspark_gazette.errors import redact_url
from pyspark_gazette.fragments import FragmentStore


class Stores:
    """FragmentStore instances by URL, and the health of each."""

    def __init__(self, file_root: str | None, storage_options: dict[str, Any] | None):
        self._file_root = file_root
        self._storage_options = storage_options
        self._lock = threading.Lock()
        self._stores: dict[str, FragmentStore] = {}
        self._errors: dict[tuple[str, str], str] = {}  # (url, operation) -> last failure

    def get(self, url: str) -> FragmentStore:
        with self._lock:
            store = self._stores.get(url)
            if store is None:
                store = FragmentStore(url, file_root=self._file_root, storage_options=self._storage_options)
                self._stores[url] = store
            return store

    def record(self, url: str, error: BaseException | None, operation: str = "persist") -> None:
        """Remember the outcome of an operation (``persist`` or ``list``) on a store."""
        with self._lock:
            if error is None:
                self._errors.pop((url, operation), None)
            else:
                self._errors[(url, operation)] = redact_url(f"{operation} failed: {type(error).__name__}: {error}")

    def health(self, url: str) -> str:
        """Empty when healthy, else the text of the last failures (or of a fresh probe)."""
        with self._lock:
            errors = [text for (u, _), text in sorted(self._errors.items()) if u == url]
        if errors:
            return "; ".join(errors)
        try:
            return self.get(url).health()
        except Exception as e:  # a broken URL is an unhealthy store
            return redact_url(f"{type(e).__name__}: {e}")
