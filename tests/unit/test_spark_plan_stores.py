"""Planning fails early, naming the pip extra, when a journal's store needs a missing package."""

from __future__ import annotations

import re
import sys

import pytest

from pyspark_gazette.client import JournalInfo, ListedFragment
from pyspark_gazette.errors import StoreError
from pyspark_gazette.message import LINES
from pyspark_gazette.protocol import pb
from pyspark_gazette.spark.options import ReadOptions
from pyspark_gazette.spark.read.plan import Snapshot, segments


def snapshot(store: str) -> Snapshot:
    fragment = pb.Fragment(
        journal="apps/journal",
        begin=0,
        end=100,
        sum=pb.SHA1Sum(),
        compression_codec=pb.NONE,
        backing_store=store,
        mod_time=7,
    )
    info = JournalInfo(spec=pb.JournalSpec(name="apps/journal"), mod_revision=1, create_revision=1, route=pb.Route())
    return Snapshot(info=info, framing=LINES, fragments=(ListedFragment(fragment),), write_head=100)


def options(**extra: str) -> ReadOptions:
    return ReadOptions.parse({"journals": "apps/journal", "broker.address": "http://127.0.0.1:1", **extra}, env={})


@pytest.mark.parametrize(
    ("store", "package", "extra"),
    [("gs://bucket/p/", "gcsfs", "gcs"), ("azure://container/p/", "adlfs", "azure"), ("s3://bucket/p/", "s3fs", None)],
)
def test_a_missing_store_package_fails_planning_with_the_extra(monkeypatch, store, package, extra):
    """The extra that installs the package; s3fs, a core dependency, by its own name."""
    monkeypatch.setitem(sys.modules, package, None)
    hint = f"pip install 'pyspark-gazette[{extra}]'" if extra else f"pip install '{package}'"
    with pytest.raises(StoreError, match=re.escape(hint)) as info:
        segments(snapshot(store), 0, 100, options())
    assert "'apps/journal'" in str(info.value) and store in str(info.value)


@pytest.mark.parametrize("extra", [{"directReads": "false"}, {"signedUrls": "true"}])
def test_reads_that_do_not_open_the_store_need_no_package(monkeypatch, extra):
    monkeypatch.setitem(sys.modules, "gcsfs", None)
    [segment] = segments(snapshot("gs://bucket/p/"), 0, 100, options(**extra))
    assert segment.fragment is None or extra == {"signedUrls": "true"}
