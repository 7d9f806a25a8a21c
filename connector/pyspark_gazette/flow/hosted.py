"""Estuary-hosted collections: broker address and token from Estuary's control plane.

A hosted collection's brokers take a per-collection bearer token, which flowctl obtains
(see docs/flow.md, "Estuary-hosted collections") by POSTing
``{"collection": <name>, "startedUnix": <seconds>}`` to ``<agent URL>/authorize/user/collection``
with the user's access token as ``Authorization: Bearer``. The JSON answer holds
``brokerAddress``, ``brokerToken`` (a JWT whose ``exp`` is its expiry) and
``journalNamePrefix``; or a non-zero ``retryMillis`` (try again after that many milliseconds,
the other fields empty). A 5xx answer is retried; any other non-2xx answer is an error whose
body says why (e.g. the user may not read the collection).

The user's credential is either an access token (a JWT: three dot-separated parts) or a
refresh token (base64 of JSON ``{"id": ..., "secret": ...}``, as flowctl's ``FLOW_AUTH_TOKEN``
takes it), exchanged for access tokens through the control plane's PostgREST RPC
``generate_access_token`` (``{"refresh_token_id": id, "secret": secret}`` ->
``{"access_token": ...}``), which needs PostgREST's URL and its public API key.

:func:`broker_authorization` caches one authorization per process and credential, and fetches a
new one before the broker token expires (when less than a quarter of its lifetime, at most five
minutes, remains), so long streams keep reading; executors do the same with the same
credential (it travels with the query's options, never in logs or reprs).

Retried: ``retryMillis`` answers (for up to :data:`MAX_RETRY_WAIT` seconds in all), 5xx answers
and connection failures (5 attempts, 1, 2, 4, 8 s apart). Surfaced: every other failure, as
:class:`~pyspark_gazette.errors.FlowAuthorizationError`.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from pyspark_gazette.errors import FlowAuthorizationError

#: Longest total wait on ``retryMillis`` answers before giving up.
MAX_RETRY_WAIT = 300.0
_ATTEMPTS = 5

#: ``post(url, body, headers, timeout) -> (status, body bytes)``; replaceable in unit tests.
Post = Callable[[str, bytes, dict[str, str], float], tuple[int, bytes]]


def _http_post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (the user's own endpoint)
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@dataclasses.dataclass(frozen=True)
class HostedAuth:
    """How to authorize a hosted collection (primitives: pickles to executors; secrets never shown)."""

    agent_url: str
    collection: str
    auth_token: str = dataclasses.field(repr=False)
    pg_url: str | None = None
    pg_api_key: str | None = dataclasses.field(default=None, repr=False)

    @property
    def is_refresh_token(self) -> bool:
        return self.auth_token.count(".") != 2


@dataclasses.dataclass(frozen=True)
class Authorization:
    """One ``/authorize/user/collection`` answer."""

    broker_address: str
    broker_token: str = dataclasses.field(repr=False)
    journal_name_prefix: str
    expires_at: float  # unix seconds
    issued_at: float

    def due(self, now: float) -> bool:
        """Whether to fetch a new one: less than a quarter of its lifetime (at most 5 minutes) is left."""
        left = self.expires_at - now
        return left < min(300.0, (self.expires_at - self.issued_at) / 4)


def jwt_claims(token: str) -> dict[str, Any]:
    """The (unverified) claims of a JWT."""
    try:
        payload = token.split(".")[1]
        return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError) as e:
        raise FlowAuthorizationError(f"the token is not a JWT ({type(e).__name__})") from None


def _refresh_token(text: str) -> tuple[str, str]:
    try:
        doc = json.loads(base64.b64decode(text + "=" * (-len(text) % 4)))
        return str(doc["id"]), str(doc["secret"])
    except (ValueError, KeyError, TypeError):
        raise FlowAuthorizationError(
            "flow.authToken is neither an access token (a JWT) nor a refresh token (base64 of "
            'JSON {"id": ..., "secret": ...}, as flowctl takes it)'
        ) from None


def _call(
    post: Post, url: str, payload: dict, headers: dict[str, str], what: str, sleep: Callable[[float], None]
) -> Any:
    """POST JSON; 5xx and connection failures retried; the decoded answer."""
    body = json.dumps(payload).encode()
    headers = {"Content-Type": "application/json", "Accept": "application/json", **headers}
    delay, last = 1.0, ""
    for attempt in range(_ATTEMPTS):
        try:
            status, answer = post(url, body, headers, 30.0)
        except OSError as e:
            status, answer, last = 0, b"", f"{type(e).__name__}: {e}"
        if 200 <= status < 300:
            try:
                return json.loads(answer)
            except ValueError:
                raise FlowAuthorizationError(f"{what}: the answer of {url} is not JSON") from None
        if status and status < 500:
            text = answer[:512].decode("utf-8", "replace").strip()
            raise FlowAuthorizationError(f"{what}: {url} answered HTTP {status}: {text}")
        if status:
            last = f"HTTP {status}"
        if attempt + 1 < _ATTEMPTS:
            sleep(delay)
            delay *= 2
    raise FlowAuthorizationError(f"{what}: {url} failed {_ATTEMPTS} times (last: {last})")


_lock = threading.Lock()
_access: dict[HostedAuth, tuple[str, float]] = {}
_cache: dict[HostedAuth, Authorization] = {}


def access_token(
    h: HostedAuth,
    *,
    post: Post = _http_post,
    now: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """The user's access token: ``flow.authToken`` itself, or one from its refresh token
    (renewed with less than a minute left, as flowctl does)."""
    if not h.is_refresh_token:
        return h.auth_token
    hit = _access.get(h)
    if hit is not None and hit[1] - now() >= 60:
        return hit[0]
    if not h.pg_url or not h.pg_api_key:
        raise FlowAuthorizationError(
            "a refresh token needs flow.pgUrl and flow.pgApiKey (the control plane's PostgREST)"
        )
    token_id, secret = _refresh_token(h.auth_token)
    answer = _call(
        post,
        h.pg_url.rstrip("/") + "/rpc/generate_access_token",
        {"refresh_token_id": token_id, "secret": secret},
        {"apikey": h.pg_api_key},
        "exchanging the refresh token for an access token",
        sleep,
    )
    token = answer.get("access_token") if isinstance(answer, dict) else None
    if not isinstance(token, str):
        raise FlowAuthorizationError("generate_access_token answered without an access_token")
    _access[h] = (token, float(jwt_claims(token).get("exp", now() + 3600)))
    return token


def authorize(
    h: HostedAuth,
    *,
    post: Post = _http_post,
    now: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> Authorization:
    """A fresh authorization of ``h.collection`` from ``/authorize/user/collection``."""
    what = f"authorizing collection {h.collection!r}"
    started = now()
    waited = 0.0
    while True:
        token = access_token(h, post=post, now=now, sleep=sleep)
        answer = _call(
            post,
            h.agent_url.rstrip("/") + "/authorize/user/collection",
            {"collection": h.collection, "startedUnix": int(started)},
            {"Authorization": f"Bearer {token}"},
            what,
            sleep,
        )
        if not isinstance(answer, dict):
            raise FlowAuthorizationError(f"{what}: the answer is not a JSON object")
        retry = int(answer.get("retryMillis") or 0)
        if retry:
            if waited + retry / 1000 > MAX_RETRY_WAIT:
                raise FlowAuthorizationError(f"{what}: still asked to retry after {waited:.0f} s")
            sleep(retry / 1000)
            waited += retry / 1000
            continue
        address, broker_token = answer.get("brokerAddress"), answer.get("brokerToken")
        prefix = answer.get("journalNamePrefix") or ""
        if not address or not broker_token:
            raise FlowAuthorizationError(f"{what}: the answer has no brokerAddress or brokerToken")
        claims = jwt_claims(broker_token)
        issued = now()
        return Authorization(address, broker_token, prefix, float(claims.get("exp", issued + 3600)), issued)


def broker_authorization(h: HostedAuth, **kw: Any) -> Authorization:
    """This process's current authorization of ``h`` (fetched again before it expires)."""
    now = kw.get("now", time.time)
    with _lock:
        hit = _cache.get(h)
        if hit is None or hit.due(now()):
            hit = _cache[h] = authorize(h, **kw)
        return hit


class BrokerToken:
    """A bearer token that is always current: the client calls it for every RPC's metadata."""

    def __init__(self, h: HostedAuth):
        self.hosted = h

    def __call__(self) -> str:
        return broker_authorization(self.hosted).broker_token

    def __repr__(self) -> str:
        return "BrokerToken(<redacted>)"


__all__ = [
    "Authorization",
    "BrokerToken",
    "HostedAuth",
    "access_token",
    "authorize",
    "broker_authorization",
    "jwt_claims",
]
