"""gazctl v0.103.0, Gazette's own client, against the embedded broker and against a real cluster.

Each command is run against both brokers and the two outputs are compared after normalizing what
legitimately differs: broker ids and zones, addresses, Etcd values and revisions, and times. Any
other difference is a difference of the embedded broker to fix there.

``journals prune`` is run on an S3 store (moto's server) only: gazctl removes aged fragments
itself through its own store clients, and gazctl v0.103.0 has no file root for ``file://`` stores
(only ``journals read`` takes ``--file-root``), so it cannot prune a ``file://`` store of either
broker.
"""

from __future__ import annotations

import json
import pathlib
import re
import time
import uuid

import pytest

import realgazette
from backends import Backend

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONF_JOURNALS = sorted((ROOT / "conf" / "journals").glob("*.yaml"))

#: A small tree in gazctl's hierarchical layout: 1 KiB fragments so every append of more than
#: that closes a fragment, on both brokers alike.
TREE = """\
name: gzctl/
replication: 1
labels:
  - name: content-type
    value: text/plain
fragment:
  length: 1024
  compression_codec: GZIP
  stores:
    - file:///gzctl/
  refresh_interval: 1s
  retention: 1h
children:
  - name: gzctl/lines
  - name: gzctl/raw
    fragment:
      compression_codec: SNAPPY
"""


#: moto's dummy credentials for the real brokers (gazctl and the embedded broker get them from the
#: test process's environment, set by the s3_server fixture).
AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def brokers(tmp_path_factory, s3_server):
    """``{"gazette": Backend, "embedded": Backend}``: a one-broker real cluster and an embedded
    broker, shared by this module's tests (each uses its own journals)."""
    realgazette.require()
    from pyspark_gazette.broker import EmbeddedBroker

    base = tmp_path_factory.mktemp("gazctl")
    store = base / "embedded-store"
    with realgazette.GazetteCluster(base / "gazette", 1, extra_env=AWS_ENV) as cluster:
        with EmbeddedBroker(str(base / "embedded"), file_root=str(store)) as embedded:
            yield {
                "gazette": Backend("gazette", cluster.address, cluster.file_root, cluster=cluster),
                "embedded": Backend("embedded", embedded.address, str(store), broker=embedded),
            }


def gazctl(backend: Backend, *args: str, input: bytes | str | None = None) -> bytes:
    """gazctl's stdout against ``backend``; a non-zero exit fails the test with gazctl's stderr."""
    return realgazette.gazctl(*args, address=backend.address, input=input).stdout


def both(brokers, *args: str, input: bytes | str | None = None) -> dict[str, bytes]:
    return {kind: gazctl(b, *args, input=input) for kind, b in brokers.items()}


def make_dirs(brokers, *paths: str) -> None:
    """What an operator does before applying specs with file:// stores (Gazette's file store needs
    the store directory to exist)."""
    for b in brokers.values():
        for p in paths:
            pathlib.Path(b.file_root, p).mkdir(parents=True, exist_ok=True)


def table_rows(out: bytes) -> list[list[str]]:
    """The cells of a tablewriter table, one list per row (header included), borders dropped.
    gazctl v0.103.0's tablewriter draws ``│`` and spaces header words (``CONTENT - TYPE``); older
    gazctls (the commit Flow pins) draw ``|`` and do not, so header cells lose their spaces."""
    rows = []
    for line in out.decode().splitlines():
        for bar in ("│", "|"):
            if line.startswith(bar):
                rows.append([cell.strip() for cell in line.strip(bar).split(bar)])
    if rows:
        rows[0] = [cell.replace(" ", "") for cell in rows[0]]
    return rows


# --------------------------------------------------------------------------- apply and list


