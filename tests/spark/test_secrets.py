"""Secrets scan: a bearer token, S3 keys and signed URLs' signatures never show up in what a
user or an operator sees.

The setup uses recognisable secrets everywhere they can go: a broker requiring tokens whose
journals persist to S3 (moto) with a secret access key and session token, a Spark read with
``broker.authToken``, the ``store.s3.*`` keys and ``signedUrls`` (the broker presigns S3 URLs
with those credentials). Then it collects the text of: batch and streaming query results'
plans (``explain`` and the query execution), streaming progress, reprs of our config and
option objects, exception messages and tracebacks of failing reads, our log records (caplog
at DEBUG, including the executor-side read run in-process), and the stderr of Spark's JVM
and Python workers (pytest's global fd capture, which the JVM inherited). None may contain a
secret, nor a signature query parameter that is not ``REDACTED``.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import traceback

import pytest
from spark_helpers import events, ndjson

from pyspark_gazette.protocol.auth import ALL, READ, KeySet, mint_token

ACCESS_KEY = "AKIASCANSECRETAKID42"
SECRET_KEY = "scan-secret-access-key-7f3e9b2c"
SESSION_TOKEN = "scan-session-token-0d6a5c1e"
HMAC_KEY = base64.b64encode(b"scan-hmac-key-for-tokens").decode()
TOKEN = mint_token(HMAC_KEY, ALL, ttl=3600)
WRONG_TOKEN = mint_token(base64.b64encode(b"not-the-broker-key").decode(), ALL, ttl=3600)
READ_ONLY_OTHER = mint_token(HMAC_KEY, READ, "name=secrets/other", ttl=3600)

SECRETS = {
    "token": TOKEN,
    "token signature": TOKEN.rsplit(".", 1)[1],
    "wrong token signature": WRONG_TOKEN.rsplit(".", 1)[1],
    "scoped token signature": READ_ONLY_OTHER.rsplit(".", 1)[1],
    "access key id": ACCESS_KEY,
    "secret access key": SECRET_KEY,
    "session token": SESSION_TOKEN,
    "hmac key": HMAC_KEY,
}
#: Signature-bearing query parameters whose value is anything but REDACTED.
SIGNATURE = re.compile(r"(?i)(X-Amz-Signature|X-Amz-Credential|X-Amz-Security-Token|Signature)=(?!REDACTED)[^&\s\"']+")


def leaks(texts: dict[str, str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for where, text in texts.items():
        names = [name for name, secret in SECRETS.items() if secret in text]
        if SIGNATURE.search(text):
            names.append("signature query parameter")
        if names:
            found[where] = names
    return found


def log_text(caplog) -> str:
    """Our log records at every level, and everyone else's from INFO up. (botocore's DEBUG
    records print request signatures by design, and the moto test server logs presigned URLs
    it receives; neither is ours to redact.)"""
    return "\n".join(
        f"{r.name} {r.levelname} {r.getMessage()} {r.exc_text or ''}"
        for r in caplog.records
        if r.name.startswith("pyspark_gazette") or (r.levelno >= logging.INFO and not r.name.startswith("werkzeug"))
    )


def global_stderr(request) -> str | None:
    """What Spark's JVM and Python workers wrote to stderr/stdout since the last call, when the
    JVM inherited pytest's global fd capture (None when pytest runs with -s)."""
    capman = request.config.pluginmanager.getplugin("capturemanager")
    if capman is None or not capman.is_globally_capturing():
        return None
    out, err = capman.read_global_capture()
    return out + err


@pytest.fixture
def s3_auth_broker(tmp_path, s3_server, s3_bucket):
    """A token-requiring broker whose journal persists to S3 with the secret credentials."""
    from pyspark_gazette.broker import EmbeddedBroker

    storage = {"key": ACCESS_KEY, "secret": SECRET_KEY, "token": SESSION_TOKEN}
    with EmbeddedBroker(
        str(tmp_path / "broker"), file_root=str(tmp_path / "store"), storage_options=storage, auth_keys=HMAC_KEY
    ) as b:
        b.store_url = f"s3://{s3_bucket}/gz/?endpoint={s3_server}&region=us-east-1"
        b.s3_endpoint = s3_server
        yield b


