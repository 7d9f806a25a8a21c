"""Who can reach the broker: loopback by default (and it says so), a usable advertised address
when bound to a wildcard, and the command line's auth flags (broker --auth-keys, journals
--broker.auth-token / --broker.auth-keys, token)."""

from __future__ import annotations

import base64
import logging
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys

import grpc
import pytest

from pyspark_gazette.broker import EmbeddedBroker
from pyspark_gazette.broker.embedded import is_loopback, is_wildcard
from pyspark_gazette.client import ClientConfig, JournalClient
from pyspark_gazette.protocol import pb, pb_grpc
from pyspark_gazette.protocol.auth import READ, KeySet, mint_token, verify_token

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "pyspark_gazette.cli"]
KEY = base64.b64encode(b"cli-test-key").decode()


def test_embedded_broker_binds_loopback_by_default_and_logs_it(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="pyspark_gazette.broker.embedded")
    with EmbeddedBroker(str(tmp_path / "d")) as broker:
        assert broker.host == "127.0.0.1"
        assert broker.address == f"http://127.0.0.1:{broker.port}"
        assert "loopback only" in broker.exposure() and "0.0.0.0" in broker.exposure()
    assert "loopback only" in caplog.text and "no authentication" in caplog.text


def test_wildcard_bind_advertises_a_reachable_host(tmp_path):
    with EmbeddedBroker(str(tmp_path / "d"), host="0.0.0.0") as broker:
        assert "0.0.0.0" not in broker.address
        assert broker.address == f"http://{socket.gethostname()}:{broker.port}"
        assert "reachable from other hosts" in broker.exposure() and "anyone" in broker.exposure()
        # The advertised address works, and is what response headers route clients to.
        with JournalClient(ClientConfig(broker.address)) as c:
            assert c.list_journals() == []
        with grpc.insecure_channel(broker.target) as ch:
            resp = pb_grpc.JournalStub(ch).FragmentStoreHealth(
                pb.FragmentStoreHealthRequest(fragment_store="file:///x/")
            )
            assert "0.0.0.0" not in str(resp.header)
    with EmbeddedBroker(str(tmp_path / "e"), host="0.0.0.0", advertise_host="127.0.0.1", auth_keys=KEY) as broker:
        assert broker.address == f"http://127.0.0.1:{broker.port}"
        assert "bearer tokens required" in broker.exposure() and "anyone" not in broker.exposure()


@pytest.mark.parametrize(
    "host, loopback, wildcard",
    [("127.0.0.1", True, False), ("::1", True, False), ("localhost", True, False), ("0.0.0.0", False, True)]
    + [("::", False, True), ("10.1.2.3", False, False), ("example.org", False, False)],
)
def test_host_classification(host, loopback, wildcard):
    assert is_loopback(host) == loopback and is_wildcard(host) == wildcard


# ------------------------------------------------------------------------------- command line


def run(*args: str, env: dict | None = None, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, cwd=ROOT, env=env, timeout=120, check=False)


@pytest.fixture
def auth_broker(tmp_path):
    """A ``pyspark-gazette broker`` process requiring tokens (keys from the environment)."""
    env = {**os.environ, "BROKER_AUTH_KEYS": KEY}
    argv = [*CLI, "broker", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "data")]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
    assert m, line + proc.stderr.read()
    notice = proc.stderr.readline()
    yield m.group(1), notice
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0


def test_cli_broker_says_it_is_loopback_only_and_requires_tokens(auth_broker):
    _, notice = auth_broker
    assert "loopback only" in notice and "bind 0.0.0.0" in notice and "bearer tokens required" in notice


def test_cli_journals_commands_with_tokens_and_keys(auth_broker, tmp_path):
    address = auth_broker[0]
    base = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_AUTH")}
    env = {**base, "BROKER_ADDRESS": address}
    specs = ROOT / "conf" / "journals" / "quickstart.yaml"

    out = run("journals", "list", env=env)
    assert out.returncode == 1 and b"UNAUTHENTICATED" in out.stderr and b"missing" in out.stderr

    # gazctl style: the CLI signs its own token with the keys.
    out = run("journals", "apply", "-f", str(specs), "--broker.auth-keys", KEY, env=env)
    assert out.returncode == 0, out.stderr

    # A token minted by `pyspark-gazette token`, given by flag or environment.
    out = run(
        "token",
        "--cap",
        "READ|LIST",
        "-l",
        "name=quickstart/clicks",
        "--ttl",
        "10m",
        env={**base, "BROKER_AUTH_KEYS": KEY},
    )
    assert out.returncode == 0, out.stderr
    token = out.stdout.decode().strip()
    claims = verify_token(token, KeySet.parse(KEY))
    assert claims.capability == READ | 2 and claims.covers("quickstart/clicks") and not claims.covers("quickstart/x")

    out = run("journals", "list", "--auth-token", token, env=env)
    assert out.returncode == 0 and b"quickstart/clicks" in out.stdout and b"quickstart/views" not in out.stdout
    assert token.encode() not in out.stdout + out.stderr
    out = run(
        "journals", "append", "-j", "quickstart/clicks", stdin=b'{"a":1}\n', env={**env, "BROKER_AUTH_TOKEN": token}
    )
    assert out.returncode == 1 and b"UNAUTHENTICATED" in out.stderr and b"APPEND" in out.stderr
    assert token.encode() not in out.stdout + out.stderr

    wrong = mint_token(base64.b64encode(b"wrong").decode(), "ALL")
    out = run("journals", "read", "-j", "quickstart/clicks", "--broker.auth-token", wrong, env=env)
    assert out.returncode == 1 and b"UNAUTHENTICATED" in out.stderr and wrong.encode() not in out.stderr


def test_cli_token_needs_keys_and_valid_arguments():
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_AUTH")}
    out = run("token", env=env)
    assert out.returncode == 1 and b"--auth-keys" in out.stderr
    out = run("token", "--auth-keys", KEY, "--cap", "READ|WRITE", env=env)
    assert out.returncode == 1 and b"unknown capability" in out.stderr
