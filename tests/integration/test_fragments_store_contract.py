"""One contract for every fragment store: the file store, S3 (moto's real HTTP server), GCS
(fake-gcs-server's JSON API) and Azure Blob (Azurite).

Each backend provides a store plus a way to write and inspect objects behind the store's back,
so the tests can check the layout and feed it foreign files.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest

from pyspark_gazette.errors import FragmentNotFoundError
from pyspark_gazette.fragments import (
    FragmentReader,
    FragmentRef,
    FragmentStore,
    compress_bytes,
    open_fragment_url,
)
from pyspark_gazette.protocol import pb

CODECS = [pb.NONE, pb.GZIP, pb.ZSTANDARD, pb.SNAPPY, pb.GZIP_OFFLOAD_DECOMPRESSION]


@dataclass
class Backend:
    make_store: Callable[[str], FragmentStore]  # query string -> store
    write_object: Callable[[str, bytes], None]  # key below the bucket -> bytes
    object_exists: Callable[[str], bool]
    file_root: str | None = None  # for file:// signed URLs


@pytest.fixture(params=["file", "s3", "gcs", "azure"])
def backend(request, tmp_path) -> Backend:
    if request.param == "file":
        root = str(tmp_path / "root")

        def write(key, data):
            path = os.path.join(root, "store", key)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)

        return Backend(
            make_store=lambda query: FragmentStore("file:///store/" + query, file_root=root),
            write_object=write,
            object_exists=lambda key: os.path.isfile(os.path.join(root, "store", key)),
            file_root=root,
        )

    if request.param == "gcs":
        return _gcs_backend(request)
    if request.param == "azure":
        return _azure_backend(request)

    import boto3

    endpoint = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("s3_bucket")
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")

    def exists(key):
        return s3.list_objects_v2(Bucket=bucket, Prefix="store/" + key).get("KeyCount", 0) > 0

    def make_store(query):
        sep = "&" if query else "?"
        return FragmentStore(f"s3://{bucket}/store/{query}{sep}endpoint={urllib.parse.quote(endpoint, safe='')}")

    return Backend(
        make_store=make_store,
        write_object=lambda key, data: s3.put_object(Bucket=bucket, Key="store/" + key, Body=data),
        object_exists=exists,
    )


def _gcs_backend(request) -> Backend:
    import store_emulators

    endpoint = request.getfixturevalue("gcs_server")
    bucket = request.getfixturevalue("gcs_bucket")
    key_file = request.getfixturevalue("gcs_signing_key")
    fs = store_emulators.gcs_filesystem(endpoint)
    options = {"endpoint_url": endpoint, "signing_credentials": key_file}
    return Backend(
        make_store=lambda query: FragmentStore(f"gs://{bucket}/store/{query}", storage_options=options),
        write_object=lambda key, data: fs.pipe_file(f"{bucket}/store/{key}", data),
        object_exists=lambda key: fs.exists(f"{bucket}/store/{key}"),
    )


def _azure_backend(request) -> Backend:
    import store_emulators

    endpoint = request.getfixturevalue("azurite_server")
    container = request.getfixturevalue("azure_container")
    client = store_emulators.azure_service(endpoint).get_container_client(container)
    request.addfinalizer(client.close)
    options = {"connection_string": store_emulators.azurite_connection_string(endpoint)}
    return Backend(
        make_store=lambda query: FragmentStore(f"azure://{container}/store/{query}", storage_options=options),
        write_object=lambda key, data: client.upload_blob("store/" + key, data, overwrite=True),
        object_exists=lambda key: client.get_blob_client("store/" + key).exists(),
    )


def content(n: int, seed: int = 0) -> bytes:
    return b"".join(b'{"event": %d, "seed": %d}\n' % (i, seed) for i in range(n))


def put(store: FragmentStore, journal: str, begin: int, data: bytes, codec=pb.SNAPPY, postfix="") -> FragmentRef:
    ref = FragmentRef(journal, begin, begin + len(data), hashlib.sha1(data).hexdigest(), codec, path_postfix=postfix)
    mod_time = store.put(ref, io.BytesIO(compress_bytes(codec, data)))
    return replace(ref, backing_store=store.url, mod_time=mod_time)


@pytest.mark.parametrize("codec", CODECS)
def test_put_list_open(backend, codec):
    store = backend.make_store("")
    data = content(5000)
    before = int(time.time())
    ref = put(store, "clicks/part-000", 1024, data, codec, postfix="date=2026-11-22/hour=03")
    assert before - 5 <= ref.mod_time <= int(time.time()) + 5
    assert backend.object_exists(ref.content_path)
    [listed] = store.list("clicks/part-000")
    assert listed == ref and listed.is_persisted
    with FragmentReader(store.open_raw(listed), listed, listed.begin + 100, verify_sha1=True) as r:
        assert r.read() == data[100:]
    with store.open_reader(listed, listed.begin + 4000, verify_sha1=True) as r:
        assert r.offset == listed.begin + 4000
        assert r.read() == data[4000:]


def test_list_is_sorted_recursive_and_scoped_to_the_journal(backend):
    store = backend.make_store("")
    refs = [
        put(store, "a/b", 300, content(10, 3), postfix="date=2"),
        put(store, "a/b", 0, content(10, 1), postfix="date=1"),
        put(store, "a/b", 100, content(10, 2), postfix="date=1/hour=7"),
    ]
    put(store, "a/bc", 0, content(10, 4))  # a sibling journal whose name extends ours
    put(store, "a", 0, content(10, 5))  # a parent "directory"
    backend.write_object("a/b/date=1/notes.txt", b"not a fragment")
    listed = store.list("a/b")
    assert [r.begin for r in listed] == [0, 100, 300]
    assert listed == sorted(refs, key=lambda r: r.begin)
    assert [r.path_postfix for r in listed] == ["date=1", "date=1/hour=7", "date=2"]
    assert {r.journal for r in store.list("a/bc")} == {"a/bc"}
    assert store.list("nothing/here") == []


def test_foreign_files_with_valid_names_are_listed(backend):
    store = backend.make_store("")
    data = content(20)
    name = f"{0:016x}-{len(data):016x}-{hashlib.sha1(data).hexdigest()}.zst"
    backend.write_object(f"j/{name}", compress_bytes(pb.ZSTANDARD, data))
    [ref] = store.list("j")
    assert (ref.codec, ref.end, ref.backing_store) == (pb.ZSTANDARD, len(data), store.url)
    with FragmentReader(store.open_raw(ref), ref, verify_sha1=True) as r:
        assert r.read() == data


def test_open_missing_fragment(backend):
    store = backend.make_store("")
    ghost = FragmentRef("j/ghost", 0, 10, "ab" * 20, pb.GZIP)
    with pytest.raises(FragmentNotFoundError) as info:
        store.open_raw(ghost)
    assert "j/ghost" in str(info.value) and ghost.content_path in str(info.value)


def test_delete_is_idempotent(backend):
    store = backend.make_store("")
    keep = put(store, "j", 0, content(10))
    gone = put(store, "j", 10, content(10, 1))
    store.delete(gone)
    store.delete(gone)
    assert store.list("j") == [keep]
    with pytest.raises(FragmentNotFoundError):
        store.open_raw(gone)


def test_find_replace_rewrites_the_object_path(backend):
    store = backend.make_store("?find=tenant-a/&replace=archive/tenant-a/")
    ref = put(store, "tenant-a/clicks", 0, content(50), postfix="date=1")
    assert backend.object_exists(f"archive/tenant-a/clicks/date=1/{ref.content_name}")
    assert not backend.object_exists(ref.content_path)
    assert store.list("tenant-a/clicks") == [ref]
    assert store.open_raw(ref).read()


@pytest.mark.parametrize("codec", [pb.GZIP, pb.GZIP_OFFLOAD_DECOMPRESSION, pb.SNAPPY])
def test_signed_url_reads_directly(backend, codec):
    store = backend.make_store("")
    data = content(3000)
    ref = put(store, "direct/read", 500, data, codec, postfix="p=1")
    url = store.signed_url(ref, 60)
    with open_fragment_url(url, codec, file_root=backend.file_root) as raw:
        with FragmentReader(raw, ref, ref.begin + 1234, verify_sha1=True) as r:
            assert b"".join(r.iter_chunks(10_000)) == data[1234:]


def test_put_from_a_path(backend, tmp_path):
    store = backend.make_store("")
    data = content(100)
    src = tmp_path / "upload.gz"
    src.write_bytes(compress_bytes(pb.GZIP, data))
    ref = FragmentRef("from/path", 0, len(data), hashlib.sha1(data).hexdigest(), pb.GZIP)
    mod_time = store.put(ref, str(src))
    assert mod_time > 0
    with FragmentReader(store.open_raw(ref), ref, verify_sha1=True) as r:
        assert r.read() == data


def test_pickled_store_works(backend):
    store = backend.make_store("")
    ref = put(store, "pickled", 0, content(10))
    clone = pickle.loads(pickle.dumps(store))
    assert clone.list("pickled") == [ref]
    assert clone.open_raw(ref).read() == store.open_raw(ref).read()


def test_health(backend):
    assert backend.make_store("").health() == ""
