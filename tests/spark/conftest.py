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


@pytest.fixture
def broker(tmp_path):
    """An embedded broker with a file store rooted at ``tmp_path/store``."""
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
def create_journal(client):
    from pyspark_gazette.client import Change

    def create(name, **kwargs):
        spec = make_spec(name, **kwargs)
        client.apply([Change(expect_mod_revision=0, upsert=spec)])
        return spec

    return create
