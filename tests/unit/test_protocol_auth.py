"""Unit tests of the JWT module (pyspark_gazette.protocol.auth): keys, signing, verification, claims."""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import json

import jwt
import pytest

from pyspark_gazette.protocol import auth, pb
from pyspark_gazette.protocol.auth import (
    APPEND,
    LEEWAY,
    LIST,
    READ,
    Claims,
    KeySet,
    PermissionDeniedError,
    TokenError,
    mint_token,
    selector_from_json,
    selector_to_json,
    verify_bearer,
    verify_token,
)
from pyspark_gazette.protocol.labels import parse_selector

KEY = base64.b64encode(b"secret-key-one").decode()
KEY2 = base64.b64encode(b"secret-key-two").decode()
NOW = 1_800_000_000.0


class Clock:
    """PyJWT's clock (it reads ``datetime.now`` of ``jwt.api_jwt``), pinned where a test says."""

    def __init__(self, monkeypatch, at: float):
        self.at = at
        clock = self

        class Pinned(datetime.datetime):
            @classmethod
            def now(cls, tz=None):
                return datetime.datetime.fromtimestamp(clock.at, tz)

        monkeypatch.setattr(jwt.api_jwt, "datetime", Pinned)


@pytest.fixture(autouse=True)
def clock(monkeypatch):
    """Verification runs at ``NOW`` unless a test moves the clock."""
    return Clock(monkeypatch, NOW)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _hand_signed(payload: dict, key: bytes, alg: str = "HS256", header: dict | None = None) -> str:
    """A JWT built independently of the module under test (RFC 7515 compact form)."""
    digest = {"HS256": hashlib.sha256, "HS384": hashlib.sha384, "HS512": hashlib.sha512}[alg]
    h = _b64(json.dumps(header or {"alg": alg, "typ": "JWT"}).encode())
    p = _b64(json.dumps(payload).encode())
    sig = hmac.new(key, f"{h}.{p}".encode(), digest).digest()
    return f"{h}.{p}.{_b64(sig)}"


def test_keyset_parse_separators_first_signs_and_allow_missing():
    ks = KeySet.parse(f" {KEY} ,{KEY2}\n AA== ")
    assert ks.keys == (b"secret-key-one", b"secret-key-two")
    assert ks.signing_key == b"secret-key-one"
    assert ks.allow_missing
    assert "secret" not in repr(ks) and KEY not in repr(ks)


@pytest.mark.parametrize("text", ["", "AA==", "not base64!"])
def test_keyset_parse_rejects(text):
    with pytest.raises(ValueError):
        KeySet.parse(text)


def test_minted_token_verifies_with_every_key_of_the_set_and_carries_claims():
    token = mint_token(KEY, "LIST|READ", "name:prefix=acme/", ttl=60, now=NOW)
    header = json.loads(base64.urlsafe_b64decode(token.split(".")[0] + "=="))
    assert header["alg"] == "HS256"
    claims = verify_token(token, KeySet.parse(f"{KEY2} {KEY}"))
    assert claims.capability == LIST | READ
    assert claims.exp == NOW + 60 and claims.iat == NOW
    assert claims.covers("acme/clicks") and not claims.covers("other/clicks")


def test_independently_signed_hs256_and_hs384_tokens_verify():
    payload = {"cap": READ, "exp": NOW + 10, "sel": {"include": {"labels": [{"name": "name", "value": "a/b"}]}}}
    for alg in ("HS256", "HS384"):
        claims = verify_token(_hand_signed(payload, b"secret-key-one", alg), KeySet.parse(KEY))
        assert claims.capability == READ
        assert claims.covers("a/b") and not claims.covers("a/c")


