"""Option parsing: every option's bad values, unknown and conflicting keys, env fallback, secrets."""

from __future__ import annotations

import pickle
import re

import pytest

from pyspark_gazette.errors import OptionError
from pyspark_gazette.spark.options import (
    OPTIONS,
    READ,
    STREAM,
    WRITE,
    ReadOptions,
    WriteOptions,
    env_name,
    parse,
    redacted,
)

BASE_READ = {"broker.address": "http://127.0.0.1:8080", "journals": "a/b/c"}
BASE_WRITE = {"broker.address": "http://127.0.0.1:8080", "journal": "a/b/c"}

# A bad value for every option kind (and specific rules), each expected to name its option.
BAD_VALUES = {
    "bool": "maybe",
    "bytes": "lots",
    "int": "1.5",
    "timestamp": "-5",
    "duration": "soon",
    "enum": "nonsense",
    "offsets": "[1, 2]",
}


def scope_of(opt) -> str:
    return READ if READ in opt.scopes else STREAM if STREAM in opt.scopes else WRITE


@pytest.mark.parametrize("opt", [o for o in OPTIONS if o.kind in BAD_VALUES], ids=lambda o: o.key)
def test_every_typed_option_rejects_a_bad_value_naming_itself(opt):
    scope = scope_of(opt)
    base = BASE_WRITE if scope == WRITE else BASE_READ
    with pytest.raises(OptionError) as ei:
        parse({**base, opt.key: BAD_VALUES[opt.kind]}, scope, env={})
    assert ei.value.option == opt.key and opt.key in str(ei.value)


@pytest.mark.parametrize(
    "typo,shown,meant",
    [
        ("startingOffset", "startingOffset", "startingOffsets"),
        ("MaxBytesPerTriger", "maxBytesPerTriger", "maxBytesPerTrigger"),
        ("broker.adress", "broker.adress", "broker.address"),
        ("completelyDifferent", "completelydifferent", None),
    ],
)
def test_an_unknown_option_is_echoed_as_written(typo, shown, meant):
    """A key with capitals is shown as written; Spark's case-insensitive options hold it
    lower-cased, so a key without capitals is shown with the case of the suggestion where their
    letters match."""
    from pyspark.sql.datasource import CaseInsensitiveDict

    hint = f" (did you mean {meant!r}?)" if meant else ""
    with pytest.raises(OptionError) as ei:
        parse({**BASE_READ, typo: "1"}, STREAM, env={})
    assert str(ei.value).startswith(f"option {typo!r}: unknown option{hint};"), ei.value
    with pytest.raises(OptionError) as ei:
        parse(CaseInsensitiveDict({**BASE_READ, typo: "1"}), STREAM, env={})
    assert str(ei.value).startswith(f"option {shown!r}: unknown option{hint};"), ei.value
    assert ei.value.option == shown


@pytest.mark.parametrize(
    "options,option",
    [
        ({"broker.address": "ftp://x:1", "journals": "a/b/c"}, "broker.address"),
        ({"journals": "a/b/c"}, "broker.address"),
        ({"broker.address": "http://h:1"}, "journals"),
        ({**BASE_READ, "selector": "a=b"}, "journals"),
        ({"broker.address": "http://h:1", "selector": "a in ("}, "selector"),
        ({**BASE_READ, "journals": "ok/name, bad name"}, "journals"),
        ({**BASE_READ, "endingOffsets": "earliest"}, "endingOffsets"),
        ({**BASE_READ, "startingOffsets": '{"a/b/c": 10}', "endingOffsets": '{"a/b/c": 5}'}, "endingOffsets"),
        ({**BASE_READ, "startingOffsets": '{"a/b/c": -3}'}, "startingOffsets"),
        ({**BASE_READ, "startingTimestamp": "1767225600000", "endingTimestamp": "1767225500000"}, "endingTimestamp"),
        ({**BASE_READ, "uuidPointer": "_meta/uuid"}, "uuidPointer"),
        ({**BASE_READ, "uuidField": "-1"}, "uuidField"),
        ({**BASE_READ, "uuidField": "536870912"}, "uuidField"),
        ({**BASE_READ, "maxPartitionBytes": "0"}, "maxPartitionBytes"),
        ({**BASE_READ, "store.s3.accessKeyId": "AKIA"}, "store.s3.accessKeyId"),
        ({**BASE_READ, "maxBytesPerTrigger": "1m"}, "maxBytesPerTrigger"),  # stream-only option in a batch read
        ({**BASE_READ, "journal": "x/y/z"}, "journal"),  # write-only option in a read
        ({**BASE_READ, "brokr.address": "x"}, "brokr.address"),
        ({**BASE_READ, "path": "a/b/c"}, "path"),  # journals twice
    ],
)
def test_read_option_errors_name_the_option(options, option):
    with pytest.raises(OptionError) as ei:
        ReadOptions.parse(options, env={})
    assert ei.value.option == option


