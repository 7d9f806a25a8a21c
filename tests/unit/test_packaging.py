"""What the package ships and claims: package data equal to the samples in conf/, the oldest
PySpark CI tests (``make test-oldest-pyspark``) equal to the lower bound pyproject.toml declares,
and the real Gazettes CI tests equal to the versions their go.mod files pin."""

from __future__ import annotations

import pathlib
import re

from pyspark_gazette.quickstart import packaged_specs, resource

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_packaged_quickstart_files_equal_the_samples_in_conf():
    assert packaged_specs() == (ROOT / "conf" / "journals" / "quickstart.yaml").read_text(encoding="utf-8")
    assert resource("log4j2.properties").read_text(encoding="utf-8") == (ROOT / "conf" / "log4j2.properties").read_text(
        encoding="utf-8"
    )


def test_the_package_data_globs_cover_the_resources():
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    for name in ("quickstart.yaml", "log4j2.properties"):
        suffix = name.rsplit(".", 1)[1]
        assert f'"resources/*.{suffix}"' in text, f"{name} is not package data"


def test_the_oldest_pyspark_tested_is_the_declared_lower_bound():
    declared = re.search(r'"pyspark>=([0-9.]+)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    tested = re.search(r"^OLDEST_PYSPARK := ([0-9.]+)$", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M)
    assert declared and tested
    lower = [int(x) for x in declared.group(1).split(".")]
    oldest = [int(x) for x in tested.group(1).split(".")]
    assert oldest == lower + [0] * (3 - len(lower)), (declared.group(1), tested.group(1))
    # CI runs it: on its own, or beside the cluster tier (`make test ALONGSIDE="... test-oldest-pyspark ..."`).
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r'^make (test-oldest-pyspark|test ALONGSIDE="[^"]*\btest-oldest-pyspark\b)', ci, re.M), ci


def test_ci_builds_and_tests_each_real_gazette_at_the_version_its_go_mod_pins():
    """tests/realgazette.py's peers are the versions their go.mod pins; CI builds each (`make
    gazette`, `gazette-flow`, `gazette-main`: the last from a source tarball checked against the
    sha256 the Makefile pins) and runs the subsets of the two besides the release beside its
    cluster tier."""
    import realgazette

    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    (alongside,) = re.findall(r'^make test ALONGSIDE="([^"]*)"', ci, re.M)
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for peer, directory in (("release", "gazette-peer"), ("flow", "gazette-flow"), ("main", "gazette-main")):
        version = realgazette.PEERS[peer][0]
        go_mod = (ROOT / "tests" / "peers" / directory / "go.mod").read_text(encoding="utf-8")
        assert re.search(rf"^\s*(require )?go\.gazette\.dev/core {re.escape(version)}$", go_mod, re.M), (peer, version)
        target = "gazette" if peer == "release" else f"gazette-{peer}"
        assert re.search(rf"^make {target}$", ci, re.M), target
        if peer != "release":
            assert f"test-{target}" in alongside.split(), alongside
    assert re.search(r"^GAZETTE_MAIN_SHA256 := [0-9a-f]{64}$", makefile, re.M)
