"""Options of Spark's Kafka source and sink are refused with what to use instead, by our names."""

from __future__ import annotations

import re

import pytest
from pyspark.sql.datasource import CaseInsensitiveDict

from pyspark_gazette.errors import OptionError
from pyspark_gazette.spark.options import BY_KEY, OPTIONS, READ, STREAM, WRITE, ReadOptions, parse
from pyspark_gazette.spark.options.kafka import KAFKA_OPTIONS, KAFKA_PROPERTIES, kafka_hint

BASE = {"broker.address": "http://127.0.0.1:8080", "journals": "a/b/c"}
KAFKA_KEYS = sorted(
    {*KAFKA_OPTIONS, *KAFKA_PROPERTIES, "kafka.max.poll.records", "kafka.ssl.keystore.location", "kafka.sasl.mechanism"}
)
#: Names a hint may use besides our options: Spark's own option of every stream.
SPARKS = {"checkpointLocation"}


def option_names_in(text: str) -> set[str]:
    """The words of ``text`` shaped like option names: camelCase, or dotted under broker./store./kafka."""
    camel = set(re.findall(r"(?<![\w.])[a-z]+[A-Z]\w*", text))
    dotted = set(re.findall(r"\b(?:broker|store|kafka)\.[\w.*]*\w|\bstore\.\*", text))
    return camel | dotted


@pytest.mark.parametrize("key", KAFKA_KEYS)
@pytest.mark.parametrize("scope", [READ, STREAM, WRITE])
def test_a_kafka_option_is_refused_naming_what_to_use(key, scope):
    base = BASE if scope != WRITE else {"broker.address": "http://127.0.0.1:8080", "journal": "a/b/c"}
    with pytest.raises(OptionError) as ei:
        parse({**base, key: "x"}, scope, env={})
    error = ei.value
    assert error.option == key
    assert error.message.startswith(("is an option of Spark's Kafka source; ", "is a Kafka client property; "))
    assert "unknown option" not in error.message and "did you mean" not in error.message
    ours = {o.key for o in OPTIONS}
    named = option_names_in(error.message)
    words = set(re.findall(r"[\w.]+", error.message))
    assert named | (words & ours), f"the hint for {key} names no option: {error.message}"
    for name in named:
        assert name in ours | SPARKS or (name == "store.*" and any(k.startswith("store.") for k in ours)), (
            f"the hint for {key} names {name!r}, which is not an option: {error.message}"
        )


@pytest.mark.parametrize("key", sorted({*KAFKA_OPTIONS, *KAFKA_PROPERTIES}))
def test_spark_lower_cases_keys_and_the_error_shows_kafkas_spelling(key):
    with pytest.raises(OptionError) as ei:
        parse(CaseInsensitiveDict({**BASE, key: "x"}), STREAM, env={})
    assert ei.value.option == key


def test_no_kafka_hint_shadows_an_option_of_ours():
    for key in {*KAFKA_OPTIONS, *KAFKA_PROPERTIES}:
        assert key.lower() not in BY_KEY, key
    assert kafka_hint("startingOffsets") is None and kafka_hint("broker.address") is None


def test_kafka_names_that_mean_the_same_here_are_ours():
    opts = ReadOptions.parse(
        {
            **BASE,
            "startingOffsets": "earliest",
            "failOnDataLoss": "false",
            "minPartitions": "4",
            "maxTriggerDelay": "1m",
        },
        streaming=True,
        env={},
    )
    assert (opts.fail_on_data_loss, opts.min_partitions) == (False, 4)


def test_a_kafka_key_in_the_options_file_names_the_file_line_and_the_hint(tmp_path):
    conf = tmp_path / "gazette.conf"
    conf.write_text("broker.address = http://127.0.0.1:8080\nkafka.bootstrap.servers = localhost:9092\n")
    with pytest.raises(OptionError) as ei:
        parse({"journals": "a/b/c"}, READ, env={"PYSPARK_GAZETTE_CONF": str(conf)})
    assert ei.value.option == "kafka.bootstrap.servers"
    assert f"{conf}, line 2: a Kafka name; use broker.address" in ei.value.message


@pytest.mark.parametrize("key", ["startingOffsets", "endingOffsets"])
def test_kafkas_offsets_per_partition_are_refused_with_the_journal_form(key):
    with pytest.raises(OptionError) as ei:
        parse({**BASE, key: '{"a/b/c": {"0": 42}}'}, READ, env={})
    assert ei.value.option == key
    assert "Kafka's offsets per partition" in ei.value.message and '{"a/b/c": 0}' in ei.value.message


def test_kafka_tls_and_sasl_properties_point_to_https_and_the_token():
    for key in ("kafka.ssl.truststore.location", "kafka.sasl.jaas.config", "kafka.security.protocol"):
        hint = kafka_hint(key)
        assert hint is not None and "https://" in hint[1] and "broker.authToken" in hint[1], key
    other = kafka_hint("kafka.max.poll.records")
    assert other is not None and "broker.address" in other[1] and "https://" not in other[1]
