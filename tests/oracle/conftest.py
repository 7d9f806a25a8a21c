"""Oracle tests: the connector held against Gazette's own code (the Go peer, real brokers).

The SparkSession and embedded-broker fixtures are the Spark tier's (tests/spark/conftest.py),
loaded here under another module name so both directories share one definition.
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys

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
make_spec = _spark_tier.make_spec
