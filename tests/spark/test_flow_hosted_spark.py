"""Estuary-hosted collections, read through a LOCAL STAND-IN of Estuary's control plane.

The stand-in (tests/flow_standin.py) implements flowctl's ``/authorize/user/collection`` contract
and mints real broker tokens for an embedded broker that requires them; it is not Estuary's
service, which these tests never reach.
"""

from __future__ import annotations

import base64
import json
import time

import pytest
from spark_helpers import events, ndjson

from flow_standin import PG_API_KEY, ControlPlaneStandIn, access_token, refresh_token
from pyspark_gazette.protocol.auth import ALL, mint_token

KEY = base64.b64encode(b"hosted-collection-test-key").decode()
COLLECTION = "acmeCo/orders"
PREFIX = "acmeCo/orders/0123456789abcdef/"


@pytest.fixture
def hosted(tmp_path):
    from journalspecs import make_spec
    from pyspark_gazette.broker import EmbeddedBroker
    from pyspark_gazette.client import Change, ClientConfig, JournalClient

    with EmbeddedBroker(str(tmp_path / "broker"), file_root=str(tmp_path / "store"), auth_keys=KEY) as b:
        with JournalClient(ClientConfig(b.address, auth_token=mint_token(KEY, ALL))) as c:
            for region in ("eu", "us"):
                name = f"{PREFIX}region={region}/pivot=00"
                labels = {"estuary.dev/collection": COLLECTION, "estuary.dev/field/region": region}
                c.apply([Change(expect_mod_revision=0, upsert=make_spec(name, length=1024, labels=labels))])
                c.append(name, ndjson(events(20)))
                c.append(name, ndjson(events(20, 20)))
            # Another collection on the same brokers, which the user may not read.
            other = "acmeCo/secret/0123/pivot=00"
            labels = {"estuary.dev/collection": "acmeCo/secret"}
            c.apply([Change(expect_mod_revision=0, upsert=make_spec(other, length=1024, labels=labels))])
            c.append(other, ndjson(events(5)))
        assert b.wait_persisted(30)
        with ControlPlaneStandIn(b.address, KEY, broker_ttl=6) as cp:
            cp.collections = {COLLECTION: PREFIX, "acmeCo/secret": "acmeCo/secret/0123/"}
            cp.grants = {"alice": {COLLECTION}}
            cp.refresh_tokens = {"0a:1b": ("s3cret", "alice")}
            cp.store_root = str(tmp_path / "store")
            yield cp


def read(spark, cp, token, collection=COLLECTION, **options):
    r = spark.read.format("gazette").option("collection", collection).option("flow.agentUrl", cp.url)
    r = r.option("flow.authToken", token).option("store.fileRoot", cp.store_root)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_a_hosted_collection_is_read_with_its_authorization(spark, hosted):
    hosted.retry_next, hosted.fail_next = 1, 1  # "retry later", then a 503: both retried
    df = read(spark, hosted, access_token("alice"))
    rows = df.collect()
    assert sorted((r.region, json.loads(r.value)["id"]) for r in rows) == sorted(
        (region, i) for region in ("eu", "us") for i in range(40)
    )
    assert {r.journal for r in rows} == {f"{PREFIX}region=eu/pivot=00", f"{PREFIX}region=us/pivot=00"}
    path, body = next((p, b) for p, b in hosted.requests if p == "/authorize/user/collection")
    assert body["collection"] == COLLECTION and isinstance(body["startedUnix"], int)
    # Through the brokers only: the executors' Read RPCs carry the broker token too.
    assert read(spark, hosted, access_token("alice"), directReads="false").count() == 80


def test_a_refresh_token_is_exchanged_as_flowctl_does(spark, hosted):
    from pyspark_gazette.flow import hosted as module

    module._cache.clear()
    token = refresh_token("0a:1b", "s3cret")
    df = read(spark, hosted, token, **{"flow.pgUrl": hosted.url + "/rest/v1", "flow.pgApiKey": PG_API_KEY})
    assert df.count() == 80
    assert any(p == "/rest/v1/rpc/generate_access_token" for p, _ in hosted.requests)


def test_the_broker_token_is_renewed_before_it_expires(spark, hosted):
    from pyspark_gazette.client import JournalClient
    from pyspark_gazette.flow import hosted as module
    from pyspark_gazette.spark.options import ReadOptions

    module._cache.clear()
    opts = ReadOptions.parse(
        {"collection": COLLECTION, "flow.agentUrl": hosted.url, "flow.authToken": access_token("alice")}, env={}
    )
    assert opts.connection.address == hosted.broker_address
    assert PREFIX in (opts.selector or "")
    with JournalClient(opts.connection.client_config()) as client:
        assert len(client.list_journals(opts.selector)) == 2
        first = hosted.issued[-1]
        exp = module.jwt_claims(first)["exp"]
        while time.time() < exp:  # the first broker token has expired ...
            time.sleep(0.2)
        assert len(client.list_journals(opts.selector)) == 2  # ... and the same client still lists
    assert hosted.issued[-1] != first and hosted.authorizations() >= 2


@pytest.mark.parametrize(
    "token, collection, message",
    [
        (
            lambda: access_token("alice"),
            "acmeCo/secret",
            "HTTP 403: alice is not authorized to read collection acmeCo/secret",
        ),
        (lambda: access_token("alice", ttl=-10), COLLECTION, "HTTP 401: unauthenticated"),
        (lambda: access_token("mallory", key=base64.b64encode(b"forged").decode()), COLLECTION, "HTTP 401"),
    ],
)
def test_refusals_name_the_option_and_say_why(spark, hosted, token, collection, message):
    from pyspark_gazette.errors import OptionError
    from pyspark_gazette.spark.options import ReadOptions

    t = token()
    with pytest.raises(OptionError, match="flow.authToken") as e:
        ReadOptions.parse({"collection": collection, "flow.agentUrl": hosted.url, "flow.authToken": t}, env={})
    assert message in str(e.value) and t not in str(e.value)
