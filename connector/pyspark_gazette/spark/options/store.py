"""The ``store.url`` options: a read of one fragment store alone, with no broker.

Checked at planning time, each error naming its option: the URL itself (scheme, a path ending
in ``/``; ``find``/``replace`` rewrites are refused, since the journal names could not be read
back from the rewritten keys), the options that need a broker (``signedUrls``,
``directReads=false``, ``flow.authToken``), a ``framing`` (the store keeps no ``content-type``
label; a ``collection`` is ndjson) and a ``selector`` of journal names only (a store holds names,
not labels). Planning is :mod:`pyspark_gazette.spark.read.store_plan`.
"""

from __future__ import annotations

from typing import Any

from pyspark_gazette.errors import OptionError, SelectorError, StoreURLError
from pyspark_gazette.protocol.labels import META_NAME, META_PREFIX, parse_selector
from pyspark_gazette.protocol.store_urls import parse_store_url

#: A ``collection`` read from a store is ndjson: Flow's journals are.
COLLECTION_FRAMING = "ndjson"


def check_store_read(v: dict[str, Any]) -> None:
    """Check (and complete, in place) parsed read values ``v`` for a ``store.url`` read; a
    ``store.*`` option of store reads without ``store.url`` is an error."""
    url = v.get("store.url")
    if not url:
        if v.get("store.pathPostfixDepth") is not None:
            raise OptionError("store.pathPostfixDepth", "applies only with store.url")
        return
    try:
        parsed = parse_store_url(url)
    except StoreURLError as e:
        raise OptionError("store.url", str(e)) from None
    if parsed.get("find"):
        raise OptionError(
            "store.url",
            "a store read cannot use find/replace query arguments: journal names are read back from the "
            "store's keys; give the URL of the prefix the fragments are under",
        )
    if v.get("signedUrls"):
        raise OptionError("signedUrls", "needs brokers to sign URLs; a store.url read reads the store itself")
    if not v.get("directReads", True):
        raise OptionError("directReads", "false needs brokers to read through; a store.url read reads the store")
    if v.get("flow.authToken"):
        raise OptionError(
            "flow.authToken",
            "authorizes reads through Estuary's brokers; a store.url read needs read access to the bucket only",
        )
    depth = v.get("store.pathPostfixDepth")
    if depth is not None and depth < 0:
        raise OptionError("store.pathPostfixDepth", f"must be 0 or more, got {depth}")
    if v.get("framing", "auto") == "auto":
        if not v.get("collection"):
            raise OptionError(
                "framing",
                "a store.url read needs the framing option (the store keeps no content-type label), "
                "e.g. framing=ndjson",
            )
        v["framing"] = COLLECTION_FRAMING
    if v.get("selector"):
        try:
            sel = parse_selector(v["selector"])
        except SelectorError as e:
            raise OptionError("selector", str(e)) from None
        other = sorted(
            {lb.name for lb in (*sel.include.labels, *sel.exclude.labels) if lb.name not in (META_NAME, META_PREFIX)}
        )
        if other:
            raise OptionError(
                "selector",
                f"a store.url read sees journal names only, not labels ({', '.join(other)}): "
                "select by name or name:prefix, or give journals",
            )


def store_values(v: dict[str, Any]) -> dict[str, Any]:
    """The :class:`~pyspark_gazette.spark.options.ReadOptions` fields of the store options."""
    return {"store_url": v.get("store.url") or None, "store_postfix_depth": v.get("store.pathPostfixDepth")}
