"""The CLI never hides or creates data loss (issue 15).

``journals read`` over a fragment that is missing or damaged, or over a hole the broker waits
on, reports each range on stderr and exits 1, or with ``--fail-on-data-loss false`` skips it and
goes on; ``journals append`` refuses content that would leave a newline-framed journal's last
message open; bad files, Ctrl-C and a closed pipe give one line or a clean exit, no traceback.

The broker is an embedded one in this process (real gRPC on loopback); the CLI runs as a child
process, as a user runs it.
"""

from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess
import sys

import pytest

from pyspark_gazette.broker import EmbeddedBroker
from pyspark_gazette.client import Change, ClientConfig, JournalClient
from pyspark_gazette.client.specs import load_specs
from pyspark_gazette.fragments import FragmentRef

CLI = [sys.executable, "-m", "pyspark_gazette.cli"]


def run(*args: str, address: str, stdin: bytes | None = None, cwd=None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BROKER_", "PYSPARK_GAZETTE_"))}
    return subprocess.run(
        [*CLI, *args, "--broker.address", address],
        input=stdin,
        capture_output=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )


SPECS = """
name: cli/
replication: 1
fragment: {length: 1024, compression_codec: NONE, stores: ["file:///store/"], refresh_interval: 1h}
children:
  - name: cli/events
    labels: [{name: content-type, value: application/x-ndjson}]
  - name: cli/text
    labels: [{name: content-type, value: text/plain}]
  - name: cli/bytes
"""


@pytest.fixture
def env(tmp_path):
    store = tmp_path / "store"
    with (
        EmbeddedBroker(str(tmp_path / "broker"), file_root=str(store)) as broker,
        JournalClient(ClientConfig(broker.address, file_root=str(store))) as client,
    ):
        client.apply([Change(expect_mod_revision=0, upsert=n.spec) for n in load_specs(SPECS)])
        yield broker, client, store


def fill(broker, client) -> tuple[bytes, FragmentRef]:
    """Five appends to cli/events, each rolling the 1 KiB fragment before it; returns the content
    and the second persisted fragment."""
    for b in range(5):
        client.append(
            "cli/events", b"".join(b'{"n": %d, "pad": "%s"}\n' % (i, b"x" * 20) for i in range(b * 30, b * 30 + 30))
        )
    data = client.read_all("cli/events")
    assert broker.wait_persisted(30)
    persisted = [FragmentRef.from_proto(f.spec) for f in client.list_fragments("cli/events") if f.spec.backing_store]
    assert len(persisted) >= 3
    return data, persisted[1]


def path_of(store: pathlib.Path, ref: FragmentRef) -> pathlib.Path:
    return store / "store" / ref.content_path


@pytest.mark.parametrize("direct", [False, True], ids=["through-broker", "direct"])
def test_read_over_a_deleted_fragment_fails_naming_it_or_skips_it_when_told(env, direct):
    broker, client, store = env
    data, ref = fill(broker, client)
    path_of(store, ref).unlink()  # the broker's index still lists it
    extra = ["--file-root", str(store)] if direct else []

    out = run("journals", "read", "-j", "cli/events", *extra, address=broker.address)
    assert out.returncode == 1, out.stderr
    assert out.stdout == data[: ref.begin]
    err = out.stderr.decode()
    assert f"data loss: journal 'cli/events' offsets [{ref.begin}, {ref.end})" in err and ref.content_path in err
    assert "Traceback" not in err

    out = run("journals", "read", "-j", "cli/events", "--fail-on-data-loss", "false", *extra, address=broker.address)
    assert out.returncode == 0, out.stderr
    assert out.stdout == data[: ref.begin] + data[ref.end :]
    lines = out.stderr.decode().splitlines()
    assert len([ln for ln in lines if ln.startswith("data loss:")]) == 1
    assert f"[{ref.begin}, {ref.end})" in lines[0] and ref.content_path in lines[0]


def test_read_over_a_hole_the_broker_waits_on_is_reported(env):
    """After a refresh the deleted fragment is gone from the index: a young hole, which brokers
    do not jump (they answer OFFSET_NOT_YET_AVAILABLE below the write head)."""
    broker, client, store = env
    data, ref = fill(broker, client)
    path_of(store, ref).unlink()
    broker.refresh("cli/events")
    assert ref.begin not in {f.spec.begin for f in client.list_fragments("cli/events")}

    out = run("journals", "read", "-j", "cli/events", address=broker.address)
    assert out.returncode == 1 and out.stdout == data[: ref.begin]
    assert f"data loss: journal 'cli/events' offsets [{ref.begin}, {ref.end})" in out.stderr.decode()

    out = run("journals", "read", "-j", "cli/events", "--fail-on-data-loss", "false", address=broker.address)
    assert out.returncode == 0 and out.stdout == data[: ref.begin] + data[ref.end :]
    assert f"[{ref.begin}, {ref.end})" in out.stderr.decode()


@pytest.mark.parametrize("journal", ["cli/events", "cli/text"])
def test_append_refuses_a_last_message_without_its_newline(env, tmp_path, journal):
    broker, client, _ = env
    out = run("journals", "append", "-j", journal, stdin=b'{"a": 1}\n{"a": 2}', address=broker.address)
    assert out.returncode == 1
    err = out.stderr.decode()
    assert err.count("\n") == 1 and "does not end with a newline" in err and journal in err
    assert client.read_all(journal) == b""  # nothing appended

    f = tmp_path / "msgs"
    f.write_bytes(b'{"a": 3}')
    out = run("journals", "append", "-j", journal, "-f", str(f), address=broker.address)
    assert out.returncode == 1 and b"does not end with a newline" in out.stderr

    out = run("journals", "append", "-j", journal, stdin=b'{"a": 1}\n{"a": 2}\n', address=broker.address)
    assert out.returncode == 0 and client.read_all(journal) == b'{"a": 1}\n{"a": 2}\n'


def test_append_of_raw_bytes_to_an_unframed_journal_is_unchanged(env):
    broker, client, _ = env
    out = run("journals", "append", "-j", "cli/bytes", stdin=b"\x00\x01", address=broker.address)
    assert out.returncode == 0, out.stderr
    assert client.read_all("cli/bytes") == b"\x00\x01"


def test_apply_of_a_missing_or_bad_file_is_one_line(env, tmp_path):
    broker, _, _ = env
    out = run("journals", "apply", "-f", str(tmp_path / "missing.yaml"), address=broker.address)
    assert out.returncode == 1
    assert out.stderr.decode() == f"error: -f {tmp_path / 'missing.yaml'}: No such file or directory\n"
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    out = run("journals", "apply", "-f", str(bad), address=broker.address)
    assert out.returncode == 1 and out.stderr.decode().startswith(f"error: -f {bad}: ")
    assert b"Traceback" not in out.stderr and b"line 2" in out.stderr


def test_a_closed_pipe_ends_the_read_quietly(env):
    broker, client, _ = env
    client.append("cli/bytes", b"line\n" * 200_000)  # more than a pipe buffer
    env_ = {k: v for k, v in os.environ.items() if not k.startswith(("BROKER_", "PYSPARK_GAZETTE_"))}
    proc = subprocess.Popen(
        [*CLI, "journals", "read", "-j", "cli/bytes", "--broker.address", broker.address],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env_,
    )
    try:
        assert proc.stdout.read(5) == b"line\n"
        proc.stdout.close()  # what `| head -1` does after its line
        err = proc.stderr.read()
        assert proc.wait(timeout=60) == 0
        assert err == b""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_ctrl_c_on_a_blocking_read_exits_cleanly(env):
    broker, client, _ = env
    client.append("cli/bytes", b"first\n")
    env_ = {k: v for k, v in os.environ.items() if not k.startswith(("BROKER_", "PYSPARK_GAZETTE_"))}
    proc = subprocess.Popen(
        [*CLI, "journals", "read", "-j", "cli/bytes", "--block", "--broker.address", broker.address],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env_,
    )
    try:
        assert proc.stdout.read(6) == b"first\n"  # it is reading, and now waits for more
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
        err = proc.stderr.read().decode()
        assert err == "interrupted\n", err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_fragments_prints_persist_times_as_utc(env):
    broker, client, store = env
    fill(broker, client)
    out = run("journals", "fragments", "-j", "cli/events", address=broker.address)
    assert out.returncode == 0, out.stderr
    rows = out.stdout.decode().splitlines()[1:]
    persisted = [r for r in rows if "file:///store/" in r]
    assert persisted and all(re.search(r"\b20\d\d-\d\d-\d\dT\d\d:\d\d:\d\dZ\b", r) for r in persisted)


def test_apply_reports_every_bad_field_at_once_and_applies_nothing(env, tmp_path):
    broker, client, _ = env
    specs = tmp_path / "bad-fields.yaml"
    specs.write_text(
        "name: bad/\nreplication: 9\n"
        "fragment: {length: 10, compression_codec: NONE, refresh_interval: 1m}\n"
        "children:\n  - name: bad/one\n  - name: bad/two\n    fragment: {flush_interval: 5s}\n"
    )
    out = run("journals", "apply", "-f", str(specs), address=broker.address)
    assert out.returncode == 1
    err = out.stderr.decode()
    assert err.startswith(f"error: -f {specs}: 5 problem(s), nothing applied:")
    for journal in ("bad/one", "bad/two"):
        assert f"journal '{journal}': replication must be 1..5 (got 9)" in err
        assert f"journal '{journal}': fragment.length must be 1024.." in err
    assert "journal 'bad/two': fragment.flush_interval must be 0 or at least 1m" in err
    assert not [i for i in client.list_journals() if i.name.startswith("bad/")]
