"""Pieces every Spark benchmark here sets up the same way: the local session and an ndjson journal spec."""

from __future__ import annotations

import pathlib
import sys
from typing import Any

# The one JournalSpec builder of tests and benches lives in tests/journalspecs.py.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
from journalspecs import make_spec  # noqa: E402


def local_spark(master: str = "local[2]", **conf: Any):
    """A quiet local SparkSession without UI, with the given ``{key: value}`` Spark settings."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).config("spark.ui.enabled", "false")
    for key, value in conf.items():
        builder = builder.config(key, str(value))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def ndjson_spec(name: str, length: int, *, store: str = "file:///bench/", refresh_seconds: int = 3600):
    """An ndjson journal with ZSTANDARD fragments of ``length`` bytes in ``store``."""
    return make_spec(name, store=store, length=length, refresh_seconds=refresh_seconds)
