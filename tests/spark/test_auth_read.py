"""A Spark read with ``broker.authToken`` against a broker that requires tokens."""

from __future__ import annotations

import base64
import json

import pytest
from spark_helpers import events, ndjson

from pyspark_gazette.protocol.auth import ALL, LIST, READ, mint_token

KEY = base64.b64encode(b"spark-auth-test-key").decode()


@pytest.fixture
def auth_broker(tmp_path):
    from journalspecs import make_spec
    from pyspark_gazette.broker import EmbeddedBroker
    from pyspark_gazette.client import Change, ClientConfig, JournalClient

    with EmbeddedBroker(str(tmp_path / "broker"), file_root=str(tmp_path / "store"), auth_keys=KEY) as b:
        with JournalClient(ClientConfig(b.address, auth_token=mint_token(KEY, ALL))) as c:
            for name in ("auth/mine", "auth/theirs"):
                c.apply([Change(expect_mod_revision=0, upsert=make_spec(name, length=1024))])
                c.append(name, ndjson(events(30)))
                c.append(name, ndjson(events(30, 30)))  # rolls and persists the first fragment
        assert b.wait_persisted(30)
        b.store_root = str(tmp_path / "store")
        yield b


def read(spark, broker, token, **options):
    r = spark.read.format("gazette").option("broker.address", broker.address).option("broker.authToken", token)
    r = r.option("store.fileRoot", broker.store_root)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_read_with_a_token_covering_the_journal(spark, auth_broker):
    token = mint_token(KEY, LIST | READ, "name:prefix=auth/mine")
    rows = read(spark, auth_broker, token, journals="auth/mine").collect()
    assert sorted(json.loads(r.value)["id"] for r in rows) == list(range(60))
    # Through the brokers only (no direct fragment reads), the executors' Read RPCs carry it too.
    rows = read(spark, auth_broker, token, journals="auth/mine", directReads="false").collect()
    assert len(rows) == 60
    # A selector read sees only what the token covers.
    rows = read(spark, auth_broker, token, selector="name:prefix=auth/").select("journal").distinct().collect()
    assert [r.journal for r in rows] == ["auth/mine"]


def test_refused_reads_say_why(spark, auth_broker):
    wrong = mint_token(base64.b64encode(b"not the key").decode(), ALL)
    with pytest.raises(Exception, match="UNAUTHENTICATED.*signature does not verify") as info:
        read(spark, auth_broker, wrong, journals="auth/mine").collect()
    assert wrong not in str(info.value)
    with pytest.raises(Exception, match="UNAUTHENTICATED.*lacks the LIST capability"):
        read(spark, auth_broker, mint_token(KEY, READ), journals="auth/mine").collect()
    other = mint_token(KEY, LIST | READ, "name=auth/mine")
    with pytest.raises(Exception, match="not found: 'auth/theirs' \\(or broker.authToken does not cover them\\)"):
        read(spark, auth_broker, other, journals="auth/theirs").collect()
