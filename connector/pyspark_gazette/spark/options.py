"""Data source options: every key once, with its type, default and documentation.

Spark hands a data source its options as a case-insensitive ``str -> str`` mapping. They are
parsed once, on the driver, into the frozen :class:`ReadOptions` / :class:`WriteOptions`, which
pickle to executors. Every error names the option (:class:`~pyspark_gazette.errors.OptionError`)
and unknown keys are rejected, so a typo fails at planning time instead of being ignored.

The options reference in the docs is generated from :data:`OPTIONS`; a test keeps the two equal.
Names follow Spark's Kafka source where the meaning is the same (``startingOffsets``,
``endingOffsets``, ``failOnDataLoss`` ...); a Kafka name whose unit would differ here
(``maxOffsetsPerTrigger``, records in Kafka) is refused rather than reinterpreted.

Values may also come from the environment: ``PYSPARK_GAZETTE_<KEY>`` with the key upper-cased
and dots as underscores (``PYSPARK_GAZETTE_BROKER_ADDRESS``), and ``broker.address`` also falls
back to ``BROKER_ADDRESS`` as Gazette's own tools do. Lowest of all comes the options file named
by ``PYSPARK_GAZETTE_CONF`` (:mod:`~pyspark_gazette.spark.conf_file`): explicit options win over
the environment, which wins over the file. Keys of the file that do not apply to a query's scope
are ignored (one file serves reads and writes alike).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from pyspark_gazette.errors import OptionError
from pyspark_gazette.spark.conf_file import options_from_file

READ, STREAM, WRITE = "read", "stream", "write"
ALL = frozenset({READ, STREAM, WRITE})
READS = frozenset({READ, STREAM})
ENV_PREFIX = "PYSPARK_GAZETTE_"

FRAMINGS = ("auto", "ndjson", "protobuf-fixed", "csv", "lines")
MODES = ("PERMISSIVE", "DROPMALFORMED", "FAILFAST")


@dataclasses.dataclass(frozen=True)
class Option:
    """One data source option, as documented."""

    key: str
    kind: str  # string | secret | bool | int | bytes | enum | offsets | timestamp
    default: Any
    doc: str
    scopes: frozenset[str] = ALL
    choices: tuple[str, ...] = ()
    example: str = ""
    env: tuple[str, ...] = ()


OPTIONS: tuple[Option, ...] = (
    # -- connection --------------------------------------------------------------------------
    Option(
        "broker.address",
        "string",
        None,
        "Broker URL of the Gazette cluster (`http://`, `https://`, `unix://`). Required unless set in the environment.",
        example="http://127.0.0.1:8080",
        env=("BROKER_ADDRESS",),
    ),
    Option(
        "broker.authToken",
        "secret",
        None,
        "Bearer JWT sent with every broker RPC. Never logged or shown in plans.",
        example="eyJhbGciOi...",
        env=("BROKER_AUTH_TOKEN",),
    ),
    Option("broker.zone", "string", "", "Prefer brokers of this zone for reads."),
    Option(
        "broker.timeout",
        "duration",
        "5m",
        "How long a task keeps retrying a read or an append while no broker answers for its journal "
        "(the cluster is down, or Gazette has not reassigned the journal yet); then the task fails "
        "naming the journal, the offset and this option. A running stream's planning of its next "
        "micro-batch waits as long. `0` retries forever.",
        example="30s",
    ),
    # -- journal selection -------------------------------------------------------------------
    Option(
        "journals",
        "string",
        None,
        "Comma-separated journal names to read. Exactly one of `journals`, "
        "`selector` (or a `load()` path) is required for reads.",
        scopes=READS,
        example="quickstart/clicks",
    ),
    Option(
        "selector",
        "string",
        None,
        "Label selector choosing the journals to read, in Gazette's syntax.",
        scopes=READS,
        example="app.gazette.dev/message-type=ClickEvent,name:prefix=quickstart/",
    ),
    Option(
        "journal",
        "string",
        None,
        "Journal to write to, unless the DataFrame has a `journal` column (which then wins row by row).",
        scopes=frozenset({WRITE}),
        example="quickstart/clicks",
    ),
    # -- bounds ------------------------------------------------------------------------------
    Option(
        "startingOffsets",
        "offsets",
        None,
        "Where reading starts: `earliest`, `latest`, or JSON "
        '`{"journal": offset}` where -2 means earliest and -1 latest. Default `earliest` for batch '
        "reads, `latest` for streams. Offsets must be message boundaries (values of the `offset` column "
        "or an earlier `endingOffsets`); a start inside a message skips to the next message.",
        scopes=READS,
        example='{"quickstart/clicks": 1048576}',
    ),
    Option(
        "endingOffsets",
        "offsets",
        "latest",
        "Where a batch read ends (exclusive): `latest` (the write head "
        "when the query is planned) or JSON per journal (-1 = latest). A message that begins before the "
        "end is returned whole.",
        scopes=frozenset({READ}),
        example='{"quickstart/clicks": 2097152}',
    ),
    Option(
        "startingTimestamp",
        "timestamp",
        None,
        "Start at the first fragment persisted at or after this time "
        "(milliseconds since the epoch, compared with fragment modification times). Takes precedence "
        "over `startingOffsets`.",
        scopes=READS,
        example="1767225600000",
    ),
    Option(
        "endingTimestamp",
        "timestamp",
        None,
        "End after the last fragment persisted at or before this time "
        "(milliseconds since the epoch); unpersisted content is then excluded.",
        scopes=frozenset({READ}),
        example="1767312000000",
    ),
    # -- format ------------------------------------------------------------------------------
    Option(
        "framing",
        "enum",
        "auto",
        "Message framing. `auto` uses each journal's `content-type` label "
        "(application/x-ndjson, application/x-protobuf-fixed, text/csv, text/plain).",
        choices=FRAMINGS,
    ),
    Option(
        "mode",
        "enum",
        "PERMISSIVE",
        "With a user schema: how malformed JSON is handled, as in Spark's JSON "
        "source. PERMISSIVE puts the raw text in `columnNameOfCorruptRecord` (when that column is in the "
        "schema) and nulls elsewhere; DROPMALFORMED drops the row; FAILFAST fails the query.",
        scopes=READS,
        choices=MODES,
    ),
    Option(
        "columnNameOfCorruptRecord",
        "string",
        "_corrupt_record",
        "Column receiving malformed records in PERMISSIVE mode.",
        scopes=READS,
    ),
    Option(
        "includeMetadata",
        "bool",
        False,
        "Add message metadata columns (`uuid`, `producer`, `clock`, "
        "`flags` from Gazette message UUIDs, and the fragment's `mod_time`). With a user schema, name them "
        "`_uuid`, `_producer`, `_clock`, `_flags`, `_mod_time`, `_journal`, `_offset` instead.",
        scopes=READS,
    ),
    Option(
        "uuidPointer",
        "string",
        "/_meta/uuid",
        "JSON pointer of the message UUID in ndjson documents "
        "(Estuary Flow and Gazette consumers use `/_meta/uuid`). For csv the UUID is column 0.",
        example="/_meta/uuid",
    ),
    Option(
        "uuidField",
        "int",
        0,
        "protobuf-fixed: number of the top-level protobuf field holding each message's UUID (a `bytes` "
        "field of its 16 bytes, or a `string` of its text form), for `readCommitted` and the metadata "
        "columns. 0: the messages carry no UUID (each counts as committed).",
        scopes=READS,
        example="1",
    ),
    Option(
        "readCommitted",
        "bool",
        False,
        "Apply Gazette's read-committed sequencer: drop uncommitted and "
        "rolled-back transactional messages and duplicates, and hide ACK messages. Each journal is then "
        "read by one task, in order. Streams emit a transaction in the micro-batch holding its ACK (see "
        "`readCommittedLookbackBytes`).",
        scopes=READS,
    ),
    # -- planning ----------------------------------------------------------------------------
    Option(
        "maxPartitionBytes",
        "bytes",
        128 << 20,
        "Target content bytes per input partition: small fragments "
        "are coalesced up to it and the unpersisted tail is split at it. A fragment is never split.",
        scopes=READS,
        example="256m",
    ),
    Option(
        "openCostInBytes",
        "bytes",
        256 << 10,
        "Estimated cost of opening one journal piece, in bytes, when small pieces of many journals are "
        "packed into one input partition (like Spark's `spark.sql.files.openCostInBytes`): each piece "
        "counts as its length plus this, up to `maxPartitionBytes` a partition. Lower than Spark's 4 MiB: "
        "a Spark task of this Python source costs far more than opening a piece (a Read RPC or a store "
        "GET, about a millisecond), so 512 one-message journals share a task, not 32 (the default was "
        '4m before; see docs/benchmarks.md, "Many small journals").',
        scopes=READS,
        example="4m",
    ),
    Option(
        "minPartitions",
        "int",
        None,
        "Packing aims for at least this many input partitions (like Spark's "
        "`spark.sql.files.minPartitionNum`): a partition holds at most the total bytes (with open "
        "costs) divided by it. Unset, partitions are filled up to `maxPartitionBytes`.",
        scopes=READS,
        example="8",
    ),
    Option(
        "filterPushdown",
        "bool",
        False,
        "Prune journals, fragments and offsets with the query's filters on `journal`, `offset` and "
        "`mod_time` before any fragment is opened. Needs Spark's `spark.sql.python.filterPushdown.enabled=true` "
        "too (off by default; Spark refuses a pushdown-capable Python reader without it).",
        scopes=frozenset({READ}),
    ),
    Option(
        "directReads",
        "bool",
        True,
        "Read persisted fragments directly from the object store in the "
        "executors. `false` reads everything through the brokers' Read RPC.",
        scopes=READS,
    ),
    Option(
        "signedUrls",
        "bool",
        False,
        "Read persisted fragments through signed URLs that the brokers mint "
        "(no store credentials needed in executors) instead of the store's own API.",
        scopes=READS,
    ),
    Option("verifySha1", "bool", False, "Check every persisted fragment's SHA1 against its name.", scopes=READS),
    Option(
        "failOnDataLoss",
        "bool",
        True,
        "Fail when content is missing (deleted or corrupt fragments, offset "
        "jumps). `false` skips it with a warning and counts it in the task metrics.",
        scopes=READS,
    ),
    # -- stores ------------------------------------------------------------------------------
    Option(
        "store.fileRoot",
        "string",
        None,
        "Local (or mounted) directory that `file://` store URLs are rooted at, "
        "as the brokers' `--file-root`. Without it, file-store fragments are read through the brokers.",
        example="/mnt/gazette",
    ),
    Option(
        "store.s3.endpoint",
        "string",
        None,
        "S3 endpoint URL for MinIO and other S3-compatible stores "
        "(path-style addressing); overrides the store URL's `endpoint`.",
        example="http://minio:9000",
    ),
    Option("store.s3.region", "string", None, "S3 region; overrides the store URL's `region`."),
    Option("store.s3.accessKeyId", "secret", None, "S3 access key id (else the environment/instance credentials)."),
    Option("store.s3.secretAccessKey", "secret", None, "S3 secret access key."),
    Option("store.s3.sessionToken", "secret", None, "S3 session token for temporary credentials."),
    Option("store.s3.profile", "string", None, "AWS profile name; overrides the store URL's `profile`."),
    Option("store.s3.anonymous", "bool", False, "Access public buckets without credentials."),
    Option(
        "store.gcs.endpoint",
        "string",
        None,
        "GCS JSON API endpoint for emulators (else `STORAGE_EMULATOR_HOST`, else Google's); "
        "requests to it are not authenticated.",
        example="http://127.0.0.1:4443",
    ),
    Option(
        "store.gcs.credentialsFile",
        "string",
        None,
        "Service-account key file on the executors for `gs://` stores (else Application Default Credentials).",
        example="/etc/gcp/reader.json",
    ),
    Option(
        "store.azure.accountName",
        "string",
        None,
        "Storage account of `azure://` stores (else `AZURE_ACCOUNT_NAME`, as the brokers use).",
    ),
    Option("store.azure.accountKey", "secret", None, "Shared key of the storage account (else `AZURE_ACCOUNT_KEY`)."),
    Option(
        "store.azure.sasToken",
        "secret",
        None,
        "A SAS token with read and list permissions, instead of the account key.",
    ),
    Option(
        "store.azure.connectionString",
        "secret",
        None,
        "An Azure Storage connection string (account, key or SAS, and endpoint: also for Azurite); "
        "overrides the other `store.azure.*` options.",
    ),
    # -- streaming ---------------------------------------------------------------------------
    Option(
        "maxBytesPerTrigger",
        "bytes",
        None,
        "Admission control: at most about this many content bytes per "
        "micro-batch, shared across journals in proportion to their backlog.",
        scopes=frozenset({STREAM}),
        example="512m",
    ),
    Option(
        "maxOffsetsPerTrigger",
        "string",
        None,
        "Refused. In Spark's Kafka source it counts records; Gazette offsets are bytes, and a record "
        "count cannot be known before reading, so the option is an error naming `maxBytesPerTrigger`, "
        "the byte limit to use instead.",
        scopes=frozenset({STREAM}),
    ),
    Option(
        "minBytesPerTrigger",
        "bytes",
        None,
        "Wait until at least this many new bytes are available "
        "(or `maxTriggerDelay` passed) before starting a micro-batch.",
        scopes=frozenset({STREAM}),
    ),
    Option(
        "maxTriggerDelay",
        "duration",
        "15m",
        "Longest wait for `minBytesPerTrigger`.",
        scopes=frozenset({STREAM}),
        example="5m",
    ),
    Option(
        "watchWriteHeads",
        "bool",
        False,
        "Keep one blocking metadata-only Read open per journal of the stream, so that the broker "
        "tells the driver of every append and `latestOffset` reads the write heads from memory "
        "instead of asking every journal at every trigger (for selectors over thousands of "
        "journals). Each watched journal holds a stream on a broker: a goroutine on Gazette's "
        "brokers, a worker thread on the embedded broker (256 by default), so leave it off there. A "
        "watched head lags an append by the broker's answer (a round trip): `processAllAvailable()` "
        "right after an append may return before reading it.",
        scopes=frozenset({STREAM}),
    ),
    Option(
        "readCommittedLookbackBytes",
        "bytes",
        64 << 20,
        "With `readCommitted`: how far before a micro-batch's start each task re-reads (without "
        "emitting) to rebuild the sequencer's state. A transaction that began further back loses its "
        "messages before that point (a warning names the journal and producer); set it above the longest "
        "transaction, in journal bytes.",
        scopes=frozenset({STREAM}),
        example="256m",
    ),
    # -- writing -----------------------------------------------------------------------------
    Option(
        "transactional",
        "bool",
        False,
        "Publish ndjson rows with Gazette message UUIDs (a producer per task, "
        "CONTINUE_TXN) and commit with ACK messages, so read-committed readers see each row once even "
        "across task retries.",
        scopes=frozenset({WRITE}),
    ),
    Option(
        "createJournals",
        "string",
        None,
        "A journal spec (YAML or JSON, gazctl layout without a name) used to "
        "create journals that do not exist yet. Without it, writing to a missing journal fails.",
        scopes=frozenset({WRITE}),
        example='{"fragment": {"length": 134217728, "compression_codec": "ZSTANDARD", '
        '"stores": ["s3://bucket/gazette/"], "refresh_interval": "1m"}}',
    ),
    Option(
        "maxBatchBytes",
        "bytes",
        64 << 20,
        "An Append RPC stops taking rows once it holds about this much (the writer adds whole messages "
        "in pieces of at most 1/8 of it).",
        scopes=frozenset({WRITE}),
    ),
)

_BY_KEY = {o.key.lower(): o for o in OPTIONS}
#: Keys Spark itself may pass along with the user's options.
_SPARK_KEYS = {"path", "paths"}
_BYTES = re.compile(r"^\s*(\d+)\s*([kmgt]i?b?|b)?\s*$", re.I)
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def option(key: str) -> Option:
    return _BY_KEY[key.lower()]


def _parse_bool(key: str, text: str) -> bool:
    t = text.strip().lower()
    if t in ("true", "1", "yes"):
        return True
    if t in ("false", "0", "no"):
        return False
    raise OptionError(key, f"expected true or false, got {text!r}")


def _parse_bytes(key: str, text: str) -> int:
    m = _BYTES.match(text)
    if not m:
        raise OptionError(key, f"expected a byte size such as 134217728, 128m or 1g, got {text!r}")
    value = int(m.group(1)) * _UNITS[(m.group(2) or "")[:1].lower()]
    if value <= 0:
        raise OptionError(key, f"must be positive, got {text!r}")
    return value


def _parse_int(key: str, text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise OptionError(key, f"expected an integer, got {text!r}") from None


#: Milliseconds since the epoch below this (1973-03-03) are almost surely seconds.
_PLAUSIBLE_MS = 100_000_000_000


def _parse_timestamp(key: str, text: str) -> int:
    value = _parse_int(key, text)
    if value < 0:
        raise OptionError(key, f"expected milliseconds since the epoch, got {text!r}")
    if 0 < value < _PLAUSIBLE_MS:
        raise OptionError(
            key,
            f"{value} looks like seconds since the epoch (as milliseconds it is before 1973); "
            f"give milliseconds, e.g. {value * 1000}",
        )
    return value


def _parse_duration(key: str, text: str) -> float:
    from pyspark_gazette.client.specs import parse_duration
    from pyspark_gazette.errors import SpecError

    try:
        value = parse_duration(text, where=key)
    except SpecError:
        raise OptionError(key, f"expected a duration such as 30s, 5m or 1h, got {text!r}") from None
    if value < 0:
        raise OptionError(key, f"must not be negative, got {text!r}")
    return value


def parse_offsets(key: str, text: str) -> str | dict[str, int]:
    """``earliest`` / ``latest`` or a JSON object of journal -> offset (-2 earliest, -1 latest)."""
    t = text.strip()
    if t.lower() in ("earliest", "latest"):
        return t.lower()
    try:
        value = json.loads(t)
    except json.JSONDecodeError:
        raise OptionError(key, f"expected earliest, latest or a JSON object of journal offsets, got {text!r}") from None
    if not isinstance(value, dict) or not value:
        raise OptionError(key, f"expected a non-empty JSON object of journal offsets, got {text!r}")
    out: dict[str, int] = {}
    for journal, offset in value.items():
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < -2:
            raise OptionError(key, f"offset of journal {journal!r} must be an integer >= -2, got {offset!r}")
        out[str(journal)] = offset
    return out


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate most like ``name`` (case and dots ignored), if any is close enough."""
    import difflib

    norm = {c.lower().replace(".", ""): c for c in candidates}
    key = name.lower().replace(".", "")
    if key in norm:
        return norm[key]
    match = difflib.get_close_matches(key, list(norm), n=1, cutoff=0.75)
    return norm[match[0]] if match else None


