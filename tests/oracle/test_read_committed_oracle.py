"""readCommitted against Gazette's own sequencer.

The Go peer publishes with Gazette's ``message.Publisher`` (committed messages, transactions
over several journals, transactions rolled back by a restarted producer, duplicates, ACKs long
after their transaction, transactions never committed), then reads the journals back with
Gazette's ``ReadCommittedIter``: that output is the oracle. A batch ``readCommitted`` read and
read-committed streams cut into micro-batches of many sizes must return exactly its messages
(ACKs excepted: our reader hides them, Gazette's iterator hands them to the application).
"""

from __future__ import annotations

import base64
import json

import peer
import pytest
from spark_helpers import reader

ACK_TXN = 0x2


def oracle_rows(address: str, journals: list[str]) -> list[tuple[str, int, bytes]]:
    """(journal, offset, payload) of every committed message but ACKs, per Gazette."""
    rows = []
    for line in peer.read_committed(address, journals):
        if line["flags"] & ACK_TXN:
            continue
        payload = json.dumps(line["doc"]).encode() if "doc" in line else base64.b64decode(line["payload"])
        rows.append((line["journal"], line["offset"], payload))
    return sorted(rows)


def normalise(framing: str, payload: bytes) -> bytes:
    # JSON documents are compared decoded (the oracle re-encodes them); protobuf payloads as bytes.
    return json.dumps(json.loads(payload), sort_keys=True).encode() if framing == "ndjson" else payload


def spark_rows(df, framing: str) -> list[tuple[str, int, bytes]]:
    return sorted(
        (r.journal, r.offset, normalise(framing, r.value.encode() if isinstance(r.value, str) else bytes(r.value)))
        for r in df.collect()
    )


def published(client_or_none, create_journal, address: str, framing: str, seed: int, n: int = 3) -> list[str]:
    journals = [f"oracle/{framing}/s{seed}-{i}" for i in range(n)]
    for j in journals:
        create_journal(j, content_type=peer.CONTENT_TYPES[framing], length=2048)
    peer.publish(address, journals, framing, seed=seed, rounds=80)
    return journals


@pytest.mark.parametrize("framing", ["ndjson", "protobuf-fixed"])
def test_batch_read_committed_equals_gazettes_sequencer(spark, broker, create_journal, framing):
    journals = published(None, create_journal, broker.address, framing, seed=11)
    want = [(j, o, normalise(framing, p)) for j, o, p in oracle_rows(broker.address, journals)]
    assert len(want) > 40 and {j for j, _, _ in want} == set(journals)
    df = (
        reader(spark, broker, readCommitted="true", framing=framing, uuidField="1")
        .option("journals", ",".join(journals))
        .load()
    )
    assert spark_rows(df, framing) == want
