"""Oracle tests: the connector held against Gazette's own code (the Go peer, real brokers).

The SparkSession and embedded-broker fixtures are the Spark tier's (tests/spark/conftest.py),
loaded here under another module name so both directories share one definition. ``target`` is
the broker an oracle test runs against: ``[embedded]`` (the Spark tier's broker) and ``[gazette]``
(the session's real Gazette cluster; journal names are unique per test, so tests share it).
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

_here = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(_here.parent / "spark"))  # spark_helpers
_spec = importlib.util.spec_from_file_location("_spark_tier_conftest", _here.parent / "spark" / "conftest.py")
assert _spec is not None and _spec.loader is not None
_spark_tier = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_spark_tier)

spark = _spark_tier.spark
broker = _spark_tier.broker
client = _spark_tier.client
create_journal = _spark_tier.create_journal


class Target:
    """A broker to test against: ``address``, ``store_root`` and ``create(name, **spec)``."""

    def __init__(self, kind: str, address: str, store_root: str, create):
        self.kind, self.address, self.store_root, self.create = kind, address, store_root, create

    def __repr__(self) -> str:
        return f"Target({self.kind})"


@pytest.fixture(params=["embedded", "gazette"])
def target(request):
    from journalspecs import make_spec

    if request.param == "embedded":
        b = request.getfixturevalue("broker")
        yield Target("embedded", b.address, b.store_root, request.getfixturevalue("create_journal"))
        return
    cluster = request.getfixturevalue("gazette_cluster")

    def create(name, **kwargs):
        spec = make_spec(name, **kwargs)
        cluster.make_store_dirs([spec])
        cluster.apply_specs([spec])
        return spec

    yield Target("gazette", cluster.address, cluster.file_root, create)
