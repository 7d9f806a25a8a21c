"""The option table: every data source option once, with its type, default, scopes and documentation.

The options reference in the docs is generated from :data:`OPTIONS`; a test keeps the two equal.
Parsing the values is :mod:`~pyspark_gazette.spark.options.parsing`; this module is only the table
(over 400 lines because it is one literal: one entry per option, with its documentation).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pyspark_gazette.message import framings

READ, STREAM, WRITE = "read", "stream", "write"
ALL = frozenset({READ, STREAM, WRITE})
READS = frozenset({READ, STREAM})
ENV_PREFIX = "PYSPARK_GAZETTE_"

#: The ``framing`` option's choices: ``auto`` and every registered framing (:mod:`pyspark_gazette.message`).
FRAMINGS = ("auto", *(f.name for f in framings()))
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
        "Broker URL of the Gazette cluster (`http://`, `https://`, `unix://`), or several brokers of it, "
        "comma-separated: when one is unreachable the next is asked (like Kafka's `bootstrap.servers`). "
        "Required unless set in the environment.",
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
        "micro-batch waits as long. `0` retries forever. A process no broker has answered yet (a wrong "
        "`broker.address`) gives up after about 7 seconds, or this long when shorter, naming the address.",
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
        "collection",
        "string",
        None,
        "An Estuary Flow collection to read, instead of `journals` or `selector`: its journals are "
        "chosen as Flow chooses them (the `estuary.dev/collection` label and the journal-name prefix), "
        "read committed at `/_meta/uuid` (unless `readCommitted=false`), without ACK or control "
        "documents, with columns for its logical partitions, `flow_published_at` and `_meta/op` "
        "(docs/flow.md).",
        scopes=READS,
        example="acmeCo/orders",
    ),
    Option(
        "collection.journalPrefix",
        "string",
        None,
        "With `collection`: the journal-name prefix of its journals (the partition template's name, "
        "as Flow's `journalNamePrefix` gives it). Default: the collection name and `/`.",
        scopes=READS,
        example="acmeCo/orders/ffd1a2b3c4d5e6f7/",
    ),
    Option(
        "collection.partitions",
        "string",
        None,
        "With `collection`: a Flow partition selector choosing logical partitions before any read, "
        'as flowctl\'s `--partitions` takes it: `{"include": {field: [values]}, "exclude": {...}}`.',
        scopes=READS,
        example='{"include": {"region": ["eu", "us"]}}',
    ),
    Option(
        "collection.controlDocuments",
        "bool",
        False,
        "With `collection`: also return Flow's control documents (`_meta/backfillBegin` and "
        "`_meta/backfillComplete`, the UUID CONTROL flag 0x4), e.g. to see backfill boundaries. "
        "ACK documents are never returned.",
        scopes=READS,
    ),
    Option(
        "flow.agentUrl",
        "string",
        None,
        "With `collection` and `flow.authToken`: URL of Estuary's control-plane agent API, which "
        "authorizes a hosted collection (`/authorize/user/collection`) and gives its broker address, "
        "broker token and journal prefix (flowctl's `agent_url`).",
        scopes=READS,
        example="https://agent-api.example.estuary.dev",
    ),
    Option(
        "flow.authToken",
        "secret",
        None,
        "With `collection`: an Estuary access token (a JWT) or refresh token (base64 JSON, as "
        "flowctl's `FLOW_AUTH_TOKEN`), for a hosted collection: the broker address and a "
        "per-collection broker token are then obtained as flowctl does, and renewed before the "
        "broker token expires. Never logged or shown in plans.",
        scopes=READS,
        example="eyJhbGciOi...",
    ),
    Option(
        "flow.pgUrl",
        "string",
        None,
        "With a refresh token in `flow.authToken`: URL of Estuary's control-plane PostgREST API, "
        "which exchanges it for access tokens (flowctl's `pg_url`).",
        scopes=READS,
    ),
    Option(
        "flow.pgApiKey",
        "secret",
        None,
        "With `flow.pgUrl`: the PostgREST API's public key (flowctl's `pg_public_token`).",
        scopes=READS,
    ),
    Option(
        "journal",
        "string",
        None,
        "Journal to write every row to. It wins over a `journal` column (as the `topic` option of "
        "Spark's Kafka sink wins over a `topic` column): the column then routes nothing and is not "
        "written. Without this option (or a `save()` path) a `journal` column routes each row. A write "
        "into a journal the same query reads is refused unless `allowWriteToSource` is true.",
        scopes=frozenset({WRITE}),
        example="quickstart/clicks",
    ),
    Option(
        "allowWriteToSource",
        "bool",
        False,
        "Allow appending rows to a journal the same query reads: without it, such a write is refused "
        "before anything is appended (a stream would otherwise read back what it wrote, forever). "
        "Spark tells a sink nothing of its query's sources, so the columns of a gazette read carry "
        "them, in column metadata (key `pyspark_gazette.read`) that Spark keeps on columns passed through (`select`, `filter`, "
        "joins, renames) and drops from computed ones: a `journal` column passed through from a "
        "gazette read is refused as the router (each row would go back to its own journal; a "
        "`journal` column you compute routes as you say), and so is a `journal` option naming a "
        "journal that a passed-through column was read from (by name, selector or `collection`). "
        "Columns of documents (`inferSchema`, a user's schema) carry no such mark; where there is "
        "none (a catalog table's `INSERT INTO t SELECT * FROM t`, a typed read's `_journal`), a "
        "row whose `journal` or `_journal` column names the `journal` option fails its task before "
        "its batch is appended. The mark travels with the columns into files Spark writes (Parquet "
        "keeps it), so restoring such a copy into its journal needs `true` too. `true` turns the "
        "checks off.",
        scopes=frozenset({WRITE}),
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
        "over `startingOffsets`. This is not a per-message time as in Kafka: a fragment is persisted "
        "when it is closed (its `fragment.flush_interval` or length), so it holds messages published "
        "earlier, and bounds fall on whole fragments. For message times use the `timestamp` column "
        "of `includeMetadata` (the message UUID's clock) in a filter.",
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
        f"({', '.join(f.content_type for f in framings())}).",
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
        "inferSchema",
        "bool",
        False,
        "Without a user schema: infer one from a sample of the messages, as `spark.read.json` does "
        "(integers LONG, other numbers DOUBLE, objects STRUCT, arrays ARRAY, strings STRING, fields "
        "sorted by name), and read typed. The driver plans the read and parses up to `samplingBytes` "
        "of messages from up to 8 partitions spread over the plan. ndjson journals only. With "
        "`collection`: the documents' schema (ACK and control documents left out), followed by the "
        "collection's Flow columns.",
        scopes=frozenset({READ}),
    ),
    Option(
        "samplingBytes",
        "bytes",
        4 << 20,
        "With `inferSchema`: bytes of messages sampled to infer the schema.",
        scopes=frozenset({READ}),
        example="16m",
    ),
    Option(
        "includeMetadata",
        "bool",
        False,
        "Add message metadata columns (`uuid`, `producer`, `clock`, "
        "`flags` from Gazette message UUIDs, the fragment's `mod_time`, and `timestamp`). With a user "
        "schema, name them `_uuid`, `_producer`, `_clock`, `_flags`, `_mod_time`, `_timestamp`, `_journal`, "
        "`_offset` instead (`_uuid` ... `_offset` are filled in a user schema even without this option; "
        "`_timestamp` only with it, so a document field of that name stays a field otherwise). "
        "`timestamp` is the per-message time, like a Kafka record's timestamp: the "
        "clock of the message's UUID as a Spark timestamp (microseconds, UTC), the time its publisher "
        "stamped it; null for a message without a UUID. `mod_time` is when the fragment holding the "
        "message was persisted (seconds; null while unpersisted), shared by every message of the "
        "fragment, and is what `startingTimestamp`/`endingTimestamp` compare with; filter on "
        "`timestamp` for message times.",
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
        "read by one task, in order. Streams emit a transaction in the micro-batch holding its ACK; their "
        "offsets carry the sequencer's producer states (docs/streaming.md).",
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
        "costs) divided by it, and a journal's partition past that is split along its fragments. "
        "Unset, batch reads plan for the cores of the driver machine (Spark plans a Python data source "
        "in a Python worker on the driver and tells it nothing of `spark.default.parallelism`, so this is "
        "the closest default it can know: on a cluster, set this to the executors' total cores); "
        "streams fill partitions up to `maxPartitionBytes`.",
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
    Option(
        "holeAgeThreshold",
        "duration",
        "6h",
        "How old the fragment after a hole (offsets no broker lists and no store holds) must be for "
        "the hole to count as lost, as Gazette's brokers judge it (their `offsetJumpAgeThreshold`, 6 "
        "hours): a hole before a younger fragment may be a fragment whose upload is still in flight "
        "after a broker hand-off. A lost hole follows `failOnDataLoss` at once; a younger one is "
        "waited for (a batch read, up to `broker.timeout`) or read up to (a stream), never skipped. "
        "Lower it only when such data is known to be gone; `0` judges a hole lost as soon as no broker "
        "lists it and no store holds it.",
        scopes=READS,
        example="30m",
    ),
    # -- stores ------------------------------------------------------------------------------
    Option(
        "store.url",
        "string",
        None,
        "Read from this fragment store alone (`s3://`, `gs://`, `azure://`, `file://` URL of a store "
        "prefix, as in a journal's `fragment.stores`), without any broker: the journals and their "
        "fragments are planned from one listing of the store, and `broker.address` is neither needed "
        "nor contacted. Journals are chosen by `journals`, by a `selector` of `name` / `name:prefix` "
        "terms, or by `collection`; `framing` must be given (the store holds no labels) except for a "
        "`collection` (ndjson). Only persisted content is read: a read ends where the journal's "
        "contiguous persisted history ends (docs/store-reads.md).",
        scopes=READS,
        example="s3://acme-flow/collection-data/",
    ),
    Option(
        "store.pathPostfixDepth",
        "int",
        None,
        "With `store.url` and a `selector` or `collection`: how many directory levels between a "
        "journal's name and its fragment files are a path postfix (the journals' "
        "`fragment.path_postfix_template`, e.g. 2 for `date=.../hour=...`). Default: a journal "
        "name ends at its last `pivot=` segment (Flow's journals, whose postfix is "
        "`utc_date=.../utc_hour=...`), else at the directory holding the files. Not needed with "
        "`journals`, whose names say where they end.",
        scopes=READS,
        example="2",
    ),
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
        "enum",
        "auto",
        "How `latestOffset` learns the journals' write heads. `false`: one metadata-only Read per "
        "journal at every trigger (128 in flight). `true`: one blocking metadata-only Read kept open "
        "per journal, which the broker answers at each append, so a trigger reads the heads from "
        "memory and an idle journal costs nothing. `auto` (default): `true` once the stream covers "
        "128 journals or more, `false` below. Each watched journal holds a stream on its broker (a "
        "goroutine on Gazette's brokers, a thread on the embedded broker). A watched head lags an "
        "append by the broker's answer (a round trip): `processAllAvailable()` right after an append "
        "may return before reading it. A watching stream also keeps its journals' listing open as a "
        "List watch (one stream on a broker), so a trigger does not List every journal. "
        "`Trigger.AvailableNow` always lists and asks every journal at the start.",
        scopes=frozenset({STREAM}),
        choices=("auto", "true", "false"),
    ),
    Option(
        "readCommittedLookbackBytes",
        "bytes",
        64 << 20,
        "With `readCommitted`: where a stream's offset carries no sequencer state (the query's starting "
        "offsets, a journal that appears later, a checkpoint from before offsets carried state), how far "
        "before it the first micro-batch re-reads (without emitting) to rebuild that state. A transaction "
        "that began further back loses its messages before that point (a warning names the journal and "
        "producer). Later offsets carry the state, so later batches do not depend on it.",
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
        "commitWhen",
        "enum",
        "acknowledged",
        "When a write counts as done. `acknowledged` (default): once Gazette acknowledged its appends "
        "(held by every replica of the journal, not yet in the fragment store). `persisted`: a batch "
        "write reports success, and a streaming micro-batch is committed, only once every span it "
        "appended is listed in persisted fragments; a span Gazette loses before persisting it fails "
        "the write naming the journal and offsets (a stream's failed micro-batch is not committed, and "
        "when the query is started again from its checkpoint it appends exactly the lost partitions "
        "once more). It costs the wait for the spool to be persisted: up to about the journal's "
        "`flush_interval` (or the time to fill `fragment.length`) per write or micro-batch, bounded by "
        "`broker.timeout`. The journal needs a fragment store and a `flush_interval` (checked at "
        "planning for the `journal` option); a stream needs a local `checkpointLocation`. See "
        "docs/exactly-once.md.",
        scopes=frozenset({WRITE}),
        choices=("acknowledged", "persisted"),
    ),
    Option(
        "createJournals",
        "string",
        None,
        "A journal spec (YAML or JSON, gazctl layout without a name) used to "
        "create journals that do not exist yet. Without it, writing to a missing journal fails. "
        "Give it a content-type label, so that reads find the framing without the framing option.",
        scopes=frozenset({WRITE}),
        example='{"labels": [{"name": "content-type", "value": "application/x-ndjson"}], '
        '"fragment": {"length": 134217728, "compression_codec": "ZSTANDARD", '
        '"stores": ["s3://bucket/gazette/"], "refresh_interval": "1m"}}',
    ),
    Option(
        "maxBatchBytes",
        "bytes",
        64 << 20,
        "An Append RPC stops taking rows once it holds about this much (the writer adds whole messages "
        "in pieces of at most 1/8 of it). A journal holds at most two such batches, one being sent and "
        "one filling: when both are full the writer waits for the broker, so a task faster than its "
        "broker keeps bounded memory and disk.",
        scopes=frozenset({WRITE}),
    ),
)

#: Each option by its lower-cased key.
BY_KEY = {o.key.lower(): o for o in OPTIONS}


def option(key: str) -> Option:
    return BY_KEY[key.lower()]
