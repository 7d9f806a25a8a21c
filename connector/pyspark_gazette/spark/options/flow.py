"""The ``collection`` options: an Estuary Flow collection read, turned into journal selection.

``collection=<name>`` stands for Flow's own selector of the collection's journals (the
``estuary.dev/collection`` label and ``name:prefix`` of the template name, narrowed by
``collection.partitions``), and makes ``readCommitted`` default to true; it excludes
``journals`` and ``selector``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from pyspark_gazette.errors import OptionError
from pyspark_gazette.flow.labels import collection_selector, parse_partition_selector
from pyspark_gazette.spark.options.connection import Connection

_COLLECTION_ONLY = (
    "collection.journalPrefix",
    "collection.partitions",
    "collection.controlDocuments",
    "flow.agentUrl",
    "flow.authToken",
    "flow.pgUrl",
    "flow.pgApiKey",
)
#: Where parsed values keep a hosted collection's HostedAuth (not an option).
HOSTED = "_flow.hosted"


def collection_values(options: Mapping[str, str], v: dict[str, Any]) -> dict[str, Any]:
    """Rewrite parsed values ``v`` in place for a ``collection`` read (nothing otherwise): the
    selector, and ``readCommitted`` true unless the user set it. Returns ``v``."""
    collection = v.get("collection")
    if not collection:
        for key in _COLLECTION_ONLY:
            if v.get(key) not in (None, False):
                raise OptionError(key, "applies only with the collection option")
        return v
    if v.get("journals") or v.get("selector"):
        raise OptionError("collection", "give collection or journals/selector, not both")
    if collection.startswith("/") or collection.endswith("/") or "//" in collection or "=" in collection:
        raise OptionError("collection", f"{collection!r} is not a Flow collection name (e.g. acmeCo/orders)")
    if v.get("flow.authToken"):
        _hosted(v, collection)
    partitions = parse_partition_selector(v["collection.partitions"]) if v.get("collection.partitions") else None
    v["selector"] = collection_selector(collection, v.get("collection.journalPrefix"), partitions)
    given = {str(k).lower() for k, val in options.items() if val is not None}
    if "readcommitted" not in given:
        v["readCommitted"] = True
    return v


def _hosted(v: dict[str, Any], collection: str) -> None:
    """Authorize a hosted collection now (errors at planning): its broker address and journal
    prefix unless given, and the :class:`HostedAuth` the connection renews its token with."""
    from pyspark_gazette.errors import FlowAuthorizationError
    from pyspark_gazette.flow.hosted import HostedAuth, broker_authorization

    if not v.get("flow.agentUrl"):
        raise OptionError("flow.agentUrl", "is required with flow.authToken (Estuary's agent API URL)")
    h = HostedAuth(v["flow.agentUrl"], collection, v["flow.authToken"], v.get("flow.pgUrl"), v.get("flow.pgApiKey"))
    try:
        a = broker_authorization(h)
    except FlowAuthorizationError as e:
        raise OptionError("flow.authToken", str(e)) from None
    v.setdefault("broker.address", None)
    v["broker.address"] = v["broker.address"] or a.broker_address
    v["collection.journalPrefix"] = v.get("collection.journalPrefix") or a.journal_name_prefix or None
    v[HOSTED] = h


def with_hosted(connection: Connection, v: dict[str, Any]) -> Connection:
    """``connection`` renewing a hosted collection's broker token, when there is one."""
    h = v.get(HOSTED)
    return dataclasses.replace(connection, hosted=h) if h is not None else connection