def test_max_offsets_per_trigger_is_refused_naming_the_byte_option():
    """Kafka's maxOffsetsPerTrigger counts records; Gazette offsets are bytes: no silent unit change."""
    for extra in ({}, {"maxBytesPerTrigger": "1m"}):
        with pytest.raises(OptionError) as ei:
            ReadOptions.parse({**BASE_READ, **extra, "maxOffsetsPerTrigger": "10000"}, streaming=True, env={})
        assert ei.value.option == "maxOffsetsPerTrigger"
        assert "maxBytesPerTrigger" in str(ei.value) and "records" in str(ei.value)
    opts = ReadOptions.parse({**BASE_READ, "maxBytesPerTrigger": "2m"}, streaming=True, env={})
    assert opts.max_bytes_per_trigger == 2 << 20


@pytest.mark.parametrize("key", ["startingTimestamp", "endingTimestamp"])
def test_a_timestamp_in_seconds_is_refused_with_the_milliseconds(key):
    with pytest.raises(OptionError) as ei:
        ReadOptions.parse({**BASE_READ, key: "1767225600"}, env={})
    assert ei.value.option == key and "seconds" in str(ei.value) and "1767225600000" in str(ei.value)
    attr = {"startingTimestamp": "starting_timestamp", "endingTimestamp": "ending_timestamp"}[key]
    assert getattr(ReadOptions.parse({**BASE_READ, key: "1767225600000"}, env={}), attr) == 1767225600000
    assert ReadOptions.parse({**BASE_READ, key: "0"}, env={})  # the epoch: from the beginning


@pytest.mark.parametrize("key", ["startingOffsets", "endingOffsets"])
def test_offsets_for_a_journal_that_is_not_read_are_refused(key):
    with pytest.raises(OptionError) as ei:
        ReadOptions.parse({**BASE_READ, key: '{"a/b/x": 5}'}, env={})
    assert ei.value.option == key and "'a/b/x'" in str(ei.value) and "not being read" in str(ei.value)
    assert "did you mean 'a/b/c'" in str(ei.value)


@pytest.mark.parametrize(
    "typo,meant",
    [
        ("maxBytesPerTriger", "maxBytesPerTrigger"),
        ("startingOffset", "startingOffsets"),
        ("broker.adress", "broker.address"),
    ],
)
def test_an_unknown_option_suggests_the_closest(typo, meant):
    with pytest.raises(OptionError) as ei:
        parse({**BASE_READ, typo: "1"}, STREAM, env={})
    assert f"did you mean {meant!r}" in str(ei.value)
    with pytest.raises(OptionError) as ei:
        parse({**BASE_READ, "completelyDifferent": "1"}, STREAM, env={})
    assert "did you mean" not in str(ei.value)


