"""Real Gazette v0.103.0 persisting to Azure Blob (Azurite), read directly by the connector.

Gazette's ``azure://`` store has no endpoint setting: it always talks to
``https://<AZURE_ACCOUNT_NAME>.blob.core.windows.net``. The brokers get ``HTTPS_PROXY`` pointing
at a CONNECT proxy that tunnels every connection to Azurite, which serves HTTPS with a throwaway
certificate valid for ``devstoreaccount1.blob.core.windows.net`` (trusted via ``SSL_CERT_FILE``)
and takes the account from that production-style host name. The connector reaches the same
Azurite over plain HTTP through a forwarder (so executors need no test CA), and its bytes must
equal ``gazctl journals read``.
"""

from __future__ import annotations

import urllib.parse

import pytest

from pyspark_gazette.fragments import FragmentRef, FragmentStore
from pyspark_gazette.protocol import pb


@pytest.fixture(scope="module")
def gazette_on_azure(tmp_path_factory):
    import realgazette
    import store_emulators as se

    realgazette.require()
    se.require_azurite()
    tmp = tmp_path_factory.mktemp("real-azure")
    with se.azurite(str(tmp), tls=True) as blob:
        upstream = ("127.0.0.1", urllib.parse.urlsplit(blob.endpoint).port or 443)
        with se.ConnectProxy(upstream) as proxy, se.TlsForwarder(upstream, blob.ca_file) as forwarder:
            connection = se.azurite_connection_string(f"{forwarder.address}/{se.AZURITE_ACCOUNT}")
            se.azure_create_container(f"{forwarder.address}/{se.AZURITE_ACCOUNT}", "fragments")
            env = {
                "AZURE_ACCOUNT_NAME": se.AZURITE_ACCOUNT,
                "AZURE_ACCOUNT_KEY": se.AZURITE_KEY,
                "HTTPS_PROXY": proxy.address,
                "NO_PROXY": "127.0.0.1,localhost",
                "SSL_CERT_FILE": blob.ca_file,
            }
            with realgazette.GazetteCluster(tmp / "gazette", brokers=1, extra_env=env) as cluster:
                yield cluster, connection, proxy


@pytest.mark.parametrize("codec", [pb.ZSTANDARD, pb.GZIP_OFFLOAD_DECOMPRESSION])
def test_real_gazette_fragments_in_azure_read_directly(spark, gazette_on_azure, codec):
    from backends import Backend
    from journalspecs import make_spec

    cluster, connection, proxy = gazette_on_azure
    journal = f"real-azure/clicks-{pb.CompressionCodec.Name(codec).lower()}"
    store_url = "azure://fragments/real/"
    cluster.apply_specs([make_spec(journal, store=store_url, length=1024, codec=codec)])
    with cluster.client() as client:
        for batch in range(5):
            client.append(journal, b"".join(b'{"batch": %d, "n": %d}\n' % (batch, i) for i in range(60)))
    assert Backend("gazette", cluster.address, cluster.file_root, cluster=cluster).wait_persisted()
    assert proxy.tunnels > 0  # the brokers really went to Azurite

    expected = cluster.gazctl("journals", "read", "-l", f"name={journal}").stdout
    assert expected.count(b"\n") == 300

    with cluster.client() as client:
        persisted = [FragmentRef.from_proto(f.spec) for f in client.list_fragments(journal) if f.spec.mod_time]
    assert len(persisted) >= 3 and {r.backing_store for r in persisted} == {store_url}

    store = FragmentStore(store_url, storage_options={"connection_string": connection})
    assert [r.content_path for r in store.list(journal)] == [r.content_path for r in persisted]
    direct = b"".join(store.open_reader(r, verify_sha1=True).read() for r in persisted)
    assert expected.startswith(direct) and len(direct) == persisted[-1].end

    df = (
        spark.read.format("gazette")
        .option("broker.address", cluster.address)
        .option("store.azure.connectionString", connection)
        .load(journal)
    )
    rows = sorted((r.offset, r.value) for r in df.collect())
    assert b"".join(v.encode() + b"\n" for _, v in rows) == expected
