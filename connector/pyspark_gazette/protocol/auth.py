"""Bearer-token auth as Gazette does it: HS256/HS384 JWTs with capability and selector claims.

A Gazette cluster started with ``--auth-keys`` (facts sheet section 1, "Auth") requires every
RPC to carry ``authorization: Bearer <JWT>``. The JWT is signed with a pre-shared key; its
claims grant capabilities (``cap``, a bitmask) over the journals matched by a label selector
(``sel``), until ``exp``. This module parses keys, signs and verifies tokens, and checks
capabilities and selectors. It knows nothing of gRPC and is shared by both sides: the CLI mints
tokens with it, the broker verifies them (its servicer's glue is
:mod:`pyspark_gazette.broker.authz`).

Tokens are signed and verified by PyJWT, as Gazette has golang-jwt v5 do it, with Gazette's
options: algorithm HS256 or HS384 (no other is even known to the verifier, ``none`` included),
any of the keys may verify, ``exp`` is required, ``iat`` and ``nbf`` are checked when present,
all with 5 seconds of leeway, against the clock. A token valid until ``exp`` is refused from
``exp + 5 s`` on, as golang-jwt refuses it. Keys of any length are taken, as Gazette takes
them. Tokens, keys and signatures never appear in messages or reprs.

Keys are given like Gazette's ``--auth-keys``: base64 (standard alphabet) separated by
whitespace and/or commas; the first signs, every key verifies. The special key ``AA==`` (one
zero byte) lets requests *without* a token through, with every capability, for rolling auth
out in an existing deployment, as in Gazette.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import re
import secrets
import time
from collections.abc import Iterable, Mapping
from typing import Any

import jwt
from jwt.algorithms import HMACAlgorithm

from pyspark_gazette.errors import AuthError
from pyspark_gazette.protocol import pb
from pyspark_gazette.protocol.labels import matches, to_selector, validate_selector

#: Capability bits (Gazette's ``pb.Capability``). Applications may use bits from 1 << 16.
LIST, APPLY, READ, APPEND, REPLICATE = 1 << 1, 1 << 2, 1 << 3, 1 << 4, 1 << 5
ALL = 0xFFFFFFFF
CAPABILITIES: dict[str, int] = {"LIST": LIST, "APPLY": APPLY, "READ": READ, "APPEND": APPEND, "REPLICATE": REPLICATE}

#: Clock skew tolerated on ``exp``, ``iat`` and ``nbf`` (seconds).
LEEWAY = 5.0
#: The key that admits requests carrying no token (base64 of one zero byte).
ALLOW_MISSING_KEY = "AA=="

#: The algorithms Gazette signs and verifies with (golang-jwt's ``WithValidMethods``).
ALGORITHMS = ("HS256", "HS384")


class _AnyLengthHMAC(HMACAlgorithm):
    """PyJWT's HMAC, without its warning for keys shorter than the digest: Gazette takes keys
    of any length, and so do we (a key's strength is its operator's choice)."""

    def check_key_length(self, key: bytes) -> str | None:
        return None


_ALGORITHM_LIST = list(ALGORITHMS)
#: A signer and verifier that knows Gazette's algorithms and no other.
_JWS = jwt.PyJWS(algorithms=[])
for _name, _digest in zip(ALGORITHMS, (HMACAlgorithm.SHA256, HMACAlgorithm.SHA384), strict=True):
    _JWS.register_algorithm(_name, _AnyLengthHMAC(_digest))
#: PyJWT's claim checks (``exp`` required; ``exp``, ``iat``, ``nbf`` against the clock), run once
#: :data:`_JWS` has verified the signature.
_CLAIMS_OPTIONS: Any = {
    "verify_signature": False,
    "verify_exp": True,
    "verify_iat": True,
    "verify_nbf": True,
    "require": ["exp"],
}


class TokenError(AuthError):
    """The token is missing, malformed, badly signed, expired or not yet valid
    (gRPC ``UNAUTHENTICATED``)."""


class PermissionDeniedError(AuthError):
    """A valid token does not grant the capability or does not cover the journal (gRPC
    ``UNAUTHENTICATED``, as Gazette answers it: its one code for every auth refusal)."""


# --------------------------------------------------------------------------------------------
# Keys.


@dataclasses.dataclass(frozen=True)
class KeySet:
    """Pre-shared HMAC keys: ``keys[0]`` signs, all verify. ``allow_missing`` admits
    requests without a token (the ``AA==`` key). The repr never shows the keys."""

    keys: tuple[bytes, ...] = dataclasses.field(repr=False)
    allow_missing: bool = False

    def __post_init__(self) -> None:
        if not self.keys:
            raise ValueError("at least one auth key (other than AA==) is required")

    @classmethod
    def parse(cls, text: str) -> KeySet:
        """Parse Gazette's ``--auth-keys`` form: base64 keys separated by whitespace or commas."""
        keys: list[bytes] = []
        allow_missing = False
        for i, item in enumerate(text.replace(",", " ").split()):
            if item == ALLOW_MISSING_KEY:
                allow_missing = True
                continue
            try:
                keys.append(base64.b64decode(item, validate=True))
            except (binascii.Error, ValueError):
                raise ValueError(f"auth key at index {i} is not valid base64") from None
        return cls(tuple(keys), allow_missing)

    @property
    def signing_key(self) -> bytes:
        return self.keys[0]


