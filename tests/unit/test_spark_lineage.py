"""The marks a gazette read puts on its columns, and what a write refuses by them."""

from __future__ import annotations

import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from pyspark_gazette.client import JournalInfo
from pyspark_gazette.errors import GazetteError
from pyspark_gazette.protocol import label_set, pb
from pyspark_gazette.spark import lineage

READ_OPTIONS = {"broker.address": "http://b:1,http://a:1", "path": "shop/orders"}
SCHEMA = StructType([StructField("journal", StringType()), StructField("offset", LongType())])


def info(name, **labels):
    spec = pb.JournalSpec(name=name, labels=label_set(labels))
    return JournalInfo(spec=spec, mod_revision=1, create_revision=1, route=pb.Route())


def marked(journals=("shop/orders",), selector=None, options=READ_OPTIONS):
    read = lineage.read_of(options["broker.address"], journals, selector, options)
    return lineage.mark(SCHEMA, read)


def test_marks_survive_json_and_name_every_column():
    schema = StructType.fromJson(marked().jsonValue())
    got = lineage.marks(schema, {"broker.address": "http://a:1"})
    assert [c for c, _ in got] == ["journal", "offset"]
    assert got[0][1].journals == ("shop/orders",)
    assert lineage.unmark(schema) == SCHEMA


def test_a_schema_marked_by_the_writes_own_options_is_no_read():
    """INSERT INTO a view hands the writer the view's schema, made with the same options."""
    own = {k.upper(): v for k, v in READ_OPTIONS.items()}  # keys compare case-insensitively
    assert lineage.marks(marked(), own) == ()
    # A part of the read (load(A).select(...).save(A)) is rows read, whatever the options.
    assert [c for c, _ in lineage.marks(StructType(marked().fields[1:]), own)] == ["offset"]


def test_routing_by_a_marked_journal_column_is_refused_on_the_same_brokers_only():
    reads = lineage.marks(marked(), {})
    with pytest.raises(GazetteError, match=r"read of journal 'shop/orders'.*allowWriteToSource=true"):
        lineage.check_routing("journal", reads, "http://a:1/,http://b:1")  # the same brokers, listed otherwise
    lineage.check_routing("journal", reads, "http://elsewhere:1")  # another cluster's journals
    lineage.check_routing("route", lineage.marks(StructType(SCHEMA.fields[1:]), {}), "http://a:1")


def test_a_journal_option_is_refused_when_a_marked_column_read_it():
    reads = lineage.marks(marked(journals=("shop/orders", "shop/returns;meta")), {})
    with pytest.raises(GazetteError, match=r"'shop/orders', 'shop/returns', which include 'shop/returns'"):
        lineage.check_target("shop/returns", reads, "http://a:1,http://b:1")  # by name, before resolving
    lineage.check_target("shop/copy", reads, "http://a:1,http://b:1", info("shop/copy"))

    by_selector = lineage.marks(marked(journals=(), selector="app=shop"), {})
    with pytest.raises(GazetteError, match=r"selector 'app=shop', which include 'shop/new'"):
        lineage.check_target("shop/new", by_selector, "http://a:1,http://b:1", info("shop/new", app="shop"))
    lineage.check_target("shop/new", by_selector, "http://a:1,http://b:1")  # labels not known yet
    lineage.check_target("shop/new", by_selector, "http://a:1,http://b:1", info("shop/new", app="other"))


def test_the_options_digest_leaves_secrets_out():
    """Marks are visible in every schema (and in files Spark writes): no secret goes in."""
    assert lineage.fingerprint({"broker.authToken": "s3cr3t", "path": "a"}) == lineage.fingerprint({"PATH": "a"})
    assert lineage.fingerprint({"path": "a"}) != lineage.fingerprint({"path": "b"})


SECRET_ADDRESSES = [
    ("http://user:secretpw@a:1", "http://a:1"),
    ("https://secretpw@a:443/", "https://a:443"),
    ("http://a:1/?token=secretpw&X-Amz-Signature=secretpw#secretpw", "http://a:1"),
    ("user:secretpw@a:1", "a:1"),
    ("unix:///run/gazette.sock?access_token=secretpw", "unix:///run/gazette.sock"),
]


@pytest.mark.parametrize(("given", "kept"), SECRET_ADDRESSES)
def test_marks_keep_no_user_info_token_or_signature_of_the_broker_address(given, kept):
    """A mark travels with the data (Parquet footers keep it): what the address was given with
    to authenticate stays out, and the same brokers given without it still compare equal."""
    options = {
        "broker.address": f"{given},http://b:2",
        "store.s3.endpoint": "http://key:secretpw@s3:9000/?sig=secretpw",
    }
    schema = marked(options=options)
    text = schema.json()
    assert "secretpw" not in text and "user" not in text
    (_, read), *_ = lineage.marks(schema, {})
    assert read.brokers == tuple(sorted((kept, "http://b:2")))
    with pytest.raises(GazetteError, match="allowWriteToSource"):
        lineage.check_routing("journal", lineage.marks(schema, {}), f"http://b:2,{kept}")


def test_the_options_digest_is_blind_to_credentials_in_values():
    """The digest is no oracle for a password either: values with and without credentials agree."""
    bare = {"broker.address": "http://a:1", "store.s3.endpoint": "http://s3:9000/?region=x"}
    with_secrets = {
        "broker.address": "http://user:secretpw@a:1",
        "store.s3.endpoint": "http://key:other@s3:9000/?region=x&X-Amz-Signature=abc",
    }
    redacted = {**bare, "store.s3.endpoint": "http://s3:9000/?region=x&X-Amz-Signature=REDACTED"}
    assert lineage.fingerprint(with_secrets) == lineage.fingerprint(redacted)
    assert lineage.fingerprint({"broker.address": "http://user:pw1@a:1"}) == lineage.fingerprint(
        {"broker.address": "http://user:pw2@a:1"}
    )
    assert lineage.fingerprint(bare) != lineage.fingerprint({**bare, "broker.address": "http://a:2"})