@pytest.mark.parametrize(
    "options,option",
    [
        ({**BASE_WRITE, "transactional": "true", "framing": "csv"}, "transactional"),
        ({**BASE_WRITE, "createJournals": "[1, 2]"}, "createJournals"),
        ({**BASE_WRITE, "createJournals": '{"name": "x"}'}, "createJournals"),
        ({**BASE_WRITE, "createJournals": '{"fragment": {"length": 5}}'}, "createJournals"),
        ({**BASE_WRITE, "readCommitted": "true"}, "readCommitted"),
    ],
)
def test_write_option_errors_name_the_option(options, option):
    with pytest.raises(OptionError) as ei:
        WriteOptions.parse(options, env={})
    assert ei.value.option == option


def test_keys_are_case_insensitive_and_values_typed():
    opts = ReadOptions.parse(
        {
            "BROKER.ADDRESS": "http://h:1",
            "Journals": "a/b/c, d/e/f",
            "maxpartitionbytes": "64m",
            "FAILONDATALOSS": "False",
            "startingoffsets": "latest",
            "framing": "NDJSON",
        },
        env={},
    )
    assert opts.journals == ("a/b/c", "d/e/f") and opts.max_partition_bytes == 64 << 20
    assert opts.fail_on_data_loss is False and opts.starting_offsets == "latest" and opts.framing == "ndjson"


def test_environment_fallbacks_and_precedence():
    env = {"BROKER_ADDRESS": "http://from-gazette-env:1", env_name("maxPartitionBytes"): "1m"}
    opts = ReadOptions.parse({"journals": "a/b/c"}, env=env)
    assert opts.connection.address == "http://from-gazette-env:1" and opts.max_partition_bytes == 1 << 20
    env[env_name("broker.address")] = "http://from-prefixed-env:1"
    assert ReadOptions.parse({"journals": "a/b/c"}, env=env).connection.address == "http://from-prefixed-env:1"
    explicit = ReadOptions.parse({**BASE_READ, "maxPartitionBytes": "2m"}, env=env)
    assert explicit.connection.address == "http://127.0.0.1:8080" and explicit.max_partition_bytes == 2 << 20


def test_secrets_stay_out_of_reprs_and_redacted_maps_but_pickle():
    options = {
        **BASE_READ,
        "broker.authToken": "tok-SECRET",
        "store.s3.accessKeyId": "AKIA-SECRET",
        "store.s3.secretAccessKey": "KEY-SECRET",
    }
    opts = ReadOptions.parse(options, env={})
    assert "SECRET" not in repr(opts)
    assert "SECRET" not in str(redacted(options))
    again = pickle.loads(pickle.dumps(opts))
    assert again == opts and again.connection.storage_options()["s3.secret"] == "KEY-SECRET"
    assert again.connection.client_config().auth_token == "tok-SECRET"


def test_every_option_is_documented_with_a_type_and_scope():
    for opt in OPTIONS:
        assert opt.doc and opt.kind and opt.scopes, opt.key
        assert opt.kind != "enum" or opt.choices, opt.key


@pytest.mark.parametrize(
    "fields,why",
    [
        ('"stores": ["ftp://bucket/p/"]', "unsupported scheme 'ftp'"),
        ('"length": 512', "fragment.length must be 1024.."),
        ('"refresh_interval": "48h"', "refresh_interval must be 1s..24h"),
        ('"path_postfix_template": "{{ .Nope }}"', "path_postfix_template"),
    ],
)
def test_a_create_journals_template_is_checked_whole_at_planning(fields, why):
    """The whole spec a template gives, by Gazette's JournalSpec rules (protocol/specs.py)."""
    fragment = '{"length": 1024, "compression_codec": "NONE", ' + fields + "}"
    if '"length": 512' in fields:
        fragment = '{"compression_codec": "NONE", ' + fields + "}"
    with pytest.raises(OptionError, match=re.escape(why)) as ei:
        WriteOptions.parse({**BASE_WRITE, "createJournals": '{"fragment": ' + fragment + "}"}, env={})
    assert ei.value.option == "createJournals"
    ok = '{"fragment": {"length": 1024, "compression_codec": "NONE", "stores": ["s3://bucket/p/"]}}'
    assert WriteOptions.parse({**BASE_WRITE, "createJournals": ok}, env={}).create_journals == ok


