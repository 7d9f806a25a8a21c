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
