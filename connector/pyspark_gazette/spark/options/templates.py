"""The ``createJournals`` option: a journal spec template, parsed and checked at planning time,
and the complete spec it gives each journal a write creates."""

from __future__ import annotations

import json
from typing import Any

import yaml

from pyspark_gazette.client.specs import spec_from_mapping
from pyspark_gazette.errors import OptionError, SpecError
from pyspark_gazette.protocol import pb
from pyspark_gazette.protocol.specs import validate_spec


def spec_template(text: str) -> dict[str, Any]:
    """Parse the ``createJournals`` option: a journal spec without a name, as YAML or JSON."""
    try:
        doc = json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        raise OptionError("createJournals", f"does not parse as JSON or YAML: {e}") from None
    if not isinstance(doc, dict):
        raise OptionError("createJournals", "must be a mapping of journal spec fields")
    if "name" in doc or "children" in doc:
        raise OptionError("createJournals", "is a template for one journal: leave out name and children")
    try:
        spec_from_template("template/check", doc)
    except SpecError as e:
        raise OptionError("createJournals", str(e)) from None
    return doc


def spec_from_template(name: str, template: dict[str, Any]) -> pb.JournalSpec:
    """A complete spec for journal ``name`` from a ``createJournals`` template, checked whole
    against Gazette's JournalSpec rules (:func:`~pyspark_gazette.protocol.specs.validate_spec`)."""
    spec = spec_from_mapping(name, template)
    if spec.fragment.length == 0 or spec.fragment.compression_codec == pb.INVALID:
        raise SpecError("a createJournals template needs fragment.length and fragment.compression_codec")
    if spec.fragment.refresh_interval.seconds == 0 and spec.fragment.refresh_interval.nanos == 0:
        spec.fragment.refresh_interval.seconds = 60
    validate_spec(spec)
    return spec
