"""Fuzzing support: every decoder of untrusted bytes or text either parses or raises our own error.

Each target runs a bounded number of hypothesis examples (``GAZETTE_FUZZ_EXAMPLES`` per target,
default 1000) under a watchdog that turns a hang into a failure. What was tried is recorded:
examples, outcomes by exception class, total and slowest time per target, printed at the end of
the run and written to ``GAZETTE_FUZZ_REPORT`` (default ``.fuzz/report.json``).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import pathlib
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

from pyspark_gazette.errors import GazetteError

EXAMPLES = int(os.environ.get("GAZETTE_FUZZ_EXAMPLES", "1000"))
HANG_SECONDS = float(os.environ.get("GAZETTE_FUZZ_HANG_SECONDS", "10"))
REPORT_PATH = pathlib.Path(os.environ.get("GAZETTE_FUZZ_REPORT", ".fuzz/report.json"))


class Hang(BaseException):
    """A fuzz input ran longer than HANG_SECONDS (BaseException: no target may swallow it)."""


@contextlib.contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    def fire(signum: int, frame: Any) -> None:
        raise Hang(f"input still running after {seconds}s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class Record:
    """Per-target tally: examples, outcomes, time."""

    def __init__(self) -> None:
        self.targets: dict[str, dict[str, Any]] = {}

    def run(self, target: str, fn: Callable[[], Any]) -> Any:
        """Run one input; our errors count as a clean rejection, anything else fails the test."""
        entry = self.targets.setdefault(
            target, {"examples": 0, "seconds": 0.0, "slowest": 0.0, "outcomes": collections.Counter()}
        )
        start = time.perf_counter()
        try:
            with watchdog(HANG_SECONDS):
                result = fn()
            outcome = "parsed"
        except GazetteError as e:
            result, outcome = e, type(e).__name__
        finally:
            spent = time.perf_counter() - start
            entry["examples"] += 1
            entry["seconds"] += spent
            entry["slowest"] = max(entry["slowest"], spent)
        entry["outcomes"][outcome] += 1
        return result

    def lines(self) -> list[str]:
        out = [f"{'target':34} {'inputs':>7} {'seconds':>8} {'slowest':>8}  outcomes"]
        for name, e in sorted(self.targets.items()):
            outcomes = ", ".join(f"{k} {v}" for k, v in e["outcomes"].most_common())
            out.append(f"{name:34} {e['examples']:7d} {e['seconds']:8.2f} {e['slowest']:8.3f}  {outcomes}")
        return out

    def save_part(self) -> None:
        """Write this process's tally beside the report (one part per pytest-xdist worker, or
        ``main``); :func:`merge_parts` joins them at the end of the run."""
        if not self.targets:
            return
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        REPORT_PATH.parent.mkdir(parents=True, exist_ok=True)
        data = {k: {**v, "outcomes": dict(v["outcomes"])} for k, v in self.targets.items()}
        REPORT_PATH.with_name(f"{REPORT_PATH.stem}.part-{worker}.json").write_text(json.dumps(data))


def merge_parts() -> Record | None:
    """Join the parts the run's processes wrote into REPORT_PATH (removing the parts); None when
    no fuzz test ran."""
    parts = sorted(REPORT_PATH.parent.glob(f"{REPORT_PATH.stem}.part-*.json"))
    if not parts:
        return None
    merged = Record()
    for part in parts:
        for name, e in json.loads(part.read_text()).items():
            merged.targets[name] = {**e, "outcomes": collections.Counter(e["outcomes"])}
        part.unlink()
    data = {k: {**v, "outcomes": dict(v["outcomes"])} for k, v in merged.targets.items()}
    REPORT_PATH.write_text(json.dumps({"examples_per_target": EXAMPLES, "targets": data}, indent=2))
    return merged


def clear_parts() -> None:
    for part in REPORT_PATH.parent.glob(f"{REPORT_PATH.stem}.part-*.json"):
        part.unlink()


RECORD = Record()
