"""Store URLs (facts sheet 4.3), the file store, and file:// fragment URLs."""

from __future__ import annotations

import hashlib
import io
import logging
import os
import pickle
import re
import sys

import pytest

from pyspark_gazette.errors import FragmentNotFoundError, StoreError, StoreURLError
from pyspark_gazette.fragments import (
    FragmentReader,
    FragmentRef,
    FragmentStore,
    StoreURL,
    compress_bytes,
    open_fragment_url,
    parse_store_url,
)
from pyspark_gazette.fragments.stores import base as stores_module
from pyspark_gazette.fragments.stores import require_package, scheme_options
from pyspark_gazette.fragments.stores.azure import _azure_options
from pyspark_gazette.fragments.stores.gcs import _gcs_options
from pyspark_gazette.fragments.stores.s3 import _s3_options
from pyspark_gazette.protocol import pb

CONTENT = b'{"Msg": "Hello, Gazette!"}\n'


def make_ref(journal="examples/foo", codec=pb.SNAPPY, begin=0, content=CONTENT, postfix=""):
    return FragmentRef(
        journal, begin, begin + len(content), hashlib.sha1(content).hexdigest(), codec, path_postfix=postfix
    )


# -- URL parsing --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("s3://bucket/", StoreURL("s3", "bucket", "", ())),
        ("s3://bucket/a/b/", StoreURL("s3", "bucket", "a/b/", ())),
        (
            "s3://examples/fragments/?profile=minio&endpoint=http%3A%2F%2Fminio%3A9000",
            StoreURL("s3", "examples", "fragments/", (("profile", "minio"), ("endpoint", "http://minio:9000"))),
        ),
        (
            "s3://b/p/?Region=eu-west-1&StorageClass=STANDARD_IA",
            StoreURL("s3", "b", "p/", (("region", "eu-west-1"), ("storageclass", "STANDARD_IA"))),
        ),
        (
            "s3://b/p/?acl=private&sse=aws:kms&ssekmskeyid=k1",
            StoreURL("s3", "b", "p/", (("acl", "private"), ("sse", "aws:kms"), ("ssekmskeyid", "k1"))),
        ),
        (
            "gs://bucket/prefix/?find=a&replace=b",
            StoreURL("gs", "bucket", "prefix/", (("find", "a"), ("replace", "b"))),
        ),
        ("azure://container/prefix/", StoreURL("azure", "container", "prefix/", ())),
        (
            "azure-ad://tenant/account/container/prefix/",
            StoreURL("azure-ad", "tenant", "account/container/prefix/", ()),
        ),
        ("file:///", StoreURL("file", "", "", ())),
        ("file:///sub/path/", StoreURL("file", "", "sub/path/", ())),
        ("FILE:///x/?FIND=a&Replace=", StoreURL("file", "", "x/", (("find", "a"), ("replace", "")))),
        # What Go's url.Parse (Gazette's FragmentStore.Validate) accepts at the edges of its rules.
        ("s3://bucket:9000/p/", StoreURL("s3", "bucket:9000", "p/", ())),
        ("s3://bucket:99999/p/", StoreURL("s3", "bucket:99999", "p/", ())),
        ("s3://bucket:/p/", StoreURL("s3", "bucket:", "p/", ())),
        ("gs://b/a%2Fb%20c/", StoreURL("gs", "b", "a/b c/", ())),
        ("gs://bücket/p/", StoreURL("gs", "bücket", "p/", ())),
    ],
)
def test_parse_valid_urls(url, expected):
    assert parse_store_url(url) == expected


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("bucket/prefix/", "not an absolute URL"),
        ("/local/path/", "not an absolute URL"),
        ("http://host/path/", "unsupported scheme 'http'"),
        ("s3://bucket/prefix", "must end in '/'"),
        ("s3://bucket", "must end in '/'"),
        ("s3:///prefix/", "missing bucket"),
        ("file://host/path/", "has no host"),
        ("s3://b/p/?colour=red", "unknown query argument 'colour'"),
        ("gs://b/p/?profile=x", "unknown query argument 'profile' for gs"),
        ("file:///p/?endpoint=x", "unknown query argument 'endpoint' for file"),
        ("s3://b/p/?region=a&REGION=b", "more than once"),
        ("s3://b/p/#frag", "fragments"),
        # Go's url.Parse refuses these (so real Gazette's Validate does); Python's urlsplit does not.
        ("s3://bucket:abc/p/", "invalid port ':abc' after host"),
        ("s3://bucket/p%zz/", "invalid escape '%zz' in the path"),
        ("s3://bucket/p%4/", "invalid escape '%4/' in the path"),
        ("s3://buc ket/p/", "invalid character in host 'buc ket'"),
        ("s3://bucket%41/p/", "invalid escape '%41' in the host"),
        ("s3://bucket/p\x01/", "control characters"),
    ],
)
def test_parse_invalid_urls(url, why):
    with pytest.raises(StoreURLError, match=why) as info:
        parse_store_url(url)
    assert "invalid fragment store URL" in str(info.value)


