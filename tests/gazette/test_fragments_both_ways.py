"""Fragment files both ways between real Gazette v0.103.0 and this project.

1. Fragments real Gazette persists, in every codec (NONE, GZIP, ZSTANDARD, SNAPPY on ``file://``;
   GZIP_OFFLOAD_DECOMPRESSION and ZSTANDARD on S3, moto's server), are read directly from their
   stores by our client, byte for byte what ``gazctl journals read`` returns. (Spark's direct
   reads of the same: tests/spark/test_real_gazette_fragments.py.)
2. Fragments our embedded broker persists into a store are indexed and served by real Gazette
   brokers pointed at the same store: ``gazctl journals read`` returns the same bytes and
   ``gazctl journals fragments`` lists the same names and SHA1 sums as our ListFragments did.
"""

from __future__ import annotations

import json
import pathlib
import time
import uuid

import pytest

import realfragments
from journalspecs import make_spec
from pyspark_gazette.fragments.names import FragmentRef, content_name
from pyspark_gazette.protocol import pb

pytestmark = pytest.mark.slow


def test_gazette_fragments_in_every_codec_are_read_directly(gazette_cluster, s3_server, s3_bucket):
    specs = realfragments.codec_specs(s3_server, s3_bucket)
    content = realfragments.write(gazette_cluster, specs)
    with gazette_cluster.client() as c:
        for spec in specs:
            name = spec.name
            frags = c.list_fragments(name)
            persisted = [f for f in frags if f.spec.mod_time]
            assert len(persisted) >= 2, name
            assert all(f.spec.compression_codec == spec.fragment.compression_codec for f in persisted), name
            assert all(f.spec.backing_store == spec.fragment.stores[0] for f in persisted), name
            via_gazctl = realfragments.gazctl_read(gazette_cluster, name)
            assert via_gazctl == content[name], name
            with c.retry_reader(name, 0, end_offset=len(content[name])) as r:
                got = b"".join(iter(r.read, b""))
                direct = r.direct_bytes
            assert got == via_gazctl, name
            # Every persisted fragment came straight from the store, not through a broker.
            assert direct == sum(f.spec.end - f.spec.begin for f in persisted), name


def _gazctl_fragments(cluster, journal: str) -> list[dict]:
    out = cluster.gazctl("journals", "fragments", "-l", f"name={journal}", "--format", "json").stdout
    return [json.loads(line)["spec"] for line in out.splitlines()]


def _sum_hex(s: dict) -> str:
    parts = s.get("sum", {})
    return (
        int(parts.get("part1", 0)).to_bytes(8, "big")
        + int(parts.get("part2", 0)).to_bytes(8, "big")
        + int(parts.get("part3", 0)).to_bytes(4, "big")
    ).hex()


@pytest.mark.parametrize("codec", [pb.NONE, pb.GZIP, pb.ZSTANDARD, pb.SNAPPY], ids=pb.CompressionCodec.Name)
def test_embedded_fragments_are_served_by_gazette(gazette_cluster, tmp_path, codec):
    from pyspark_gazette.broker import EmbeddedBroker
    from pyspark_gazette.client import Change, ClientConfig, JournalClient

    # The embedded broker persists into the real cluster's file root.
    prefix = f"emb-{uuid.uuid4().hex[:8]}"
    spec = make_spec(f"{prefix}/journal", store=f"file:///{prefix}/", length=1024, codec=codec)
    content = b""
    with EmbeddedBroker(str(tmp_path / "embedded"), file_root=gazette_cluster.file_root) as broker:
        with JournalClient(ClientConfig(broker.address, file_root=gazette_cluster.file_root)) as c:
            c.apply([Change(expect_mod_revision=0, upsert=spec)])
            for b in range(6):
                chunk = realfragments.lines(spec.name, b)
                c.append(spec.name, chunk)
                content += chunk
            assert broker.wait_persisted(30)
            ours = c.list_fragments(spec.name)
    # Stopping the broker persisted its open spool too: every fragment listed is now in the store.
    assert len(ours) >= 3 and ours[-1].spec.end == len(content)
    expected = sorted(FragmentRef.from_proto(f.spec).content_name for f in ours)
    stored = sorted(p.name for p in pathlib.Path(gazette_cluster.file_root, prefix, spec.name).iterdir())
    assert stored == expected

    # The same journal on the real cluster: its brokers index the store and serve it.
    gazette_cluster.apply_specs([spec])
    try:
        deadline = time.monotonic() + realfragments.PERSIST_TIMEOUT
        while True:
            theirs = _gazctl_fragments(gazette_cluster, spec.name)
            if len(theirs) >= len(ours) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        # gazctl's JSON is Go's encoding of pb.Fragment: zero fields omitted, the codec a number.
        names = [content_name(f.get("begin", 0), f["end"], _sum_hex(f), f["compression_codec"]) for f in theirs]
        assert sorted(names) == expected
        assert [_sum_hex(f) for f in theirs] == [FragmentRef.from_proto(f.spec).sum for f in ours]
        assert all(f["backing_store"] == spec.fragment.stores[0] and f.get("mod_time") for f in theirs)
        assert realfragments.gazctl_read(gazette_cluster, spec.name) == content
    finally:
        gazette_cluster.delete_journals(f"name={spec.name}")
