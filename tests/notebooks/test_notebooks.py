"""Every notebook in ``notebooks/`` runs top to bottom in a fresh kernel (issue #6).

Each notebook runs in its own Jupyter kernel started from this interpreter (the project's venv),
with a temporary working directory (and ``TMPDIR``), against the embedded broker the notebook starts itself
(no broker address in the environment). Every cell runs, tags or not: the Databricks-only cells
(``%pip install`` and the Python restart) guard themselves with ``if "dbutils" in globals()``, so
they do nothing here, as in plain Jupyter. A cell error fails the
test naming the notebook and the cell. After the notebook's own clean-up cell, one more cell
checks that it stopped its SparkSession and its broker.

One notebook also runs against an "external cluster": a broker this test starts, named by
``BROKER_ADDRESS``, which exercises the notebooks' real-cluster branch (journals under a scratch
prefix, deleted at the end).

The merge notebook (05) prints the table format it merged into (``table format: delta`` or
``parquet``). With ``NOTEBOOK_TABLE_FORMAT`` set, the test requires that format: ``make
test-notebook-delta`` runs this module in the oldest-pyspark venv (PySpark 4.2.0 with
``delta-spark``) and requires ``delta``; the dev venv (PySpark 4.3, no Delta release for it) runs
the Parquet path.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import sys

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SKIP_TAG = "databricks-only"
DATABRICKS_GUARD = 'if "dbutils" in globals():'
#: Seconds one notebook may take in all (pytest-timeout), and one cell.
NOTEBOOK_TIMEOUT = 600
CELL_TIMEOUT = 300
KERNEL = "pyspark-gazette-tests"
#: The notebook run against an "external" broker too (all share the same set-up cell).
EXTERNAL_NOTEBOOK = "04-flow-collection-read-committed.ipynb"
#: The notebook that merges into a table, printing ``table format: <delta|parquet>``.
MERGE_NOTEBOOK = "05-flow-collection-merge.ipynb"
TABLE_FORMAT = re.compile(r"table format: (delta|parquet)\b")
#: Imports a notebook makes only when the package is installed (not from any extra: delta-spark
#: pins pyspark to the releases Delta was built for, so the notebooks extra cannot require it).
OPTIONAL_IMPORTS = {"delta"}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")

# Appended after the notebook's last cell: nothing it started may still run.
LEFTOVERS_CHECK = """
import socket

from pyspark.sql import SparkSession

assert SparkSession.getActiveSession() is None, "the notebook left its SparkSession running"
if broker is not None:
    try:
        socket.create_connection(("127.0.0.1", broker.port), timeout=5).close()
    except OSError:
        pass
    else:
        raise AssertionError(f"the notebook left its broker listening on port {broker.port}")
"""


def _ids(path: pathlib.Path) -> str:
    return path.stem


def test_there_are_notebooks():
    assert NOTEBOOKS, f"no notebooks in {ROOT / 'notebooks'}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_committed_without_outputs_and_with_a_databricks_install_cell(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count)]
    assert not dirty, (
        f"{path.name}: cells {dirty} have outputs; clear them (jupyter nbconvert --clear-output --inplace)"
    )
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    assert any("%pip install --no-deps" in s for s in code), f"{path.name}: no %pip install --no-deps cell"
    # Databricks-only code runs only on Databricks: plain Jupyter runs every cell too.
    for source in code:
        if "%pip" in source or "dbutils" in source:
            lines = [ln for ln in source.splitlines() if "%pip" in ln or "dbutils." in ln]
            assert DATABRICKS_GUARD in source and all(ln.startswith("    ") for ln in lines), (
                f"{path.name}: Databricks-only code outside `{DATABRICKS_GUARD}`:\n{source}"
            )


def _third_party_imports(path: pathlib.Path) -> set[str]:
    import ast

    from IPython.core.inputtransformer2 import TransformerManager

    names: set[str] = set()
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        tree = ast.parse(TransformerManager().transform_cell(cell.source))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n not in {"pyspark_gazette", *OPTIONAL_IMPORTS}}


def _requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s<>=!~\[;]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requirements}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_every_import_is_installed_by_the_package_or_its_notebooks_extra(path):
    """What a notebook imports comes with ``pip install 'pyspark-gazette[notebooks]'``."""
    import importlib.metadata

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+, as CI runs
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    allowed = _requirement_names(project["dependencies"] + project["optional-dependencies"]["notebooks"])
    dists = importlib.metadata.packages_distributions()
    missing = {}
    for module in _third_party_imports(path):
        provided = {d.lower().replace("_", "-") for d in dists.get(module, [module])}
        if not provided & allowed:
            missing[module] = sorted(provided)
    assert not missing, f"{path.name} imports modules no documented extra installs: {missing}"


@pytest.fixture
def kernel_cwd(tmp_path, monkeypatch):
    """A kernelspec running this interpreter, an environment without any broker address, and the
    temporary working directory the kernel starts in (returned)."""
    spec_dir = tmp_path / "jupyter" / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "pyspark-gazette tests",
        "language": "python",
        "env": {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable},
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    for name in list(os.environ):
        if name.startswith("PYSPARK_GAZETTE_") or name in ("BROKER_ADDRESS", "BROKER_AUTH_TOKEN"):
            monkeypatch.delenv(name)
    monkeypatch.delenv("GAZETTE_NOTEBOOK_STORE", raising=False)
    # The notebooks' scratch directories (tempfile) go under tmp_path too.
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    return cwd


def _output_text(nb) -> str:
    """What the executed notebook's cells printed and displayed (as text)."""
    return "".join(
        o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) for c in nb.cells for o in c.get("outputs", [])
    )


