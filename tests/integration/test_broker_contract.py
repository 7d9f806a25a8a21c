"""Contract suite: fragment persistence, indexing and reads, run against a ``file://`` store
and an ``s3://`` store (moto). Every test here must pass on both backends alike."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import time
from datetime import datetime, timezone

import grpc
import pytest
from google.protobuf import duration_pb2

from pyspark_gazette.fragments import (
    FragmentRef,
    FragmentStore,
    compress_bytes,
    decompress_bytes,
    open_fragment_url,
    parse_content_name,
)
from pyspark_gazette.protocol import pb, sha1sum_to_hex

CODECS = [pb.NONE, pb.GZIP, pb.ZSTANDARD, pb.SNAPPY]


def fill(gz, journal, sizes):
    """Append blocks of the given sizes; returns all content."""
    out = bytearray()
    for i, n in enumerate(sizes):
        block = (f"<{i}:" + "x" * n)[:n].encode()
        out += block
        assert gz.append(journal, block).status == pb.OK
    return bytes(out)


def store_of(gz):
    return FragmentStore(gz.store, file_root=gz.file_root)


@pytest.mark.parametrize("codec", CODECS, ids=[pb.CompressionCodec.Name(c) for c in CODECS])
def test_rolled_fragments_are_persisted_and_read_back(gz_store, codec):
    gz = gz_store
    j = gz.create(length=1024, codec=codec).name
    data = fill(gz, j, [600, 600, 600])  # the third append rolls [0, 1200)
    assert gz.broker.wait_persisted(30)
    frags = gz.fragments(j).fragments
    assert [(f.spec.begin, f.spec.end) for f in frags] == [(0, 1200), (1200, 1800)]
    persisted, local = frags[0].spec, frags[1].spec
    assert persisted.backing_store == gz.store and persisted.mod_time > 0
    assert persisted.compression_codec == codec
    assert sha1sum_to_hex(persisted.sum) == hashlib.sha1(data[:1200]).hexdigest()
    assert local.mod_time == 0 and local.backing_store == ""
    # Proxied read: the broker opens, decompresses and streams the persisted fragment.
    assert gz.content(j) == data
    # do_not_proxy: metadata with a fragment URL, then the stream ends.
    resps = gz.read(j, 100, do_not_proxy=True)
    assert len(resps) == 1
    meta = resps[0]
    assert meta.status == pb.OK and meta.offset == 100 and meta.fragment.begin == 0 and meta.fragment_url
    with open_fragment_url(meta.fragment_url, codec, file_root=gz.file_root) as f:
        assert decompress_bytes(codec, f.read()) == data[:1200]
    # do_not_proxy on the local spool streams its content.
    assert b"".join(r.content for r in gz.read(j, 1200, do_not_proxy=True)) == data[1200:]


def test_list_fragments_pages_and_filters(gz_store):
    gz = gz_store
    j = gz.create(length=1024, codec=pb.ZSTANDARD).name
    fill(gz, j, [1100] * 7)  # every append after the first rolls: 6 persisted + 1 local
    assert gz.broker.wait_persisted(30)
    full = gz.fragments(j)
    assert full.next_page_token == 0
    begins = [f.spec.begin for f in full.fragments]
    assert begins == [i * 1100 for i in range(7)]
    assert [f.spec.mod_time > 0 for f in full.fragments] == [True] * 6 + [False]
    # Pages of 3: the token is the begin of the next unscanned fragment.
    p1 = gz.fragments(j, page_limit=3)
    assert [f.spec.begin for f in p1.fragments] == begins[:3] and p1.next_page_token == begins[3]
    p2 = gz.fragments(j, page_limit=3, next_page_token=p1.next_page_token)
    assert [f.spec.begin for f in p2.fragments] == begins[3:6] and p2.next_page_token == begins[6]
    p3 = gz.fragments(j, page_limit=3, next_page_token=p2.next_page_token)
    assert [f.spec.begin for f in p3.fragments] == begins[6:] and p3.next_page_token == 0
    # Filters exactly as coded upstream.
    mod_times = [f.spec.mod_time for f in full.fragments[:6]]
    newest = max(mod_times)
    after = gz.fragments(j, begin_mod_time=newest + 1)
    assert [f.spec.mod_time for f in after.fragments] == [0]  # unpersisted ones always pass
    bounded = gz.fragments(j, end_mod_time=newest)
    assert len(bounded.fragments) == 6  # inclusive, and drops the unpersisted one
    assert gz.fragments(j, end_mod_time=min(mod_times) - 1).fragments == []
    for bad in (-1, 10001):
        with pytest.raises(grpc.RpcError) as err:
            gz.fragments(j, page_limit=bad)
        assert err.value.code() == grpc.StatusCode.UNKNOWN
    assert gz.fragments(j, page_limit=10000).next_page_token == 0
    assert gz.fragments("no/such/journal").status == pb.JOURNAL_NOT_FOUND


def test_signed_urls(gz_store):
    gz = gz_store
    j = gz.create(length=1024, codec=pb.GZIP).name
    data = fill(gz, j, [1100, 200])
    assert gz.broker.wait_persisted(30)
    resp = gz.fragments(j, signatureTTL=duration_pb2.Duration(seconds=120))
    persisted, local = resp.fragments
    assert local.signed_url == ""
    url = persisted.signed_url
    if gz.store.startswith("file:"):
        assert url.startswith("file:///store/prefix/" + j + "/")
    else:
        assert url.startswith("http") and "X-Amz-Signature" in url
    with open_fragment_url(url, pb.GZIP, file_root=gz.file_root) as f:
        assert decompress_bytes(pb.GZIP, f.read()) == data[:1100]
    assert all(f.signed_url == "" for f in gz.fragments(j).fragments)


def test_persisted_files_decompress_with_standard_tools(gz_store, tmp_path):
    gz = gz_store
    for codec, tool in ((pb.ZSTANDARD, "zstd"), (pb.GZIP, "gzip")):
        j = gz.create(length=1 << 20, codec=codec).name
        data = os.urandom(3 << 20)  # > 1 MiB so GZIP writes several members
        gz.append(j, data[: 2 << 20])
        gz.append(j, data[2 << 20 :])
        assert gz.broker.wait_persisted(30)
        frag = gz.fragments(j).fragments[0].spec
        ref = FragmentRef.from_proto(frag)
        with store_of(gz).open_raw(ref) as raw:
            path = tmp_path / ref.content_name
            path.write_bytes(raw.read())
        out = subprocess.run([tool, "-d", "-c", str(path)], check=True, capture_output=True).stdout
        begin, end, sum_hex, parsed_codec = parse_content_name(ref.content_name)
        assert (begin, end, parsed_codec) == (0, 2 << 20, codec)
        assert out == data[: 2 << 20]
        assert hashlib.sha1(out).hexdigest() == sum_hex


def test_path_postfix_template(gz_store):
    gz = gz_store
    template = 'date={{ .Spool.FirstAppendTime.Format "2006-01-02" }}/hour={{ .Spool.FirstAppendTime.Format "15" }}'
    j = gz.create(length=1024, codec=pb.SNAPPY, template=template).name
    before = datetime.now(timezone.utc)
    data = fill(gz, j, [1100, 10])
    after = datetime.now(timezone.utc)
    assert gz.broker.wait_persisted(30)
    frag = gz.fragments(j).fragments[0].spec
    expected = {f"date={t:%Y-%m-%d}/hour={t:%H}" for t in (before, after)}
    assert frag.path_postfix in expected
    ref = FragmentRef.from_proto(frag)
    assert f"/{frag.path_postfix}/" in store_of(gz).object_path(ref)
    gz.restart()  # listing finds it under the postfix again
    assert gz.fragments(j).fragments[0].spec.path_postfix == frag.path_postfix
    assert gz.content(j) == data


def test_index_is_rebuilt_from_stores_at_start(gz_store):
    gz = gz_store
    j = gz.create(length=1024, codec=pb.ZSTANDARD).name
    data = fill(gz, j, [700, 700, 50])
    gz.restart()  # a graceful stop rolls and persists the current spool too
    frags = gz.fragments(j).fragments
    assert [(f.spec.begin, f.spec.end) for f in frags] == [(0, 1400), (1400, 1450)]
    assert all(f.spec.mod_time > 0 for f in frags)
    assert gz.content(j) == data
    r = gz.append(j, b"more")
    assert (r.commit.begin, r.commit.end) == (1450, 1454)


def test_fragments_written_by_another_process_are_served(gz_store):
    gz = gz_store
    j = gz.create(codec=pb.ZSTANDARD, refresh=1).name
    content = b"written by someone else\n" * 10
    ref = FragmentRef(j, 0, len(content), hashlib.sha1(content).hexdigest(), pb.ZSTANDARD, backing_store=gz.store)
    store_of(gz).put(ref, io.BytesIO(compress_bytes(pb.ZSTANDARD, content)))
    # The refresher lists the store every refresh_interval (1 s here); wait for it to see it.
    deadline = time.monotonic() + 20
    while not gz.fragments(j).fragments and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gz.content(j) == content
    r = gz.append(j, b"next")
    assert (r.commit.begin, r.commit.end) == (len(content), len(content) + 4)


def test_fragment_store_health(gz_store):
    gz = gz_store
    r = gz.stub.FragmentStoreHealth(pb.FragmentStoreHealthRequest(fragment_store=gz.store))
    assert r.status == pb.OK and r.store_health_error == "" and r.header.etcd.revision > 0
    with pytest.raises(grpc.RpcError) as err:
        gz.stub.FragmentStoreHealth(pb.FragmentStoreHealthRequest(fragment_store="nope://x/"))
    assert err.value.code() == grpc.StatusCode.UNKNOWN


def test_failed_persists_are_retried_and_reported(gz, file_root):
    broken = os.path.join(file_root, "broken")
    with open(broken, "w") as f:
        f.write("a file where the store's directory should be")
    store = "file:///broken/"
    j = gz.create(length=1024, codec=pb.NONE, stores=[store]).name
    data = fill(gz, j, [1100, 10])
    assert not gz.broker.wait_persisted(1)
    health = gz.stub.FragmentStoreHealth(pb.FragmentStoreHealthRequest(fragment_store=store))
    assert health.status == pb.FRAGMENT_STORE_UNHEALTHY and health.store_health_error
    frags = gz.fragments(j).fragments
    assert [f.spec.mod_time for f in frags] == [0, 0]
    assert gz.content(j) == data  # still served from the local spool
    os.remove(broken)
    assert gz.broker.wait_persisted(30)
    assert gz.fragments(j).fragments[0].spec.mod_time > 0
    health = gz.stub.FragmentStoreHealth(pb.FragmentStoreHealthRequest(fragment_store=store))
    assert health.status == pb.OK
    assert gz.content(j) == data


def test_journals_without_stores_keep_fragments_local(gz):
    j = gz.create(length=1024, codec=pb.GZIP, stores=[]).name
    data = fill(gz, j, [1100, 1100, 10])
    gz.restart()
    frags = gz.fragments(j).fragments
    assert [(f.spec.begin, f.spec.end, f.spec.mod_time) for f in frags] == [
        (0, 1100, 0),
        (1100, 2200, 0),
        (2200, 2210, 0),
    ]
    assert gz.content(j) == data
    assert not os.listdir(gz.file_root)
    shutil.rmtree(gz.file_root, ignore_errors=True)
