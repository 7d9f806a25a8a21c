"""Every default the docs state equals the code's, read from the pages themselves (not from the
generator of docs/options.md): each option's section of the options reference, each page's
"`option` (default X)", and the command line's defaults, with the Spark option's default where the
command line names it."""

from __future__ import annotations

import pathlib
import re

import pytest

from pyspark_gazette.spark.options import BY_KEY, OPTIONS, parse
from pyspark_gazette.spark.options.parsing import DEFAULTS

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

#: "`key` (default `X`)", "[`key`](options.md#a) (default 5 minutes)", "`key`, default `X`".
_STATED = re.compile(
    r"\[?`(?P<key>[A-Za-z][\w.]*)`\]?(?:\([^)\s]*\))?(?: \(|, )default (?:`(?P<code>[^`]+)`|(?P<n>\d+) minutes?)"
)


def stated_defaults(text: str) -> list[tuple[str, str]]:
    """``(key, default as written)`` for every default stated right after an option's name."""
    out = []
    for m in _STATED.finditer(text):
        out.append((m["key"], m["code"] if m["code"] is not None else f"{m['n']}m"))
    return out


def same_as_code(key: str, written: str) -> bool:
    """``written`` (a page's text of ``key``'s default) parses to the code's default."""
    opt = BY_KEY[key.lower()]
    if written == "none":
        return opt.default in (None, "")
    scope = sorted(opt.scopes)[0]
    return parse({opt.key: written}, scope, env={})[opt.key] == DEFAULTS[opt.key]  # parsed as a user's value


@pytest.mark.unit
def test_the_options_reference_states_each_default_of_the_code():
    text = (DOCS / "options.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| \[`([^`]+)`\]\(#[^)]+\) \| [^|]+ \| ([^|]+) \|", text, flags=re.M))
    wrong = []
    for opt in OPTIONS:
        section = text.split(f"### `{opt.key}` ", 1)[1].split("\n### ", 1)[0]
        m = re.search(r"^- \*\*Default:\*\* (.+)$", section, flags=re.M)
        assert m, f"{opt.key}: no default in its section"
        for where, shown in (("section", m.group(1)), ("summary table", rows[opt.key])):
            written = shown.strip().strip("`")
            if not same_as_code(opt.key, written):
                wrong.append(f"{opt.key} ({where}): the page says {shown.strip()}, the code {opt.default!r}")
    assert not wrong, wrong


@pytest.mark.unit
def test_every_page_states_the_codes_defaults():
    """A default given beside an option's name anywhere in the docs is the code's."""
    wrong, seen = [], 0
    for page in sorted(DOCS.rglob("*.md")):
        for key, written in stated_defaults(page.read_text(encoding="utf-8")):
            if key.lower() not in BY_KEY:
                continue
            seen += 1
            if not same_as_code(key, written):
                wrong.append(f"{page.name}: {key} default {written}, the code's is {BY_KEY[key.lower()].default!r}")
    assert seen >= 5, "the pattern finds nothing: the pages' wording changed, update this test"
    assert not wrong, wrong


#: "--broker.timeout ... (default 1m" / "... ; default `1m`", and "the Spark option broker.timeout ... defaults to 5m".
_CLI_DEFAULT = re.compile(r"--broker\.timeout\b(?:[^|]{0,40}\|)?[^|]{0,200}?[(;] ?default `?(\w+)`?")
_SPARK_DEFAULT = re.compile(r"Spark option \[?`?broker\.timeout`?\]?(?:\([^)]*\))? [^;)|]{0,80}?defaults to `?(\w+)`?")


@pytest.mark.unit
def test_the_command_lines_broker_timeout_and_the_spark_options_are_stated_as_in_the_code():
    """The command line's --broker.timeout and the Spark option broker.timeout mean the same and
    default differently (a command gives up sooner than a task): its help and docs/cli.md say both
    defaults as the code has them."""
    from pyspark_gazette import cli

    cli_default, spark_default = cli.DEFAULT_BROKER_TIMEOUT, BY_KEY["broker.timeout"].default
    append = cli.build_parser().parse_args(["journals", "append", "-j", "a/b/c"])
    assert append.broker_timeout == cli_default
    helps = [
        a.help % {"default": a.default}
        for a in cli.build_parser()
        ._subparsers._group_actions[0]
        .choices["journals"]
        ._subparsers._group_actions[0]
        .choices["append"]
        ._actions
        if "--broker.timeout" in a.option_strings
    ]
    texts = {"--help": " ".join(f"--broker.timeout {h}" for h in helps)}
    texts["docs/cli.md"] = (DOCS / "cli.md").read_text(encoding="utf-8")
    for where, text in texts.items():
        text = " ".join(text.split())
        said = _CLI_DEFAULT.findall(text)
        spark = _SPARK_DEFAULT.findall(text)
        assert said and spark, f"{where} states no default for --broker.timeout or the Spark option"
        assert set(said) == {cli_default}, f"{where}: --broker.timeout default {said}, the code's {cli_default}"
        assert set(spark) == {spark_default}, f"{where}: broker.timeout default {spark}, the code's {spark_default}"