def test_unknown_key_error_names_key_and_url():
    with pytest.raises(StoreURLError) as info:
        parse_store_url("s3://my-bucket/pre/?endpoint=http%3A%2F%2Fx&bogus=1")
    assert "'bogus'" in str(info.value) and "s3://my-bucket/pre/" in str(info.value)


def test_rewrite_replaces_first_occurrence_only():
    url = parse_store_url("s3://b/p/?find=foo/&replace=bar/")
    assert url.rewrite("foo/foo/x") == "bar/foo/x"
    assert url.rewrite("none/here") == "none/here"
    assert parse_store_url("s3://b/p/?replace=x").rewrite("a/b") == "a/b"


def test_object_path_applies_prefix_and_rewrite():
    ref = make_ref(postfix="date=1")
    assert FragmentStore("s3://b/pre/fix/").object_path(ref) == "pre/fix/" + ref.content_path
    store = FragmentStore("s3://b/pre/?find=examples/&replace=ex/")
    assert store.object_path(ref) == f"pre/ex/foo/date=1/{ref.content_name}"


# -- s3 options --------------------------------------------------------------------------------


def test_s3_options_from_url_and_overrides():
    opts = _s3_options(
        parse_store_url("s3://b/p/?endpoint=http%3A%2F%2Fminio%3A9000&region=eu-west-1&profile=minio"), {}
    )
    assert opts["endpoint_url"] == "http://minio:9000"
    assert opts["config_kwargs"]["s3"] == {"addressing_style": "path"}
    assert opts["config_kwargs"]["signature_version"] == "s3v4"
    assert opts["client_kwargs"] == {"region_name": "eu-west-1"}
    assert opts["profile"] == "minio"
    assert opts["use_listings_cache"] is False

    opts = _s3_options(
        parse_store_url("s3://b/p/?endpoint=http%3A%2F%2Fminio%3A9000&region=eu-west-1"),
        {"endpoint_url": "http://other:1", "region": "us-east-2", "key": "K", "secret": "S", "anon": False},
    )
    assert opts["endpoint_url"] == "http://other:1"
    assert opts["client_kwargs"]["region_name"] == "us-east-2"
    assert (opts["key"], opts["secret"], opts["anon"]) == ("K", "S", False)

    opts = _s3_options(parse_store_url("s3://b/p/"), {})
    assert opts["endpoint_url"] is None and "s3" not in opts["config_kwargs"]


@pytest.mark.parametrize(
    ("scheme", "package", "extra"),
    [("s3", "s3fs", None), ("gs", "gcsfs", "gcs"), ("azure", "adlfs", "azure"), ("azure-ad", "adlfs", "azure")],
)
def test_missing_filesystem_package_names_the_extra(monkeypatch, scheme, package, extra):
    monkeypatch.setitem(sys.modules, package, None)  # makes `import package` raise ImportError
    monkeypatch.setitem(sys.modules, package + ".core", None)
    monkeypatch.setattr(stores_module, "_FS_CACHE", {})  # no filesystem made by an earlier test
    url = f"{scheme}://bucket/acct/cont/prefix/" if scheme == "azure-ad" else f"{scheme}://bucket/prefix/"
    hint = f"pip install 'pyspark-gazette[{extra}]'" if extra else f"pip install '{package}'"  # s3fs: core
    with pytest.raises(StoreError, match=re.escape(hint)):
        require_package(scheme)
    store = FragmentStore(url)
    with pytest.raises(StoreError, match=re.escape(hint)) as info:
        store.list("j")
    assert isinstance(info.value.__cause__, ImportError)
    assert hint in store.health()
    require_package("file")  # nothing to install