def new_key(nbytes: int = 32) -> str:
    """A fresh random key, base64-encoded as ``--auth-keys`` takes it."""
    return base64.b64encode(secrets.token_bytes(nbytes)).decode()


def _key_bytes(key: bytes | str | KeySet) -> bytes:
    if isinstance(key, KeySet):
        return key.signing_key
    if isinstance(key, bytes):
        return key
    return KeySet.parse(key).signing_key


# --------------------------------------------------------------------------------------------
# Claims.


@dataclasses.dataclass(frozen=True, eq=False)
class Claims:
    """The verified claims of a token: capabilities, selector and validity window."""

    capability: int
    selector: pb.LabelSelector
    exp: float
    iat: float | None = None

    def require(self, capability: int, what: str) -> None:
        """Raise :class:`PermissionDeniedError` unless every bit of ``capability`` is granted."""
        if self.capability & capability == capability:
            return
        missing = [n for n, bit in CAPABILITIES.items() if capability & bit and not self.capability & bit]
        names = ", ".join(missing) if missing else f"{capability & ~self.capability:#x}"
        raise PermissionDeniedError(
            f"{what}: the token lacks the {names} capability (has {describe_cap(self.capability)})"
        )

    def covers(self, name: str, labels: pb.LabelSet | None = None) -> bool:
        """Whether the selector matches journal ``name`` with ``labels`` (plus its ``name`` label)."""
        return matches(self.selector, labels or pb.LabelSet(), journal_name=name)


def describe_cap(capability: int) -> str:
    """``LIST|READ`` for a bitmask (unnamed bits as hex)."""
    names = [n for n, bit in CAPABILITIES.items() if capability & bit]
    rest = capability & ~sum(CAPABILITIES.values())
    if rest:
        names.append(f"{rest:#x}")
    return "|".join(names) or "none"


def parse_capability(value: int | str | Iterable[str]) -> int:
    """A bitmask from an int, ``"READ|APPEND"`` / ``"read,append"``, ``"ALL"`` or names."""
    if isinstance(value, int):
        if not 0 <= value <= ALL:
            raise ValueError(f"capability {value} is not a uint32")
        return value
    items = re.split(r"[|,\s]+", value.strip()) if isinstance(value, str) else list(value)
    out = 0
    for item in items:
        if not item:
            continue
        upper = item.upper()
        if upper == "ALL":
            out |= ALL
        elif upper in CAPABILITIES:
            out |= CAPABILITIES[upper]
        else:
            raise ValueError(f"unknown capability {item!r} (expected {', '.join(CAPABILITIES)} or ALL)")
    return out


