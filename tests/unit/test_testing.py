"""The streaming sink's hold hook (:func:`pyspark_gazette.testing.stream_hold`):
where its point comes from, and that only the first process reaching the point holds."""

from __future__ import annotations

from pyspark_gazette import testing
from pyspark_gazette.testing import STREAM_HOLD_ENV as HOLD_ENV

hold = testing.stream_hold


class Ctx:
    """A TaskContext stand-in carrying Spark local properties."""

    def __init__(self, props: dict[str, str]):
        self.props = props

    def getLocalProperty(self, key: str):  # noqa: N802  (Spark's name)
        return self.props.get(key)


def test_no_point_or_another_point_does_not_hold(tmp_path, monkeypatch):
    monkeypatch.delenv(HOLD_ENV, raising=False)
    hold("task-end", 1)
    hold("task-end", 1, Ctx({}))
    hold("task-start", 1, Ctx({HOLD_ENV: f"task-end:1:{tmp_path}"}))
    hold("task-end", 2, Ctx({HOLD_ENV: f"task-end:1:{tmp_path}"}))
    assert list(tmp_path.iterdir()) == []


def test_a_point_already_held_lets_later_processes_go_on(tmp_path, monkeypatch):
    """A retry reaching the point after the first holder was killed goes on (no second hold)."""
    monkeypatch.delenv(HOLD_ENV, raising=False)
    (tmp_path / "task-end-1").write_text("12345")
    hold("task-end", 1, Ctx({HOLD_ENV: f"task-end:1:{tmp_path}"}))  # returns
    monkeypatch.setenv(HOLD_ENV, f"task-end:1:{tmp_path}")
    hold("task-end", 1)  # the environment's point, same rule
    assert [p.name for p in tmp_path.iterdir()] == ["task-end-1"]  # no draft left behind
    assert (tmp_path / "task-end-1").read_text() == "12345"


def test_an_rpc_hold_holds_the_first_caller_of_its_kind_and_journal_until_released(tmp_path, monkeypatch):
    import threading

    monkeypatch.setattr(testing, "SETTLE_DIR", str(tmp_path))
    journal = "hold/a"
    testing.rpc_hold("append", journal, "http://x:1", 5)  # not armed: returns at once
    held, _ = testing.arm_hold("append", journal)
    assert testing.armed_journals("append") == {journal} and testing.armed_journals("heads") == set()
    testing.rpc_hold("heads", journal, "http://x:1")  # another kind: not held
    first = threading.Thread(target=testing.rpc_hold, args=("append", journal, "http://x:1", 5))
    first.start()
    first.join(0.3)
    assert first.is_alive() and open(held).read().split()[1:] == ["5", "http://x:1"]
    testing.rpc_hold("append", journal, "http://x:2", 6)  # a later caller goes on
    testing.release_hold("append", journal)
    first.join(5)
    assert not first.is_alive()
    testing.disarm_hold("append", journal)
    assert testing.armed_journals("append") == set()


def _forbid_files(monkeypatch):
    """Every way a hook could look at the filesystem raises."""
    import builtins

    def forbidden(*args, **kwargs):
        raise AssertionError(f"a filesystem call with the hooks off: {args!r}")

    for name in ("exists", "isdir", "isfile"):
        monkeypatch.setattr(testing.os.path, name, forbidden)
    for name in ("stat", "listdir", "link", "unlink", "replace", "makedirs", "write"):
        monkeypatch.setattr(testing.os, name, forbidden)
    monkeypatch.setattr(testing.tempfile, "mkstemp", forbidden)
    monkeypatch.setattr(builtins, "open", forbidden)


def test_hooks_off_touch_no_file_and_ignore_armed_markers(tmp_path, monkeypatch):
    """Without the switch (production), a marker that would arm a hook has no effect and no hook
    looks at the filesystem: another user's file in the shared folder cannot pause a job."""
    import types

    journal = "hold/off"
    monkeypatch.setattr(testing, "SETTLE_DIR", str(tmp_path))
    monkeypatch.setenv(HOLD_ENV, f"task-end:1:{tmp_path}")
    monkeypatch.setenv(testing.FAIL_FIRST_ATTEMPT_ENV, "3")
    for kind in testing.HOLD_KINDS:  # what arm_hold and arm_settle_wait would leave, by hand
        (tmp_path / f"{testing._settle_name(journal)}.{kind}-armed").touch()
    (tmp_path / f"{testing._settle_name(journal)}.armed").touch()
    (tmp_path / "armed").touch()  # the broker's --test-hold-dir
    before = sorted(p.name for p in tmp_path.iterdir())
    monkeypatch.setattr(testing, "ENABLED", False)
    _forbid_files(monkeypatch)
    core = types.SimpleNamespace(hold_dir=str(tmp_path), stopping=False)
    hold("task-end", 1)
    hold("task-end", 1, Ctx({HOLD_ENV: f"task-end:1:{tmp_path}"}))
    assert testing.fail_first_attempt_after(0, 0) == 0
    testing.hold_rpc(core, "append", journal)
    testing.settle_waiting(journal, [(0, 10)])
    assert not testing.hold_armed("append", journal)
    assert testing.armed_journals("heads") == frozenset()
    for kind in testing.HOLD_KINDS:
        testing.rpc_hold(kind, journal, "http://x:1", 1)  # would block until released if armed
    testing.read_hold(journal, 0, 10, "http://x:1")
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no marker written


def test_the_switch_is_read_once_at_import_and_arming_without_it_is_an_error(tmp_path):
    """The variable as the process had it when it imported the package decides; a test that arms
    a hook in a process without it is told so, not left waiting for a marker that never comes."""
    import os
    import subprocess
    import sys

    script = (
        "import os, sys\n"
        "import pyspark_gazette.testing as t\n"
        "os.environ[t.HOOKS_ENV] = '1'\n"  # too late: read at import
        "print(t.ENABLED)\n"
        "try:\n"
        "    t.arm_hold('append', 'j/a')\n"
        "except RuntimeError as e:\n"
        "    print(e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != testing.HOOKS_ENV}
    env["PYSPARK_GAZETTE_TESTING_DIR"] = str(tmp_path)
    off = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert off.returncode == 0, off.stderr
    enabled, message = off.stdout.splitlines()
    assert enabled == "False"
    assert message.startswith("arm_hold: the test hooks are off") and testing.HOOKS_ENV in message
    assert list(tmp_path.iterdir()) == []
    on = subprocess.run(
        [sys.executable, "-c", "import pyspark_gazette.testing as t; print(t.ENABLED)"],
        env={**env, testing.HOOKS_ENV: "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert on.stdout.strip() == "True", on.stderr