def test_azure_ad_urls_need_account_and_container():
    url = parse_store_url("azure-ad://tenant-id/account/container/pre/fix/")
    assert (url.bucket, url.prefix) == ("tenant-id", "account/container/pre/fix/")
    assert parse_store_url("azure-ad://tenant-id/account/container/").prefix == "account/container/"
    with pytest.raises(StoreURLError, match="missing storage account"):
        parse_store_url("azure-ad://tenant-id//container/")
    with pytest.raises(StoreURLError, match="missing storage container"):
        parse_store_url("azure-ad://tenant-id/account/")
    with pytest.raises(StoreURLError, match="missing bucket"):
        parse_store_url("azure-ad:///account/container/")


@pytest.mark.parametrize("scheme", ["gs", "azure", "azure-ad"])
def test_gazette_query_arguments_of_gcs_and_azure(scheme):
    base = "azure-ad://t/a/c/p/" if scheme == "azure-ad" else f"{scheme}://b/p/"
    assert parse_store_url(base + "?find=a/&replace=b/").rewrite("a/x") == "b/x"
    assert parse_store_url(base + "?FIND=a/&Replace=b/").rewrite("a/x") == "b/x"  # names match case-insensitively
    for key in ("endpoint", "region", "profile", "account"):  # S3's arguments are not theirs
        with pytest.raises(StoreURLError, match=f"unknown query argument '{key}'"):
            parse_store_url(base + f"?{key}=x")


def test_storage_options_are_scoped_per_scheme():
    options = {"s3.key": "K", "gs.token": "anon", "azure.connection_string": "C", "timeout": 5}
    assert scheme_options("s3", options) == {"key": "K", "timeout": 5}
    assert scheme_options("gs", options) == {"token": "anon", "timeout": 5}
    assert scheme_options("azure", options) == {"connection_string": "C", "timeout": 5}
    assert scheme_options("azure-ad", options) == {"connection_string": "C", "timeout": 5}


def test_gcs_options_follow_the_emulator_host(monkeypatch):
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    assert "endpoint_url" not in _gcs_options({})
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "127.0.0.1:4443")
    opts = _gcs_options({})
    assert (opts["endpoint_url"], opts["token"]) == ("http://127.0.0.1:4443", "anon")
    opts = _gcs_options({"endpoint_url": "https://gcs.internal:1", "token": "/key.json", "signing_credentials": "x"})
    assert (opts["endpoint_url"], opts["token"]) == ("https://gcs.internal:1", "/key.json")
    assert "signing_credentials" not in opts  # ours, not gcsfs's


def test_azure_options_use_gazettes_variables(monkeypatch):
    monkeypatch.setenv("AZURE_ACCOUNT_NAME", "acct")
    monkeypatch.setenv("AZURE_ACCOUNT_KEY", "a2V5")
    monkeypatch.setenv("AZURE_CLIENT_ID", "cid")
    monkeypatch.setenv("AZURE_CLIENT_SECRET", "csecret")
    opts = _azure_options(parse_store_url("azure://container/p/"), {})
    assert (opts["account_name"], opts["account_key"]) == ("acct", "a2V5")
    opts = _azure_options(parse_store_url("azure://container/p/"), {"connection_string": "C"})
    assert "account_key" not in opts and opts["connection_string"] == "C"
    opts = _azure_options(parse_store_url("azure://container/p/"), {"sas_token": "sv=1"})
    assert "account_key" not in opts and opts["account_name"] == "acct"
    opts = _azure_options(parse_store_url("azure-ad://tenant/acct2/container/p/"), {})
    assert (opts["tenant_id"], opts["account_name"], opts["client_id"], opts["client_secret"]) == (
        "tenant",
        "acct2",
        "cid",
        "csecret",
    )


# -- the file store ----------------------------------------------------------------------------


@pytest.fixture
def root(tmp_path):
    return str(tmp_path / "root")