def selector_to_json(sel: pb.LabelSelector) -> dict[str, Any]:
    """The Go-JSON form of a selector: ``{"include": {"labels": [{"name", "value", "prefix"}]}, ...}``."""

    def side(ls: pb.LabelSet) -> dict[str, Any]:
        labels = []
        for label in ls.labels:
            item: dict[str, Any] = {"name": label.name, "value": label.value}
            if label.prefix:
                item["prefix"] = True
            labels.append(item)
        return {"labels": labels}

    return {"include": side(sel.include), "exclude": side(sel.exclude)}


def selector_from_json(value: Any) -> pb.LabelSelector:
    """Parse the Go-JSON form (absent or null parts are empty); raises ``ValueError``."""
    if value is None:
        return pb.LabelSelector()
    if not isinstance(value, Mapping):
        raise ValueError("sel must be a JSON object")

    def side(key: str) -> pb.LabelSet:
        part = value.get(key)
        if part is None:
            return pb.LabelSet()
        if not isinstance(part, Mapping) or not isinstance(part.get("labels") or [], list):
            raise ValueError(f"sel.{key} must be an object with a labels list")
        labels = []
        for item in part.get("labels") or []:
            if not isinstance(item, Mapping):
                raise ValueError(f"sel.{key}.labels holds a non-object")
            name, val, prefix = item.get("name", ""), item.get("value", ""), item.get("prefix", False)
            if not isinstance(name, str) or not isinstance(val, str) or not isinstance(prefix, bool):
                raise ValueError(f"sel.{key}.labels: name and value must be strings, prefix a boolean")
            labels.append(pb.Label(name=name, value=val, prefix=prefix))
        labels.sort(key=lambda lb: (lb.name, lb.value, lb.prefix))
        return pb.LabelSet(labels=labels)

    sel = pb.LabelSelector(include=side("include"), exclude=side("exclude"))
    validate_selector(sel)  # a SelectorError is a ValueError
    return sel


# --------------------------------------------------------------------------------------------
# Signing and verification.


def sign(payload: Mapping[str, Any], key: bytes | str | KeySet, *, alg: str = "HS256") -> str:
    """A compact JWT of ``payload`` signed with ``key`` (raw bytes, or base64 text / a KeySet)."""
    if alg not in ALGORITHMS:
        raise ValueError(f"unsupported alg {alg!r} (expected HS256 or HS384)")
    body = json.dumps(dict(payload), separators=(",", ":")).encode()
    return _JWS.encode(body, _key_bytes(key), algorithm=alg)


def mint_token(
    key: bytes | str | KeySet,
    capability: int | str | Iterable[str] = READ,
    selector: str | pb.LabelSelector | None = None,
    ttl: float = 3600.0,
    *,
    now: float | None = None,
    alg: str = "HS256",
) -> str:
    """Sign a token granting ``capability`` over the journals ``selector`` matches, for ``ttl`` s.

    ``key`` is raw bytes or base64 text as ``--auth-keys`` takes it (its first key signs);
    ``capability`` an int or names (``"READ|APPEND"``, ``"ALL"``); ``selector`` Gazette's
    selector syntax (``"name=acme/clicks"``, ``"name:prefix=acme/"``, ``"app=x"``), a
    :class:`LabelSelector`, or None for every journal. For tests, the CLI and notebooks.
    """
    issued = time.time() if now is None else now
    payload = {
        "cap": parse_capability(capability),
        "sel": selector_to_json(to_selector(selector)),
        "iat": int(issued),
        "exp": int(issued + ttl),
    }
    return sign(payload, key, alg=alg)


def _numeric_date(payload: Mapping[str, Any], name: str) -> float | None:
    value = payload.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TokenError(f"token claim {name!r} is not a number")
    return float(value)


def _alg(token: str) -> Any:
    """The ``alg`` a token's header names (None when it names none or cannot be read)."""
    try:
        return _JWS.get_unverified_header(token).get("alg")
    except jwt.InvalidTokenError:
        return None