# -- every option at its default and at a set value (issue 25) ----------------------------------

#: A value to set for each option kind when the table gives no example (and its parsed form).
SET_VALUES = {
    "bool": ("true", True),
    "bytes": ("3m", 3 << 20),
    "int": ("7", 7),
    "timestamp": ("1767225600000", 1767225600000),
    "duration": ("90s", 90.0),
    "offsets": ('{"a/b/c": 5}', {"a/b/c": 5}),
    "string": ("some-text", "some-text"),
    "secret": ("s3cr3t", "s3cr3t"),
}
#: The Python type every option kind parses to.
KIND_TYPES = {
    "bool": bool,
    "bytes": int,
    "int": int,
    "timestamp": int,
    "duration": float,
    "offsets": (str, dict),
    "string": str,
    "secret": str,
    "enum": str,
}
#: Options whose set value needs more than its kind (a rule of its own).
SPECIAL_SET = {
    "broker.address": ("http://10.0.0.1:9000", "http://10.0.0.1:9000"),
    "journals": ("x/y", "x/y"),
    "selector": None,  # conflicts with journals; covered by its own tests
    "journal": ("x/y", "x/y"),
    "uuidPointer": ("/meta/id", "/meta/id"),
    "maxOffsetsPerTrigger": None,  # refused whatever its value; tested above
    "startingOffsets": ('{"a/b/c": 5}', {"a/b/c": 5}),
    "endingOffsets": ('{"a/b/c": 9}', {"a/b/c": 9}),
    "createJournals": ('{"fragment": {"length": 1024}}', '{"fragment": {"length": 1024}}'),
    "transactional": ("true", True),
    "uuidField": ("3", 3),
}


def _set_value(opt):
    if opt.key in SPECIAL_SET:
        return SPECIAL_SET[opt.key]
    if opt.kind == "enum":
        choice = opt.choices[-1]
        return choice.lower(), choice  # enums match case-insensitively
    return SET_VALUES[opt.kind]


@pytest.mark.parametrize("opt", OPTIONS, ids=lambda o: o.key)
def test_every_option_parses_at_its_default_and_at_a_set_value(opt):
    for scope in sorted(opt.scopes):
        base = BASE_WRITE if scope == WRITE else BASE_READ
        # Default: of the option's own type, never the unparsed text of the table (an option the
        # base sets is required, without a default).
        at_default = None if opt.key in base else parse(base, scope, env={})[opt.key]
        if opt.default is None:
            assert at_default is None
        else:
            assert isinstance(at_default, KIND_TYPES[opt.kind]), (opt.key, at_default)
            if isinstance(opt.default, str) and opt.kind not in ("string", "secret", "enum", "offsets"):
                assert not isinstance(at_default, str), (opt.key, at_default)
        # Set: the parsed value of what the user gave.
        given = _set_value(opt)
        if given is None:
            continue
        text, want = given
        assert parse({**base, opt.key: text}, scope, env={})[opt.key] == want


@pytest.mark.parametrize(
    "key,field,want",
    [
        ("maxTriggerDelay", "max_trigger_delay", 15 * 60.0),
        ("readCommittedLookbackBytes", "read_committed_lookback", 64 << 20),
        ("openCostInBytes", "open_cost_bytes", 256 << 10),
        ("watchWriteHeads", "watch_write_heads", "auto"),
        ("maxPartitionBytes", "max_partition_bytes", 128 << 20),
    ],
)
def test_read_options_carry_parsed_defaults(key, field, want):
    """``minBytesPerTrigger`` without ``maxTriggerDelay`` used to leave the delay as the text '15m',
    which the stream reader then compared with a float (a TypeError)."""
    opts = ReadOptions.parse({**BASE_READ, "minBytesPerTrigger": "1m"}, streaming=True, env={})
    assert getattr(opts, field) == want
    assert opts.min_bytes_per_trigger == 1 << 20
    assert opts.connection.broker_timeout == 300.0