@pytest.mark.parametrize(
    "header, why",
    [({"alg": "HS512"}, "not allowed"), ({"alg": "none"}, "not allowed"), ({"typ": "JWT"}, "not allowed")],
)
def test_other_algorithms_are_refused(header, why):
    token = _hand_signed({"cap": READ, "exp": NOW + 10}, b"secret-key-one", "HS512", header=header)
    with pytest.raises(TokenError, match=why):
        verify_token(token, KeySet.parse(KEY))


def test_bad_signature_is_refused_and_the_message_never_quotes_the_token():
    token = mint_token(base64.b64encode(b"another key").decode(), READ, now=NOW)
    with pytest.raises(TokenError, match="signature") as info:
        verify_token(token, KeySet.parse(KEY))
    assert token.split(".")[2] not in str(info.value) and token not in str(info.value)


def test_tampered_claims_break_the_signature():
    token = mint_token(KEY, READ, "name=a/b", now=NOW)
    h, _, s = token.split(".")
    forged = _b64(json.dumps({"cap": auth.ALL, "exp": NOW + 3600}).encode())
    with pytest.raises(TokenError, match="signature"):
        verify_token(f"{h}.{forged}.{s}", KeySet.parse(KEY))


@pytest.mark.parametrize("token", ["", "a.b", "a.b.c.d", "!!.??.##", "e30.e30"])
def test_malformed_tokens_are_refused(token):
    with pytest.raises(TokenError):
        verify_token(token, KeySet.parse(KEY))


def test_exp_is_required():
    token = _hand_signed({"cap": READ, "iat": NOW}, b"secret-key-one")
    with pytest.raises(TokenError, match="no exp"):
        verify_token(token, KeySet.parse(KEY))


def test_expiry_with_leeway(clock):
    """Valid while now < exp + leeway (golang-jwt's ``cmp.Before(exp.Add(leeway))``)."""
    token = mint_token(KEY, READ, ttl=0, now=NOW)  # exp == NOW
    clock.at = NOW + LEEWAY - 0.5
    verify_token(token, KeySet.parse(KEY))  # within the leeway
    for late in (NOW + LEEWAY, NOW + LEEWAY + 1):  # from the boundary on, as Gazette
        clock.at = late
        with pytest.raises(TokenError, match="expired"):
            verify_token(token, KeySet.parse(KEY))


def test_iat_and_nbf_in_the_future_beyond_leeway_are_refused():
    ks = KeySet.parse(KEY)
    verify_token(_hand_signed({"exp": NOW + 60, "iat": NOW + 4}, b"secret-key-one"), ks)
    with pytest.raises(TokenError, match="issued .* in the future"):
        verify_token(_hand_signed({"exp": NOW + 60, "iat": NOW + 30}, b"secret-key-one"), ks)
    with pytest.raises(TokenError, match="not valid for another"):
        verify_token(_hand_signed({"exp": NOW + 60, "nbf": NOW + 30}, b"secret-key-one"), ks)


@pytest.mark.parametrize(
    "payload, why",
    [
        ({"exp": "tomorrow"}, "'exp' is not a number"),
        ({"exp": NOW + 9, "cap": -1}, "'cap'"),
        ({"exp": NOW + 9, "cap": 1 << 32}, "'cap'"),
        ({"exp": NOW + 9, "sel": []}, "'sel'"),
        ({"exp": NOW + 9, "sel": {"include": {"labels": [{"name": "x", "value": "y"}]}}}, "'sel'"),
    ],
)
def test_ill_typed_claims_are_refused(payload, why):
    with pytest.raises(TokenError, match=why):
        verify_token(_hand_signed(payload, b"secret-key-one"), KeySet.parse(KEY))


def test_missing_cap_grants_nothing_and_require_names_the_missing_capability():
    claims = verify_token(_hand_signed({"exp": NOW + 9}, b"secret-key-one"), KeySet.parse(KEY))
    assert claims.capability == 0
    with pytest.raises(PermissionDeniedError, match="lacks the READ capability"):
        claims.require(READ, "Read")
    granted = Claims(capability=READ | APPEND, selector=pb.LabelSelector(), exp=NOW)
    granted.require(READ, "Read")
    with pytest.raises(PermissionDeniedError, match="lacks the LIST capability .*has READ\\|APPEND"):
        granted.require(LIST, "List")


