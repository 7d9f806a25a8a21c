"""Edges of the command line a new user hit (issue 25): where ``journals read`` starts, errors in
one line, and a wrong broker address. Each test runs the ``pyspark-gazette`` command as a user
does, in a process of its own, against an embedded broker on a loopback port."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys

import pytest

from pyspark_gazette.broker import EmbeddedBroker
from pyspark_gazette.client import Change, ClientConfig, JournalClient

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "pyspark_gazette.cli"]
SPECS = ROOT / "conf" / "journals" / "quickstart.yaml"
LINES = [b'{"n": %d, "pad": "%s"}\n' % (i, b"x" * (i % 7)) for i in range(50)]
DATA = b"".join(LINES)


def run(*args: str, stdin: bytes | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    return subprocess.run(
        [*CLI, *args], input=stdin, capture_output=True, cwd=ROOT, env=env, timeout=timeout, check=False
    )


def one_error_line(out: subprocess.CompletedProcess) -> str:
    """The process failed with exactly one line on stderr, starting ``error:``; returns it."""
    lines = out.stderr.decode().splitlines()
    assert out.returncode != 0 and len(lines) == 1 and lines[0].startswith("error: "), out.stderr.decode()
    return lines[0]


@pytest.fixture
def clicks(tmp_path):
    """A broker holding the quickstart journals, with ``DATA`` in quickstart/clicks; its address."""
    store = tmp_path / "store"
    with EmbeddedBroker(str(tmp_path / "data"), file_root=str(store)) as broker:
        with JournalClient(ClientConfig(broker.address, file_root=str(store))) as c:
            from pyspark_gazette.client.specs import load_spec_file

            c.apply([Change(expect_mod_revision=-1, upsert=n.spec) for n in load_spec_file(str(SPECS), "-f")])
            c.append("quickstart/clicks", DATA)
        yield broker.address


def read(address: str, *args: str) -> subprocess.CompletedProcess:
    return run("journals", "read", "-j", "quickstart/clicks", "--broker.address", address, *args)


def test_read_from_minus_one_is_the_write_head(clicks):
    out = read(clicks, "--offset", "-1")
    assert (out.returncode, out.stdout, out.stderr) == (0, b"", b"")
    # The journal must exist all the same.
    out = run("journals", "read", "-j", "quickstart/nope", "--offset", "-1", "--broker.address", clicks)
    assert "JOURNAL_NOT_FOUND" in one_error_line(out) and "quickstart/nope" in out.stderr.decode()


def test_read_beyond_the_write_head_is_an_error_naming_the_offset(clicks):
    beyond = len(DATA) + 10
    line = one_error_line(read(clicks, "--offset", str(beyond)))
    assert f"--offset {beyond}" in line and "quickstart/clicks" in line and f"write head {len(DATA)}" in line
    out = read(clicks, "--offset", str(len(DATA)))  # the write head itself: nothing to read
    assert (out.returncode, out.stdout) == (0, b"")


def test_read_from_inside_a_message_starts_at_the_next_message(clicks):
    third = len(LINES[0]) + len(LINES[1])
    for start in (third - len(LINES[1]) + 3, third - 1):  # inside the second message, its last byte
        out = read(clicks, "--offset", str(start))
        assert out.returncode == 0 and out.stdout == DATA[third:], out.stderr
        assert f"offset {start} is inside a message" in out.stderr.decode()
        assert f"at offset {third}" in out.stderr.decode()
    # At a message boundary nothing is dropped and nothing is said.
    out = read(clicks, "--offset", str(third))
    assert (out.returncode, out.stdout, out.stderr) == (0, DATA[third:], b"")
    # --exact-offset copies bytes as asked.
    out = read(clicks, "--offset", str(third - 1), "--end-offset", str(third + 5), "--exact-offset")
    assert (out.returncode, out.stdout) == (0, DATA[third - 1 : third + 5])


def test_broker_on_a_port_in_use_is_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = run("broker", "--listen", f"127.0.0.1:{port}", "--data-dir", str(tmp_path / "d"))
    line = one_error_line(out)
    assert f"127.0.0.1:{port}" in line and "in use" in line


def test_cli_errors_are_one_line(tmp_path, clicks):
    from journalspecs import make_spec
    from pyspark_gazette.client.specs import dump_specs

    escape = tmp_path / "escape.yaml"
    escape.write_text(dump_specs([(make_spec("../escape"), 0)]))
    cases = [
        # an address that is not one
        (("journals", "list", "--broker.address", "ftp://x:1"), "--broker.address"),
        # a file that does not exist
        (
            ("journals", "append", "-j", "quickstart/clicks", "-f", str(tmp_path / "none"), "--broker.address", clicks),
            "none",
        ),
        # a journal that does not exist
        (("journals", "fragments", "-j", "quickstart/nope", "--broker.address", clicks), "quickstart/nope"),
        # a bad duration
        (("journals", "list", "--broker.timeout", "soon", "--broker.address", clicks), "--broker.timeout"),
        # a checkpoint that is not one
        (("journals", "lag", "--checkpoint", str(tmp_path), "--broker.address", clicks), "--checkpoint"),
        # a log config that is not YAML
        (("--log-config", str(SPECS.parent), "journals", "list", "--broker.address", clicks), "--log-config"),
        # a spec only the broker refuses (the embedded broker's '..' rule; Gazette's rules allow it)
        (
            ("journals", "apply", "-f", str(escape), "--broker.address", clicks),
            "error: the broker refused the spec of journal '../escape': "
            "invalid journal name '../escape': must not begin with '..'",
        ),
    ]
    for args, named in cases:
        assert named in one_error_line(run(*args)), args


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("command", ["append", "list", "read"])
def test_a_wrong_broker_address_is_one_sentence_naming_it(command):
    """Nothing listens at the address: every command gives up by the same rule as List (append
    and read no longer wait out --broker.timeout, 1 minute by default, printing a warning per
    retry), with one line naming the flag, the address and what to check."""
    address = f"http://127.0.0.1:{unused_port()}"  # nothing listens there
    args = {
        "append": ("journals", "append", "-j", "quickstart/clicks"),
        "list": ("journals", "list"),
        "read": ("journals", "read", "-j", "quickstart/clicks"),
    }[command]
    line = one_error_line(run(*args, "--broker.address", address, stdin=b'{"n": 1}\n', timeout=50))
    assert line.startswith(f"error: nothing answered at --broker.address {address!r} ("), line
    assert "check that a broker is running there and that the host and port are right" in line
    assert "--broker.timeout" in line


def test_a_wrong_broker_address_from_the_environment_is_named_and_redacted():
    port = unused_port()
    env = {**os.environ, "BROKER_ADDRESS": f"http://user:s3cret@127.0.0.1:{port}"}
    out = subprocess.run(
        [*CLI, "journals", "append", "-j", "quickstart/clicks"],
        input=b'{"n": 1}\n',
        capture_output=True,
        cwd=ROOT,
        env=env,
        timeout=50,
        check=False,
    )
    line = one_error_line(out)
    assert f"nothing answered at BROKER_ADDRESS 'http://REDACTED@127.0.0.1:{port}'" in line, line
    assert "s3cret" not in line


@pytest.mark.parametrize("command", ["read", "fragments", "append"])
def test_a_missing_journal_suggests_the_closest(clicks, command):
    """As the Spark source does for its journals option: a near miss names the journal meant."""
    out = run("journals", command, "-j", "quickstart/click", "--broker.address", clicks, stdin=b'{"n": 1}\n')
    line = one_error_line(out)
    assert "-j 'quickstart/click': no such journal" in line and "(did you mean 'quickstart/clicks'?)" in line, line
    out = run("journals", command, "-j", "elsewhere/xyz", "--broker.address", clicks, stdin=b'{"n": 1}\n')
    assert "did you mean" not in one_error_line(out)
