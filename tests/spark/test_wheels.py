"""The wheels users install (``make wheels``, docs/getting-started.md "Install"), as a user gets them:
built by ``make wheels`` in a copy of the checkout, each installed into a fresh virtualenv (with
its dependencies), used from that virtualenv's own executables without activating it.

* the pure wheel (``py3-none-any``): no C extension, the Python engines; a typed read through
  Spark works; ``pyspark-gazette doctor`` run without PYSPARK_PYTHON says the workers' Python
  (``python3`` from the PATH) cannot import the package;
* the native wheel (``cp311-abi3-<platform>``): the C scanner loads; the same file imports and
  scans in the other CPython 3.11+ versions found on this machine (the stable ABI).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
VERSION_LINE = next(ln for ln in (ROOT / "pyproject.toml").read_text().splitlines() if ln.startswith("version = "))
VERSION = VERSION_LINE.split('"')[1]
PLATFORM = sysconfig.get_platform().replace("-", "_").replace(".", "_")
PURE = f"pyspark_gazette-{VERSION}-py3-none-any.whl"
NATIVE = f"pyspark_gazette-{VERSION}-cp311-abi3-{PLATFORM}.whl"
UV = pathlib.Path(sys.executable).parent / "uv"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.version_info < (3, 11), reason="the abi3 wheel is built by CPython 3.11+"),
]


def _clean_env(**extra: str) -> dict[str, str]:
    """A user's shell: nothing of this test process's venv or Spark settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYSPARK_", "PYTHON", "VIRTUAL_ENV", "MAKE", "MFLAGS", "BROKER_"))
    }
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    return {**env, **extra}


def _run(cmd, *, cwd, env, timeout=900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> pathlib.Path:
    """``make wheels`` in a copy of the checkout (the dev venv's Python builds them)."""
    src = tmp_path_factory.mktemp("wheels") / "src"
    shutil.copytree(
        ROOT,
        src,
        ignore=shutil.ignore_patterns(
            ".venv*", ".git", ".bin", ".tools", ".gazette", "site", "build", "dist", "*.egg-info", "__pycache__",
            ".*_cache", "tests", "bench", "notebooks", ".ci-*", ".cluster-python", ".fuzz", ".hypothesis", "*.so",
        ),
    )  # fmt: skip
    venv = pathlib.Path(sys.executable).parent.parent
    done = _run(["make", f"VENV={venv}", "wheels"], cwd=src, env=_clean_env())
    assert done.returncode == 0, done.stdout + done.stderr
    return src / "dist"


def _venv(tmp: pathlib.Path, wheel: pathlib.Path) -> pathlib.Path:
    """A fresh virtualenv with ``wheel`` and its dependencies; its bin directory."""
    venv = tmp / "venv"
    done = _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=tmp, env=_clean_env())
    assert done.returncode == 0, done.stderr
    done = _run([UV, "pip", "install", "-q", "--python", venv / "bin" / "python", wheel], cwd=tmp, env=_clean_env())
    assert done.returncode == 0, done.stdout + done.stderr
    return venv / "bin"


ENGINE = "from pyspark_gazette import native; import pyspark_gazette; print(native.engine(), pyspark_gazette.__file__)"


def test_make_wheels_builds_the_pure_and_the_native_wheel(dist):
    assert sorted(p.name for p in dist.iterdir()) == sorted([NATIVE, PURE])
    with zipfile.ZipFile(dist / PURE) as z:
        names = z.namelist()
        wheel = z.read(f"pyspark_gazette-{VERSION}.dist-info/WHEEL").decode()
    assert not [n for n in names if n.endswith(".so")]
    assert "Root-Is-Purelib: true" in wheel and "Tag: py3-none-any" in wheel
    with zipfile.ZipFile(dist / NATIVE) as z:
        names = z.namelist()
        wheel = z.read(f"pyspark_gazette-{VERSION}.dist-info/WHEEL").decode()
    assert [n for n in names if n.endswith(".so")] == ["pyspark_gazette/_jsonscan.abi3.so"]
    assert f"Tag: cp311-abi3-{PLATFORM}" in wheel