def test_file_store_layout_and_round_trip(root):
    store = FragmentStore("file:///sub/path/", file_root=root)
    ref = make_ref(postfix="date=2019-11-19/hour=22")
    mod_time = store.put(ref, io.BytesIO(compress_bytes(ref.codec, CONTENT)))
    on_disk = os.path.join(root, "sub", "path", "examples", "foo", "date=2019-11-19", "hour=22", ref.content_name)
    assert os.path.isfile(on_disk)
    assert mod_time == int(os.stat(on_disk).st_mtime)
    assert not [n for n in os.listdir(os.path.dirname(on_disk)) if n.startswith(".partial-")]
    [listed] = store.list("examples/foo")
    assert listed == FragmentRef(**{**ref.__dict__, "backing_store": store.url, "mod_time": mod_time})
    with FragmentReader(store.open_raw(listed), listed, verify_sha1=True) as r:
        assert r.read() == CONTENT


def test_file_store_put_from_path_and_failed_put_leaves_nothing(root, tmp_path):
    store = FragmentStore("file:///", file_root=root)
    ref = make_ref(codec=pb.NONE)
    src = tmp_path / "upload.raw"
    src.write_bytes(CONTENT)
    store.put(ref, str(src))
    assert store.open_raw(ref).read() == CONTENT

    class Failing(io.RawIOBase):
        def readable(self):
            return True

        def readinto(self, b):
            raise ConnectionResetError("upload source broke")

    other = make_ref(codec=pb.NONE, begin=100)
    with pytest.raises(StoreError, match="upload source broke"):
        store.put(other, Failing())
    directory = os.path.join(root, "examples", "foo")
    assert sorted(os.listdir(directory)) == [ref.content_name]


def test_file_store_list_skips_partials_dirs_and_bad_names(root, caplog):
    store = FragmentStore("file:///", file_root=root)
    ref = make_ref()
    store.put(ref, io.BytesIO(compress_bytes(ref.codec, CONTENT)))
    base = os.path.join(root, "examples", "foo")
    open(os.path.join(base, ".partial-abc"), "wb").close()
    open(os.path.join(base, "README.txt"), "wb").close()
    os.makedirs(os.path.join(base, "empty-dir"))
    with caplog.at_level(logging.WARNING, logger="pyspark_gazette.fragments.stores"):
        assert [r.content_name for r in store.list("examples/foo")] == [ref.content_name]
    assert "README.txt" in caplog.text and ".partial-abc" not in caplog.text
    assert store.list("no/such/journal") == []


def test_file_store_rejects_traversal(root):
    with pytest.raises(StoreURLError, match="escapes the file root"):
        FragmentStore("file:///../../etc/", file_root=root)
    store = FragmentStore("file:///", file_root=root)
    evil = make_ref(journal="../../outside")
    for op in (lambda: store.open_raw(evil), lambda: store.put(evil, io.BytesIO(b"x")), lambda: store.list("../../x")):
        with pytest.raises(StoreURLError, match="escapes the (file root|journal's directory)"):
            op()
    assert not os.path.exists(os.path.join(os.path.dirname(root), "outside"))


def test_file_store_is_picklable_and_hides_secrets(root):
    store = FragmentStore("file:///p/", file_root=root, storage_options={"token": "sekrit"})
    store.put(make_ref(), io.BytesIO(compress_bytes(pb.SNAPPY, CONTENT)))
    clone = pickle.loads(pickle.dumps(store))
    assert clone.url == store.url and clone.file_root == root
    assert [r.content_name for r in clone.list("examples/foo")] == [make_ref().content_name]
    assert "sekrit" not in repr(store)


def test_file_store_health(root, tmp_path):
    assert FragmentStore("file:///fresh/", file_root=root).health() == ""
    assert not os.listdir(os.path.join(root, "fresh")), "the health probe is removed"
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"")
    assert "unhealthy" in FragmentStore("file:///", file_root=str(blocker)).health()


def test_file_store_signed_url_excludes_root_and_opens_under_a_root(root):
    store = FragmentStore("file:///sub/?find=examples/&replace=ex/", file_root=root)
    ref = make_ref(codec=pb.ZSTANDARD, postfix="date=1")
    store.put(ref, io.BytesIO(compress_bytes(ref.codec, CONTENT)))
    url = store.signed_url(ref, 60)
    assert url == f"file:///sub/ex/foo/date=1/{ref.content_name}"
    with open_fragment_url(url, ref.codec, file_root=root) as raw:
        assert raw.content_encoding == "" and raw.codec == pb.ZSTANDARD
        with FragmentReader(raw, ref, ref.begin + 7, verify_sha1=True) as r:
            assert r.read() == CONTENT[7:]


