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
