"""The ``collection`` options: an Estuary Flow collection read, turned into journal selection.

``collection=<name>`` stands for Flow's own selector of the collection's journals (the
``estuary.dev/collection`` label and ``name:prefix`` of the template name, narrowed by
``collection.partitions``), and makes ``readCommitted`` default to true; it excludes
``journals`` and ``selector``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark_gazette.errors import OptionError
from pyspark_gazette.flow.labels import collection_selector, parse_partition_selector

_COLLECTION_ONLY = ("collection.journalPrefix", "collection.partitions", "collection.controlDocuments")


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
    partitions = parse_partition_selector(v["collection.partitions"]) if v.get("collection.partitions") else None
    v["selector"] = collection_selector(collection, v.get("collection.journalPrefix"), partitions)
    given = {str(k).lower() for k, val in options.items() if val is not None}
    if "readcommitted" not in given:
        v["readCommitted"] = True
    return v
