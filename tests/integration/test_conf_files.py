"""The sample files in conf/: every journal YAML loads and a broker accepts it, children inherit
their directories' settings, and the logging, Spark and options samples parse and name only
settings that exist."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

from pyspark_gazette.client.specs import load_specs
from pyspark_gazette.spark.options import OPTIONS, env_name
from pyspark_gazette.spark.options.conf_file import CONF_ENV

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
JOURNAL_FILES = sorted((CONF / "journals").glob("*.yaml"))


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pyspark_gazette.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_the_journal_files_are_the_expected_ones():
    assert {p.name for p in JOURNAL_FILES} >= {"quickstart.yaml", "examples.yaml"}


@pytest.mark.parametrize("path", JOURNAL_FILES, ids=lambda p: p.name)
def test_every_journal_file_loads_and_a_broker_accepts_it(path, tmp_path):
    from pyspark_gazette.broker import EmbeddedBroker
    from pyspark_gazette.client import Change, ClientConfig, JournalClient

    nodes = load_specs(path.read_text())
    assert nodes and all(not n.spec.name.endswith("/") for n in nodes)
    with (
        EmbeddedBroker(str(tmp_path / "broker"), file_root=str(tmp_path / "store")) as broker,
        JournalClient(ClientConfig(broker.address)) as client,
    ):
        client.apply([Change(expect_mod_revision=0, upsert=n.spec) for n in nodes])
        listed = {i.name: i.spec for i in client.list_journals()}
    assert set(listed) == {n.spec.name for n in nodes}
    for n in nodes:
        assert listed[n.spec.name] == n.spec  # the broker kept every field as loaded


def test_examples_children_inherit_and_override_their_directories():
    specs = {n.spec.name: n.spec for n in load_specs((CONF / "journals" / "examples.yaml").read_text())}
    labels = {name: {(lb.name, lb.value) for lb in s.labels.labels} for name, s in specs.items()}
    eu = specs["examples/clicks/region=eu"]
    # Inherited from examples/ through examples/clicks/: length, codec, stores, retention.
    assert eu.fragment.length == 128 << 20 and list(eu.fragment.stores) == ["file:///examples/"]
    assert eu.fragment.retention.seconds == 720 * 3600
    # Overridden one level down (examples/clicks/), kept for the leaf.
    assert eu.fragment.flush_interval.seconds == 300
    assert ("app.gazette.dev/managed-by", "pyspark-gazette-examples") in labels["examples/clicks/region=eu"]
    assert ("app.gazette.dev/region", "eu") in labels["examples/clicks/region=eu"]
    # Four levels deep: the tenant's fragment settings, the collection's and partition's labels.
    leaf = "examples/acmeCo/orders/region=EU/pivot=80"
    assert specs[leaf].fragment.length == 512 << 20 and list(specs[leaf].fragment.stores) == [
        "file:///examples/acmeCo/"
    ]
    assert specs[leaf].fragment.flush_interval.seconds == 600  # from examples/, untouched on the way
    assert {
        ("estuary.dev/collection", "acmeCo/orders"),
        ("estuary.dev/field/region", "EU"),
        ("estuary.dev/key-begin", "80000000"),
        ("content-type", "application/x-ndjson"),
    } <= labels[leaf]
    # A child's label replaces the parent's values of that label.
    assert ("content-type", "application/x-protobuf-fixed") in labels["examples/sensors/readings"]
    assert ("content-type", "application/x-ndjson") not in labels["examples/sensors/readings"]
    # An empty store list overrides the inherited one: real-time only.
    assert list(specs["examples/logs/debug"].fragment.stores) == []


def test_the_logging_config_applies_through_the_cli():
    out = cli(
        "--log-config",
        str(CONF / "logging.yaml"),
        "journals",
        "apply",
        "-f",
        "conf/journals/examples.yaml",
        "--dry-run",
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("upsert ") == len(load_specs((CONF / "journals" / "examples.yaml").read_text()))


def test_a_broken_logging_config_is_an_error_naming_the_file(tmp_path):
    bad = tmp_path / "logging.yaml"
    bad.write_text("version: 1\nhandlers:\n  h:\n    class: no.such.Handler\n")
    out = cli("--log-config", str(bad), "journals", "apply", "-f", "conf/journals/quickstart.yaml", "--dry-run")
    assert out.returncode == 1 and str(bad) in out.stderr


def test_log4j2_properties_is_consistent():
    props = dict(
        line.split("=", 1)
        for line in (CONF / "log4j2.properties").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )
    props = {k.strip(): v.strip() for k, v in props.items()}
    assert props["rootLogger.level"] in {"warn", "error", "info"}
    assert props["rootLogger.appenderRef.stderr.ref"] == props["appender.console.name"]
    loggers = {k.split(".")[1] for k in props if k.startswith("logger.")}
    for name in loggers:  # every logger has a name and a valid level
        assert props[f"logger.{name}.name"].startswith("org.apache.")
        assert props[f"logger.{name}.level"] in {"error", "warn", "info", "debug", "off"}


def test_spark_defaults_sample_names_only_real_options():
    env_names = {env_name(o.key) for o in OPTIONS} | {CONF_ENV}
    seen = []
    for line in (CONF / "spark-defaults.conf").read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, value = re.split(r"\s+", line.strip(), maxsplit=1)
        assert key.startswith("spark.") and value, line
        m = re.search(r"\b(PYSPARK_GAZETTE_\w+)$", key)
        if m:
            seen.append(m.group(1))
            assert m.group(1) in env_names, f"{m.group(1)} is no option's environment variable"
    assert "PYSPARK_GAZETTE_BROKER_ADDRESS" in seen
