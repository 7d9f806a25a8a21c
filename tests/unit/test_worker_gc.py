"""pyspark_gazette.spark.worker_gc: what a reused Python worker of pyspark's daemon freezes.

The daemon is not started here: ``__main__`` is replaced by a module whose spec names
``pyspark.daemon`` (what ``python -m pyspark.daemon`` makes it), and the worker's environment
is set as the daemon's is. What Spark does with it is measured in bench/bench_read.py (g).
"""

from __future__ import annotations

import gc
import importlib.machinery
import sys
import types

import pytest

from pyspark_gazette.spark import worker_gc
from pyspark_gazette.spark.surface import plain


@pytest.fixture
def fresh(monkeypatch):
    """The module as a new process sees it, the collector unfrozen before and after."""
    gc.unfreeze()
    monkeypatch.setattr(worker_gc, "_pid", 0)
    monkeypatch.setattr(worker_gc, "_entries", 0)
    yield
    gc.unfreeze()


def as_daemon_worker(monkeypatch, *, reuse: str | None = "1", main: str = "pyspark.daemon") -> None:
    module = types.ModuleType("__main__")
    module.__spec__ = importlib.machinery.ModuleSpec(main, None)
    monkeypatch.setitem(sys.modules, "__main__", module)
    if reuse is None:
        monkeypatch.delenv("SPARK_REUSE_WORKER", raising=False)
    else:
        monkeypatch.setenv("SPARK_REUSE_WORKER", reuse)
    monkeypatch.delenv(worker_gc.FREEZE_ENV, raising=False)


def frozen(obj) -> bool:
    """Whether the collector has moved ``obj`` to its permanent generation (the frozen count
    alone can fall while a test runs: frozen objects that die leave it)."""
    assert gc.is_tracked(obj)
    return not any(o is obj for o in gc.get_objects())  # lists generations 0-2, not the frozen


def test_a_reused_worker_freezes_at_its_first_two_entries_only(fresh, monkeypatch):
    as_daemon_worker(monkeypatch)
    keep = [object() for _ in range(10)], {"a": [1]}  # tracked containers alive at entry
    worker_gc.settle()
    assert frozen(keep) and frozen(keep[1])
    more = [[i] for i in range(1000)]  # what the first task imported or cached
    assert not frozen(more)
    worker_gc.settle()
    assert frozen(more) and frozen(more[-1])
    later = [[i] for i in range(1000)]
    worker_gc.settle()  # the third entry and after: later tasks' objects stay collectable
    assert not frozen(later) and not frozen(later[0])


def test_entry_points_settle_through_plain(fresh, monkeypatch):
    as_daemon_worker(monkeypatch)

    alive = [0]

    @plain
    def entry():
        return frozen(alive)

    @plain
    def gen_entry():
        yield frozen(alive)

    assert entry()
    gc.unfreeze()
    assert next(gen_entry())


@pytest.mark.parametrize(
    "setting",
    [
        {"reuse": None},  # spark.python.worker.reuse=false: the daemon does not collect
        {"main": "pytest"},  # a driver, a test, a worker run without the daemon
        {"off": True},  # PYSPARK_GAZETTE_FREEZE_IMPORTS=0
    ],
    ids=["no-reuse", "not-the-daemon", "turned-off"],
)
def test_nothing_is_frozen_elsewhere(fresh, monkeypatch, setting):
    as_daemon_worker(monkeypatch, reuse=setting.get("reuse", "1"), main=setting.get("main", "pyspark.daemon"))
    if setting.get("off"):
        monkeypatch.setenv(worker_gc.FREEZE_ENV, "0")
    alive = [0]
    for _ in range(3):
        worker_gc.settle()
    assert gc.get_freeze_count() == 0 and not frozen(alive)


def test_a_forked_process_counts_its_entries_again(fresh, monkeypatch):
    as_daemon_worker(monkeypatch)
    worker_gc.settle()
    worker_gc.settle()
    gc.unfreeze()
    alive = [0]
    worker_gc.settle()
    assert not frozen(alive)  # this process has had its two
    monkeypatch.setattr(worker_gc.os, "getpid", lambda: worker_gc._pid + 1)  # as after a fork
    worker_gc.settle()
    assert frozen(alive)
