"""JournalSpec and ApplyRequest rules (protocol/specs.py), and the broker's name rule on top."""

from __future__ import annotations

import pytest

from journalspecs import make_spec
from pyspark_gazette.broker import specs as broker_specs
from pyspark_gazette.errors import SpecError
from pyspark_gazette.protocol import pb
from pyspark_gazette.protocol.specs import spec_problems, validate_apply, validate_spec


def test_every_problem_of_a_spec_is_listed_in_gazettes_order():
    spec = make_spec("a/b", length=10, store="nope://x/")
    spec.replication = 9
    problems = [str(p) for p in spec_problems(spec)]
    assert len(problems) == 4
    for problem, says in zip(
        problems,
        [
            "length must be 4..512",
            "replication must be 1..5",
            "fragment.length must be 1024..",
            "unsupported scheme 'nope'",
        ],
        strict=True,
    ):
        assert says in problem
    with pytest.raises(SpecError, match="invalid journal name 'a/b'"):  # the first problem only
        validate_spec(spec)
    assert spec_problems(make_spec("a/bc")) == []


def test_the_broker_adds_its_store_safety_name_rule_to_gazettes():
    spec = make_spec("../escape")
    assert spec_problems(spec) == []  # Gazette's rules: a clean path
    request = pb.ApplyRequest(changes=[pb.ApplyRequest.Change(expect_mod_revision=0, upsert=spec)])
    validate_apply(request)
    with pytest.raises(SpecError, match="must not begin with '..'"):
        broker_specs.validate_apply(request)
    delete = pb.ApplyRequest(changes=[pb.ApplyRequest.Change(expect_mod_revision=-1, delete="../escape")])
    with pytest.raises(SpecError, match="must not begin with '..'"):
        broker_specs.validate_apply(delete)


def test_a_negative_suspend_offset_is_refused_as_gazette_does():
    # Gazette's JournalSpec_Suspend.Validate: "Suspend.Offset: invalid Offset (-1; expected >= 0)".
    spec = make_spec("a/suspended")
    spec.suspend.level = pb.JournalSpec.Suspend.FULL
    spec.suspend.offset = 4096
    assert spec_problems(spec) == []
    spec.suspend.offset = -1
    with pytest.raises(SpecError, match=r"journal 'a/suspended': suspend.offset must be >= 0 \(got -1\)"):
        validate_spec(spec)
