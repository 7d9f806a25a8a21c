"""Which journals a write's rows were read from: refusing writes into a query's own source.

A Python data source's writer sees only the schema of the rows it is given, never the query
that made them. Spark keeps a column's metadata where the column is passed through (``select``,
``alias``, ``filter``, joins, unions, ``withColumn`` of other columns) and drops it from
computed expressions (``concat(...)``, ``lit(...)``). So the columns the connector makes (an
untyped read's ``journal``, ``offset``, ``value`` and metadata columns; a ``collection`` read's
default columns) carry, under :data:`MARK_KEY`, the brokers and the journals (or selector) they
were read from, and a write checks the marks of its input before anything is appended:

* rows routed by a ``journal`` column that carries a mark would each go back to the journal
  they were read from;
* a ``journal`` option naming a journal that a marked column says was read (or that matches the
  read's selector) appends to the query's own source.

Both are refused unless ``allowWriteToSource`` is true.

A mark travels with the data (a Parquet file's footer keeps its schema's metadata), so it holds
nothing secret: broker addresses without user info, query or fragment (where passwords, tokens
and signatures travel), and of the options only a digest, made without secret options and with
every value's user info and signature parameters taken out. Documents' columns (``inferSchema``,
a user's ``.schema(...)``) carry no mark, so their schemas stay those Spark's JSON reader
gives. A relation's own schema, handed to ``INSERT INTO`` a temporary view, is not evidence of
a read: a schema that is exactly one read's, made with the write's own options, is left to the
row check (catalog tables keep no marks).
What a mark cannot show, the write task's check of the rows' ``journal``/``_journal`` names
still does (:meth:`~pyspark_gazette.spark.write.task.WriteTask._check_source`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping

from pyspark.sql.types import StructField, StructType

from pyspark_gazette.client import JournalInfo
from pyspark_gazette.client.conn import split_addresses
from pyspark_gazette.errors import GazetteError, redact_url
from pyspark_gazette.protocol.journal_names import base_journal
from pyspark_gazette.protocol.labels import matches, to_selector
from pyspark_gazette.spark.options.table import BY_KEY

#: The column metadata key of a mark.
MARK_KEY = "pyspark_gazette.read"

SOURCE_HINT = "write to another journal, or set allowWriteToSource=true if this is intended"


@dataclasses.dataclass(frozen=True)
class Read:
    """One gazette read, as a mark records it."""

    brokers: tuple[str, ...]
    journals: tuple[str, ...]
    selector: str | None
    #: Digest of the options the read was made with (see :func:`fingerprint`).
    options: str
    #: A Flow collection read: the collection (whose journals ``selector`` selects).
    collection: str | None = None
    #: The columns of the read's schema.
    columns: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.collection:
            return f"the journals of collection {self.collection!r}"
        if self.selector:
            return f"the journals matching selector {self.selector!r}"
        names = ", ".join(map(repr, self.journals))
        return f"journal {names}" if len(self.journals) == 1 else f"journals {names}"

    def reads(self, journal: str, info: JournalInfo | None) -> bool:
        """Whether this read covers ``journal`` (a selector's only known from its ``info``)."""
        if self.selector:
            return info is not None and matches(to_selector(self.selector), info.spec.labels, journal_name=journal)
        return journal in self.journals


#: The user info of a URL anywhere in a text (``user@`` or ``user:password@`` after ``://``).
_USER_INFO = re.compile(r"(?<=://)[^/?#\s]*@")


def fingerprint(options: Mapping[str, str]) -> str:
    """A digest of a query's options (keys compared lower-case; secret options left out, and of
    the others' values, URLs' user info and signature parameters)."""
    kept = ((str(k).lower(), redact_url(_USER_INFO.sub("", str(v)))) for k, v in options.items())
    text = json.dumps(sorted((k, v) for k, v in kept if (o := BY_KEY.get(k)) is None or o.kind != "secret"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def public_address(address: str) -> str:
    """A broker address as a mark keeps it: scheme, host, port and path, without the user info,
    query or fragment it was given with (the client connects to host and port only)."""
    text = address.strip().split("#", 1)[0].split("?", 1)[0].rstrip("/")
    scheme, sep, rest = text.partition("://") if "://" in text else ("", "", text)
    authority, slash, path = rest.partition("/")
    return f"{scheme}{sep}{authority.rpartition('@')[2]}{slash}{path}"


def brokers(address: str) -> tuple[str, ...]:
    return tuple(sorted(public_address(a) for a in split_addresses(address)))


def mark(schema: StructType, read: Read) -> StructType:
    """``schema`` with every column marked as read by ``read``."""
    text = json.dumps(dataclasses.asdict(dataclasses.replace(read, columns=tuple(schema.names))), sort_keys=True)
    return StructType(
        [StructField(f.name, f.dataType, f.nullable, {**(f.metadata or {}), MARK_KEY: text}) for f in schema.fields]
    )


def unmark(schema: StructType) -> StructType:
    """``schema`` without marks (a catalog table's or a view's own schema is not a read)."""
    return StructType(
        [
            StructField(f.name, f.dataType, f.nullable, {k: v for k, v in (f.metadata or {}).items() if k != MARK_KEY})
            for f in schema.fields
        ]
    )


def marks(schema: StructType, options: Mapping[str, str]) -> tuple[tuple[str, Read], ...]:
    """``(column, read)`` of every marked column. ``INSERT INTO`` a view hands the writer the
    view's own schema, which is no evidence of a read: a schema that is exactly a read's, made
    with the write's own ``options``, is left out (the task's row check still sees it)."""
    own = fingerprint(options)
    out = []
    for f in schema.fields:
        text = (f.metadata or {}).get(MARK_KEY)
        if not text:
            continue
        v = json.loads(text)
        read = Read(
            tuple(v["brokers"]),
            tuple(v["journals"]),
            v["selector"],
            v["options"],
            v.get("collection"),
            tuple(v.get("columns", ())),
        )
        if read.options != own or read.columns != tuple(schema.names):
            out.append((f.name, read))
    return tuple(out)


def check_routing(journal_column: str, reads: tuple[tuple[str, Read], ...], address: str) -> None:
    """Refuse rows routed by a ``journal`` column passed through from a read on these brokers."""
    for column, read in reads:
        if column == journal_column and read.brokers == brokers(address):
            raise GazetteError(
                f"the journal column comes unchanged from a gazette read of {read.describe()}, so every row "
                f"would be appended to the journal it was read from and the query would write into its own "
                f"source; route rows by a column you compute or the journal option, or set "
                f"allowWriteToSource=true if this is intended"
            )


def check_target(
    journal: str, reads: tuple[tuple[str, Read], ...], address: str, info: JournalInfo | None = None
) -> None:
    """Refuse a ``journal`` option naming a journal that a marked column was read from: by name
    before the journal is resolved (or created), by selector once its ``info`` is known."""
    for column, read in reads:
        if read.brokers == brokers(address) and read.reads(journal, info):
            what = repr(journal) if read.journals == (journal,) else f"{read.describe()}, which include {journal!r}"
            raise GazetteError(
                f"column {column!r} comes from a gazette read of {what}, the journal this write appends to: "
                f"the query would write into its own source; {SOURCE_HINT}"
            )


def read_of(
    address: str,
    journals: tuple[str, ...],
    selector: str | None,
    options: Mapping[str, str],
    collection: str | None = None,
) -> Read:
    """The :class:`Read` of a gazette read with these options."""
    names = tuple(sorted({base_journal(j) for j in journals}))
    return Read(brokers(address), names, selector, fingerprint(options), collection)