def test_selector_json_round_trip_and_go_null_forms():
    sel = parse_selector("app in (a,b),name:prefix=acme/,!tmp")
    assert selector_from_json(json.loads(json.dumps(selector_to_json(sel)))) == sel
    for empty in (None, {}, {"include": {"labels": None}, "exclude": None}):
        parsed = selector_from_json(empty)
        assert not parsed.include.labels and not parsed.exclude.labels
    # Unsorted labels are accepted (sorted on the way in).
    unsorted = {"include": {"labels": [{"name": "zz", "value": "1"}, {"name": "aa", "value": "2"}]}}
    assert [lb.name for lb in selector_from_json(unsorted).include.labels] == ["aa", "zz"]


def test_claims_cover_labels_name_prefix_meta_labels_and_excludes():
    claims = Claims(READ, parse_selector("app=x,prefix=acme/,!secret"), exp=NOW)
    app_x = pb.LabelSet(labels=[pb.Label(name="app", value="x")])
    assert claims.covers("acme/one", app_x)
    assert not claims.covers("acme/one")  # app label missing
    assert not claims.covers("other/one", app_x)
    with_secret = pb.LabelSet(labels=[pb.Label(name="app", value="x"), pb.Label(name="secret", value="")])
    assert not claims.covers("acme/one", with_secret)
    assert Claims(READ, pb.LabelSelector(), exp=NOW).covers("anything/at-all")


def test_verify_bearer_header_forms_and_allow_missing():
    ks = KeySet.parse(KEY)
    token = mint_token(KEY, READ, now=NOW)
    assert verify_bearer([f"Bearer {token}"], ks).capability == READ
    with pytest.raises(TokenError, match="missing"):
        verify_bearer([], ks)
    with pytest.raises(TokenError, match="Bearer"):
        verify_bearer([f"Basic {token}"], ks)
    open_claims = verify_bearer([], KeySet.parse(f"{KEY} AA=="))
    assert open_claims.capability == auth.ALL and open_claims.covers("any/journal")
    # A token presented to an allow-missing broker is still verified.
    with pytest.raises(TokenError):
        verify_bearer(["Bearer x.y.z"], KeySet.parse(f"{KEY} AA=="))


def test_parse_capability_forms():
    assert auth.parse_capability("read, append") == READ | APPEND
    assert auth.parse_capability(["LIST"]) == LIST
    assert auth.parse_capability("ALL") == auth.ALL
    assert auth.describe_cap(READ | (1 << 16)) == "READ|0x10000"
    with pytest.raises(ValueError, match="unknown capability"):
        auth.parse_capability("READ|WRITE")


def _unsigned(header: dict, payload: dict, signature: bytes = b"") -> str:
    return f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(payload).encode())}.{_b64(signature)}"


GOOD = {"cap": auth.ALL, "exp": NOW + 60}


@pytest.mark.parametrize(
    "token",
    [
        _unsigned({"alg": "none", "typ": "JWT"}, GOOD),  # RFC 7519's unsecured JWT
        _unsigned({"alg": "None"}, GOOD),
        _unsigned({"alg": "NONE"}, GOOD, b"x"),
        _unsigned({"alg": ""}, GOOD),
        _unsigned({"alg": None}, GOOD),
        _unsigned({"alg": ["HS256"]}, GOOD),
        _unsigned({"alg": "hs256"}, GOOD, hmac.new(b"secret-key-one", b"x", hashlib.sha256).digest()),
    ],
    ids=["none", "None", "NONE", "empty", "null", "list", "lower-case"],
)
def test_unsigned_and_unknown_algorithm_tokens_are_refused(token):
    """The ``alg: none`` attack and its spellings: no algorithm but HS256/HS384 is known."""
    with pytest.raises(TokenError, match="not allowed"):
        verify_token(token, KeySet.parse(KEY))


