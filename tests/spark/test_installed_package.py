"""The user's path: the wheel installed (not editable) into a fresh virtualenv, then
``pyspark-gazette quickstart`` run from an empty directory, as someone who never cloned the
repository would.

The wheel is built from this checkout (``pip wheel --no-deps``) and installed by path; its
dependencies come from the package index (pip's cache makes that quick). The quickstart runs with
a fresh ``HOME`` and an empty working directory and must write only under its documented default
data directory (``$HOME/.cache/pyspark-gazette/quickstart``).
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
ROWS = 3000


def _files(root: pathlib.Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> pathlib.Path:
    """A fresh virtualenv holding the wheel of this checkout; returns its bin directory."""
    tmp = tmp_path_factory.mktemp("wheel")
    # Build from a copy of the sources so the build leaves nothing in the checkout (build/, *.egg-info).
    src = tmp / "src"
    shutil.copytree(
        ROOT,
        src,
        ignore=shutil.ignore_patterns(
            ".venv", ".git", ".bin", ".gazette", "site", "build", "*.egg-info", "__pycache__", ".*_cache", "tests"
        ),
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "PYTHON"))}
    run = lambda *cmd: subprocess.run(  # noqa: E731
        cmd, env=env, cwd=tmp, capture_output=True, text=True, timeout=600, check=False
    )
    out = run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp / "dist"), str(src))
    assert out.returncode == 0, out.stdout + out.stderr
    (wheel,) = (tmp / "dist").glob("pyspark_gazette-*.whl")
    out = run(sys.executable, "-m", "venv", str(tmp / "venv"))
    assert out.returncode == 0, out.stdout + out.stderr
    bin_dir = tmp / "venv" / "bin"
    out = run(str(bin_dir / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel))
    assert out.returncode == 0, out.stdout + out.stderr
    return bin_dir


def test_the_wheel_ships_what_the_quickstart_needs(installed):
    out = subprocess.run(
        [str(installed / "python"), "-c", "import pyspark_gazette; print(pyspark_gazette.__file__)"],
        cwd=installed,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    package = pathlib.Path(out.stdout.strip()).parent
    assert installed.parent in package.parents, f"imported from {package}, not the fresh venv"
    # Equal to the samples in conf/, which the docs show.
    assert (package / "resources" / "quickstart.yaml").read_text() == (
        ROOT / "conf" / "journals" / "quickstart.yaml"
    ).read_text()
    assert (package / "resources" / "log4j2.properties").read_text() == (
        ROOT / "conf" / "log4j2.properties"
    ).read_text()


def test_the_installed_quickstart_runs_from_an_empty_directory(installed, tmp_path):
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYSPARK_", "PYTHON", "XDG_", "BROKER_", "VIRTUAL_ENV")) and k != "HOME"
    }
    env.update(HOME=str(home), PATH=f"{installed}{os.pathsep}{env.get('PATH', '')}")
    out = subprocess.run(
        [str(installed / "pyspark-gazette"), "quickstart", "--rows", str(ROWS)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    data_dir = home / ".cache" / "pyspark-gazette" / "quickstart"
    assert f"data in {data_dir}" in out.stdout
    assert "report" in out.stdout and f"{ROWS:,} (" in out.stdout
    # Not a terminal: each Spark phase prints its final task count once, not a stream of lines.
    for phase in ("writing", "aggregating"):
        line = rf"^      {phase}: (\d+)/\1 tasks(?: \(stages of \d+(?: \+ \d+)+\))?$"
        assert len(re.findall(line, out.stdout, re.M)) == 1, out.stdout
    assert _files(cwd) == [], "the quickstart wrote into the working directory"
    outside = [
        f for f in _files(home) if not (home / f).is_relative_to(data_dir) and (home / f) not in data_dir.parents
    ]
    assert outside == [], f"the quickstart wrote outside its data directory: {outside}"
    assert {p.name for p in data_dir.iterdir()} == {"broker", "store", "checkpoints", "state.json"}
