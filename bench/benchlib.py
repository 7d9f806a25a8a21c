"""Pieces every Spark benchmark here sets up the same way: the local session and an ndjson journal spec."""

from __future__ import annotations

from typing import Any


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
    from pyspark_gazette.protocol import label_set, pb

    s = pb.JournalSpec(name=name, replication=1)
    s.labels.CopyFrom(label_set({"content-type": "application/x-ndjson"}))
    s.fragment.length = length
    s.fragment.compression_codec = pb.ZSTANDARD
    s.fragment.stores.append(store)
    s.fragment.refresh_interval.seconds = refresh_seconds
    return s
