"""The docs agree with the code: generated pages are current, every option is documented and
every documented option exists, pages only use real options, and the site builds strictly.

The generated pages come from ``tools/gen_docs.py``; when one of these tests fails after an
option or a CLI flag changed, run ``make docs-gen`` and commit the result.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

from pyspark_gazette.spark.options import OPTIONS, env_name

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "tools" / "gen_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _load_generator()
OPTION_KEYS = [o.key for o in OPTIONS]
#: Keys Spark itself handles, which pages may use beside ours.
SPARK_KEYS = {"checkpointLocation", "path"}


def _pages() -> list[pathlib.Path]:
    return sorted(DOCS.rglob("*.md"))


@pytest.mark.unit
def test_options_page_is_generated_from_the_options_module():
    assert (DOCS / "options.md").read_text(encoding="utf-8") == gen.render_options(), (
        "docs/options.md is stale: run `make docs-gen`"
    )


@pytest.mark.unit
def test_every_option_is_documented_once_and_every_documented_option_exists():
    text = (DOCS / "options.md").read_text(encoding="utf-8")
    table = re.findall(r"^\| \[`([^`]+)`\]\(#([^)]+)\) \|", text, flags=re.M)
    headings = re.findall(r"^### `([^`]+)` \{#([^}]+)\}$", text, flags=re.M)
    assert [key for key, _ in table] == OPTION_KEYS
    assert [key for key, _ in headings] == OPTION_KEYS
    # Each summary row links to its option's section.
    assert [anchor for _, anchor in table] == [anchor for _, anchor in headings]
    for key, _ in headings:
        section = text.split(f"### `{key}` ", 1)[1].split("\n### ", 1)[0]
        assert f"`{env_name(key)}`" in section, f"{key}: environment variable not documented"
        assert "- **Type:**" in section and "- **Default:**" in section and "- **Applies to:**" in section


@pytest.mark.unit
def test_pages_only_use_options_that_exist():
    """``.option("key", ...)`` in any page (examples, prose) names a real option."""
    known = {k.lower() for k in OPTION_KEYS} | {k.lower() for k in SPARK_KEYS}
    bad = []
    for page in _pages():
        for key in re.findall(r"\.option\(\s*[\"']([^\"']+)[\"']", page.read_text(encoding="utf-8")):
            if key.lower() not in known:
                bad.append(f"{page.relative_to(ROOT)}: {key}")
    assert not bad, f"pages use options that do not exist: {bad}"


@pytest.mark.unit
def test_pages_only_name_environment_variables_that_exist():
    """``PYSPARK_GAZETTE_*`` in a page is an option's variable or a name the code reads."""
    source = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "connector").rglob("*.py"))
    source += "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "tests").rglob("*.py"))
    source += (ROOT / "setup.py").read_text(encoding="utf-8")  # the build's own switches
    options = {env_name(k) for k in OPTION_KEYS}
    bad = []
    for page in _pages():
        for name in set(re.findall(r"\bPYSPARK_GAZETTE_[A-Z0-9_]*[A-Z0-9]\b", page.read_text(encoding="utf-8"))):
            if name not in options and f'"{name}"' not in source and f"'{name}'" not in source:
                bad.append(f"{page.relative_to(ROOT)}: {name}")
    assert not bad, f"pages name environment variables nothing reads: {sorted(bad)}"


@pytest.mark.unit
def test_cli_reference_is_generated_from_the_parsers():
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    assert text == gen.render_cli(text), "docs/cli.md is stale: run `make docs-gen`"


def _all_parsers():
    from pyspark_gazette import cli
    from pyspark_gazette.broker.main import build_parser

    todo = [cli.build_parser(), build_parser()]
    while todo:
        parser = todo.pop()
        yield parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo.extend(action.choices.values())


@pytest.mark.unit
def test_cli_reference_names_every_command_and_flag():
    """Independent of the generator: every flag of every parser appears in docs/cli.md."""
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    missing = []
    for parser in _all_parsers():
        for action in parser._actions:
            if action.help == argparse.SUPPRESS:
                continue
            for flag in action.option_strings:
                if flag not in ("-h", "--help") and f"`{flag}`" not in text:
                    missing.append(f"{parser.prog} {flag}")
    for command in ("quickstart", "broker", "journals list", "journals apply", "journals append", "journals read"):
        assert f"### `pyspark-gazette {command}`" in text
    assert not missing, f"flags missing from docs/cli.md: {missing}"


@pytest.mark.unit
def test_check_mode_fails_on_a_stale_page_and_passes_on_a_current_one(tmp_path, monkeypatch, capsys):
    options_md, cli_md = tmp_path / "options.md", tmp_path / "cli.md"
    cli_md.write_text("# CLI\n\n" + gen.CLI_BEGIN + "\n" + gen.CLI_END + "\n", encoding="utf-8")
    monkeypatch.setattr(gen, "OPTIONS_MD", options_md)
    monkeypatch.setattr(gen, "CLI_MD", cli_md)
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    assert gen.main(["--check"]) == 1  # options.md missing, cli block empty
    assert "options.md is stale" in capsys.readouterr().err
    assert gen.main([]) == 0
    assert gen.main(["--check"]) == 0
    assert cli_md.read_text(encoding="utf-8").startswith("# CLI\n\n" + gen.CLI_BEGIN)
    options_md.write_text(options_md.read_text(encoding="utf-8").replace("`maxPartitionBytes`", "`maxPartBytes`"))
    assert gen.main(["--check"]) == 1


#: Words of a development diary, which no repository text uses: it states the product's facts.
DIARY = re.compile(r"session [0-9]|stop [0-9]|rehearsal", re.IGNORECASE)


@pytest.mark.unit
def test_no_tracked_text_reads_like_a_development_diary():
    """README, docs, CHANGELOG, code, tests, benchmarks, tools, CI, Makefile, notebooks: every
    text file git tracks (this pattern's own line excepted)."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=False)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: no list of tracked files")
    here = pathlib.Path(__file__).resolve()
    found = []
    for name in listed.stdout.decode().split("\0"):
        path = ROOT / name
        if not name or not path.is_file():
            continue
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            continue  # not text
        for number, line in enumerate(text.splitlines(), 1):
            if DIARY.search(line) and not (path.resolve() == here and DIARY.pattern in line):
                found.append(f"{name}:{number}: {line.strip()[:120]}")
    assert not found, "state the product's facts without the history:\n" + "\n".join(found)


@pytest.mark.integration
def test_site_builds_strictly(tmp_path):
    """``mkdocs build --strict``: broken links, missing pages and API references fail."""
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "WARNING" not in output, output
    assert (tmp_path / "site" / "options" / "index.html").exists()
    api = (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")
    for name in ("client.JournalClient", "client.ClientConfig", "broker.EmbeddedBroker", "errors.GazetteError"):
        assert f'id="pyspark_gazette.{name}"' in api, f"{name} missing from the API page"
