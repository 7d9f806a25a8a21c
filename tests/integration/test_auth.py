"""Bearer-token auth of the embedded broker, over real gRPC (facts sheet section 1, "Auth").

A broker started with ``auth_keys`` verifies every RPC's token: UNAUTHENTICATED for a missing,
bad, expired or future token, for a missing capability and for an Apply outside the token's
selector (Gazette's one code for every refusal); JOURNAL_NOT_FOUND for Read/Append/ListFragments of a journal outside it; List
returns the intersection of the request's and the token's selectors.
"""

from __future__ import annotations

import base64
import time

import grpc
import pytest

from journalspecs import make_spec
from pyspark_gazette.client import ClientConfig, JournalClient
from pyspark_gazette.errors import AuthError, AuthRefusedError, JournalNotFoundError
from pyspark_gazette.protocol import pb, pb_grpc
from pyspark_gazette.protocol.auth import ALL, APPEND, APPLY, LIST, READ, REPLICATE, mint_token

KEY = base64.b64encode(b"integration-test-key").decode()
OTHER_KEY = base64.b64encode(b"some-other-key").decode()
STORE = "file:///fragments/"

#: The capability each RPC needs (Gazette's VerifiedJournalServer).
NEEDS = {
    "List": LIST,
    "Apply": APPLY,
    "Read": READ,
    "Append": APPEND,
    "ListFragments": READ,
    "FragmentStoreHealth": READ,
    "Replicate": REPLICATE,
}


def spec(name: str, **labels: str) -> pb.JournalSpec:
    return make_spec(name, store=STORE, codec=pb.NONE, content_type="", labels=labels, refresh_seconds=60)


class AuthBroker:
    def __init__(self, broker):
        self.broker = broker
        self.channel = grpc.insecure_channel(broker.target)
        self.stub = pb_grpc.JournalStub(self.channel)
        self.admin = mint_token(KEY, ALL)
        changes = [
            pb.ApplyRequest.Change(expect_mod_revision=0, upsert=spec("acme/a", app="x")),
            pb.ApplyRequest.Change(expect_mod_revision=0, upsert=spec("acme/b", app="y")),
            pb.ApplyRequest.Change(expect_mod_revision=0, upsert=spec("other/c", app="x")),
        ]
        assert self.stub.Apply(pb.ApplyRequest(changes=changes), metadata=md(self.admin)).status == pb.OK
        for name in ("acme/a", "other/c"):
            assert self.append(name, b"hello\n", self.admin).status == pb.OK

    def append(self, journal: str, data: bytes, token: str | None) -> pb.AppendResponse:
        msgs = [pb.AppendRequest(journal=journal), pb.AppendRequest(content=data), pb.AppendRequest()]
        return self.stub.Append(iter(msgs), metadata=md(token))

    def content(self, journal: str) -> bytes:
        resps = self.stub.Read(pb.ReadRequest(journal=journal, block=False), metadata=md(self.admin))
        return b"".join(r.content for r in resps)

    def names(self, token: str, selector: str | None = None) -> list[str]:
        from pyspark_gazette.protocol.labels import parse_selector

        request = pb.ListRequest(selector=parse_selector(selector) if selector else None)
        return sorted(j.spec.name for r in self.stub.List(request, metadata=md(token)) for j in r.journals)


def md(token: str | None) -> list[tuple[str, str]] | None:
    return [("authorization", f"Bearer {token}")] if token else None


@pytest.fixture
def ab(make_broker):
    h = AuthBroker(make_broker(auth_keys=KEY))
    yield h
    h.channel.close()


