"""The quickstart's ``--specs`` file: read through the client's ``load_spec_file`` (as the CLI's
``journals apply -f``), every problem named with the flag and the path."""

from __future__ import annotations

import pytest

from pyspark_gazette.client.specs import load_spec_file
from pyspark_gazette.errors import InvalidInputError
from pyspark_gazette.quickstart import _load_specs, packaged_specs


def test_a_missing_or_broken_file_names_the_flag_and_the_path(tmp_path):
    missing = tmp_path / "missing.yaml"
    with pytest.raises(InvalidInputError, match=f"--specs {missing}: No such file"):
        _load_specs(missing)
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    with pytest.raises(ValueError, match=f"--specs {broken}: "):
        _load_specs(broken)
    with pytest.raises(InvalidInputError, match=f"-f {missing}: No such file"):
        load_spec_file(str(missing), "-f")


def test_the_quickstart_journals_must_be_defined(tmp_path):
    other = tmp_path / "other.yaml"
    other.write_text(packaged_specs().replace("quickstart/", "elsewhere/"))
    with pytest.raises(ValueError, match=f"--specs {other}: defines no journal quickstart/clicks"):
        _load_specs(other)
    packaged = tmp_path / "quickstart.yaml"
    packaged.write_text(packaged_specs())
    assert {n.spec.name for n in _load_specs(packaged) if not n.delete} >= {"quickstart/clicks", "quickstart/checkouts"}
