"""Spark fixtures: one local[2] SparkSession for the whole run, and an embedded broker.

Executors run a separate Python: PYSPARK_PYTHON is the interpreter running the tests (set in
tests/conftest.py), which has this project installed.
"""

from __future__ import annotations

import os
import sys

import pytest

from journalspecs import make_spec  # noqa: F401  (tests import it from here too)


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    warehouse = tmp_path_factory.mktemp("warehouse")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("pyspark-gazette-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.driver.memory", "2g")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def pytest_generate_tests(metafunc):
    """Tests marked ``both_brokers`` run once on the embedded broker and once on a real Gazette
    v0.103.0 cluster (ids ``[embedded]`` / ``[gazette]``): the same test, not a copy."""
    if "broker" in metafunc.fixturenames and metafunc.definition.get_closest_marker("both_brokers"):
        metafunc.parametrize("broker", ["embedded", "gazette"], indirect=True)


@pytest.fixture
def broker(request, tmp_path):
    """An embedded broker with a file store rooted at ``tmp_path/store``; with the
    ``both_brokers`` marker, also a real Gazette cluster (tests/backends.py ``Backend``, which
    offers the same ``address``, ``store_root``, ``wait_persisted`` and ``refresh``)."""
    if getattr(request, "param", "embedded") == "gazette":
        yield request.getfixturevalue("backend_gazette")
        return
    from pyspark_gazette.broker import EmbeddedBroker

    with EmbeddedBroker(str(tmp_path / "broker"), file_root=str(tmp_path / "store")) as b:
        b.store_root = str(tmp_path / "store")
        yield b


@pytest.fixture
def client(broker):
    from pyspark_gazette.client import ClientConfig, JournalClient

    with JournalClient(ClientConfig(broker.address, file_root=broker.store_root)) as c:
        yield c


@pytest.fixture
def create_journal(client, broker):
    from pyspark_gazette.client import Change

    def create(name, **kwargs):
        spec = make_spec(name, **kwargs)
        prepare = getattr(broker, "prepare", None)  # real Gazette: store directories must exist
        if prepare:
            prepare([spec])
        client.apply([Change(expect_mod_revision=0, upsert=spec)])
        wait = getattr(broker, "wait_primaries", None)
        if wait:
            wait([spec.name])
        return spec

    return create
