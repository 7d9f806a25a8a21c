"""``pyspark-gazette doctor``: check a set-up the way Spark will run the connector.

Spark runs the connector in Python workers it starts itself, with the interpreter named by
``PYSPARK_DRIVER_PYTHON``, else ``PYSPARK_PYTHON``, else ``python3`` from the ``PATH``; a worker that
cannot import the package makes Spark answer ``[DATA_SOURCE_NOT_FOUND]`` before any of the
connector's code runs, and a store a task cannot read fails the task. Each check here prints one
line: ``ok``, ``warn`` (works, slower or partly) or ``FAIL`` followed by one sentence on what to
do. The command exits 1 when a check failed.

The checks, in order: this package (version, where, engine); the C scanner; the Python Spark's
workers will run, in a subprocess; Java (17 or later); the broker (a List, with the auth options
given); a journal (``--journal``, else the first listed); one persisted fragment of it, read
from its store from this machine, as a task's direct read does; with ``--spark``, a one-row read
through a local Spark session.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import Any

from pyspark_gazette import native

OK, WARN, FAIL = "ok", "warn", "FAIL"

#: What the workers' Python prints: its executable, version and where it imports the package from.
_PROBE = (
    "import sys\n"
    "print(sys.executable)\n"
    "print('%d.%d.%d' % sys.version_info[:3])\n"
    "import pyspark_gazette\n"
    "print(pyspark_gazette.__file__)\n"
)


@dataclasses.dataclass
class Check:
    status: str  # OK, WARN or FAIL
    name: str
    text: str

    def line(self) -> str:
        return f"{self.status:<4} {self.name}: {self.text}"


def package_check() -> Check:
    import pyspark_gazette

    try:
        version = importlib.metadata.version("pyspark-gazette")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
        version = "(not installed: run from a source tree)"
    where = os.path.dirname(pyspark_gazette.__file__)
    return Check(OK, "package", f"pyspark-gazette {version} in {where}, Python {_version()} ({sys.executable})")


def scanner_check() -> Check:
    if native.module is not None:
        off = native.extension() is None
        text = f"built and loaded ({os.path.basename(native.module.__file__ or '')})"
        if off:
            return Check(
                WARN,
                "C scanner",
                text + f", but turned off by {native.NATIVE_ENV}=0: typed reads use the Python engines",
            )
        return Check(OK, "C scanner", text + ": typed reads and JSON writes use the native engine")
    if native.LOAD_ERROR is not None:
        return Check(
            WARN,
            "C scanner",
            f"installed but not loadable here ({native.LOAD_ERROR}): reads and writes use the Python engines "
            "(same results, slower); install the pure wheel here, or a native wheel built for this platform "
            "(make wheels on a machine like this one)",
        )
    return Check(
        WARN,
        "C scanner",
        "not built (the pure wheel, or no C compiler at install): typed reads use the Python engines (same "
        "results, slower); for speed install the native wheel (pyspark_gazette-*-cp311-abi3-*.whl, CPython "
        "3.11+) built with make wheels",
    )


def worker_python(env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The interpreter Spark runs the ``gazette`` data source with, and which variable chose it.

    Spark (4.2, 4.3) finds a Python data source by its short name, and then runs its planning and
    its tasks, with the interpreter its JVM's environment names: ``PYSPARK_DRIVER_PYTHON``, else
    ``PYSPARK_PYTHON``, else ``python3`` from the ``PATH`` (``PythonUtils.defaultPythonExec``;
    the ``spark.pyspark.python`` setting does not change it). A local session's JVM inherits the
    environment of the Python that starts it, as this check's subprocess does."""
    env = os.environ if env is None else env
    for name in ("PYSPARK_DRIVER_PYTHON", "PYSPARK_PYTHON"):
        if env.get(name):
            return env[name], name
    return "python3", "PYSPARK_PYTHON unset: python3 from the PATH"


