"""Throttling and 5xx answers of every object store, mid-read, through a fault-injecting proxy.

The proxy (tests/spark/s3_fault_proxy.py, a plain HTTP forwarder) sits between the store client
and the emulator (moto for S3, fake-gcs-server for GCS, Azurite for Azure) and fails chosen GETs
of a fragment's object. A few failures are retried by the store SDK and the read returns the
exact content. (Failures that outlast the retries: tests/unit/test_fragments_stores.py checks
their translation; tests/spark/test_faults_store.py fails an S3 read for good.)
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import pathlib
import urllib.parse
from collections.abc import Callable

import pytest

from pyspark_gazette.fragments import FragmentReader, FragmentRef, FragmentStore, compress_bytes
from pyspark_gazette.protocol import pb

_spec = importlib.util.spec_from_file_location(
    "s3_fault_proxy", pathlib.Path(__file__).resolve().parent.parent / "spark" / "s3_fault_proxy.py"
)
assert _spec is not None and _spec.loader is not None
fault_proxy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fault_proxy)


@pytest.fixture(params=["s3", "gcs", "azure"])
def store_via(request) -> tuple[str, Callable[[str], FragmentStore]]:
    """(the emulator's endpoint, endpoint -> a store whose requests go to that endpoint)."""
    import store_emulators

    if request.param == "s3":
        upstream = request.getfixturevalue("s3_server")
        bucket = request.getfixturevalue("s3_bucket")
        return upstream, lambda ep: FragmentStore(
            f"s3://{bucket}/faults/?endpoint={urllib.parse.quote(ep, safe='')}&region=us-east-1"
        )
    if request.param == "gcs":
        upstream = request.getfixturevalue("gcs_server")
        bucket = request.getfixturevalue("gcs_bucket")
        return upstream, lambda ep: FragmentStore(f"gs://{bucket}/faults/", storage_options={"endpoint_url": ep})
    upstream = request.getfixturevalue("azurite_server")
    container = request.getfixturevalue("azure_container")
    return upstream, lambda ep: FragmentStore(
        f"azure://{container}/faults/",
        storage_options={"connection_string": store_emulators.azurite_connection_string(ep)},
    )


def _proxy_endpoint(proxy, upstream: str) -> str:
    """The proxy's address with the upstream's path (Azurite's endpoint names the account)."""
    return proxy.endpoint + urllib.parse.urlsplit(upstream).path


@pytest.mark.parametrize("codec", [pb.ZSTANDARD, pb.GZIP_OFFLOAD_DECOMPRESSION])
def test_failed_gets_are_retried(store_via, codec):
    upstream, make = store_via
    data = b"".join(b'{"n": %d}\n' % i for i in range(20_000))
    ref = FragmentRef("faults/a", 0, len(data), hashlib.sha1(data).hexdigest(), codec)
    # The Azure SDK backs off 15 s before its first retry: one failure there, two elsewhere.
    failures, status = (1, 500) if store_via_kind(upstream) == "azure" else (2, 503)
    with fault_proxy.FaultProxy(upstream.split("/devstoreaccount1")[0]) as proxy:
        store = make(_proxy_endpoint(proxy, upstream))
        store.put(ref, io.BytesIO(compress_bytes(codec, data)))
        proxy.fail_next(failures, ref.content_name, status)
        with FragmentReader(store.open_raw(ref), ref, 1000, verify_sha1=True) as reader:
            assert reader.read() == data[1000:]
        assert proxy.failed == failures and proxy.forwarded_gets > 0


def store_via_kind(upstream: str) -> str:
    return "azure" if "devstoreaccount1" in upstream else "other"
