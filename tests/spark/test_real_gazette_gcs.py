"""Real Gazette v0.103.0 persisting to GCS (fake-gcs-server), read directly by the connector.

Gazette's Go GCS client follows ``STORAGE_EMULATOR_HOST``, but signs ``https://`` URLs for it
and fetches one in its store health check, so the emulator also serves HTTPS with a throwaway
self-signed certificate the brokers trust through ``SSL_CERT_FILE``. A service-account key
(generated here) satisfies Gazette's GCS store, which insists on one for signing. The connector
reads the same objects over the emulator's plain-HTTP port: its bytes must equal what
``gazctl journals read`` returns, through our FragmentStore and through a Spark batch read.
"""

from __future__ import annotations

import os

import pytest

from pyspark_gazette.fragments import FragmentRef, FragmentStore
from pyspark_gazette.protocol import pb

JOURNAL = "real-gcs/clicks"


@pytest.fixture(scope="module")
def gazette_on_gcs(tmp_path_factory):
    import realgazette
    import store_emulators

    realgazette.require()
    store_emulators.require_fake_gcs()
    tmp = tmp_path_factory.mktemp("real-gcs")
    key = store_emulators.write_service_account_key(str(tmp))
    with store_emulators.fake_gcs_server(str(tmp), tls=True) as gcs:
        store_emulators.gcs_create_bucket(gcs.endpoint, "gazette-fragments")
        env = {
            "STORAGE_EMULATOR_HOST": gcs.tls_endpoint,
            "GOOGLE_APPLICATION_CREDENTIALS": key,
            "SSL_CERT_FILE": gcs.ca_file,
        }
        with realgazette.GazetteCluster(tmp / "gazette", brokers=1, extra_env=env) as cluster:
            yield cluster, gcs


def gazctl_read(cluster, journal: str, ca_file: str) -> bytes:
    """``gazctl journals read`` of ``journal`` (non-blocking: up to the write head), trusting the
    emulator's certificate in case gazctl fetches fragment URLs itself."""
    old = os.environ.get("SSL_CERT_FILE")
    os.environ["SSL_CERT_FILE"] = ca_file
    try:
        return cluster.gazctl("journals", "read", "-l", f"name={journal}").stdout
    finally:
        if old is None:
            del os.environ["SSL_CERT_FILE"]
        else:
            os.environ["SSL_CERT_FILE"] = old


@pytest.mark.parametrize("codec", [pb.GZIP, pb.ZSTANDARD, pb.SNAPPY, pb.GZIP_OFFLOAD_DECOMPRESSION])
def test_real_gazette_fragments_in_gcs_read_directly(spark, gazette_on_gcs, codec):
    from backends import Backend
    from journalspecs import make_spec

    cluster, gcs = gazette_on_gcs
    journal = f"{JOURNAL}-{pb.CompressionCodec.Name(codec).lower()}"
    store_url = "gs://gazette-fragments/real/"
    cluster.apply_specs([make_spec(journal, store=store_url, length=1024, codec=codec)])
    with cluster.client() as client:
        for batch in range(5):
            client.append(journal, b"".join(b'{"batch": %d, "n": %d}\n' % (batch, i) for i in range(60)))
    assert Backend("gazette", cluster.address, cluster.file_root, cluster=cluster).wait_persisted()

    expected = gazctl_read(cluster, journal, gcs.ca_file)
    assert expected.count(b"\n") == 300

    with cluster.client() as client:
        listed = [FragmentRef.from_proto(f.spec) for f in client.list_fragments(journal)]
    persisted = [r for r in listed if r.is_persisted]
    assert len(persisted) >= 3 and {r.backing_store for r in persisted} == {store_url}
    assert {r.codec for r in persisted} == {codec}

    # Gazette's objects, byte for byte, read by our store code over the emulator's HTTP port.
    store = FragmentStore(store_url, storage_options={"endpoint_url": gcs.endpoint})
    assert [r.content_path for r in store.list(journal)] == [r.content_path for r in persisted]
    direct = b"".join(store.open_reader(r, verify_sha1=True).read() for r in persisted)
    assert expected.startswith(direct) and len(direct) == persisted[-1].end

    # And by Spark: executors open the persisted fragments in the store, the tail via the broker.
    df = (
        spark.read.format("gazette")
        .option("broker.address", cluster.address)
        .option("store.gcs.endpoint", gcs.endpoint)
        .load(journal)
    )
    rows = sorted((r.offset, r.value) for r in df.collect())
    assert b"".join(v.encode() + b"\n" for _, v in rows) == expected
