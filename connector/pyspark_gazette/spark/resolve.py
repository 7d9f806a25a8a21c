"""Driver-side journal resolution: which journals a query covers, and the framing of each."""

from __future__ import annotations

import logging
from typing import Any

from pyspark_gazette.client import JournalClient, JournalInfo
from pyspark_gazette.errors import FramingError, GazetteError, OptionError
from pyspark_gazette.message import Framing, framing_by_name, framing_for_content_type, framings
from pyspark_gazette.protocol.journal_names import base_journal
from pyspark_gazette.protocol.labels import CONTENT_TYPE
from pyspark_gazette.spark.options.parsing import check_offsets_name_read_journals, closest

log = logging.getLogger(__name__)


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
    if selector:
        infos = client.list_journals(selector)
        if not infos:
            log.warning("selector %r matches no journal: the read is empty until one is created", selector)
    else:
        found = client.get_journals(journals)  # one List of the named journals
        infos = [found[n] for n in (base_journal(j) for j in journals) if n in found]
        missing = [j for j in journals if base_journal(j) not in found]
        if missing:
            # A broker with auth answers "not found" for journals outside the token's selector too.
            hint = " (or broker.authToken does not cover them)" if client.config.auth_token else ""
            hint += did_you_mean(client, missing[0])
            raise OptionError("journals", f"journal(s) not found: {', '.join(map(repr, missing))}{hint}")
    infos = sorted({i.name: i for i in infos}.values(), key=lambda i: i.name)
    if offsets is not None and selector:
        check_offsets_name_read_journals(*offsets, [i.name for i in infos])
    return infos


def did_you_mean(client: JournalClient, journal: str) -> str:
    """`` (did you mean 'x'?)`` naming the existing journal closest to a missing ``journal``, or
    ``""`` when none is close (or listing is refused, e.g. a token without LIST)."""
    try:
        near = closest(journal, [i.name for i in client.list_journals()])
    except GazetteError:
        return ""
    return f" (did you mean {near!r}?)" if near else ""


def framing_of(info: JournalInfo, option: str) -> Framing:
    """The framing of a journal: the ``framing`` option's, or its ``content-type`` label's."""
    if option != "auto":
        return framing_by_name(option)
    content_type = info.label(CONTENT_TYPE)
    if not content_type:
        raise OptionError(
            "framing",
            f"journal {info.name!r} has no content-type label; set the framing option ({_names()})",
        )
    try:
        return framing_for_content_type(content_type)
    except FramingError:
        raise OptionError(
            "framing",
            f"journal {info.name!r} has content-type {content_type!r}, which has no framing; set the framing option",
        ) from None


def _names() -> str:
    names = [f.name for f in framings()]
    return ", ".join(names[:-1]) + " or " + names[-1]