def call(ab: AuthBroker, rpc: str, token: str | None, journal: str = "acme/a"):
    """One well-formed call of ``rpc`` with ``token``; returns the (first) response."""
    s, m = ab.stub, md(token)
    if rpc == "List":
        return list(s.List(pb.ListRequest(), metadata=m))[-1]
    if rpc == "Apply":
        change = pb.ApplyRequest.Change(expect_mod_revision=-1, upsert=spec(journal, app="x"))
        return s.Apply(pb.ApplyRequest(changes=[change]), metadata=m)
    if rpc == "Read":
        return list(s.Read(pb.ReadRequest(journal=journal, block=False), metadata=m))[0]
    if rpc == "Append":
        return ab.append(journal, b"more\n", token)
    if rpc == "ListFragments":
        return s.ListFragments(pb.FragmentsRequest(journal=journal), metadata=m)
    if rpc == "FragmentStoreHealth":
        return s.FragmentStoreHealth(pb.FragmentStoreHealthRequest(fragment_store=STORE), metadata=m)
    assert rpc == "Replicate"
    return list(s.Replicate(iter([pb.ReplicateRequest()]), metadata=m))


def refused(ab: AuthBroker, rpc: str, token: str | None, journal: str = "acme/a") -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call(ab, rpc, token, journal)
    return info.value


# ------------------------------------------------------------------------------- allowed


@pytest.mark.parametrize("rpc", [r for r in NEEDS if r != "Replicate"])
def test_each_rpc_is_allowed_with_exactly_its_capability(ab, rpc):
    token = mint_token(KEY, NEEDS[rpc], "name:prefix=acme/")
    resp = call(ab, rpc, token)
    assert resp.status == pb.OK, resp
    if rpc == "Append":
        assert ab.content("acme/a") == b"hello\nmore\n"
    if rpc == "Read":
        assert resp.offset == 0
        assert b"".join(r.content for r in ab.stub.Read(pb.ReadRequest(journal="acme/a"), metadata=md(token))) == (
            b"hello\n"
        )


def test_replicate_passes_auth_with_replicate_and_is_then_unimplemented(ab):
    err = refused(ab, "Replicate", mint_token(KEY, REPLICATE))
    assert err.code() == grpc.StatusCode.UNIMPLEMENTED


# ------------------------------------------------------------------------------- tokens


@pytest.mark.parametrize("rpc", list(NEEDS))
def test_missing_token_is_unauthenticated(ab, rpc):
    err = refused(ab, rpc, None)
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "missing" in err.details()


@pytest.mark.parametrize("rpc", ["List", "Read", "Append", "Apply"])
def test_bad_signature_is_unauthenticated_and_not_echoed(ab, rpc):
    token = mint_token(OTHER_KEY, ALL)
    err = refused(ab, rpc, token)
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "signature" in err.details()
    assert token.split(".")[2] not in err.details()
    if rpc == "Append":
        assert ab.content("acme/a") == b"hello\n"


def test_not_a_bearer_header_is_unauthenticated(ab):
    with pytest.raises(grpc.RpcError) as info:
        list(ab.stub.List(pb.ListRequest(), metadata=[("authorization", f"Basic {ab.admin}")]))
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_expired_beyond_leeway_is_refused_and_within_leeway_allowed(ab):
    now = time.time()
    expired = mint_token(KEY, ALL, ttl=60, now=now - 80)  # exp 20 s ago
    err = refused(ab, "List", expired)
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED and "expired" in err.details()
    within = mint_token(KEY, ALL, ttl=60, now=now - 62)  # exp 2 s ago, leeway 5 s
    assert call(ab, "List", within).status == pb.OK
    # Accepted, but the call's deadline (exp) is gone: what does not stream fails as Gazette's.
    for rpc in ("Append", "ListFragments"):
        assert refused(ab, rpc, within).code() == grpc.StatusCode.DEADLINE_EXCEEDED


def test_iat_in_the_future_is_refused(ab):
    future = mint_token(KEY, ALL, ttl=3600, now=time.time() + 120)
    err = refused(ab, "Read", future)
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED and "future" in err.details()


def test_a_second_key_verifies_tokens_too(make_broker):
    broker = make_broker(auth_keys=f"{OTHER_KEY},{KEY}")
    with grpc.insecure_channel(broker.target) as ch:
        stub = pb_grpc.JournalStub(ch)
        for key in (KEY, OTHER_KEY):
            assert list(stub.List(pb.ListRequest(), metadata=md(mint_token(key, LIST))))[0].status == pb.OK


