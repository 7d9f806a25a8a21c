"""Fixtures shared by every test tier.

Markers follow the directory: tests/unit -> unit, tests/integration -> integration,
tests/spark -> spark, tests/cluster -> cluster (declared in pyproject.toml, run with
--strict-markers).
"""

from __future__ import annotations

import os
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Executors run a separate Python: make it the interpreter running the tests, which has our
# dependencies installed.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# The JVMs the tests start (Spark drivers in this process and in the CLIs, notebooks and child
# processes they run) compile with C1 only and collect garbage on one thread: their jobs are
# small and short, so C2's compiler threads and G1's concurrent ones cost CPU that never pays
# back, on two cores shared by two test processes (docs/benchmarks.md, "The test suite's own
# time": test_quickstart.py 398 s -> 222 s). Set JAVA_TOOL_OPTIONS (even empty) to
# choose otherwise. Each JVM notes the setting on its stderr ("Picked up JAVA_TOOL_OPTIONS").
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
# The package's fault hooks (pyspark_gazette.testing) are off unless this is set when the package
# is imported: set here, before any test imports it, so this process and every process it starts
# (Spark's JVM and Python workers, brokers, child scripts) have them armed.
os.environ["PYSPARK_GAZETTE_TESTING_HOOKS"] = "1"
# Parallel test processes (pytest-xdist workers) keep the fault hooks' files apart
# (pyspark_gazette.testing.SETTLE_DIR); set before any SparkSession starts, so its workers see it.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault(
        "PYSPARK_GAZETTE_TESTING_DIR", f"/tmp/pyspark-gazette-testing-settle-{os.environ['PYTEST_XDIST_WORKER']}"
    )

_TIER_BY_DIR = {
    "unit": "unit",
    "integration": "integration",
    "spark": "spark",
    "notebooks": "spark",
    "fuzz": "unit",
    "gazette": "integration",
    "oracle": "spark",
    "cluster": "cluster",
}


def _runs_on_real_gazette(item, rel: pathlib.PurePath) -> bool:
    """The rule for the ``real_gazette`` marker: the tests of tests/gazette/, and the cases whose
    id has a ``gazette`` part (``[gazette]``, ``[gazette-ndjson]``: the real-Gazette case of a
    both-brokers test or of the ``backend`` fixture)."""
    if rel.parts[0] == "gazette" and len(rel.parts) > 1:
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and "gazette" in callspec.id.split("-")


def _shares_module_fixture(item) -> bool:
    """Whether the test uses a fixture set up once per module (a built wheel, a Spark Connect
    server, a Gazette cluster): its module's tests then run in one test process."""
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    return any(d.scope in ("module", "class", "package") for ds in defs for d in ds)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    """Markers by directory and by the real-Gazette rule; the order parallel test processes
    take tests in (``make test`` runs them with ``--dist loadgroup --no-loadscope-reorder``).

    Tests are shared out one at a time, except that a module whose tests share a module-scoped
    fixture goes to one process whole (an ``xdist_group``). Those modules and the tests marked
    ``slow`` start first, so no long one is left to the end with the other processes idle."""
    first: set[int] = set()
    for item in items:
        rel = pathlib.Path(str(item.fspath)).resolve().relative_to(ROOT / "tests")
        marker = _TIER_BY_DIR.get(rel.parts[0]) if len(rel.parts) > 1 else None
        if marker:
            item.add_marker(getattr(pytest.mark, marker))
        if _runs_on_real_gazette(item, rel):
            item.add_marker(pytest.mark.real_gazette)
        if _shares_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(name=rel.as_posix()))
            first.add(id(item))
        elif item.get_closest_marker("slow"):
            first.add(id(item))
    items.sort(key=lambda item: id(item) not in first)  # stable: otherwise in collection order


@pytest.fixture(scope="session")
def s3_server():
    """A real HTTP S3 API (moto's server) on a port-0 loopback socket.

    Yields the endpoint URL (``http://127.0.0.1:<port>``). Credentials are dummies set in the
    environment so boto3/s3fs/aiobotocore sign requests.
    """
    from moto.server import ThreadedMotoServer

    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        os.environ.setdefault(key, value)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(s3_server, request):
    """A fresh, empty bucket on the moto server; yields its name."""
    import uuid

    import boto3

    name = "gz-" + uuid.uuid4().hex[:12]
    s3 = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1")
    s3.create_bucket(Bucket=name)
    yield name


