"""bench/bench_kafka.py's command line: its defaults and its refusal of an unknown job (nothing is started)."""

from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
import bench_kafka  # noqa: E402


def test_defaults_run_every_job_on_a_million_events() -> None:
    args = bench_kafka.parse_args([])
    assert args.events == 1_000_000
    assert args.rounds == 3
    assert args.jobs.split(",") == list(bench_kafka.JOBS)


def test_a_small_run_is_possible() -> None:
    args = bench_kafka.parse_args(["--events", "200000", "--jobs", "typed,latency", "--latency-seconds", "5"])
    assert (args.events, args.jobs, args.latency_seconds) == (200_000, "typed,latency", 5.0)


def test_an_unknown_job_is_refused_naming_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        bench_kafka.parse_args(["--jobs", "typed,speed"])
    err = capsys.readouterr().err
    assert "--jobs: unknown speed" in err and "catchup" in err


def test_make_events_gives_exactly_that_many_lines() -> None:
    data = bench_kafka.make_events(1000)
    assert data.count(b"\n") == 1000 and data.endswith(b"\n")