def test_allow_missing_key_admits_calls_without_a_token_but_checks_given_ones(make_broker):
    broker = make_broker(auth_keys=f"{KEY} AA==")
    with grpc.insecure_channel(broker.target) as ch:
        stub = pb_grpc.JournalStub(ch)
        assert list(stub.List(pb.ListRequest()))[0].status == pb.OK
        with pytest.raises(grpc.RpcError) as info:
            list(stub.List(pb.ListRequest(), metadata=md(mint_token(OTHER_KEY, LIST))))
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED


# ------------------------------------------------------------------------------- capabilities


@pytest.mark.parametrize("rpc", list(NEEDS))
def test_wrong_capability_is_unauthenticated_naming_it(ab, rpc):
    token = mint_token(KEY, ALL & ~NEEDS[rpc])
    err = refused(ab, rpc, token)
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED
    name = {LIST: "LIST", APPLY: "APPLY", READ: "READ", APPEND: "APPEND", REPLICATE: "REPLICATE"}[NEEDS[rpc]]
    assert f"lacks the {name} capability" in err.details()
    assert ab.content("acme/a") == b"hello\n"  # nothing was appended


# ------------------------------------------------------------------------------- journals


@pytest.mark.parametrize("rpc", ["Read", "Append", "ListFragments"])
def test_journal_outside_the_selector_is_not_found_like_a_missing_one(ab, rpc):
    token = mint_token(KEY, ALL, "name:prefix=acme/")
    outside = call(ab, rpc, token, journal="other/c")
    missing = call(ab, rpc, token, journal="acme/missing")
    assert outside.status == missing.status == pb.JOURNAL_NOT_FOUND
    assert not getattr(outside, "content", b"")
    assert ab.content("other/c") == b"hello\n"


def test_label_selector_claims_cover_by_labels(ab):
    token = mint_token(KEY, READ | APPEND, "app=x")
    assert call(ab, "Read", token, journal="other/c").status == pb.OK  # app=x, any name
    assert call(ab, "Read", token, journal="acme/b").status == pb.JOURNAL_NOT_FOUND  # app=y
    assert call(ab, "Append", token, journal="acme/b").status == pb.JOURNAL_NOT_FOUND
    assert ab.content("acme/b") == b""


def test_apply_outside_the_selector_is_denied_and_changes_nothing(ab):
    token = mint_token(KEY, APPLY | LIST, "name:prefix=acme/")
    err = refused(ab, "Apply", token, journal="other/new")
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED and "'other/new'" in err.details()
    # A transaction with one covered and one uncovered change is refused as a whole.
    changes = [
        pb.ApplyRequest.Change(expect_mod_revision=0, upsert=spec("acme/new", app="x")),
        pb.ApplyRequest.Change(expect_mod_revision=-1, delete="other/c"),
    ]
    with pytest.raises(grpc.RpcError) as info:
        ab.stub.Apply(pb.ApplyRequest(changes=changes), metadata=md(token))
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED and "'other/c'" in info.value.details()
    assert ab.names(ab.admin) == ["acme/a", "acme/b", "other/c"]
    # Inside the selector, Apply works.
    assert call(ab, "Apply", token, journal="acme/new").status == pb.OK
    assert "acme/new" in ab.names(token)


def test_apply_upsert_is_matched_with_the_new_labels(ab):
    token = mint_token(KEY, APPLY, "app=x")
    assert call(ab, "Apply", token, journal="acme/a").status == pb.OK  # stays app=x
    relabel = pb.ApplyRequest.Change(expect_mod_revision=-1, upsert=spec("acme/a", app="y"))
    with pytest.raises(grpc.RpcError) as info:
        ab.stub.Apply(pb.ApplyRequest(changes=[relabel]), metadata=md(token))
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED and "'acme/a'" in info.value.details()


