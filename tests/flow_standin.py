"""A LOCAL STAND-IN for Estuary's control plane: not Estuary's service, and never run against it.

It implements exactly the contract flowctl's source shows (docs/flow.md, "Estuary-hosted
collections"), on loopback HTTP:

- ``POST /authorize/user/collection`` with ``Authorization: Bearer <access token>`` and JSON
  ``{"collection": ..., "startedUnix": ...}`` (``capability`` optional, default read). Answers
  ``{"brokerAddress", "brokerToken", "journalNamePrefix", "retryMillis": 0}``; or
  ``{"retryMillis": N}`` alone (try again); 401 for a missing, malformed, badly signed or expired
  access token; 403 when the user may not read the collection; 5xx when told to fail.
- ``POST /rest/v1/rpc/generate_access_token`` (PostgREST) with an ``apikey`` header and JSON
  ``{"refresh_token_id", "secret"}``: ``{"access_token": ...}``, or 401.

Broker tokens are real Gazette tokens (HS256, ``cap``/``sel`` claims) signed with the brokers'
key, so the brokers check them; their lifetime is ``broker_ttl`` seconds.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from pyspark_gazette.protocol.auth import LIST, READ, mint_token

USER_KEY = base64.b64encode(b"stand-in control plane key").decode()
PG_API_KEY = "stand-in-public-api-key"


def _b64(d: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")


def access_token(user: str, ttl: float = 3600.0, *, key: str = USER_KEY) -> str:
    """A control-plane access token (a JWT) for ``user``, as Estuary's auth would issue."""
    import hashlib
    import hmac

    now = int(time.time())
    head = _b64({"alg": "HS256", "typ": "JWT"})
    body = _b64({"sub": user, "role": "authenticated", "iat": now, "exp": int(now + ttl)})
    sig = hmac.new(base64.b64decode(key), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{base64.urlsafe_b64encode(sig).decode().rstrip('=')}"


def refresh_token(token_id: str, secret: str) -> str:
    """A refresh token as flowctl's FLOW_AUTH_TOKEN takes it: base64 of ``{"id", "secret"}``."""
    return base64.b64encode(json.dumps({"id": token_id, "secret": secret}).encode()).decode()


class ControlPlaneStandIn:
    """The stand-in server (see the module doc). ``grants``: user -> collections it may read;
    ``collections``: collection -> journal name prefix; ``refresh_tokens``: id -> (secret, user)."""

    def __init__(self, broker_address: str, broker_key: str, *, broker_ttl: float = 3600.0):
        self.broker_address, self.broker_key, self.broker_ttl = broker_address, broker_key, broker_ttl
        self.grants: dict[str, set[str]] = {}
        self.collections: dict[str, str] = {}
        self.refresh_tokens: dict[str, tuple[str, str]] = {}
        self.retry_next = 0  # answer this many authorizations with retryMillis
        self.fail_next = 0  # answer this many requests with 503
        self.requests: list[tuple[str, dict]] = []  # (path, JSON body) of every request
        self.issued: list[str] = []  # broker tokens issued
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> ControlPlaneStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def authorizations(self) -> int:
        return sum(1 for p, _ in self.requests if p == "/authorize/user/collection")

    # -- the contract ----------------------------------------------------------------------

    def _user(self, header: str | None) -> str | None:
        import hashlib
        import hmac

        if not header or not header.startswith("Bearer "):
            return None
        parts = header[7:].split(".")
        if len(parts) != 3:
            return None
        sig = hmac.new(base64.b64decode(USER_KEY), f"{parts[0]}.{parts[1]}".encode(), hashlib.sha256).digest()
        if base64.urlsafe_b64encode(sig).decode().rstrip("=") != parts[2]:
            return None
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
        return claims["sub"] if claims.get("exp", 0) > time.time() else None

    def authorize(self, headers, body: dict) -> tuple[int, dict | str]:
        if self.fail_next:
            self.fail_next -= 1
            return 503, "service unavailable (stand-in told to fail)"
        user = self._user(headers.get("Authorization"))
        if user is None:
            return 401, "unauthenticated: missing, malformed or expired access token"
        collection = body.get("collection")
        if not isinstance(collection, str) or body.get("capability", "read") != "read":
            return 400, "invalid request"
        if self.retry_next:
            self.retry_next -= 1
            return 200, {"retryMillis": 50}
        if collection not in self.grants.get(user, set()) or collection not in self.collections:
            return 403, f"{user} is not authorized to read collection {collection}"
        prefix = self.collections[collection]
        token = mint_token(self.broker_key, LIST | READ, f"name:prefix={prefix}", ttl=self.broker_ttl)
        self.issued.append(token)
        return 200, {
            "brokerAddress": self.broker_address,
            "brokerToken": token,
            "journalNamePrefix": prefix,
            "retryMillis": 0,
        }

    def generate_access_token(self, headers, body: dict) -> tuple[int, dict | str]:
        if headers.get("apikey") != PG_API_KEY:
            return 401, "no api key"
        entry = self.refresh_tokens.get(str(body.get("refresh_token_id")))
        if entry is None or entry[0] != body.get("secret"):
            return 401, "invalid refresh token"
        return 200, {"access_token": access_token(entry[1], ttl=3600)}

    def _handler(self):
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    body = None
                standin.requests.append((self.path, body if isinstance(body, dict) else {}))
                if not isinstance(body, dict):
                    status, answer = 400, "body is not a JSON object"
                elif self.path == "/authorize/user/collection":
                    status, answer = standin.authorize(self.headers, body)
                elif self.path == "/rest/v1/rpc/generate_access_token":
                    status, answer = standin.generate_access_token(self.headers, body)
                else:
                    status, answer = 404, "not found"
                data = json.dumps(answer).encode() if isinstance(answer, dict) else answer.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json" if isinstance(answer, dict) else "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