def test_the_pure_wheel_reads_typed_rows_with_the_python_engines(dist, tmp_path):
    bin_dir = _venv(tmp_path, dist / PURE)
    python = bin_dir / "python"
    done = _run([python, "-c", ENGINE], cwd=tmp_path, env=_clean_env())
    assert done.returncode == 0, done.stderr
    engine, where = done.stdout.split()
    assert engine == "pure" and where.startswith(str(tmp_path / "venv"))

    # The mistake first: run from the venv by path, PYSPARK_PYTHON unset: the doctor says which
    # Python Spark's workers would run and that it lacks the package.
    done = _run([bin_dir / "pyspark-gazette", "doctor"], cwd=tmp_path, env=_clean_env())
    assert done.returncode == 1
    workers = next(ln for ln in done.stdout.splitlines() if "Spark workers' Python" in ln)
    assert workers.startswith("FAIL ") and "python3 from the PATH" in workers
    assert f"set PYSPARK_PYTHON={python}" in workers
    scanner = next(ln for ln in done.stdout.splitlines() if "C scanner" in ln)
    assert scanner.startswith("warn C scanner: not built")

    # Then as the docs say: PYSPARK_PYTHON set, a typed read through Spark.
    script = tmp_path / "typed_read.py"
    script.write_text(TYPED_READ)
    done = _run(
        [python, script, tmp_path / "broker"], cwd=tmp_path, env=_clean_env(PYSPARK_PYTHON=str(python)), timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "pure [(1, 'DE'), (2, 'FR'), (3, 'JP')]"


TYPED_READ = """
import sys
from pyspark.sql import SparkSession
from pyspark_gazette import native
from pyspark_gazette.broker import EmbeddedBroker
from pyspark_gazette.client import Change, ClientConfig, JournalClient
from pyspark_gazette.client.specs import load_specs

SPEC = '''
name: wheel/events
replication: 1
labels: [{name: content-type, value: application/x-ndjson}]
fragment: {length: 1048576, compression_codec: NONE, stores: ["file:///wheel/"], refresh_interval: 1s}
'''
root = sys.argv[1]
with EmbeddedBroker(root + "/data", file_root=root + "/store") as broker:
    with JournalClient(ClientConfig(broker.address)) as client:
        client.apply([Change(expect_mod_revision=0, upsert=n.spec) for n in load_specs(SPEC)])
        client.append("wheel/events", b'{"id": 1, "c": "DE"}\\n{"id": 2, "c": "FR"}\\n{"id": 3, "c": "JP"}\\n')
    spark = SparkSession.builder.master("local[1]").getOrCreate()
    try:
        df = spark.read.format("gazette").option("broker.address", broker.address).schema("id long, c string")
        rows = sorted((r.id, r.c) for r in df.load("wheel/events").collect())
    finally:
        spark.stop()
print(native.engine(), rows)
"""


def test_the_native_wheel_loads_its_c_scanner(dist, tmp_path):
    bin_dir = _venv(tmp_path, dist / NATIVE)
    done = _run([bin_dir / "python", "-c", ENGINE + "; print(native.module.__file__)"], cwd=tmp_path, env=_clean_env())
    assert done.returncode == 0, done.stderr
    engine, where, so = done.stdout.split()
    assert engine == "native" and where.startswith(str(tmp_path / "venv")) and so.endswith("_jsonscan.abi3.so")


# The extension alone (it needs nothing but CPython): two records scanned into a long column.
SCAN = """
import struct, pyspark_gazette._jsonscan as m
records = [b'{"n": 7}', b'{"n": -8}']
offsets = struct.pack("<3i", 0, len(records[0]), len(records[0]) + len(records[1]))
status, rows, columns = m.scan([(b"n", m.SCAN_KINDS["long"])], None, offsets, b"".join(records), 0, 2, False)
print(rows, struct.unpack("<2q", columns[0][2][:16]))
"""


@pytest.mark.parametrize("minor", [12, 13])
def test_the_native_wheel_serves_later_cpythons(dist, tmp_path, minor):
    """The stable ABI: the wheel built on 3.11 installs and runs on 3.12 and 3.13 (where this
    machine has them: pyenv's, or python3.N on the PATH)."""
    pyenv = sorted(pathlib.Path.home().glob(f".pyenv/versions/3.{minor}.*/bin/python3.{minor}"))
    found = str(pyenv[-1]) if pyenv else shutil.which(f"python3.{minor}")  # pyenv's shims need its set-up
    if not found:
        pytest.skip(f"no CPython 3.{minor} on this machine")
    venv = tmp_path / "venv"
    done = _run([found, "-m", "venv", "--without-pip", venv], cwd=tmp_path, env=_clean_env())
    if done.returncode != 0:
        pytest.skip(f"{found} cannot make a virtualenv: {done.stderr.strip()}")
    python = venv / "bin" / "python"
    done = _run(
        [UV, "pip", "install", "-q", "--no-deps", "--python", python, dist / NATIVE], cwd=tmp_path, env=_clean_env()
    )
    assert done.returncode == 0, done.stdout + done.stderr
    done = _run([python, "-c", SCAN], cwd=tmp_path, env=_clean_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout.split(None, 1) == ["2", "(7, -8)\n"]