def test_file_fragment_url_rules(root):
    with pytest.raises(StoreError, match="broker proxy"):
        open_fragment_url("file:///x/y.raw", pb.NONE)
    with pytest.raises(StoreURLError, match="escapes the file root"):
        open_fragment_url("file:///../../etc/passwd", pb.NONE, file_root=root)
    with pytest.raises(StoreURLError, match="escapes the file root"):
        open_fragment_url("file:///%2e%2e/%2e%2e/etc/passwd", pb.NONE, file_root=root)
    with pytest.raises(StoreURLError, match="has a host"):
        open_fragment_url("file://host/x", pb.NONE, file_root=root)
    with pytest.raises(FragmentNotFoundError, match="missing"):
        open_fragment_url("file:///no/such/file", pb.NONE, file_root=root)
    with pytest.raises(StoreURLError, match="unsupported scheme 'ftp'"):
        open_fragment_url("ftp://host/x", pb.NONE)


class _FailingFile:
    """A remote file whose reads fail as an SDK does once its retries are spent."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def read(self, size: int = -1) -> bytes:
        raise self.error

    def close(self) -> None:
        pass


class HttpResponseError(Exception):  # named like azure.core's, not an OSError
    pass


@pytest.mark.parametrize("error", [HttpResponseError("SlowDown"), OSError("HTTP 503"), ValueError("bad chunk")])
def test_store_read_failures_are_store_errors_naming_the_fragment(error):
    from pyspark_gazette.fragments.stores.base import _StoreStream

    ref = make_ref()
    stream = _StoreStream(_FailingFile(error), ref)
    with pytest.raises(StoreError) as info:
        stream.read(10)
    assert ref.content_path in str(info.value) and type(error).__name__ in str(info.value)
    assert info.value.__cause__ is error


def test_a_vanished_object_is_fragment_not_found():
    from pyspark_gazette.fragments.stores.base import _StoreStream

    ref = make_ref()
    with pytest.raises(FragmentNotFoundError):
        _StoreStream(_FailingFile(FileNotFoundError("gone")), ref).read(10)


def test_azure_ad_urls_are_signed_with_a_cached_user_delegation_key(monkeypatch):
    import base64
    import urllib.parse

    azure_blob = pytest.importorskip("azure.storage.blob")
    azure_identity = pytest.importorskip("azure.identity")
    calls = []

    class FakeService:  # stands in for the Blob service's get_user_delegation_key call
        def __init__(self, url, credential):
            calls.append((url, type(credential).__name__))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

        def get_user_delegation_key(self, start, expiry):
            key = azure_blob.UserDelegationKey()
            key.signed_oid, key.signed_tid = "oid", "tid"
            key.signed_start, key.signed_expiry = "2026-01-01T00:00:00Z", "2026-01-01T02:00:00Z"
            key.signed_service, key.signed_version = "b", "2025-01-05"
            key.value = base64.b64encode(b"k" * 32).decode()
            return key

    monkeypatch.setattr(azure_blob, "BlobServiceClient", FakeService)
    monkeypatch.setattr(azure_identity, "ClientSecretCredential", lambda *a: object())
    monkeypatch.setenv("AZURE_CLIENT_ID", "cid")
    monkeypatch.setenv("AZURE_CLIENT_SECRET", "csecret")
    store = FragmentStore("azure-ad://tenant/acct/container/pre/")
    ref = make_ref(postfix="date=1")
    url = store.signed_url(ref, 60)
    store.signed_url(ref, 60)
    parts = urllib.parse.urlsplit(url)
    assert (parts.scheme, parts.netloc) == ("https", "acct.blob.core.windows.net")
    assert parts.path == f"/container/pre/{ref.content_path}"
    query = urllib.parse.parse_qs(parts.query)
    assert query["sp"] == ["r"] and query["spr"] == ["https"] and query["skoid"] == ["oid"] and query["sig"]
    assert calls == [("https://acct.blob.core.windows.net", "object")]  # one key for both URLs
    monkeypatch.delenv("AZURE_CLIENT_SECRET")
    with pytest.raises(StoreError, match="AZURE_CLIENT_SECRET"):
        FragmentStore("azure-ad://tenant/acct/container/pre/").signed_url(ref, 60)
    assert "csecret" not in url