def check_offsets_name_read_journals(
    starting: str | dict[str, int] | None, ending: str | dict[str, int] | None, read: Iterable[str]
) -> None:
    """``startingOffsets`` / ``endingOffsets`` JSON may only name journals being read (as Spark's
    Kafka source requires): an offset for another journal is a mistake that would read the wrong data."""
    names = set(read)
    for key, value in (("startingOffsets", starting), ("endingOffsets", ending)):
        if not isinstance(value, dict):
            continue
        for journal in value:
            if journal not in names:
                close = closest(journal, names)
                hint = f" (did you mean {close!r}?)" if close else ""
                shown = ", ".join(sorted(names)[:5]) + (", ..." if len(names) > 5 else "")
                raise OptionError(
                    key, f"names journal {journal!r}, which is not being read{hint}; the read covers: {shown or 'none'}"
                )


_PARSERS = {
    "bool": _parse_bool,
    "bytes": _parse_bytes,
    "int": _parse_int,
    "timestamp": _parse_timestamp,
    "duration": _parse_duration,
    "offsets": parse_offsets,
}


def env_name(key: str) -> str:
    return ENV_PREFIX + key.upper().replace(".", "_")


def _value(opt: Option, raw: str) -> Any:
    """``raw`` converted to ``opt``'s type (an :class:`OptionError` naming it when it does not fit)."""
    if opt.kind == "enum":
        match = [c for c in opt.choices if c.lower() == raw.strip().lower()]
        if not match:
            raise OptionError(opt.key, f"expected one of {', '.join(opt.choices)}, got {raw!r}")
        return match[0]
    if opt.kind in _PARSERS:
        return _PARSERS[opt.kind](opt.key, raw)
    if not raw.strip():
        raise OptionError(opt.key, "must not be empty")
    return raw.strip()


