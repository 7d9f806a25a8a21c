"""Gazette's journal-name rules and the ``;meta`` suffix (protocol/journal_names.py)."""

from __future__ import annotations

import pytest

from pyspark_gazette.errors import OptionError, SpecError
from pyspark_gazette.protocol.journal_names import base_journal, split_meta, validate_journal_name
from pyspark_gazette.spark.options import ReadOptions

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "name", ["a/b/c", "events/part=001", "caf\u00e9/\u65e5\u672c", "x/\u0661\u0662\u0663", "a-b_c+d.e%f"]
)
def test_letters_and_numbers_of_any_script_and_the_path_symbols_are_valid(name):
    validate_journal_name(name)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("abc", "length"),
        ("a" * 513, "length"),
        ("\u00e9" * 257, "length"),  # 257 characters, 514 bytes: Gazette counts bytes
        ("a b/c", "not allowed"),
        ("a/b;c", "not allowed"),
        ("/abc", "begin with '/'"),
        ("a//b", "clean path"),
        ("a/./b", "clean path"),
    ],
)
def test_invalid_names_say_why(name, why):
    with pytest.raises(SpecError, match=why):
        validate_journal_name(name)


def test_meta_suffix_names_the_same_journal():
    assert split_meta("a/b;x/y") == ("a/b", ";x/y")
    assert split_meta("a/b") == ("a/b", "")
    assert base_journal("a/b;x") == "a/b"


def test_the_journals_option_follows_the_same_rules():
    # Unicode letters are valid journal names in Gazette, so the option accepts them too.
    opts = ReadOptions.parse({"broker.address": "http://127.0.0.1:1", "journals": "caf\u00e9/x;meta"}, env={})
    assert opts.journals == ("caf\u00e9/x;meta",)
    with pytest.raises(OptionError, match="invalid journal name"):
        ReadOptions.parse({"broker.address": "http://127.0.0.1:1", "journals": "a b/c"}, env={})
