"""Options of SQL catalog tables (``CREATE TABLE t USING gazette OPTIONS (...)``).

Spark (4.2, 4.3) hands a Python data source a catalog table's options only once: when
``CREATE TABLE`` without a column list infers the schema. It then passes the table's properties,
each ``OPTIONS`` key twice (as given and prefixed ``option.``) plus catalog keys (``owner``,
``provider``, ``location``, ``TBLPROPERTIES``). Reads and ``INSERT INTO`` of the table later get
no options at all, only the table's schema, as the catalog stored it.

So the inferred schema carries the options: :func:`stash` puts the ``option.`` keys (prefix
stripped, secrets refused) as JSON into the first column's metadata under :data:`STASH_KEY`,
and :func:`stashed` takes them back from the schema a reader or writer is given. Options given
with the query win over stashed ones. Secrets never go into the catalog: give them through the
environment or the options file (``PYSPARK_GAZETTE_CONF``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pyspark_gazette.errors import OptionError
from pyspark_gazette.spark.options.table import BY_KEY

#: The column metadata key holding a catalog table's options.
STASH_KEY = "pyspark_gazette.options"
#: How Spark prefixes a catalog table's ``OPTIONS`` keys among its properties.
PREFIX = "option."


def is_catalog(options: Mapping[str, str]) -> bool:
    """Whether ``options`` are a catalog table's properties (CREATE TABLE), not a query's options."""
    keys = {str(k).lower() for k in options}
    return "provider" in keys or any(k.startswith(PREFIX) for k in keys)


def catalog_options(options: Mapping[str, str]) -> dict[str, str]:
    """The ``OPTIONS`` of a catalog table's properties (prefix stripped; other properties dropped)."""
    out = {str(k)[len(PREFIX) :]: v for k, v in options.items() if str(k).lower().startswith(PREFIX)}
    # Spark lower-cases property keys: name options as the reference spells them.
    out = {BY_KEY[k.lower()].key if k.lower() in BY_KEY else k: v for k, v in out.items()}
    secrets = sorted(k for k in out if (o := BY_KEY.get(k.lower())) is not None and o.kind == "secret")
    if secrets:
        raise OptionError(
            secrets[0],
            "is a secret, and a catalog table keeps its options in the catalog: set it in the "
            f"environment ({'PYSPARK_GAZETTE_' + secrets[0].upper().replace('.', '_')}) or the options file "
            "named by PYSPARK_GAZETTE_CONF instead of in CREATE TABLE ... OPTIONS",
        )
    return out


def nullable(schema: Any) -> Any:
    """``schema`` with every column nullable, so ``INSERT INTO t (value) ...`` may leave
    ``journal`` and ``offset`` out."""
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(f.name, f.dataType, True, f.metadata) for f in schema.fields])


def is_write_target(options: Mapping[str, str]) -> bool:
    """Options a write can append with (a view for ``INSERT INTO``): a ``journal``, or
    ``journals`` naming one journal (:func:`for_scope`), and no ``selector`` or ``path``."""
    from pyspark_gazette.spark.options.table import WRITE

    keys = {str(k).lower() for k in for_scope(options, WRITE)}
    return "journal" in keys and not {"journals", "selector", "path"} & keys


def stash(schema: Any, options: Mapping[str, str]) -> Any:
    """``schema`` (a StructType) with ``options`` in its first column's metadata, every column
    nullable."""
    from pyspark.sql.types import StructField, StructType

    first, *rest = nullable(schema).fields
    meta = {**(first.metadata or {}), STASH_KEY: json.dumps(dict(options), sort_keys=True)}
    return StructType([StructField(first.name, first.dataType, True, meta), *rest])


def stashed(schema: Any) -> dict[str, str]:
    """The options :func:`stash` put into ``schema`` (empty when there are none)."""
    fields = getattr(schema, "fields", None) or []
    text = (fields[0].metadata or {}).get(STASH_KEY) if fields else None
    return dict(json.loads(text)) if text else {}


def table_options(options: Mapping[str, str], schema: Any, scope: str) -> dict[str, str]:
    """A read's or write's options: the query's ``options`` over those stashed in ``schema``.

    One table serves reads and ``INSERT INTO``, so stashed keys of another scope are dropped (as
    the options file's are), and ``journal``/``journals`` stand for each other (:func:`for_scope`).
    """
    saved = for_scope(stashed(schema), scope)
    kept = {k: v for k, v in saved.items() if (o := BY_KEY.get(k.lower())) is None or scope in o.scopes}
    given = {str(k).lower() for k in options}
    return for_scope({**{k: v for k, v in kept.items() if k.lower() not in given}, **options}, scope)


def for_scope(options: Mapping[str, str], scope: str) -> dict[str, str]:
    """One set of options serving reads and writes of a SQL view or table: a read given only
    ``journal`` reads that journal; a write given only ``journals`` naming one journal writes to
    it. Anything else is left for :func:`~pyspark_gazette.spark.options.parsing.parse` to judge."""
    from pyspark_gazette.spark.options.table import WRITE

    keys = {str(k).lower(): k for k in options}
    out = dict(options)
    if scope != WRITE and "journal" in keys and not {"journals", "selector", "path"} & keys.keys():
        out["journals"] = out.pop(keys["journal"])
    if scope == WRITE and "journals" in keys and not {"journal", "path"} & keys.keys():
        names = [j.strip() for j in str(options[keys["journals"]]).split(",") if j.strip()]
        if len(names) == 1:
            del out[keys["journals"]]
            out["journal"] = names[0]
    return out
