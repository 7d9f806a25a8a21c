"""The options file (PYSPARK_GAZETTE_CONF): precedence explicit > environment > file, and its errors."""

from __future__ import annotations

import pathlib

import pytest

from pyspark_gazette.errors import OptionError
from pyspark_gazette.spark.options import READ, WRITE, ReadOptions, WriteOptions, parse
from pyspark_gazette.spark.options.conf_file import CONF_ENV

ROOT = pathlib.Path(__file__).resolve().parents[2]


def conf(tmp_path, text: str) -> dict[str, str]:
    path = tmp_path / "gazette.properties"
    path.write_text(text)
    return {CONF_ENV: str(path)}


def test_file_values_fill_options_nobody_else_set(tmp_path):
    env = conf(
        tmp_path,
        "# connection\nbroker.address = http://file:1\n! another comment\n\nmaxPartitionBytes: 64m\n"
        "store.s3.endpoint=http://minio:9000\n",
    )
    v = parse({"journals": "a/b/c"}, READ, env=env)
    assert v["broker.address"] == "http://file:1"
    assert v["maxPartitionBytes"] == 64 << 20
    assert v["store.s3.endpoint"] == "http://minio:9000"  # the value keeps its own ':'


@pytest.mark.parametrize(
    "explicit,environment,expected",
    [
        ({"broker.address": "http://explicit:1"}, {"PYSPARK_GAZETTE_BROKER_ADDRESS": "http://env:1"}, "explicit"),
        ({}, {"PYSPARK_GAZETTE_BROKER_ADDRESS": "http://env:1"}, "env"),
        ({}, {"BROKER_ADDRESS": "http://env:1"}, "env"),
        ({"broker.address": "http://explicit:1"}, {}, "explicit"),
        ({}, {}, "file"),
    ],
)
def test_precedence_is_explicit_then_environment_then_file(tmp_path, explicit, environment, expected):
    env = {**conf(tmp_path, "broker.address=http://file:1\n"), **environment}
    v = parse({"journals": "a/b/c", **explicit}, READ, env=env)
    assert v["broker.address"] == f"http://{expected}:1"


def test_file_keys_of_another_scope_are_ignored(tmp_path):
    env = conf(tmp_path, "broker.address=http://file:1\njournal=out/journal\nreadCommitted=true\n")
    read = ReadOptions.parse({"journals": "in/journal"}, env=env)
    write = WriteOptions.parse({}, env=env)
    assert read.read_committed is True and read.connection.address == "http://file:1"
    assert write.journal == "out/journal"


def test_keys_are_case_insensitive(tmp_path):
    env = conf(tmp_path, "BROKER.ADDRESS=http://file:1\n")
    assert parse({"journal": "a/b/c"}, WRITE, env=env)["broker.address"] == "http://file:1"


@pytest.mark.parametrize(
    "text,option,fragment",
    [
        ("broker.address=http://h:1\nmaxPartitionBytes=lots\n", "maxPartitionBytes", "line 2"),
        ("brokeraddress=http://h:1\n", "brokeraddress", "line 1: unknown option"),
        ("\n\njust some words\n", CONF_ENV, "line 3: expected key=value"),
        ("=value\n", CONF_ENV, "line 1: expected key=value"),
        ("framing=ndjson\nFraming=csv\n", "framing", "line 2: repeats line 1"),
        ("broker.address=http://h:1\\\n", "broker.address", "line 1: backslash"),
        ("framing=xml\n", "framing", "line 1: expected one of"),
    ],
)
def test_errors_name_the_file_line_and_option(tmp_path, text, option, fragment):
    env = conf(tmp_path, text)
    with pytest.raises(OptionError) as ei:
        parse({"broker.address": "http://h:1", "journals": "a/b/c"}, READ, env=env)
    assert ei.value.option == option
    assert str(tmp_path / "gazette.properties") in str(ei.value) and fragment in str(ei.value)


def test_a_bad_file_value_is_not_reported_when_an_explicit_option_overrides_it(tmp_path):
    env = conf(tmp_path, "maxPartitionBytes=lots\n")
    v = parse({"broker.address": "http://h:1", "journals": "a/b/c", "maxPartitionBytes": "1m"}, READ, env=env)
    assert v["maxPartitionBytes"] == 1 << 20


def test_a_missing_file_is_an_error_naming_it(tmp_path):
    missing = tmp_path / "nope.properties"
    with pytest.raises(OptionError) as ei:
        parse({"broker.address": "http://h:1", "journals": "a/b/c"}, READ, env={CONF_ENV: str(missing)})
    assert ei.value.option == CONF_ENV and str(missing) in str(ei.value)


def test_the_sample_options_file_parses_for_reads_and_writes():
    env = {CONF_ENV: str(ROOT / "conf" / "gazette.properties")}
    read = ReadOptions.parse({"journals": "quickstart/clicks"}, env=env)
    write = WriteOptions.parse({"journal": "quickstart/clicks"}, env=env)
    assert read.connection.address.startswith("http") and read.connection == write.connection
