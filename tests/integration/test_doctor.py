"""``pyspark-gazette doctor`` as a user runs it: a separate process against an embedded broker
whose journal has a persisted fragment in a file store, first set up right, then with each
mistake it is there to catch (one FAIL line saying what to do, exit status 1)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import venv

import pytest

from journalspecs import make_spec
from pyspark_gazette.client import Change, ClientConfig, JournalClient
from pyspark_gazette.protocol.auth import ALL, mint_token

CLI = [sys.executable, "-m", "pyspark_gazette.cli", "doctor"]
JOURNAL = "doctor/events"
KEY = "c2VjcmV0LWtleS1mb3ItZG9jdG9yLXRlc3Rz"  # base64 of a test-only signing key


def doctor(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    """Exit status, ``{check name: its line}`` and the whole output of one doctor run."""
    base = {
        k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "BROKER_ADDRESS")
    }
    done = subprocess.run(
        [*CLI, *args], env={**base, **(env or {})}, capture_output=True, text=True, timeout=300, check=False
    )
    lines = {}
    for line in done.stdout.splitlines():
        status, _, rest = line.partition(" ")
        name, sep, _ = rest.strip().partition(": ")
        if sep and status in ("ok", "warn", "FAIL"):
            lines[name] = line
    return done.returncode, lines, done.stdout + done.stderr


@pytest.fixture
def persisted(make_broker, file_root):
    """A broker (with auth when asked) and a journal with one persisted fragment in its file store."""

    def make(**kwargs):
        broker = make_broker(**kwargs)
        token = mint_token(KEY, ALL) if kwargs.get("auth_keys") else None
        with JournalClient(ClientConfig(broker.address, auth_token=token, file_root=file_root)) as c:
            c.apply([Change(expect_mod_revision=0, upsert=make_spec(JOURNAL, store="file:///doctor/"))])
            c.append(JOURNAL, b"".join(b'{"n": %d}\n' % i for i in range(100)))
        broker.roll(JOURNAL)
        assert broker.wait_persisted()
        return broker

    return make


@pytest.fixture
def bare_python(tmp_path) -> pathlib.Path:
    """A Python without the package (a fresh virtualenv, no pip)."""
    venv.EnvBuilder(with_pip=False).create(tmp_path / "bare")
    return tmp_path / "bare" / "bin" / "python"


def test_a_good_set_up_passes_every_check(persisted, file_root):
    broker = persisted()
    code, lines, out = doctor(
        "--broker.address",
        broker.address,
        "--file-root",
        file_root,
        "-j",
        JOURNAL,
        env={"PYSPARK_PYTHON": sys.executable},
    )
    assert code == 0, out
    for name in ("package", "Spark workers' Python", "Java", "broker", "journal", "fragment store"):
        assert lines[name].startswith("ok "), out
    assert f"{sys.executable} (Python " in lines["Spark workers' Python"]
    assert "; PYSPARK_PYTHON)" in lines["Spark workers' Python"]
    assert f"journal: {JOURNAL}: ndjson framing, read-write" in lines["journal"]
    assert (
        "byte(s) of file:///doctor/" in lines["fragment store"] and "directly from the store" in lines["fragment store"]
    )
    from pyspark_gazette import native

    assert lines["C scanner"].startswith("ok " if native.extension() is not None else "warn ")
    assert out.splitlines()[-1] == "all checks passed"


def test_pyspark_python_without_the_package_fails_with_what_to_set(persisted, file_root, bare_python):
    broker = persisted()
    code, lines, out = doctor(
        "--broker.address", broker.address, "--file-root", file_root, env={"PYSPARK_PYTHON": str(bare_python)}
    )
    assert code == 1, out
    line = lines["Spark workers' Python"]
    assert line.startswith("FAIL ") and "cannot import pyspark_gazette" in line and "DATA_SOURCE_NOT_FOUND" in line
    assert f"set PYSPARK_PYTHON={sys.executable}" in line
    assert lines["broker"].startswith("ok "), out  # the other checks still run
    assert out.splitlines()[-1] == "1 check(s) failed: Spark workers' Python"


def test_unset_pyspark_python_checks_python3_from_the_path(persisted, bare_python):
    broker = persisted()
    code, lines, out = doctor(
        "--broker.address", broker.address, env={"PATH": f"{bare_python.parent}:{os.environ['PATH']}"}
    )
    assert code == 1, out
    line = lines["Spark workers' Python"]
    assert "PYSPARK_PYTHON unset: python3 from the PATH" in line and "cannot import pyspark_gazette" in line


def test_pyspark_driver_python_comes_first(persisted, bare_python):
    """Spark runs Python data sources with PYSPARK_DRIVER_PYTHON when it is set (a notebook
    set-up often sets it), whatever PYSPARK_PYTHON says."""
    broker = persisted()
    code, lines, out = doctor(
        "--broker.address",
        broker.address,
        env={"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": str(bare_python)},
    )
    assert code == 1, out
    line = lines["Spark workers' Python"]
    assert "; PYSPARK_DRIVER_PYTHON) cannot import pyspark_gazette" in line
    assert f"set PYSPARK_DRIVER_PYTHON={sys.executable} or unset it" in line


def test_a_wrong_broker_address_fails_naming_it(persisted, file_root):
    broker = persisted()
    port = broker.port
    broker.stop(grace=1)  # nothing listens at its address now
    code, lines, out = doctor("--broker.address", f"http://127.0.0.1:{port}", env={"PYSPARK_PYTHON": sys.executable})
    assert code == 1, out
    assert lines["broker"].startswith(f"FAIL broker: nothing answered at broker.address 'http://127.0.0.1:{port}'")
    assert "check that a broker is running there" in lines["broker"]
    assert "journal" not in lines and "fragment store" not in lines


def test_a_store_this_machine_cannot_read_fails_with_what_to_give(persisted, tmp_path):
    """The brokers persisted to file:///doctor/ under their file root; this machine's --file-root
    is another (empty) directory: the fragment cannot be read directly, as a task could not."""
    broker = persisted()
    elsewhere = tmp_path / "not-the-store"
    elsewhere.mkdir()
    code, lines, out = doctor(
        "--broker.address", broker.address, "--file-root", str(elsewhere), env={"PYSPARK_PYTHON": sys.executable}
    )
    assert code == 1, out
    line = lines["fragment store"]
    assert line.startswith("FAIL fragment store: file:///doctor/") and "could not be read from this machine" in line
    assert "set store.fileRoot (--file-root)" in line and "directReads=false" in line


def test_auth_the_token_given_passes_and_a_missing_one_fails(persisted, file_root):
    broker = persisted(auth_keys=KEY)
    env = {"PYSPARK_PYTHON": sys.executable}
    code, lines, out = doctor(
        "--broker.address", broker.address, "--file-root", file_root, "--broker.auth-keys", KEY, env=env
    )
    assert code == 0, out
    assert "answered with the token given" in lines["broker"]
    code, lines, out = doctor("--broker.address", broker.address, env=env)
    assert code == 1, out
    assert lines["broker"].startswith("FAIL broker: "), out
