"""Journals whose fragments real Gazette persists in every codec, for the tests that read them
back (tests/gazette/test_fragments_both_ways.py with our client, tests/spark/
test_real_gazette_fragments.py with Spark).

Fragments are 1 KiB and each append is about 600 bytes, so Gazette closes a fragment every second
append and persists it to the journal's store; the last one stays open on the brokers.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable

import realgazette
from journalspecs import make_spec

#: Codecs Gazette's file store takes, and those tested on S3 (gzip-offload needs an object store).
FILE_CODECS = ("NONE", "GZIP", "ZSTANDARD", "SNAPPY")
S3_CODECS = ("GZIP_OFFLOAD_DECOMPRESSION", "ZSTANDARD")
PERSIST_TIMEOUT = 60.0


def codec_specs(s3_endpoint: str, bucket: str) -> list:
    """One journal per (store, codec), under a fresh prefix so a session cluster never mixes runs."""
    from pyspark_gazette.protocol import pb

    prefix = f"codecs-{uuid.uuid4().hex[:8]}"
    s3_store = f"s3://{bucket}/{prefix}/?endpoint={s3_endpoint}&region=us-east-1"
    specs = [
        make_spec(
            f"{prefix}/file/{c.lower()}", store=f"file:///{prefix}/", length=1024, codec=pb.CompressionCodec.Value(c)
        )
        for c in FILE_CODECS
    ]
    specs += [
        make_spec(f"{prefix}/s3/{c.lower()}", store=s3_store, length=1024, codec=pb.CompressionCodec.Value(c))
        for c in S3_CODECS
    ]
    return specs


def lines(journal: str, batch: int, n: int = 8) -> bytes:
    return b"".join(
        json.dumps({"journal": journal, "batch": batch, "i": i, "pad": "x" * 40}, separators=(",", ":")).encode()
        + b"\n"
        for i in range(n)
    )


def write(cluster: realgazette.GazetteCluster, specs: Iterable, appends: int = 6) -> dict[str, bytes]:
    """Create the journals on ``cluster``, append to each, wait until Gazette has persisted every
    closed fragment; returns each journal's content."""
    specs = list(specs)
    cluster.apply_specs(specs)
    content = {}
    with cluster.client() as c:
        for spec in specs:
            data = b""
            for b in range(appends):
                chunk = lines(spec.name, b)
                c.append(spec.name, chunk)
                data += chunk
            content[spec.name] = data
        wait_persisted(c, content)
    return content


def wait_persisted(client, names: Iterable[str], timeout: float = PERSIST_TIMEOUT) -> None:
    """Poll ListFragments until every fragment of each journal but its last (the open spool) has a
    mod_time, i.e. is in its store, and at least two are."""
    names = list(names)
    deadline = time.monotonic() + timeout
    while True:
        pending = []
        for name in names:
            frags = client.list_fragments(name)
            if len(frags) < 3 or any(not f.spec.mod_time for f in frags[:-1]):
                pending.append(name)
        if not pending:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"Gazette did not persist the closed fragments of {pending} in {timeout}s")
        time.sleep(0.2)


def gazctl_read(cluster: realgazette.GazetteCluster, journal: str) -> bytes:
    """``gazctl journals read -l name=J``: every byte up to the write head, without blocking (no
    --block; gazctl has no --offset flag: reads start at offset 0)."""
    return cluster.gazctl("journals", "read", "-l", f"name={journal}").stdout
