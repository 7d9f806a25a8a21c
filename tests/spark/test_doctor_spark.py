"""``pyspark-gazette doctor --spark``: the one-row read through a local Spark session, the way the
user's own script would run it: it passes with PYSPARK_PYTHON set to a Python that has the
package, and with one that lacks it turns Spark's DATA_SOURCE_NOT_FOUND into one line saying what
to set (tests/integration/test_doctor.py has the checks that need no Spark)."""

from __future__ import annotations

import os
import subprocess
import sys
import venv

import pytest

pytestmark = pytest.mark.slow

JOURNAL = "doctor/rows"


def doctor(*args: str, python: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "BROKER_ADDRESS")
    }
    env["PYSPARK_PYTHON"] = python
    return subprocess.run(
        [sys.executable, "-m", "pyspark_gazette.cli", "doctor", "--spark", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.fixture
def journal(create_journal, client):
    create_journal(JOURNAL)
    client.append(JOURNAL, b'{"n": 1}\n{"n": 2}\n')
    return JOURNAL


def _line(out: str, name: str) -> str:
    return next(ln for ln in out.splitlines() if ln.split(" ", 1)[-1].strip().startswith(f"{name}: "))


def test_a_one_row_read_through_spark(broker, journal):
    done = doctor("--broker.address", broker.address, "-j", journal, python=sys.executable)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert _line(done.stdout, "Spark") == f"ok   Spark: a local Spark session read 1 row(s) of {journal}"


def test_workers_without_the_package_fail_the_spark_read_in_one_line(broker, journal, tmp_path):
    venv.EnvBuilder(with_pip=False).create(tmp_path / "bare")
    bare = str(tmp_path / "bare" / "bin" / "python")
    done = doctor("--broker.address", broker.address, "-j", journal, python=bare)
    assert done.returncode == 1
    assert _line(done.stdout, "Spark workers' Python").startswith("FAIL ")
    line = _line(done.stdout, "Spark")
    assert line.startswith("FAIL Spark: Spark's Python workers cannot import pyspark_gazette (DATA_SOURCE_NOT_FOUND)")