def test_apply_conf_journals_then_list_in_every_format(brokers):
    make_dirs(brokers, "quickstart", "examples", "examples/acmeCo")
    for path in CONF_JOURNALS:
        out = both(brokers, "journals", "apply", "--specs", str(path))
        assert out["gazette"] == out["embedded"]
    selector = "app.gazette.dev/managed-by"
    for b in brokers.values():  # Gazette assigns primaries after Apply, on its own schedule
        with b.client() as c:
            b.wait_primaries([j.name for j in c.list_journals(selector)])

    # The table, with every optional column.
    columns = ("--rf", "--primary", "--replicas", "--stores", "-L", "content-type")
    tables = {kind: table_rows(gazctl(b, "journals", "list", "-l", selector, *columns)) for kind, b in brokers.items()}
    for kind, rows in tables.items():
        assert rows[0] == ["NAME", "RF", "PRIMARY", "REPLICAS", "STORES", "CONTENT-TYPE"]
        assert len(rows) == 10  # the header and nine journals
        for row in rows[1:]:
            assert row[2].startswith("broker-"), (kind, row)  # every journal has a primary
            row[2] = "<primary>"
    assert tables["gazette"] == tables["embedded"]
    assert ["examples/logs/debug", "1", "<primary>", "", "<none>", "text/plain"] in tables["embedded"]

    # YAML: gazctl's hoisted tree, identical but for the revisions.
    yamls = {
        kind: re.sub(
            rb"revision: \d+", b"revision: N", gazctl(b, "journals", "list", "-l", selector, "--format", "yaml")
        )
        for kind, b in brokers.items()
    }
    assert yamls["gazette"] == yamls["embedded"]
    assert b"name: examples/acmeCo/orders/region=EU/" in yamls["embedded"]

    # JSON: the ListResponse. Specs equal; headers and routes compared by shape.
    docs = {
        kind: json.loads(gazctl(b, "journals", "list", "-l", selector, "--format", "json"))
        for kind, b in brokers.items()
    }
    for doc in docs.values():
        assert doc["status"] == "OK"
        # List answers with Gazette's "unrouted" header: no members, primary -1.
        assert doc["header"]["route"] == {"members": [], "primary": -1, "endpoints": []}
        assert all(int(v) > 0 for v in doc["header"]["etcd"].values())
        for j in doc["journals"]:
            assert [m["suffix"] for m in j["route"]["members"]] == [doc["header"]["process_id"]["suffix"]]
            assert j["route"]["primary"] == 0 and len(j["route"]["endpoints"]) == 1
            assert int(j["mod_revision"]) == int(j["create_revision"]) > 0
    specs = {kind: [j["spec"] for j in doc["journals"]] for kind, doc in docs.items()}
    assert specs["gazette"] == specs["embedded"]
    assert len(specs["embedded"]) == 9


# --------------------------------------------------------------------------- append, read, fragments


def test_append_read_and_fragments(brokers, tmp_path):
    make_dirs(brokers, "gzctl")
    tree = tmp_path / "tree.yaml"
    tree.write_text(TREE)
    both(brokers, "journals", "apply", "--specs", str(tree))
    # Gazette assigns a primary asynchronously: an append right after Apply may get
    # NO_JOURNAL_PRIMARY_BROKER, which gazctl does not retry.
    brokers["gazette"].wait_primaries(["gzctl/lines", "gzctl/raw"])

    # Three atomic appends of 1,260 bytes from stdin (--framing none: one Append each), three
    # fragments of 1 KiB+; then two lines with lines framing, which gazctl appends record by
    # record (its AppendService may send them in one Append or two, as it happens to batch:
    # a 1,260-byte batch sent that way was once split 1,197 + 63 against one broker and not
    # the other). They roll the third fragment and make the open spool either way.
    batches = ["".join(f"line {i:04d} of batch {b}\n" for i in range(60)) for b in range(3)]
    for batch in batches:
        both(brokers, "journals", "append", "-l", "name=gzctl/lines", "--framing", "none", input=batch)
    tail = "tail 1 of 2\ntail 2 of 2\n"
    both(brokers, "journals", "append", "-l", "name=gzctl/lines", "--framing", "lines", input=tail)
    both(brokers, "journals", "append", "-l", "name=gzctl/raw", input="raw\nbytes\n")
    for b in brokers.values():
        assert b.wait_persisted(), f"{b.kind}: rolled fragments were not persisted"

    expected = ("".join(batches) + tail).encode()
    reads = both(brokers, "journals", "read", "-l", "name=gzctl/lines")
    assert reads["gazette"] == reads["embedded"] == expected
    # A selector matching both journals: each journal's content arrives whole-fragment at a time.
    reads = both(brokers, "journals", "read", "-l", "content-type=text/plain,name:prefix=gzctl/")
    for out in reads.values():
        assert sorted(out.splitlines(keepends=True)) == sorted((expected + b"raw\nbytes\n").splitlines(keepends=True))

    # Direct reads: with a route cache gazctl asks not to be proxied and opens each persisted
    # fragment's URL itself, under --file-root. (Not ZSTANDARD: gazctl v0.103.0 hangs after the
    # first zstd fragment read this way, against either broker.)
    for kind, b in brokers.items():
        out = gazctl(
            b, "journals", "read", "-l", "name=gzctl/lines", "--broker.cache.size=16", "--file-root", b.file_root
        )
        assert out == expected, kind

    # The fragment table: same offsets, lengths, SHA1 prefixes and codecs; persisted or not.
    tables = {}
    for kind, b in brokers.items():
        rows = table_rows(gazctl(b, "journals", "fragments", "-l", "name:prefix=gzctl/"))
        for row in rows[1:]:
            row[3] = "persisted" if row[3] else ""
        tables[kind] = rows
    assert tables["gazette"] == tables["embedded"]
    assert tables["embedded"][0] == ["JOURNAL", "OFFSET", "LENGTH", "PERSISTED", "SHA1", "COMPRESSION"]
    assert [r[:4] + r[5:] for r in tables["embedded"][1:]] == [
        ["gzctl/lines", "0", "1.2 KiB", "persisted", "GZIP"],
        ["gzctl/lines", "1260", "1.2 KiB", "persisted", "GZIP"],
        ["gzctl/lines", "2520", "1.2 KiB", "persisted", "GZIP"],
        ["gzctl/lines", "3780", "24 B", "", "GZIP"],  # the open spool
        ["gzctl/raw", "0", "10 B", "", "SNAPPY"],
    ]

    # JSON, one Fragment per line: identical but for the upload times.
    docs = {}
    for kind, b in brokers.items():
        lines = gazctl(b, "journals", "fragments", "-l", "name:prefix=gzctl/", "--format", "json").splitlines()
        frags = [json.loads(line) for line in lines]
        for f in frags:
            f["spec"]["mod_time"] = bool(f["spec"].get("mod_time"))
        docs[kind] = frags
    assert docs["gazette"] == docs["embedded"]
    persisted = [f["spec"] for f in docs["embedded"] if f["spec"]["mod_time"]]
    assert [(f["journal"], f.get("begin", 0), f["end"], f["backing_store"]) for f in persisted] == [
        ("gzctl/lines", 0, 1260, "file:///gzctl/"),
        ("gzctl/lines", 1260, 2520, "file:///gzctl/"),
        ("gzctl/lines", 2520, 3780, "file:///gzctl/"),
    ]


