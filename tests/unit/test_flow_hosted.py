"""flow/hosted.py: the /authorize/user/collection client, with a scripted HTTP post."""

from __future__ import annotations

import base64
import json

import pytest

from pyspark_gazette.errors import FlowAuthorizationError
from pyspark_gazette.flow import hosted
from pyspark_gazette.flow.hosted import Authorization, BrokerToken, HostedAuth, authorize, broker_authorization


def jwt(**claims) -> str:
    enc = lambda d: base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")  # noqa: E731
    return f"{enc({'alg': 'HS256'})}.{enc(claims)}.c2lnbmF0dXJl"


ACCESS = jwt(sub="user", exp=10_000)
H = HostedAuth("http://agent", "acme/orders", ACCESS)


class Script:
    """A fake ``post``: answers in order, recording (url, body, headers)."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls: list[tuple[str, dict, dict]] = []

    def __call__(self, url, body, headers, timeout):
        self.calls.append((url, json.loads(body), headers))
        a = self.answers.pop(0)
        if isinstance(a, Exception):
            raise a
        status, doc = a
        return status, (json.dumps(doc) if isinstance(doc, dict) else doc).encode()


def ok(prefix="acme/orders/g1/", exp=2_000.0):
    return 200, {"brokerAddress": "http://broker:8080", "brokerToken": jwt(exp=exp), "journalNamePrefix": prefix}


def test_request_and_answer_follow_flowctls_contract():
    post, slept = Script(ok()), []
    a = authorize(H, post=post, now=lambda: 1_000.0, sleep=slept.append)
    assert (a.broker_address, a.journal_name_prefix, a.expires_at) == ("http://broker:8080", "acme/orders/g1/", 2_000.0)
    url, body, headers = post.calls[0]
    assert url == "http://agent/authorize/user/collection"
    assert body == {"collection": "acme/orders", "startedUnix": 1000}
    assert headers["Authorization"] == f"Bearer {ACCESS}" and not slept


def test_retry_millis_and_server_errors_are_retried():
    post, slept = Script((200, {"retryMillis": 250}), (503, "busy"), OSError("refused"), ok()), []
    a = authorize(H, post=post, now=lambda: 1_000.0, sleep=slept.append)
    assert a.broker_address == "http://broker:8080"
    assert slept == [0.25, 1.0, 2.0]
    # startedUnix stays the operation's start across retries, as flowctl sends it.
    assert {c[1]["startedUnix"] for c in post.calls} == {1000}


@pytest.mark.parametrize("status", [400, 401, 403, 404])
def test_client_errors_are_surfaced_with_the_answer(status):
    post = Script((status, "alice@example.com is not authorized to read collection acme/orders"))
    with pytest.raises(FlowAuthorizationError, match=f"'acme/orders'.*HTTP {status}: alice@example.com is not") as e:
        authorize(H, post=post, now=lambda: 0.0, sleep=lambda s: None)
    assert ACCESS not in str(e.value)


def test_persistent_server_errors_give_up():
    post = Script(*[(500, "boom")] * 5)
    with pytest.raises(FlowAuthorizationError, match="failed 5 times.*HTTP 500"):
        authorize(H, post=post, now=lambda: 0.0, sleep=lambda s: None)


def test_endless_retry_millis_gives_up():
    post = Script(*[(200, {"retryMillis": 100_000})] * 4)
    with pytest.raises(FlowAuthorizationError, match="still asked to retry"):
        authorize(H, post=post, now=lambda: 0.0, sleep=lambda s: None)


def test_refresh_tokens_are_exchanged_for_access_tokens():
    refresh = base64.b64encode(json.dumps({"id": "0a:1b", "secret": "s3cret"}).encode()).decode()
    h = HostedAuth("http://agent", "acme/orders", refresh, "http://pg/rest/v1", "anon-key")
    fresh = jwt(sub="user", exp=5_000)
    post = Script((200, {"access_token": fresh}), ok())
    authorize(h, post=post, now=lambda: 1_000.0, sleep=lambda s: None)
    url, body, headers = post.calls[0]
    assert url == "http://pg/rest/v1/rpc/generate_access_token"
    assert body == {"refresh_token_id": "0a:1b", "secret": "s3cret"} and headers["apikey"] == "anon-key"
    assert post.calls[1][2]["Authorization"] == f"Bearer {fresh}"
    hosted._access.clear()


def test_a_refresh_token_needs_postgrest():
    refresh = base64.b64encode(json.dumps({"id": "1", "secret": "s"}).encode()).decode()
    with pytest.raises(FlowAuthorizationError, match="flow.pgUrl"):
        authorize(HostedAuth("http://agent", "c/d", refresh), post=Script(), now=lambda: 0.0)
    with pytest.raises(FlowAuthorizationError, match="neither an access token"):
        authorize(
            HostedAuth("http://agent", "c/d", "not-base64-json", "http://pg", "k"), post=Script(), now=lambda: 0.0
        )


def test_authorizations_are_renewed_before_they_expire():
    assert not Authorization("a", "t", "p", expires_at=4_600, issued_at=1_000).due(3_000)
    assert Authorization("a", "t", "p", expires_at=4_600, issued_at=1_000).due(4_400)  # 5 min cap
    assert Authorization("a", "t", "p", expires_at=1_008, issued_at=1_000).due(1_006.5)  # a quarter left
    clock = [1_000.0]
    post = Script(ok(exp=1_008), ok(exp=1_016))
    h = HostedAuth("http://agent", "acme/renewed", ACCESS)
    first = broker_authorization(h, post=post, now=lambda: clock[0], sleep=lambda s: None)
    assert broker_authorization(h, post=post, now=lambda: clock[0], sleep=lambda s: None) is first
    clock[0] = 1_006.5
    second = broker_authorization(h, post=post, now=lambda: clock[0], sleep=lambda s: None)
    assert second.expires_at == 1_016 and len(post.calls) == 2
    hosted._cache.clear()


def test_secrets_stay_out_of_reprs():
    assert ACCESS not in repr(H)
    assert "redacted" in repr(BrokerToken(H))
    a = Authorization("http://b", "secret-token", "p/", 1.0, 0.0)
    assert "secret-token" not in repr(a)