@pytest.fixture
def secret_journal(s3_auth_broker):
    from journalspecs import make_spec
    from pyspark_gazette.client import Change, ClientConfig, JournalClient

    with JournalClient(ClientConfig(s3_auth_broker.address, auth_token=TOKEN)) as c:
        for name in ("secrets/events", "secrets/other"):
            c.apply(
                [Change(expect_mod_revision=0, upsert=make_spec(name, store=s3_auth_broker.store_url, length=1024))]
            )
        for batch in range(4):
            c.append("secrets/events", ndjson(events(20, batch * 20)))
        assert s3_auth_broker.wait_persisted(30)
        listed = c.list_fragments("secrets/events", signature_ttl=300)
    signed = [f.signed_url for f in listed if f.signed_url]
    # Positive control: the broker really signs with the secret credentials, and the scan sees it.
    assert signed and SIGNATURE.search(signed[0]) and ACCESS_KEY in signed[0]
    assert leaks({"control": signed[0]})
    return "secrets/events"


def options(broker, **extra) -> dict[str, str]:
    opts = {
        "broker.address": broker.address,
        "broker.authToken": TOKEN,
        "store.s3.endpoint": broker.s3_endpoint,
        "store.s3.region": "us-east-1",
        "store.s3.accessKeyId": ACCESS_KEY,
        "store.s3.secretAccessKey": SECRET_KEY,
        "store.s3.sessionToken": SESSION_TOKEN,
    }
    opts.update(extra)
    return opts


def test_batch_read_plans_reprs_and_logs_hold_no_secrets(
    spark, s3_auth_broker, secret_journal, caplog, capsys, request
):
    from pyspark_gazette.client import JournalClient
    from pyspark_gazette.client.conn import Connections
    from pyspark_gazette.fragments import FragmentStore
    from pyspark_gazette.spark.options import ReadOptions
    from pyspark_gazette.spark.source import GazetteDataSource

    caplog.set_level(logging.DEBUG)
    global_stderr(request)  # start from a clean slate
    texts: dict[str, str] = {}
    for signed in ("false", "true"):
        opts = options(s3_auth_broker, journals=secret_journal, signedUrls=signed)
        df = spark.read.format("gazette").options(**opts).load()
        rows = df.collect()
        assert sorted(json.loads(r.value)["id"] for r in rows) == list(range(80))
        texts[f"queryExecution signedUrls={signed}"] = df._jdf.queryExecution().toString()
        df.explain(extended=True)
        df.explain(mode="formatted")
        texts[f"explain stdout signedUrls={signed}"] = capsys.readouterr().out

        # The executor side, run in this process so its log records reach caplog.
        source = GazetteDataSource(opts)
        reader = source.reader(source.schema())
        parts = reader.partitions()
        assert sum(b.num_rows for p in parts for b in reader.read(p)) == 80
        texts[f"partition reprs signedUrls={signed}"] = "\n".join(map(repr, parts))

    # A batch write with the token (its logs and output are scanned below with the rest).
    write_df = spark.createDataFrame([('{"w": 1}',), ('{"w": 2}',)], ["value"])
    writer = write_df.write.format("gazette").mode("append")
    writer.options(**{"broker.address": s3_auth_broker.address, "broker.authToken": TOKEN}).save("secrets/other")
    texts["batch write stdout"] = capsys.readouterr().out

    read_opts = ReadOptions.parse(options(s3_auth_broker, journals=secret_journal))
    config = read_opts.connection.client_config()
    with JournalClient(config) as client:
        texts["reprs"] = "\n".join(
            [
                repr(read_opts),
                str(read_opts),
                repr(read_opts.connection),
                repr(config),
                repr(client),
                repr(Connections(config)),
                repr(FragmentStore(s3_auth_broker.store_url, storage_options=read_opts.connection.storage_options())),
                repr(s3_auth_broker),
                repr(KeySet.parse(HMAC_KEY)),
            ]
        )
    texts["log records"] = log_text(caplog)
    stderr = global_stderr(request)
    if stderr is not None:
        texts["spark jvm and python worker output"] = stderr
    assert len(texts) >= 7
    assert not leaks(texts), leaks(texts)


