"""Auth across implementations: tokens minted by Gazette's ``auth`` package (the Go peer) and by
``pyspark-gazette token``, presented to the embedded broker and to real Gazette brokers started
with ``--broker.auth-keys``. Both brokers must accept the same good tokens and refuse the same
bad ones (wrong key, expired, a missing capability, a journal outside the selector).
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys

import peer
import pytest

from journalspecs import make_spec
from pyspark_gazette.client import Change, ClientConfig, JournalClient
from pyspark_gazette.errors import AuthRefusedError, JournalNotFoundError

KEY = base64.b64encode(b"oracle-auth-test-key").decode()
WRONG_KEY = base64.b64encode(b"some other key").decode()
MINE, THEIRS = "auth/mine", "auth/theirs"


class AuthTarget:
    def __init__(self, kind: str, address: str, store_root: str):
        self.kind, self.address, self.store_root = kind, address, store_root

    def client(self, token: str) -> JournalClient:
        return JournalClient(ClientConfig(self.address, auth_token=token, file_root=self.store_root))


@pytest.fixture(scope="module")
def gazette_auth_cluster(tmp_path_factory):
    """One real Gazette broker (and etcd) requiring tokens signed with KEY, for this module."""
    import realgazette

    realgazette.require()
    with realgazette.GazetteCluster(tmp_path_factory.mktemp("gazette-auth"), 1, auth_keys=KEY) as cluster:
        cluster.apply_specs([make_spec(MINE), make_spec(THEIRS)])
        yield cluster


@pytest.fixture(params=["embedded", "gazette"])
def auth_target(request, tmp_path):
    if request.param == "gazette":
        cluster = request.getfixturevalue("gazette_auth_cluster")
        yield AuthTarget("gazette", cluster.address, cluster.file_root)
        return
    from pyspark_gazette.broker import EmbeddedBroker
    from pyspark_gazette.protocol.auth import ALL, mint_token

    store = str(tmp_path / "store")
    with EmbeddedBroker(str(tmp_path / "broker"), file_root=store, auth_keys=KEY) as b:
        with JournalClient(ClientConfig(b.address, auth_token=mint_token(KEY, ALL))) as c:
            c.apply([Change(expect_mod_revision=0, upsert=make_spec(name)) for name in (MINE, THEIRS)])
        yield AuthTarget("embedded", b.address, store)


def test_tokens_minted_by_gazettes_auth_package(auth_target):
    good = peer.token(KEY, "LIST,READ,APPEND", f"name:prefix={MINE}")
    with auth_target.client(good) as c:
        begin = c.append(MINE, b'{"go":1}\n').begin
        assert c.read_all(MINE)[begin:] == b'{"go":1}\n'
        assert [j.name for j in c.list_journals()] == [MINE]  # the selector hides the rest
        with pytest.raises(JournalNotFoundError, match=THEIRS):
            c.append(THEIRS, b"{}\n")
        with pytest.raises(JournalNotFoundError, match=THEIRS):
            c.read_all(THEIRS)
    with auth_target.client(peer.token(KEY, "LIST,READ", f"name:prefix={MINE}")) as c:
        with pytest.raises(AuthRefusedError, match="APPEND"):
            c.append(MINE, b"{}\n")
    with auth_target.client(peer.token(KEY, "READ,APPEND")) as c:
        with pytest.raises(AuthRefusedError, match="LIST"):
            c.list_journals()
    for bad in (peer.token(WRONG_KEY, "ALL"), peer.token(KEY, "ALL", expires="-1m")):
        with auth_target.client(bad) as c:
            for call in (c.list_journals, lambda: c.read_all(MINE), lambda: c.append(MINE, b"{}\n")):
                with pytest.raises(AuthRefusedError, match="UNAUTHENTICATED") as info:
                    call()
                assert bad not in str(info.value)


def cli_token(capability: str, selector: str | None = None) -> str:
    argv = [sys.executable, "-m", "pyspark_gazette.cli", "token", "--auth-keys", KEY, "--cap", capability]
    if selector:
        argv += ["--selector", selector]
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60).stdout.strip()


def test_spark_with_tokens_from_the_cli(spark, auth_target):
    def read(token, journal, **options):
        r = spark.read.format("gazette").option("broker.address", auth_target.address)
        r = r.option("broker.authToken", token).option("store.fileRoot", auth_target.store_root)
        for k, v in options.items():
            r = r.option(k, v)
        return r.option("journals", journal).load()

    def write(token, journal, rows):
        df = spark.createDataFrame([(json.dumps(r),) for r in rows], "value string")
        w = df.write.format("gazette").mode("append").option("broker.address", auth_target.address)
        w.option("broker.authToken", token).option("journal", journal).save()

    writer = cli_token("LIST|APPEND", f"name:prefix={MINE}")
    readonly = cli_token("LIST|READ", f"name:prefix={MINE}")
    write(writer, MINE, [{"spark": i} for i in range(20)])
    got = [json.loads(r.value) for r in read(readonly, MINE).collect()]
    assert sorted(d["spark"] for d in got if "spark" in d) == list(range(20))
    assert read(readonly, MINE, directReads="false").count() == len(got)

    with pytest.raises(Exception, match="APPEND") as info:
        write(readonly, MINE, [{"x": 1}])
    assert readonly not in str(info.value)
    with pytest.raises(Exception, match="LIST"):
        read(cli_token("READ", f"name:prefix={MINE}"), MINE).collect()
    with pytest.raises(Exception, match="does not cover them"):
        read(readonly, THEIRS).collect()
    with pytest.raises(Exception, match="UNAUTHENTICATED"):
        read(peer.token(WRONG_KEY, "ALL"), MINE).collect()


def test_every_refusal_is_unauthenticated(auth_target):
    """Gazette answers UNAUTHENTICATED for a missing capability and an Apply outside the token's
    selector as for a bad token; the embedded broker answers the same."""
    with auth_target.client(peer.token(KEY, "LIST,READ", f"name:prefix={MINE}")) as c:
        with pytest.raises(AuthRefusedError, match="APPEND") as info:
            c.append(MINE, b"{}\n")
        assert info.value.code == "UNAUTHENTICATED"
    with auth_target.client(peer.token(KEY, "APPLY", f"name:prefix={MINE}")) as c:
        with pytest.raises(AuthRefusedError, match="auth/new") as info:
            c.apply([Change(expect_mod_revision=0, upsert=make_spec("auth/new"))])
        assert info.value.code == "UNAUTHENTICATED"
    with auth_target.client(peer.token(KEY, "LIST")) as c:
        assert "auth/new" not in [j.name for j in c.list_journals()]


@pytest.mark.timeout(120)
def test_a_blocking_read_ends_cleanly_at_expiry_then_is_refused(auth_target):
    """At the token's ``exp`` a blocking Read ends with status OK (Gazette's deadline, which its
    Read treats as a close); the reader restarts it and, once the 5 s leeway has passed, is
    refused UNAUTHENTICATED. Nothing appended before is lost on the way."""
    import grpc

    from pyspark_gazette.protocol import pb, pb_grpc

    with auth_target.client(peer.token(KEY, "ALL")) as c:
        c.append(MINE, b'{"before":"expiry"}\n')
        head = c.read_all(MINE)
    short = peer.token(KEY, "READ", f"name:prefix={MINE}", expires="3s")
    with grpc.insecure_channel(auth_target.address.removeprefix("http://")) as channel:
        stream = pb_grpc.JournalStub(channel).Read(
            pb.ReadRequest(journal=MINE, offset=0, block=True),
            metadata=[("authorization", f"Bearer {short}")],
            timeout=60,
        )
        got = b"".join(r.content for r in stream)
        assert stream.code() == grpc.StatusCode.OK  # a clean end, not an error
    assert got == head

    short = peer.token(KEY, "READ", f"name:prefix={MINE}", expires="3s")
    read = bytearray()
    with auth_target.client(short) as c, c.retry_reader(MINE, 0, block=True) as r:
        with pytest.raises(AuthRefusedError, match="expired") as info:
            while True:
                read += r.read()
    assert info.value.code == "UNAUTHENTICATED" and bytes(read) == head


def test_a_token_past_exp_within_the_leeway_still_lists_and_reads(auth_target):
    """Accepted (5 s leeway) though its deadline is gone: List and Read serve what is there.
    (Gazette's Append and ListFragments then race their deadline against the work, so either
    outcome is Gazette's; the embedded broker answers DEADLINE_EXCEEDED: tests/integration.)"""
    import grpc

    from pyspark_gazette.protocol import pb, pb_grpc

    with auth_target.client(peer.token(KEY, "ALL")) as c:
        c.append(MINE, b'{"before":"late"}\n')
        content = c.read_all(MINE)
    md = [("authorization", f"Bearer {peer.token(KEY, 'ALL', expires='-2s')}")]
    with grpc.insecure_channel(auth_target.address.removeprefix("http://")) as channel:
        stub = pb_grpc.JournalStub(channel)
        assert MINE in [j.spec.name for r in stub.List(pb.ListRequest(), metadata=md) for j in r.journals]
        read = list(stub.Read(pb.ReadRequest(journal=MINE, block=True), metadata=md, timeout=60))
        assert read[0].status == pb.OK and b"".join(r.content for r in read) == content
