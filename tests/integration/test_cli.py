"""The pyspark-gazette command: a broker process and journals commands against it (the quickstart's
tests, which need Spark, are in tests/spark/test_quickstart.py)."""

from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "pyspark_gazette.cli"]


def run(*args: str, stdin: bytes | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, cwd=ROOT, env=env, timeout=120, check=False)


@pytest.fixture
def broker_process(tmp_path):
    proc = subprocess.Popen(
        [
            *CLI,
            "broker",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            str(tmp_path / "data"),
            "--file-root",
            str(tmp_path / "store"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()  # blocks until the broker says it listens
    m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
    assert m, line + proc.stderr.read()
    yield m.group(1), tmp_path / "store"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0


def test_journals_commands_against_a_broker_process(broker_process, tmp_path):
    address, store = broker_process
    env = {**os.environ, "BROKER_ADDRESS": address}
    specs = ROOT / "conf" / "journals" / "quickstart.yaml"
    out = run("journals", "apply", "-f", str(specs), env=env)
    assert out.returncode == 0, out.stderr
    assert b"applied 2 change(s)" in out.stdout

    out = run("journals", "list", env=env)
    assert out.returncode == 0, out.stderr
    assert b"quickstart/clicks " in out.stdout and b"ZSTANDARD" in out.stdout

    out = run("journals", "list", "--format", "yaml", "-l", "app.gazette.dev/message-type=ClickEvent", env=env)
    from pyspark_gazette.client.specs import load_specs

    listed = load_specs(out.stdout.decode())
    assert [n.spec.name for n in listed] == ["quickstart/clicks"] and listed[0].revision > 0

    data = b"".join(b'{"n": %d}\n' % i for i in range(1000))
    out = run("journals", "append", "-j", "quickstart/clicks", stdin=data, env=env)
    assert out.returncode == 0, out.stderr
    assert b"appended [0, %d)" % len(data) in out.stderr

    out = run("journals", "read", "-j", "quickstart/clicks", env=env)
    assert out.returncode == 0 and out.stdout == data
    out = run(
        "journals",
        "read",
        "-j",
        "quickstart/clicks",
        "--offset",
        "9",
        "--end-offset",
        "18",
        "--broker.address",
        address,
    )
    assert out.stdout == data[9:18]

    out = run("journals", "fragments", "-j", "quickstart/clicks", env=env)
    assert out.returncode == 0 and b"(local)" in out.stdout and b"ZSTANDARD" in out.stdout

    out = run("journals", "append", "-j", "quickstart/missing", stdin=b"x", env=env)
    assert out.returncode == 1 and b"JOURNAL_NOT_FOUND" in out.stderr and b"quickstart/missing" in out.stderr


def test_a_dead_first_broker_address_is_passed_over(broker_process):
    address, _ = broker_process
    specs = ROOT / "conf" / "journals" / "quickstart.yaml"
    env = {**os.environ, "BROKER_ADDRESS": f"http://127.0.0.1:1,{address}"}
    out = run("journals", "apply", "-f", str(specs), env=env)
    assert out.returncode == 0, out.stderr
    out = run("journals", "list", "--broker.address", f"http://127.0.0.1:1, {address}")
    assert out.returncode == 0 and b"quickstart/clicks " in out.stdout, out.stderr


def test_unreachable_broker_is_a_clear_error(tmp_path):
    out = run("journals", "list", "--broker.address", "http://127.0.0.1:1")
    assert out.returncode == 1 and b"nothing answered at --broker.address 'http://127.0.0.1:1'" in out.stderr