# --------------------------------------------------------------------------- prune


@pytest.mark.skipif(
    realgazette.PEER == "flow",
    reason="gazctl at the commit Flow pins cannot remove s3 fragments (its prune exits 'unsupported "
    "fragment store scheme: s3'): a limit of that gazctl, not of either broker",
)
def test_prune_removes_aged_fragments_from_s3(brokers, s3_server, tmp_path):
    import boto3

    s3 = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1")
    logs = {}
    for kind, b in brokers.items():
        bucket = f"prune-{kind}-{uuid.uuid4().hex[:8]}"
        s3.create_bucket(Bucket=bucket)
        tree = tmp_path / f"prune-{kind}.yaml"
        # Retention 0s: every persisted fragment is aged, so nothing waits on the clock.
        tree.write_text(
            TREE.replace("gzctl/", "prune/")
            .replace("file:///prune/", f"s3://{bucket}/pre/?endpoint={s3_server}&region=us-east-1")
            .replace("retention: 1h", "retention: 0s")
        )
        gazctl(b, "journals", "apply", "--specs", str(tree))
        b.wait_primaries(["prune/lines", "prune/raw"])
        for n in range(3):
            gazctl(b, "journals", "append", "-l", "name=prune/lines", input=f"{n}".encode() * 1100)
        assert b.wait_persisted(), kind
        assert len(s3.list_objects_v2(Bucket=bucket, Prefix="pre/prune/lines/").get("Contents", [])) == 2

        err = realgazette.gazctl(
            "journals", "prune", "-l", "name:prefix=prune/", "--log.level=info", address=b.address
        ).stderr.decode()
        # gazctl logs what it pruned: the same counts against both brokers.
        err = re.sub(r'time="[^"]*" |mod=\d+ ', "", err.replace(bucket, "BUCKET"))
        # (gazctl's own store start-up lines race its exit: only the prune report is compared.)
        logs[kind] = sorted(line for line in err.splitlines() if re.search(r'msg="(fetched aged|prun|finished)', line))
        assert s3.list_objects_v2(Bucket=bucket, Prefix="pre/prune/lines/").get("KeyCount") == 0, kind

        # The brokers drop the removed fragments at their next store refresh; the open one stays.
        with b.client() as c:
            deadline = time.monotonic() + 30
            while [f.spec.begin for f in c.list_fragments("prune/lines")] != [2200]:
                assert time.monotonic() < deadline, (kind, c.list_fragments("prune/lines"))
                time.sleep(0.2)
    assert logs["gazette"] == logs["embedded"]
    assert any("fragmentsPruned=2" in line and "finished pruning" in line for line in logs["embedded"])
