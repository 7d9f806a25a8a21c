"""Cost of Gazette's bearer tokens with PyJWT, beside the stdlib code it replaced, in one run.

Mints ``--tokens`` tokens (HS256, a selector claim, the same payloads for both) and verifies each
with a key set of ``--keys`` keys whose last one signed them (the worst case: every key tried),
through :mod:`pyspark_gazette.protocol.auth` (PyJWT) and through the hand-written HMAC and
base64 code that signed and verified them before (kept below, unchanged, as the baseline).
The broker verifies one token per RPC, so the verify time is what auth adds to a call.

    .venv/bin/python bench/bench_auth.py [--tokens 20000] [--keys 2] [--rounds 5]

Each round times both sides (the order alternates); the best round of each is reported, with the
ratio baseline time / PyJWT time (below 1: PyJWT is slower).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hashlib
import hmac
import json
import re
import time
from typing import Any

from pyspark_gazette.protocol import auth
from pyspark_gazette.protocol.auth import READ, KeySet, mint_token, selector_to_json, verify_token
from pyspark_gazette.protocol.labels import to_selector

# --------------------------------------------------------------------------------------------
# The baseline: the stdlib signing and verification protocol/auth.py had before PyJWT (claims
# checks included, so both sides do the same work).

_ALGORITHMS = {"HS256": hashlib.sha256, "HS384": hashlib.sha384}
_B64URL = re.compile(r"^[A-Za-z0-9_-]*$")


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64url(part: str) -> bytes:
    if not _B64URL.match(part):
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def old_sign(payload: dict[str, Any], key: bytes, alg: str = "HS256") -> str:
    digest = _ALGORITHMS[alg]
    header = _b64url(json.dumps({"alg": alg, "typ": "JWT"}, separators=(",", ":")).encode())
    body = _b64url(json.dumps(dict(payload), separators=(",", ":")).encode())
    signing_input = f"{header}.{body}".encode()
    return f"{header}.{body}.{_b64url(hmac.new(key, signing_input, digest).digest())}"


def _numeric_date(payload: dict[str, Any], name: str) -> float | None:
    value = payload.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(name)
    return float(value)


def old_verify(token: str, keys: KeySet, leeway: float = auth.LEEWAY) -> auth.Claims:
    parts = token.split(".")
    if len(parts) != 3:
        raise ValueError("parts")
    try:
        header = json.loads(_unb64url(parts[0]))
        payload = json.loads(_unb64url(parts[1]))
        signature = _unb64url(parts[2])
    except (ValueError, UnicodeDecodeError, binascii.Error):
        raise ValueError("not a JWT") from None
    digest = _ALGORITHMS.get(header.get("alg"))
    if digest is None:
        raise ValueError("alg")
    signing_input = f"{parts[0]}.{parts[1]}".encode()
    if not any(hmac.compare_digest(hmac.new(k, signing_input, digest).digest(), signature) for k in keys.keys):
        raise ValueError("signature")
    t = time.time()
    exp = _numeric_date(payload, "exp")
    if exp is None or t > exp + leeway:
        raise ValueError("exp")
    iat = _numeric_date(payload, "iat")
    if iat is not None and t < iat - leeway:
        raise ValueError("iat")
    nbf = _numeric_date(payload, "nbf")
    if nbf is not None and t < nbf - leeway:
        raise ValueError("nbf")
    cap = payload.get("cap", 0)
    return auth.Claims(capability=cap, selector=auth.selector_from_json(payload.get("sel")), exp=exp, iat=iat)


# --------------------------------------------------------------------------------------------


def payloads(n: int) -> list[dict[str, Any]]:
    now = int(time.time())
    return [
        {
            "cap": READ,
            "sel": selector_to_json(to_selector(f"name:prefix=acme/{i % 50}/")),
            "iat": now,
            "exp": now + 3600,
        }
        for i in range(n)
    ]


def run_new(items: list[dict[str, Any]], key: bytes, keys: KeySet) -> tuple[float, float]:
    t0 = time.perf_counter()
    tokens = [auth.sign(p, key) for p in items]
    t1 = time.perf_counter()
    for token in tokens:
        verify_token(token, keys)
    return t1 - t0, time.perf_counter() - t1


def run_old(items: list[dict[str, Any]], key: bytes, keys: KeySet) -> tuple[float, float]:
    t0 = time.perf_counter()
    tokens = [old_sign(p, key) for p in items]
    t1 = time.perf_counter()
    for token in tokens:
        old_verify(token, keys)
    return t1 - t0, time.perf_counter() - t1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=20000)
    ap.add_argument("--keys", type=int, default=2, help="keys in the verifying set; the last one signs")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    raw = [f"bench-key-{i}-0123456789abcdef0123".encode() for i in range(args.keys)]
    keys, key = KeySet(tuple(raw)), raw[-1]
    items = payloads(args.tokens)
    # The two sides agree: each verifies the other's tokens, with the same claims.
    token = mint_token(key, READ, "name:prefix=acme/", now=time.time())
    assert old_verify(token, keys).capability == verify_token(old_sign(items[0], key), keys).capability == READ
    best: dict[str, list[float]] = {"stdlib (before)": [1e9, 1e9], "PyJWT": [1e9, 1e9]}
    for r in range(args.rounds):
        order = [("stdlib (before)", run_old), ("PyJWT", run_new)]
        for name, fn in order if r % 2 == 0 else order[::-1]:
            mint, verify = fn(items, key, keys)
            best[name] = [min(best[name][0], mint), min(best[name][1], verify)]
    n = args.tokens
    print(f"{n} tokens, {args.keys} keys (the last signs), best of {args.rounds} rounds")
    print(f"{'':18} {'mint us/token':>14} {'verify us/token':>16} {'both us/token':>14}")
    for name, (mint, verify) in best.items():
        print(f"{name:18} {mint / n * 1e6:14.1f} {verify / n * 1e6:16.1f} {(mint + verify) / n * 1e6:14.1f}")
    (om, ov), (nm, nv) = best["stdlib (before)"], best["PyJWT"]
    print(f"ratio before / PyJWT: mint {om / nm:.2f}, verify {ov / nv:.2f}, both {(om + ov) / (nm + nv):.2f}")


if __name__ == "__main__":
    main()