@pytest.mark.parametrize(
    "token, journal, expect",
    [
        (WRONG_TOKEN, "secrets/events", "UNAUTHENTICATED"),
        (READ_ONLY_OTHER, "secrets/events", "LIST"),  # no LIST capability to plan with
        (TOKEN, "secrets/missing", "not found"),
    ],
)
def test_failing_reads_report_without_secrets(
    spark, s3_auth_broker, secret_journal, caplog, capsys, request, token, journal, expect
):
    caplog.set_level(logging.DEBUG)
    global_stderr(request)
    opts = options(s3_auth_broker, journals=journal, signedUrls="true")
    opts["broker.authToken"] = token
    with pytest.raises(Exception) as info:
        spark.read.format("gazette").options(**opts).load().collect()
    text = "".join(traceback.format_exception(info.value))
    assert expect in text
    texts = {
        "exception and traceback": text,
        "captured python output": "".join(capsys.readouterr()),
        "log records": log_text(caplog),
    }
    stderr = global_stderr(request)
    if stderr is not None:
        texts["spark jvm and python worker output"] = stderr
    assert not leaks(texts), leaks(texts)


def test_a_failure_inside_tasks_reports_without_secrets(spark, s3_auth_broker, secret_journal, capsys, request):
    """A corrupt fragment, read by an executor through its signed URL: the task fails, and the
    failure travels back through Spark's task failure handling and the JVM's logs."""
    import io

    from pyspark_gazette.client import ClientConfig, JournalClient
    from pyspark_gazette.fragments import FragmentRef, FragmentStore

    with JournalClient(ClientConfig(s3_auth_broker.address, auth_token=TOKEN)) as c:
        refs = [FragmentRef.from_proto(f.spec) for f in c.list_fragments(secret_journal) if f.spec.mod_time]
    storage = {"key": ACCESS_KEY, "secret": SECRET_KEY, "token": SESSION_TOKEN}
    FragmentStore(s3_auth_broker.store_url, storage_options=storage).put(refs[0], io.BytesIO(b"not zstd at all"))
    global_stderr(request)
    opts = options(s3_auth_broker, journals=secret_journal, signedUrls="true")
    with pytest.raises(Exception) as info:
        spark.read.format("gazette").options(**opts).load().collect()
    text = "".join(traceback.format_exception(info.value))
    assert refs[0].content_name in text  # the error names the fragment
    texts = {"exception and traceback": text, "captured python output": "".join(capsys.readouterr())}
    stderr = global_stderr(request)
    if stderr is not None:
        texts["spark jvm and python worker output"] = stderr
    assert not leaks(texts), leaks(texts)


def test_streaming_query_progress_and_plans_hold_no_secrets(
    spark, s3_auth_broker, secret_journal, tmp_path, capsys, request
):
    global_stderr(request)
    opts = options(s3_auth_broker, journals=secret_journal, startingOffsets="earliest", signedUrls="true")
    stream = spark.readStream.format("gazette").options(**opts).load()
    query = (
        stream.writeStream.format("memory")
        .queryName("secrets_scan")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    # The same stream into the exactly-once gazette sink, with the token.
    sink_opts = {"broker.address": s3_auth_broker.address, "broker.authToken": TOKEN, "journal": "secrets/other"}
    sink = (
        stream.selectExpr("value")
        .writeStream.format("gazette")
        .options(**sink_opts)
        .option("checkpointLocation", str(tmp_path / "sink-ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert sink.awaitTermination(120)
        assert sink.exception() is None
        sink.explain(extended=True)
        sink_texts = {
            "sink progress": json.dumps([json.loads(p.json) for p in sink.recentProgress]),
            "sink query execution": sink._jsq.streamingQuery().lastExecution().toString(),
        }
    finally:
        sink.stop()
    try:
        assert query.awaitTermination(120)
        assert query.exception() is None
        assert spark.table("secrets_scan").count() == 80
        query.explain(extended=True)
        texts = {
            **sink_texts,
            "recent progress": json.dumps([json.loads(p.json) for p in query.recentProgress]),
            "last progress": str(query.lastProgress),
            "status": str(query.status),
            "query explain stdout": capsys.readouterr().out,
            # StreamingQueryWrapper -> StreamExecution -> the last batch's IncrementalExecution.
            "query execution": query._jsq.streamingQuery().lastExecution().toString(),
        }
    finally:
        query.stop()
        spark.catalog.dropTempView("secrets_scan")
    assert secret_journal in texts["recent progress"]  # the progress is real, and names the journal
    stderr = global_stderr(request)
    if stderr is not None:
        texts["spark jvm and python worker output"] = stderr
    assert not leaks(texts), leaks(texts)
