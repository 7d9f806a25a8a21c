"""The user's path: the install ``make quickstart`` runs, then the wheel installed (not editable)
into the same fresh virtualenv and ``pyspark-gazette quickstart`` run from an empty directory, as
someone who never cloned the repository would.

One virtualenv serves both (its dependencies are the slow part): first the Makefile's own install
step (``make VENV=<tmp>/venv <tmp>/venv/.installed-run``, the target ``make quickstart`` depends on)
runs in a copy of this checkout, as a newcomer's first ``make quickstart`` does; then the wheel,
built from the same copy (``pip wheel --no-deps``), replaces the editable install, and ``pip check``
holds its declared dependencies to what is installed. The quickstart runs with a fresh ``HOME`` and
an empty working directory and must write only under its documented default data directory
(``$HOME/.cache/pyspark-gazette/quickstart``).
"""

from __future__ import annotations

import dataclasses
import json
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


# What `make quickstart` must not install: the development toolchain (`make test` and friends).
DEV_TOOLS = ("pytest", "ruff", "mypy", "mkdocs", "moto", "hypothesis")


@dataclasses.dataclass
class MakeInstall:
    src: pathlib.Path  # the copy of the checkout make ran in
    venv: pathlib.Path
    output: str  # make's stdout and stderr, interleaved as a terminal shows them
    packages: set[str]  # distributions in the venv after make (normalized names)
    imported_from: str  # pyspark_gazette.__file__ in the venv's python after make


def _run(cmd, *, cwd, env, timeout=900):
    return subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def make_install(tmp_path_factory) -> MakeInstall:
    """A fresh virtualenv installed by the Makefile step `make quickstart` runs, in a copy of the checkout."""
    tmp = tmp_path_factory.mktemp("wheel")
    # A copy of the sources, so neither make nor the wheel build leaves anything in the checkout.
    src = tmp / "src"
    shutil.copytree(
        ROOT,
        src,
        ignore=shutil.ignore_patterns(
            ".venv*",
            ".git",
            ".bin",
            ".tools",
            ".gazette",
            "site",
            "build",
            "*.egg-info",
            "__pycache__",
            ".*_cache",
            "tests",
            # what runs of the tests, CI and the quickstart leave in a checkout (GBs: package
            # caches, the cluster tier's executor venv), which a newcomer's clone does not have
            ".ci-*",
            ".cluster-python",
            ".fuzz",
            ".hypothesis",
            "quickstart-data",
            "spark-warehouse",
            "metastore_db",
        ),
    )
    # Nothing of this process's venv, python or make invocation leaks into the user's make.
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "PYTHON", "VIRTUAL_ENV", "MAKE", "MFLAGS"))
    }
    venv = tmp / "venv"
    out = subprocess.run(
        ["make", f"VENV={venv}", f"PYTHON={sys.executable}", f"{venv}/.installed-run"],
        cwd=src,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=900,
        check=False,
    )
    assert out.returncode == 0, out.stdout
    python = venv / "bin" / "python"
    listed = _run([python, "-m", "pip", "list", "--format=json"], cwd=tmp, env=env)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    probe = _run([python, "-c", "import pyspark_gazette; print(pyspark_gazette.__file__)"], cwd=tmp, env=env)
    assert probe.returncode == 0, probe.stdout + probe.stderr
    return MakeInstall(
        src=src,
        venv=venv,
        output=out.stdout,
        packages={re.sub(r"[-_.]+", "-", p["name"]).lower() for p in json.loads(listed.stdout)},
        imported_from=probe.stdout.strip(),
    )


@pytest.fixture(scope="module")
def installed(make_install) -> pathlib.Path:
    """The same virtualenv with the wheel of this checkout instead of the editable install; its bin directory."""
    tmp, src = make_install.src.parent, make_install.src
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "PYTHON", "VIRTUAL_ENV"))}
    out = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp / "dist", src], cwd=tmp, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    (wheel,) = (tmp / "dist").glob("pyspark_gazette-*.whl")
    bin_dir = make_install.venv / "bin"
    pip = [bin_dir / "python", "-m", "pip"]
    out = _run([*pip, "install", "-q", "--no-deps", "--force-reinstall", wheel], cwd=tmp, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    out = _run([*pip, "check"], cwd=tmp, env=env)  # the wheel's declared dependencies are all installed
    assert out.returncode == 0, out.stdout + out.stderr
    return bin_dir


def test_make_quickstart_installs_only_the_runtime_and_says_so_first(make_install):
    """`make quickstart`'s install step: what and how long before pip's output, pip's own progress
    shown, no development tool, no setuptools `project.license` deprecation banner, and the package
    importable from the venv it made."""
    lines = make_install.output.splitlines()

    def first(pattern: str) -> int:
        found = [i for i, line in enumerate(lines) if re.search(pattern, line)]
        assert found, f"no line matching {pattern!r} in make's output:\n{make_install.output}"
        return found[0]

    what = first(r"^==> installing pyspark-gazette and its runtime dependencies into .*venv")
    how_long = first(r"first run only; .*typically \d+-\d+ minutes")
    pip_starts = first(r"^(Obtaining|Processing|Collecting|Looking in) ")
    assert what < how_long < pip_starts, make_install.output
    # pip's own progress is shown (the install is not `pip -q`), one package after another.
    assert first(r"^Collecting pyspark\b") > pip_starts
    assert first(r"^Successfully installed .*pyspark-gazette-") > pip_starts
    assert "deprecated" not in make_install.output and "project.license" not in make_install.output, make_install.output
    assert make_install.packages.isdisjoint(DEV_TOOLS), sorted(make_install.packages & set(DEV_TOOLS))
    assert {"pyspark", "pyarrow", "grpcio", "pyspark-gazette"} <= make_install.packages
    # Editable: the venv's python imports the package from the copy make ran in.
    assert pathlib.Path(make_install.imported_from).is_relative_to(make_install.src / "connector")
    assert (make_install.venv / ".installed-run").exists() and not (make_install.venv / ".installed").exists()


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
    # The optional C scanner of typed reads is built into the wheel where a compiler is (CI).
    if os.environ.get("GAZETTE_REQUIRE_TOOLS") == "1":
        assert list(package.glob("_jsonscan*")), f"the wheel has no C scanner: {sorted(os.listdir(package))}"


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