def test_list_returns_the_intersection_of_request_and_token_selectors(ab):
    acme = mint_token(KEY, LIST, "name:prefix=acme/")
    assert ab.names(acme) == ["acme/a", "acme/b"]
    assert ab.names(acme, "app=x") == ["acme/a"]
    assert ab.names(acme, "name=other/c") == []
    assert ab.names(mint_token(KEY, LIST, "app=x,!nothing")) == ["acme/a", "other/c"]
    assert ab.names(ab.admin) == ["acme/a", "acme/b", "other/c"]


def test_list_watch_is_filtered_by_the_token(ab):
    token = mint_token(KEY, LIST, "app=y")
    stream = ab.stub.List(pb.ListRequest(watch=True), metadata=md(token), timeout=30)
    try:
        first = next(stream)
        assert [j.spec.name for j in first.journals] == ["acme/b"]
    finally:
        stream.cancel()


# ------------------------------------------------------------------------------- expiry


def test_a_blocking_read_ends_cleanly_when_its_token_expires(ab):
    # exp 4 s ago: accepted within the 5 s leeway; what is there is served, and the read ends
    # cleanly instead of blocking (Gazette's deadline at exp, which its Read treats as a close).
    token = mint_token(KEY, READ, ttl=60, now=time.time() - 64)
    stream = ab.stub.Read(pb.ReadRequest(journal="acme/a", offset=0, block=True), metadata=md(token), timeout=60)
    assert b"".join(resp.content for resp in stream) == b"hello\n"
    assert stream.code() == grpc.StatusCode.OK


# ------------------------------------------------------------------------------- our client


def test_journal_client_sends_its_token(ab):
    token = mint_token(KEY, LIST | READ | APPEND, "name:prefix=acme/")
    with JournalClient(ClientConfig(ab.broker.address, auth_token=token)) as c:
        assert [i.name for i in c.list_journals()] == ["acme/a", "acme/b"]
        c.append("acme/b", b"from the client\n")
        with c.retry_reader("acme/b", 0, block=False) as r:
            assert r.read() == b"from the client\n"
        with pytest.raises(JournalNotFoundError):
            c.append("other/c", b"nope\n")
    assert ab.content("other/c") == b"hello\n"


def test_journal_client_refusals_are_auth_errors_without_the_token(ab):
    bad = mint_token(OTHER_KEY, ALL, ttl=600)
    with JournalClient(ClientConfig(ab.broker.address, auth_token=bad)) as c:
        with pytest.raises(AuthRefusedError) as info:
            c.list_journals()
    assert isinstance(info.value, AuthError) and not info.value.retriable
    assert info.value.code == "UNAUTHENTICATED"
    assert bad not in str(info.value) and bad.split(".")[2] not in repr(info.value)
    weak = mint_token(KEY, READ)
    with JournalClient(ClientConfig(ab.broker.address, auth_token=weak)) as c:
        with pytest.raises(AuthRefusedError, match="UNAUTHENTICATED.*APPEND"):
            c.append("acme/a", b"x\n")


def test_each_call_is_judged_by_its_own_token(ab):
    tokens = [mint_token(KEY, LIST, f"name=acme/{n}") for n in ("a", "b")]
    for _ in range(20):
        assert ab.names(tokens[0]) == ["acme/a"]
        assert ab.names(tokens[1]) == ["acme/b"]


def test_append_service_fails_at_once_on_a_refused_token(ab):
    """The async append service (used by the Spark writer) treats auth refusals as terminal."""
    weak = mint_token(KEY, READ)
    with JournalClient(ClientConfig(ab.broker.address, auth_token=weak)) as c:
        service = c.append_service
        aa = service.append("acme/a", b"refused\n")
        with pytest.raises(AuthRefusedError, match="UNAUTHENTICATED.*APPEND"):
            aa.wait(timeout=30)
        with pytest.raises(AuthRefusedError):  # the journal's chain keeps the terminal error
            service.append("acme/a", b"again\n")
    assert ab.content("acme/a") == b"hello\n"