@pytest.mark.parametrize("alg", ["RS256", "ES256", "PS256", "EdDSA"])
def test_a_public_key_algorithm_signed_with_the_key_as_an_hmac_secret_is_refused(alg):
    """RS/HS confusion: a token claiming an asymmetric algorithm but carrying an HMAC of the
    shared key (what a verifier that lets the header choose the algorithm would accept)."""
    h = _b64(json.dumps({"alg": alg, "typ": "JWT"}).encode())
    p = _b64(json.dumps(GOOD).encode())
    sig = hmac.new(b"secret-key-one", f"{h}.{p}".encode(), hashlib.sha256).digest()
    with pytest.raises(TokenError, match="not allowed"):
        verify_token(f"{h}.{p}.{_b64(sig)}", KeySet.parse(KEY))


def test_a_header_switched_between_allowed_algorithms_breaks_the_signature():
    """HS256 signed, header rewritten to HS384 (and back): the signature covers the header."""
    token = mint_token(KEY, READ, now=NOW, alg="HS256")
    _, p, s = token.split(".")
    h384 = _b64(json.dumps({"alg": "HS384", "typ": "JWT"}).encode())
    with pytest.raises(TokenError, match="signature"):
        verify_token(f"{h384}.{p}.{s}", KeySet.parse(KEY))


@pytest.mark.parametrize("where", ["payload", "signature-bit", "signature-truncated", "signature-empty", "jwk"])
def test_tampered_tokens_are_refused(where):
    ks = KeySet.parse(KEY)
    token = mint_token(KEY, READ, "name=a/b", now=NOW)
    h, p, s = token.split(".")
    if where == "payload":  # a claim widened, the rest untouched
        claims = json.loads(base64.urlsafe_b64decode(p + "=="))
        claims["cap"] = auth.ALL
        token = f"{h}.{_b64(json.dumps(claims, separators=(',', ':')).encode())}.{s}"
    elif where == "signature-bit":
        raw = bytearray(base64.urlsafe_b64decode(s + "=="))
        raw[0] ^= 1
        token = f"{h}.{p}.{_b64(bytes(raw))}"
    elif where == "signature-truncated":
        token = f"{h}.{p}.{s[:-4]}"
    elif where == "signature-empty":
        token = f"{h}.{p}."
    else:  # a key of the attacker's embedded in the header, and the token signed with it
        token = _hand_signed(GOOD, b"attacker", header={"alg": "HS256", "jwk": {"kty": "oct", "k": _b64(b"attacker")}})
    with pytest.raises(TokenError, match="signature|not a JWT"):
        verify_token(token, ks)
    verify_token(mint_token(KEY, READ, "name=a/b", now=NOW), ks)  # the untouched token verifies


def test_keys_of_any_length_sign_and_verify_as_in_gazette():
    """Gazette takes short keys; PyJWT would warn of them (and the test run fails on warnings)."""
    short = base64.b64encode(b"k").decode()
    for alg in auth.ALGORITHMS:
        assert verify_token(mint_token(short, READ, now=NOW, alg=alg), KeySet.parse(short)).capability == READ


@pytest.mark.parametrize(
    "header",
    [{"alg": "none", "kid": 5}, {"alg": "HS256", "crit": ["exp"]}, {"alg": "HS256", "b64": False, "crit": ["b64"]}],
    ids=["none-bad-kid", "crit", "unencoded-payload"],
)
def test_odd_headers_are_refused_with_our_error(header):
    """Whatever PyJWT makes of a header, the caller sees a TokenError, never PyJWT's own."""
    with pytest.raises(TokenError):
        verify_token(_hand_signed(GOOD, b"secret-key-one", header=header), KeySet.parse(KEY))