#: Each option's canonical spelling by its lower-cased key (for the options file's messages).
_SPELLINGS = {k: o.key for k, o in _BY_KEY.items()}


def parse(options: Mapping[str, str], scope: str, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Validate ``options`` for ``scope`` and return ``{canonical key: typed value}`` with defaults.

    Raises :class:`OptionError` for unknown keys, keys of another scope, and bad values.
    """
    env = os.environ if env is None else env
    given = {str(k).lower(): v for k, v in options.items() if v is not None}
    in_file = options_from_file(env, _SPELLINGS)
    out: dict[str, Any] = {}
    for key in given:
        if key in _SPARK_KEYS:
            continue
        opt = _BY_KEY.get(key)
        if opt is None:
            close = closest(key, [o.key for o in OPTIONS])
            hint = f" (did you mean {close!r}?)" if close else ""
            raise OptionError(key, f"unknown option{hint}; see the options reference")
        if scope not in opt.scopes:
            hint = (
                "; a stream has no end: use trigger(availableNow=True) to stop at the data present at start"
                if scope == STREAM and opt.key == "endingOffsets"
                else ""
            )
            raise OptionError(
                opt.key, f"does not apply to {scope}s (it applies to: {', '.join(sorted(opt.scopes))}){hint}"
            )
    for opt in OPTIONS:
        if scope not in opt.scopes:
            continue
        raw = given.get(opt.key.lower())
        if raw is None:
            for name in (env_name(opt.key), *opt.env):
                if env.get(name):
                    raw = env[name]
                    break
        from_file = None
        if raw is None and opt.key.lower() in in_file:
            from_file = in_file[opt.key.lower()]
            raw = from_file.value
        if raw is None:
            out[opt.key] = opt.default
            continue
        try:
            out[opt.key] = _value(opt, str(raw))
        except OptionError as e:
            if from_file is None:
                raise
            raise OptionError(opt.key, f"{from_file.where}: {e.message}") from None
    if given.get("path") and scope in READS:
        if out.get("journals") or out.get("selector"):
            raise OptionError("path", "give journals either as the load() path or as the journals/selector option")
        out["journals"] = str(given["path"])
    if given.get("path") and scope == WRITE:
        if out.get("journal"):
            raise OptionError("path", "give the journal either as the save() path or as the journal option")
        out["journal"] = str(given["path"])
    return out


def redacted(options: Mapping[str, str]) -> dict[str, str]:
    """The options with secret values replaced (for logs and error messages)."""
    out = {}
    for k, v in options.items():
        opt = _BY_KEY.get(str(k).lower())
        out[k] = "*****" if opt is not None and opt.kind == "secret" else v
    return out


# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Connection:
    """How executors reach the brokers and the stores (primitives only: pickles to executors)."""

    address: str
    auth_token: str | None = dataclasses.field(default=None, repr=False)
    zone: str = ""
    file_root: str | None = None
    storage: tuple[tuple[str, Any], ...] = dataclasses.field(default=(), repr=False)
    broker_timeout: float | None = 300.0

    def client_config(self, *, direct_reads: bool = True):
        from pyspark_gazette.client import ClientConfig

        return ClientConfig(
            self.address,
            auth_token=self.auth_token,
            file_root=self.file_root,
            direct_reads=direct_reads,
            zone=self.zone,
            broker_timeout=self.broker_timeout,
        )

    def storage_options(self) -> dict[str, Any]:
        return dict(self.storage)


# Option -> scoped fsspec setting (see pyspark_gazette.fragments.stores.scheme_options).
_STORAGE_SETTINGS = (
    ("store.s3.endpoint", "s3.endpoint_url"),
    ("store.s3.region", "s3.region"),
    ("store.s3.accessKeyId", "s3.key"),
    ("store.s3.secretAccessKey", "s3.secret"),
    ("store.s3.sessionToken", "s3.token"),
    ("store.s3.profile", "s3.profile"),
    ("store.gcs.endpoint", "gs.endpoint_url"),
    ("store.gcs.credentialsFile", "gs.token"),
    ("store.azure.accountName", "azure.account_name"),
    ("store.azure.accountKey", "azure.account_key"),
    ("store.azure.sasToken", "azure.sas_token"),
    ("store.azure.connectionString", "azure.connection_string"),
)


def _connection(values: dict[str, Any]) -> Connection:
    address = values.get("broker.address")
    if not address:
        raise OptionError("broker.address", "is required (or set BROKER_ADDRESS), e.g. http://127.0.0.1:8080")
    from pyspark_gazette.client.conn import parse_address

    try:
        parse_address(address)
    except ValueError as e:
        raise OptionError("broker.address", str(e)) from None
    # Storage options are scoped per scheme ("s3.key" reaches s3:// stores only).
    storage: dict[str, Any] = {}
    for key, setting in _STORAGE_SETTINGS:
        if values.get(key):
            storage[setting] = values[key]
    if values.get("store.s3.anonymous"):
        storage["s3.anon"] = True
    if bool(storage.get("s3.key")) != bool(storage.get("s3.secret")):
        raise OptionError("store.s3.accessKeyId", "store.s3.accessKeyId and store.s3.secretAccessKey go together")
    return Connection(
        address=address,
        auth_token=values.get("broker.authToken"),
        zone=values.get("broker.zone") or "",
        file_root=values.get("store.fileRoot"),
        storage=tuple(sorted(storage.items())),
        broker_timeout=_broker_timeout(values),
    )


def _broker_timeout(values: dict[str, Any]) -> float | None:
    """``broker.timeout`` in seconds (its documented default when not given), None for 0 (forever)."""
    value = values.get("broker.timeout", option("broker.timeout").default)
    if isinstance(value, str):
        value = _parse_duration("broker.timeout", value)
    return float(value) or None


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """Parsed options of a batch or streaming read."""

    connection: Connection
    journals: tuple[str, ...]
    selector: str | None
    starting_offsets: str | dict[str, int] | None
    ending_offsets: str | dict[str, int]
    starting_timestamp: int | None
    ending_timestamp: int | None
    framing: str
    mode: str
    corrupt_column: str
    include_metadata: bool
    uuid_pointer: str
    read_committed: bool
    max_partition_bytes: int
    direct_reads: bool
    signed_urls: bool
    verify_sha1: bool
    fail_on_data_loss: bool
    filter_pushdown: bool = False
    max_bytes_per_trigger: int | None = None
    min_bytes_per_trigger: int | None = None
    max_trigger_delay: float = 900.0
    read_committed_lookback: int = 64 << 20
    open_cost_bytes: int = 256 << 10
    min_partitions: int | None = None
    uuid_field: int = 0
    watch_write_heads: bool = False

    @property
    def offset_bounds(self) -> tuple[str | dict[str, int] | None, str | dict[str, int]]:
        """(``startingOffsets``, ``endingOffsets``) as given, for checks against the journals read."""
        return self.starting_offsets, self.ending_offsets

    @classmethod
    def parse(
        cls, options: Mapping[str, str], *, streaming: bool = False, env: Mapping[str, str] | None = None
    ) -> ReadOptions:
        v = parse(options, STREAM if streaming else READ, env)
        journals = tuple(j.strip() for j in (v.get("journals") or "").split(",") if j.strip())
        if bool(journals) == bool(v.get("selector")):
            raise OptionError(
                "journals",
                "give exactly one of journals (or a load() path) and selector"
                if journals
                else "is required: give journals (comma-separated names, or a load() path) or a selector",
            )
        if v.get("selector"):
            from pyspark_gazette.errors import SelectorError
            from pyspark_gazette.protocol.labels import parse_selector

            try:
                parse_selector(v["selector"])
            except SelectorError as e:
                raise OptionError("selector", str(e)) from None
        if not v["uuidPointer"].startswith("/"):
            raise OptionError("uuidPointer", f"a JSON pointer starts with '/', got {v['uuidPointer']!r}")
        if not 0 <= v["uuidField"] <= 536_870_911:
            raise OptionError("uuidField", f"a protobuf field number is 1 to 536870911 (0: none), got {v['uuidField']}")
        max_bytes = v.get("maxBytesPerTrigger")
        if v.get("maxOffsetsPerTrigger") is not None:
            raise OptionError(
                "maxOffsetsPerTrigger",
                "is not supported: in Kafka it counts records, but Gazette offsets are bytes; "
                "limit micro-batches by bytes with maxBytesPerTrigger (e.g. 64m) instead",
            )
        start_ts, end_ts = v.get("startingTimestamp"), v.get("endingTimestamp")
        if start_ts is not None and end_ts is not None and end_ts < start_ts:
            raise OptionError("endingTimestamp", f"{end_ts} is before startingTimestamp {start_ts}")
        starting = v.get("startingOffsets")
        ending = v.get("endingOffsets", "latest")
        if ending == "earliest":
            raise OptionError(
                "endingOffsets", "must be latest or a JSON object of offsets (earliest would read nothing)"
            )
        if isinstance(ending, dict) and any(o == -2 for o in ending.values()):
            raise OptionError("endingOffsets", "-2 (earliest) is not allowed as an ending offset")
        if isinstance(starting, dict) and isinstance(ending, dict):
            for journal, start in starting.items():
                end = ending.get(journal, -1)
                if start >= 0 and end >= 0 and end < start:
                    raise OptionError("endingOffsets", f"journal {journal!r} ends at {end}, before its start {start}")
        if journals:
            from pyspark_gazette.client.conn import _base_journal

            bad = [j for j in journals if not re.fullmatch(r"[A-Za-z0-9\-_+/.=%]{4,512}", _base_journal(j))]
            if bad:
                raise OptionError("journals", f"invalid journal name(s): {', '.join(map(repr, bad))}")
            check_offsets_name_read_journals(starting, ending, {*journals, *map(_base_journal, journals)})
        return cls(
            connection=_connection(v),
            journals=journals,
            selector=v.get("selector"),
            starting_offsets=starting,
            ending_offsets=ending,
            starting_timestamp=start_ts,
            ending_timestamp=end_ts,
            framing=v["framing"],
            mode=v["mode"],
            corrupt_column=v["columnNameOfCorruptRecord"],
            include_metadata=v["includeMetadata"],
            uuid_pointer=v["uuidPointer"],
            read_committed=v["readCommitted"],
            max_partition_bytes=v["maxPartitionBytes"],
            direct_reads=v["directReads"],
            signed_urls=v["signedUrls"],
            verify_sha1=v["verifySha1"],
            fail_on_data_loss=v["failOnDataLoss"],
            filter_pushdown=bool(v.get("filterPushdown")),
            max_bytes_per_trigger=max_bytes,
            min_bytes_per_trigger=v.get("minBytesPerTrigger"),
            max_trigger_delay=v.get("maxTriggerDelay") or 900.0,
            read_committed_lookback=v.get("readCommittedLookbackBytes") or option("readCommittedLookbackBytes").default,
            open_cost_bytes=v.get("openCostInBytes") or option("openCostInBytes").default,
            min_partitions=_min_partitions(v.get("minPartitions")),
            uuid_field=v["uuidField"],
            watch_write_heads=bool(v.get("watchWriteHeads")),
        )


def _min_partitions(value: int | None) -> int | None:
    if value is not None and value < 1:
        raise OptionError("minPartitions", f"must be at least 1, got {value}")
    return value


@dataclasses.dataclass(frozen=True)
class WriteOptions:
    """Parsed options of a batch or streaming write."""

    connection: Connection
    journal: str | None
    framing: str
    transactional: bool
    uuid_pointer: str
    create_journals: str | None
    max_batch_bytes: int

    @classmethod
    def parse(cls, options: Mapping[str, str], *, env: Mapping[str, str] | None = None) -> WriteOptions:
        v = parse(options, WRITE, env)
        if not v["uuidPointer"].startswith("/"):
            raise OptionError("uuidPointer", f"a JSON pointer starts with '/', got {v['uuidPointer']!r}")
        if v["transactional"] and v["framing"] not in ("auto", "ndjson"):
            raise OptionError(
                "transactional", f"needs ndjson framing (message UUIDs live in JSON documents), not {v['framing']}"
            )
        if v.get("createJournals"):
            from pyspark_gazette.spark.journals import spec_template

            spec_template(v["createJournals"])  # validate now, at planning time
        return cls(
            connection=_connection(v),
            journal=v.get("journal"),
            framing=v["framing"],
            transactional=v["transactional"],
            uuid_pointer=v["uuidPointer"],
            create_journals=v.get("createJournals"),
            max_batch_bytes=v["maxBatchBytes"],
        )