def workers_check() -> Check:
    python, source = worker_python()
    name = "Spark workers' Python"
    fix = (
        f"set PYSPARK_DRIVER_PYTHON={sys.executable} or unset it (Spark runs Python data sources with it first)"
        if source == "PYSPARK_DRIVER_PYTHON"
        else f"set PYSPARK_PYTHON={sys.executable} (export it before starting Python or Spark), or activate the "
        "virtualenv"
    )
    resolved = shutil.which(python) if os.sep not in python else python
    if resolved is None or not os.path.exists(resolved):
        return Check(FAIL, name, f"{python} ({source}) is not found, so Spark cannot start its workers: {fix}")
    try:
        done = subprocess.run([resolved, "-c", _PROBE], capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return Check(FAIL, name, f"{resolved} ({source}) did not run ({e}): {fix}")
    out = done.stdout.splitlines()
    if len(out) < 2:
        return Check(FAIL, name, f"{resolved} ({source}) did not run as Python ({_last_line(done.stderr)}): {fix}")
    executable, version = out[0], out[1]
    if done.returncode != 0 or len(out) < 3:
        return Check(
            FAIL,
            name,
            f"{executable} (Python {version}; {source}) cannot import pyspark_gazette, so Spark would answer "
            f"[DATA_SOURCE_NOT_FOUND] Failed to find the data source: gazette: {fix}",
        )
    if version.rsplit(".", 1)[0] != _version().rsplit(".", 1)[0]:
        return Check(
            FAIL,
            name,
            f"{executable} ({source}) is Python {version}, this one is {_version()}: Spark refuses workers of "
            f"another Python version (PYTHON_VERSION_MISMATCH); {fix}",
        )
    return Check(
        OK, name, f"{executable} (Python {version}; {source}) imports pyspark_gazette from {os.path.dirname(out[2])}"
    )


def java_check() -> Check:
    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    where = "JAVA_HOME" if java_home else "the PATH"
    if not java or not os.path.exists(java):
        return Check(
            FAIL, "Java", f"no java in {where}: Spark needs Java 17 or 21; install one and set JAVA_HOME to it"
        )
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return Check(FAIL, "Java", f"{java} -version did not run ({e}): set JAVA_HOME to a Java 17 or 21")
    text = done.stderr + done.stdout
    m = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if not m:
        return Check(
            FAIL, "Java", f"{java} -version printed no version ({_last_line(text)}): set JAVA_HOME to a Java 17 or 21"
        )
    major = int(m.group(1))
    if major == 1 and m.group(2):  # 1.8 -> 8
        major = int(m.group(2))
    if major < 17:
        return Check(FAIL, "Java", f"{java} is Java {major}; Spark 4 needs Java 17 or 21: set JAVA_HOME to one")
    return Check(OK, "Java", f"{java} is Java {major} (from {where})")


def _version() -> str:
    return ".".join(str(n) for n in sys.version_info[:3])


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


def broker_checks(options: Mapping[str, str], journal: str | None, spark: bool) -> list[Check]:
    """The broker, a journal, one of its persisted fragments from its store, and (``spark``) a
    one-row read through Spark; each later check is skipped when an earlier one failed."""
    from pyspark_gazette.client import JournalClient
    from pyspark_gazette.errors import GazetteError
    from pyspark_gazette.spark.options import ReadOptions

    checks: list[Check] = []
    try:
        opts = ReadOptions.parse({**options, "journals": journal or "doctor/any"}, env=os.environ)
    except GazetteError as e:
        return [Check(FAIL, "options", f"{e}")]
    conn = opts.connection
    shown = _redacted(conn.address)
    try:
        with JournalClient(conn.client_config()) as client:
            try:
                listed = client.list_journals()
            except GazetteError as e:
                return [Check(FAIL, "broker", f"{_for_option(e)}")]
            auth = " with the token given" if conn.auth_token or conn.hosted else ""
            checks.append(Check(OK, "broker", f"{shown} answered{auth}: {len(listed)} journal(s) listed"))
            if journal:
                info = next((i for i in listed if i.name == journal), None)
                if info is None:
                    from pyspark_gazette.spark.resolve import did_you_mean

                    return [
                        *checks,
                        Check(
                            FAIL,
                            "journal",
                            f"{journal!r} is not listed (or the token does not cover it){did_you_mean(client, journal)}",
                        ),
                    ]
            elif listed:
                info = listed[0]
            else:
                return [
                    *checks,
                    Check(WARN, "journal", "the broker lists no journal: create one (pyspark-gazette journals apply)"),
                ]
            checks.append(journal_check(info, opts.framing))
            checks.append(fragment_check(client, info.name, opts))
            if spark:
                checks.append(spark_check(options, info.name))
    except GazetteError as e:  # the channel could not even be set up
        checks.append(Check(FAIL, "broker", f"{_for_option(e)}"))
    return checks


def journal_check(info: Any, framing_option: str = "auto") -> Check:
    from pyspark_gazette.errors import GazetteError
    from pyspark_gazette.protocol.specs import O_RDONLY, O_WRONLY
    from pyspark_gazette.spark.resolve import framing_of

    flags = info.spec.flags
    access = (
        "read-only (O_RDONLY)" if flags & O_RDONLY else "write-only (O_WRONLY)" if flags & O_WRONLY else "read-write"
    )
    try:
        framing = framing_of(info, framing_option)
    except GazetteError as e:  # no content-type label a framing is known for: reads need the option
        return Check(WARN, "journal", f"{info.name}, {access}: {e}")
    return Check(OK, "journal", f"{info.name}: {framing} framing, {access}")


def fragment_check(client: Any, journal: str, opts: Any) -> Check:
    """Read the start of the latest persisted fragment from its store, from this machine."""
    from pyspark_gazette.errors import GazetteError
    from pyspark_gazette.fragments import FragmentRef, FragmentStore

    name = "fragment store"
    try:
        listed = client.list_fragments(journal)
    except GazetteError as e:
        return Check(FAIL, name, f"listing the fragments of {journal} failed: {e}")
    persisted = [f for f in listed if f.spec.backing_store]
    if not persisted:
        return Check(
            WARN,
            name,
            f"{journal} has no persisted fragment yet (nothing in a store to try; the brokers serve what they hold)",
        )
    ref = FragmentRef.from_proto(persisted[-1].spec)
    where = f"{ref.backing_store}{ref.content_path}"
    conn = opts.connection
    try:
        store = FragmentStore(ref.backing_store, file_root=conn.file_root, storage_options=conn.storage_options())
        with store.open_reader(ref, ref.begin) as reader:
            data = reader.read(64 << 10)
    except Exception as e:  # any store error: credentials, network, a wrong fileRoot, a missing package
        first = _last_line(str(e)) if str(e) else type(e).__name__
        hint = (
            "set store.fileRoot (--file-root) to where this machine mounts the brokers' file:// store"
            if ref.backing_store.startswith("file://")
            else "give the store's options (-o store.s3.accessKeyId=... and the like: docs/options.md) or "
            "credentials in the environment"
        )
        return Check(
            FAIL,
            name,
            f"{where} could not be read from this machine ({type(e).__name__}: {first}); Spark tasks read persisted "
            f"fragments directly from the store: {hint}, or set directReads=false to read through the brokers",
        )
    return Check(OK, name, f"read {len(data)} byte(s) of {where} directly from the store")


def spark_check(options: Mapping[str, str], journal: str) -> Check:
    """A one-row read of ``journal`` through a local Spark session (its Python workers included)."""
    try:
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.master("local[1]").appName("pyspark-gazette doctor").getOrCreate()
    except Exception as e:
        return Check(FAIL, "Spark", f"a local Spark session did not start ({_last_line(str(e))})")
    try:
        rows = spark.read.format("gazette").options(**options).load(journal).limit(1).collect()
    except Exception as e:
        text = str(e)
        if "DATA_SOURCE_NOT_FOUND" in text:
            return Check(
                FAIL,
                "Spark",
                "Spark's Python workers cannot import pyspark_gazette (DATA_SOURCE_NOT_FOUND): "
                f"set {worker_python()[1].split(' ')[0]}={sys.executable}",
            )
        lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("SQLSTATE")]
        return Check(FAIL, "Spark", f"a one-row read of {journal} failed: {lines[-1] if lines else type(e).__name__}")
    finally:
        spark.stop()
    return Check(OK, "Spark", f"a local Spark session read {len(rows)} row(s) of {journal}")


def _redacted(address: str) -> str:
    return re.sub(r"//[^/@]*@", "//REDACTED@", address)


def _for_option(e: Exception) -> str:
    from pyspark_gazette.errors import BrokerUnreachableError

    if isinstance(e, BrokerUnreachableError):
        return str(e.for_option("broker.address", "broker.timeout"))
    return str(e)


def run(
    options: Mapping[str, str],
    journal: str | None = None,
    *,
    spark: bool = False,
    emit: Callable[[str], None] = print,
) -> int:
    """Run every check, printing each line as it completes; 1 if any failed, else 0."""
    checks: list[Check] = []

    def add(check: Check) -> None:
        checks.append(check)
        emit(check.line())

    add(package_check())
    add(scanner_check())
    add(workers_check())
    add(java_check())
    for check in broker_checks(options, journal, spark):
        add(check)
    failed = [c.name for c in checks if c.status == FAIL]
    emit(f"{len(failed)} check(s) failed: {', '.join(failed)}" if failed else "all checks passed")
    return 1 if failed else 0
