"""Driver-side journal resolution: which journals, which framing, and spec templates."""

from __future__ import annotations

import json
import logging
from typing import Any

from pyspark_gazette.client import JournalClient, JournalInfo
from pyspark_gazette.errors import GazetteError, JournalNotFoundError, OptionError, SpecError
from pyspark_gazette.protocol import pb
from pyspark_gazette.protocol.labels import CONTENT_TYPE

log = logging.getLogger(__name__)

#: Framings whose messages are text (``value`` is a string column).
TEXT_FRAMINGS = frozenset({"ndjson", "csv", "lines"})


def resolve_journals(
    client: JournalClient,
    journals: tuple[str, ...],
    selector: str | None,
    *,
    offsets: tuple[Any, Any] | None = None,
) -> list[JournalInfo]:
    """The journals a read covers, in name order: named ones (each must exist; a missing one is an
    error suggesting the closest existing name) or a selector's (a warning when none matches).
    ``offsets`` (``startingOffsets``, ``endingOffsets``) may only name journals being read."""
    from pyspark_gazette.spark.options import check_offsets_name_read_journals, closest

    if selector:
        infos = client.list_journals(selector)
        if not infos:
            log.warning("selector %r matches no journal: the read is empty until one is created", selector)
    else:
        infos = []
        missing = []
        for name in journals:
            try:
                infos.append(client.get_journal(name))
            except JournalNotFoundError:
                missing.append(name)
        if missing:
            # A broker with auth answers "not found" for journals outside the token's selector too.
            hint = " (or broker.authToken does not cover them)" if client.config.auth_token else ""
            try:
                near = closest(missing[0], [i.name for i in client.list_journals()])
            except GazetteError:
                near = None  # e.g. a token without LIST
            if near:
                hint += f" (did you mean {near!r}?)"
            raise OptionError("journals", f"journal(s) not found: {', '.join(map(repr, missing))}{hint}")
    infos = sorted({i.name: i for i in infos}.values(), key=lambda i: i.name)
    if offsets is not None and selector:
        check_offsets_name_read_journals(*offsets, [i.name for i in infos])
    return infos


def framing_of(info: JournalInfo, option: str) -> str:
    """The framing name of a journal: the ``framing`` option, or its ``content-type`` label."""
    if option != "auto":
        return option
    from pyspark_gazette.errors import FramingError
    from pyspark_gazette.message import framing_for_content_type

    content_type = info.label(CONTENT_TYPE)
    if not content_type:
        raise OptionError(
            "framing",
            f"journal {info.name!r} has no content-type label; set the framing option "
            "(ndjson, protobuf-fixed, csv or lines)",
        )
    try:
        return framing_for_content_type(content_type).name
    except FramingError:
        raise OptionError(
            "framing",
            f"journal {info.name!r} has content-type {content_type!r}, which has no framing; set the framing option",
        ) from None


def spec_template(text: str) -> dict[str, Any]:
    """Parse the ``createJournals`` option: a journal spec without a name, as YAML or JSON."""
    import yaml

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
    """A complete spec for journal ``name`` from a ``createJournals`` template."""
    from pyspark_gazette.client.specs import spec_from_mapping

    spec = spec_from_mapping(name, template)
    if spec.fragment.length == 0 or spec.fragment.compression_codec == pb.INVALID:
        raise SpecError("a createJournals template needs fragment.length and fragment.compression_codec")
    if spec.fragment.refresh_interval.seconds == 0 and spec.fragment.refresh_interval.nanos == 0:
        spec.fragment.refresh_interval.seconds = 60
    return spec