def verify_token(token: str, keys: KeySet, *, leeway: float = LEEWAY) -> Claims:
    """Verify a compact JWT with ``keys`` and return its :class:`Claims`.

    Raises :class:`TokenError` (never quoting the token) when it is malformed, its algorithm is
    not HS256/HS384, no key verifies its signature, ``exp`` is missing or ``leeway`` seconds
    past, or ``iat``/``nbf`` is more than ``leeway`` seconds in the future.
    """
    if token.count(".") != 2:
        raise TokenError("the token is not a compact JWT (expected three dot-separated parts)")
    for key in keys.keys:
        try:
            signed = _JWS.decode_complete(token, key, algorithms=_ALGORITHM_LIST)
            break
        except jwt.InvalidSignatureError:
            continue
        except jwt.InvalidAlgorithmError:
            raise TokenError(f"token algorithm {_alg(token)!r} is not allowed (expected HS256 or HS384)") from None
        except jwt.InvalidTokenError:
            raise TokenError("the token is not a JWT (bad base64url or JSON)") from None
    else:
        raise TokenError("the token's signature does not verify with any auth key")
    try:
        payload = json.loads(signed["payload"])
    except ValueError:
        raise TokenError("the token is not a JWT (bad base64url or JSON)") from None
    if not isinstance(payload, dict):
        raise TokenError("the token's header and claims must be JSON objects")
    exp, iat = _numeric_date(payload, "exp"), _numeric_date(payload, "iat")
    nbf = _numeric_date(payload, "nbf")
    try:
        jwt.decode(token, options=_CLAIMS_OPTIONS, leeway=leeway)
    except jwt.MissingRequiredClaimError:
        raise TokenError("the token has no exp (expiry) claim") from None
    except jwt.ExpiredSignatureError:
        raise TokenError(f"the token expired {time.time() - (exp or 0):.0f}s ago (leeway {leeway:g}s)") from None
    except jwt.ImmatureSignatureError as e:
        if "(iat)" in str(e):
            ahead = (iat or 0) - time.time()
            raise TokenError(f"the token was issued {ahead:.0f}s in the future (leeway {leeway:g}s)") from None
        ahead = (nbf or 0) - time.time()
        raise TokenError(f"the token is not valid for another {ahead:.0f}s (leeway {leeway:g}s)") from None
    except jwt.InvalidTokenError as e:
        raise TokenError(f"the token's claims are not valid ({type(e).__name__})") from None
    assert exp is not None  # required above
    cap = payload.get("cap", 0)
    if isinstance(cap, bool) or not isinstance(cap, int) or not 0 <= cap <= ALL:
        raise TokenError("token claim 'cap' is not a uint32 capability bitmask")
    try:
        selector = selector_from_json(payload.get("sel"))
    except ValueError as e:
        raise TokenError(f"token claim 'sel' is not a valid label selector: {e}") from None
    return Claims(capability=cap, selector=selector, exp=exp, iat=iat)


def verify_bearer(values: Iterable[str], keys: KeySet) -> Claims:
    """Verify the ``authorization`` metadata values of a call (the first one counts, as in Gazette).

    Without a value, :class:`TokenError` -- unless ``keys.allow_missing``, which grants every
    capability over every journal for an hour.
    """
    values = [v for v in values if v]
    if not values:
        if keys.allow_missing:
            return Claims(capability=ALL, selector=pb.LabelSelector(), exp=time.time() + 3600)
        raise TokenError("missing or empty authorization token (expected metadata 'authorization: Bearer <JWT>')")
    if not values[0].startswith("Bearer "):
        raise TokenError("invalid or unsupported authorization header (expected 'Bearer <JWT>')")
    return verify_token(values[0][len("Bearer ") :].strip(), keys)


__all__ = [
    "ALGORITHMS",
    "ALL",
    "APPEND",
    "APPLY",
    "CAPABILITIES",
    "LEEWAY",
    "LIST",
    "READ",
    "REPLICATE",
    "Claims",
    "KeySet",
    "PermissionDeniedError",
    "TokenError",
    "describe_cap",
    "mint_token",
    "new_key",
    "parse_capability",
    "selector_from_json",
    "selector_to_json",
    "sign",
    "verify_bearer",
    "verify_token",
]
