"""S3-specific behaviour against moto's real HTTP server (the shared contract is in
test_fragments_store_contract.py)."""

from __future__ import annotations

import hashlib
import io
import pickle
import urllib.parse

import boto3
import pytest

from pyspark_gazette.errors import FragmentNotFoundError, StoreURLError
from pyspark_gazette.fragments import FragmentReader, FragmentRef, FragmentStore, compress_bytes, open_fragment_url
from pyspark_gazette.protocol import pb

DATA = b"".join(b'{"click": %d, "page": "/home"}\n' % i for i in range(20_000))


def quoted(endpoint: str) -> str:
    return urllib.parse.quote(endpoint, safe="")


def make_ref(codec: int, journal: str = "clicks/0", data: bytes = DATA) -> FragmentRef:
    return FragmentRef(journal, 0, len(data), hashlib.sha1(data).hexdigest(), codec, path_postfix="date=2026-11-22")


@pytest.fixture
def s3(s3_server):
    return boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1")


def test_signed_url_is_path_style_sigv4_and_fetched_over_http(s3_server, s3_bucket):
    store = FragmentStore(f"s3://{s3_bucket}/frags/?endpoint={quoted(s3_server)}&region=us-east-1")
    ref = make_ref(pb.ZSTANDARD)
    store.put(ref, io.BytesIO(compress_bytes(ref.codec, DATA)))
    url = store.signed_url(ref, 30)
    assert url.startswith(f"{s3_server}/{s3_bucket}/frags/clicks/0/")
    assert "X-Amz-Signature=" in url and "X-Amz-Expires=30" in url
    with open_fragment_url(url, ref.codec) as raw:
        assert raw.content_encoding == ""
        with FragmentReader(raw, ref, verify_sha1=True) as r:
            assert r.read() == DATA


def test_gzip_offload_is_stored_gzip_encoded_and_decoded_by_the_reader(s3_server, s3_bucket, s3):
    store = FragmentStore(f"s3://{s3_bucket}/frags/?endpoint={quoted(s3_server)}")
    ref = make_ref(pb.GZIP_OFFLOAD_DECOMPRESSION)
    store.put(ref, io.BytesIO(compress_bytes(ref.codec, DATA)))
    head = s3.head_object(Bucket=s3_bucket, Key=store.object_path(ref))
    assert head["ContentEncoding"] == "gzip"
    assert not store.object_path(ref).endswith(".gz"), "GZIP_OFFLOAD_DECOMPRESSION files have no extension"
    with open_fragment_url(store.signed_url(ref, 60), ref.codec) as raw:
        assert raw.content_encoding == "gzip"  # S3 does not transcode
        assert raw.codec == pb.GZIP
        with FragmentReader(raw, ref, 10, verify_sha1=True) as r:
            assert r.read() == DATA[10:]


def test_plain_gzip_is_not_content_encoded(s3_server, s3_bucket, s3):
    store = FragmentStore(f"s3://{s3_bucket}/frags/?endpoint={quoted(s3_server)}")
    ref = make_ref(pb.GZIP)
    store.put(ref, io.BytesIO(compress_bytes(ref.codec, DATA)))
    assert "ContentEncoding" not in s3.head_object(Bucket=s3_bucket, Key=store.object_path(ref))


def test_put_options_from_the_url(s3_server, s3_bucket, s3):
    store = FragmentStore(
        f"s3://{s3_bucket}/opts/?endpoint={quoted(s3_server)}&storageclass=STANDARD_IA&sse=AES256&acl=private"
    )
    ref = make_ref(pb.SNAPPY)
    store.put(ref, io.BytesIO(compress_bytes(ref.codec, DATA)))
    head = s3.head_object(Bucket=s3_bucket, Key=store.object_path(ref))
    assert head["StorageClass"] == "STANDARD_IA"
    assert head["ServerSideEncryption"] == "AES256"


def test_endpoint_and_credentials_from_storage_options(s3_server, s3_bucket):
    options = {"endpoint_url": s3_server, "key": "testing", "secret": "s3cr3t-value", "region": "us-east-1"}
    store = FragmentStore(f"s3://{s3_bucket}/so/", storage_options=options)
    ref = make_ref(pb.NONE)
    store.put(ref, io.BytesIO(DATA))
    clone = pickle.loads(pickle.dumps(store))
    assert clone.list("clicks/0")[0].content_name == ref.content_name
    assert "s3cr3t-value" not in repr(store)


def test_signed_url_of_a_deleted_fragment_is_not_found_and_redacted(s3_server, s3_bucket):
    # moto does not check signatures; 403 handling is covered in test_fragments_urls.py.
    store = FragmentStore(f"s3://{s3_bucket}/frags/?endpoint={quoted(s3_server)}")
    ref = make_ref(pb.NONE)
    store.put(ref, io.BytesIO(DATA))
    url = store.signed_url(ref, 60)
    signature = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)["X-Amz-Signature"][0]
    store.delete(ref)
    with pytest.raises(FragmentNotFoundError, match="HTTP 404") as info:
        open_fragment_url(url, ref.codec)
    assert signature not in str(info.value) and "X-Amz-Signature=REDACTED" in str(info.value)


def test_health_reports_a_missing_bucket(s3_server):
    store = FragmentStore(f"s3://no-such-bucket-here/p/?endpoint={quoted(s3_server)}")
    health = store.health()
    assert "unhealthy" in health and "no-such-bucket-here" in health


def test_listing_is_not_cached(s3_server, s3_bucket):
    store = FragmentStore(f"s3://{s3_bucket}/fresh/?endpoint={quoted(s3_server)}")
    assert store.list("clicks/0") == []
    ref = make_ref(pb.NONE)
    store.put(ref, io.BytesIO(DATA))
    assert [r.content_name for r in store.list("clicks/0")] == [ref.content_name]
    store.delete(ref)
    assert store.list("clicks/0") == []


def test_unknown_query_keys_are_rejected(s3_server, s3_bucket):
    with pytest.raises(StoreURLError, match="'colour'"):
        FragmentStore(f"s3://{s3_bucket}/p/?endpoint={quoted(s3_server)}&colour=red")


def test_directory_markers_and_foreign_keys_are_skipped(s3_server, s3_bucket, s3, caplog):
    store = FragmentStore(f"s3://{s3_bucket}/m/?endpoint={quoted(s3_server)}")
    ref = make_ref(pb.NONE)
    store.put(ref, io.BytesIO(DATA))
    s3.put_object(Bucket=s3_bucket, Key="m/clicks/0/", Body=b"")
    s3.put_object(Bucket=s3_bucket, Key="m/clicks/0/date=2026-11-22/", Body=b"")
    s3.put_object(Bucket=s3_bucket, Key="m/clicks/0/_SUCCESS", Body=b"")
    with caplog.at_level("WARNING", logger="pyspark_gazette.fragments.stores"):
        assert [r.content_name for r in store.list("clicks/0")] == [ref.content_name]
    assert "_SUCCESS" in caplog.text