def _fuzzing():
    """tests/fuzz/fuzzing.py (its tallies), imported from the run's main process too."""
    if str(ROOT / "tests" / "fuzz") not in sys.path:
        sys.path.insert(0, str(ROOT / "tests" / "fuzz"))
    import fuzzing

    return fuzzing


def pytest_sessionstart(session):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        _fuzzing().clear_parts()  # a previous run's leftovers


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The fuzz suite's table of inputs tried, joined from every process that ran fuzz tests."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    fuzzing = _fuzzing()
    merged = fuzzing.merge_parts()
    if merged is None:
        return
    terminalreporter.section("fuzz inputs tried")
    for line in merged.lines():
        terminalreporter.write_line(line)
    terminalreporter.write_line(f"fuzz report written to {fuzzing.REPORT_PATH}")


# ---------------------------------------------------------------------- real Gazette


@pytest.fixture(scope="session")
def gazette_cluster(tmp_path_factory):
    """A real Gazette v0.103.0 cluster for the whole run: etcd and three brokers on loopback
    (tests/realgazette.py). Skips, saying how to get it, when ``make gazette`` has not run.
    The brokers get moto's dummy AWS credentials so ``s3://...?endpoint=`` stores work."""
    import realgazette

    realgazette.require()
    cluster = realgazette.GazetteCluster(tmp_path_factory.mktemp("gazette-cluster"), 3, extra_env=GAZETTE_AWS_ENV)
    with cluster:
        yield cluster


#: moto's dummy credentials, in the real brokers' environment so s3:// stores on moto work.
GAZETTE_AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}


@pytest.fixture(params=["embedded", "gazette"])
def backend(request, tmp_path):
    """The broker a wire-level test runs against: ``[embedded]`` is our EmbeddedBroker,
    ``[gazette]`` a fresh real Gazette cluster (etcd + 3 brokers) for this test alone, so literal
    journal names and store URLs never meet an earlier test's fragments."""
    from backends import Backend

    store = tmp_path / "store"
    if request.param == "embedded":
        from pyspark_gazette.broker import EmbeddedBroker

        with EmbeddedBroker(str(tmp_path / "broker"), file_root=str(store)) as b:
            yield Backend("embedded", b.address, str(store), broker=b)
        return
    yield request.getfixturevalue("backend_gazette")


@pytest.fixture
def backend_gazette(tmp_path):
    """A fresh real Gazette cluster (etcd + 3 brokers) for one test, as a ``Backend``."""
    import realgazette
    from backends import Backend

    realgazette.require()
    cluster = realgazette.GazetteCluster(tmp_path / "gazette", 3, extra_env=GAZETTE_AWS_ENV)
    with cluster:
        yield Backend("gazette", cluster.address, cluster.file_root, cluster=cluster)


# -- GCS and Azure emulators (tests/store_emulators.py; installed by `make emulators`) ---------


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory):
    """fake-gcs-server on a free loopback port; yields its endpoint URL. Skips (fails in CI)
    when it is not installed."""
    import store_emulators

    with store_emulators.fake_gcs_server(str(tmp_path_factory.mktemp("fake-gcs"))) as server:
        yield server.endpoint


@pytest.fixture
def gcs_bucket(gcs_server):
    """A fresh, empty bucket on the GCS emulator; yields its name."""
    import uuid

    import store_emulators

    name = "gz-" + uuid.uuid4().hex[:12]
    store_emulators.gcs_create_bucket(gcs_server, name)
    yield name


@pytest.fixture(scope="session")
def gcs_signing_key(tmp_path_factory):
    """Path of a freshly generated service-account key file (for signing GCS URLs)."""
    import store_emulators

    return store_emulators.write_service_account_key(str(tmp_path_factory.mktemp("gcs-key")))


@pytest.fixture(scope="session")
def azurite_server(tmp_path_factory):
    """Azurite's blob service on a free loopback port; yields the account's blob endpoint
    (``http://127.0.0.1:PORT/devstoreaccount1``). Skips (fails in CI) when not installed."""
    import store_emulators

    with store_emulators.azurite(str(tmp_path_factory.mktemp("azurite"))) as server:
        yield server.endpoint


@pytest.fixture
def azure_container(azurite_server):
    """A fresh, empty container on Azurite; yields its name."""
    import uuid

    import store_emulators

    name = "gz-" + uuid.uuid4().hex[:12]
    store_emulators.azure_create_container(azurite_server, name)
    yield name