def run_notebook(path: pathlib.Path, cwd: pathlib.Path):
    """Execute every cell of ``path`` in ``cwd``; fail naming the cell."""
    nb = nbformat.read(path, as_version=4)
    numbered = list(enumerate(nb.cells))
    nb.cells = [c for _, c in numbered] + [nbformat.v4.new_code_cell(LEFTOVERS_CHECK)]
    client = nbclient.NotebookClient(
        nb, timeout=CELL_TIMEOUT, kernel_name=KERNEL, resources={"metadata": {"path": str(cwd)}}
    )
    try:
        client.execute()
    except (nbclient.exceptions.CellExecutionError, nbclient.exceptions.CellTimeoutError) as e:
        failed = [k for k, c in enumerate(nb.cells) if any(o.output_type == "error" for o in c.get("outputs", []))]
        k = failed[0] if failed else None
        if k is None:
            where = "a cell (timed out)"
        elif k < len(numbered):
            where = f"cell {numbered[k][0]}"
        else:
            where = "the leftovers check after the last cell"
        pytest.fail(f"notebook {path.name}: {where} failed:\n{_ANSI.sub('', str(e))}", pytrace=False)
    return nb


@pytest.mark.slow
@pytest.mark.timeout(NOTEBOOK_TIMEOUT)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_notebook_runs_top_to_bottom_on_the_embedded_broker(path, kernel_cwd):
    nb = run_notebook(path, kernel_cwd)
    if path.name == MERGE_NOTEBOOK:
        formats = set(TABLE_FORMAT.findall(_output_text(nb)))
        assert len(formats) == 1, f"{path.name} printed table formats {sorted(formats)}, expected one"
        want = os.environ.get("NOTEBOOK_TABLE_FORMAT")
        assert want in (None, *formats), f"{path.name} merged into a {formats.pop()} table, not {want}"
    assert sorted(p.name for p in kernel_cwd.iterdir()) == [], "the notebook wrote into its working directory"
    scratch = sorted(p.name for p in (kernel_cwd.parent / "tmp").glob("gazette-notebook-*"))
    assert scratch == [], "the notebook did not remove its scratch directory"


@pytest.mark.slow
@pytest.mark.timeout(NOTEBOOK_TIMEOUT)
def test_a_notebook_against_an_external_broker(kernel_cwd, tmp_path, monkeypatch):
    from pyspark_gazette.broker import EmbeddedBroker
    from pyspark_gazette.client import JournalClient

    store = tmp_path / "store"
    with EmbeddedBroker(str(tmp_path / "broker"), file_root=str(store)) as broker:
        monkeypatch.setenv("BROKER_ADDRESS", broker.address)
        monkeypatch.setenv("GAZETTE_NOTEBOOK_STORE", "file:///external/")
        monkeypatch.setenv("PYSPARK_GAZETTE_STORE_FILEROOT", str(store))
        nb = run_notebook(ROOT / "notebooks" / EXTERNAL_NOTEBOOK, kernel_cwd)
        with JournalClient(broker.address) as client:
            assert client.list_journals() == []  # the notebook deleted the journals it created
    text = _output_text(nb)
    # ... which it had created on this broker, under a scratch prefix.
    assert f"broker: {broker.address} (external)" in text
    assert "scratch/notebooks/" in text


def _write_notebook(path: pathlib.Path, cells: list) -> pathlib.Path:
    nb = nbformat.v4.new_notebook(cells=cells)
    nbformat.write(nb, path)
    return path


def test_the_runner_names_the_failing_cell_and_runs_tagged_cells_too(kernel_cwd, tmp_path):
    v4 = nbformat.v4
    guarded = v4.new_code_cell(f"{DATABRICKS_GUARD}\n    %pip install --no-deps nothing-here\nguard_ran = True")
    guarded.metadata["tags"] = [SKIP_TAG]
    tagged = v4.new_code_cell("raise RuntimeError('a tagged cell ran')")
    tagged.metadata["tags"] = [SKIP_TAG]
    path = _write_notebook(
        tmp_path / "bad.ipynb",
        [v4.new_markdown_cell("# bad"), guarded, v4.new_code_cell("assert guard_ran"), tagged],
    )
    with pytest.raises(pytest.fail.Exception) as ei:
        run_notebook(path, kernel_cwd)
    assert "notebook bad.ipynb: cell 3 failed" in str(ei.value) and "a tagged cell ran" in str(ei.value)


def test_the_runner_fails_a_notebook_that_leaves_its_broker_running(kernel_cwd, tmp_path):
    v4 = nbformat.v4
    start = (
        "from pyspark_gazette.broker import EmbeddedBroker\n"
        f"broker = EmbeddedBroker({str(tmp_path / 'leftover')!r}).start()"
    )
    path = _write_notebook(tmp_path / "leaky.ipynb", [v4.new_code_cell(start)])
    with pytest.raises(pytest.fail.Exception) as ei:
        run_notebook(path, kernel_cwd)
    assert "the leftovers check after the last cell failed" in str(ei.value)
    assert "left its broker listening" in str(ei.value)
