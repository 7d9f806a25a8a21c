"""The generated protocol matches Gazette's wire facts, and the stubs match the .proto."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from pyspark_gazette.protocol import pb, sha1sum_from_digest, sha1sum_from_hex, sha1sum_to_hex

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHECKER = ROOT / "tools" / "check_protocol_facts.py"
FACTS = ROOT / "tools" / "facts" / "gazette-protocol-fields.json"

# A table of the facts sheet's field numbers that this test states on its own, so it fails if
# both the .proto and the facts JSON (tools/facts/) were ever edited the same wrong way.
FIELD_NUMBERS = {
    "AppendRequest": {
        "header": 1,
        "journal": 2,
        "do_not_proxy": 3,
        "content": 4,
        "offset": 5,
        "check_registers": 6,
        "union_registers": 7,
        "subtract_registers": 8,
        "suspend": 9,
        "min_etcd_revision": 10,
    },
    "AppendResponse": {
        "status": 1,
        "header": 2,
        "commit": 3,
        "registers": 4,
        "total_chunks": 5,
        "delayed_chunks": 6,
        "store_health_error": 7,
    },
    "ReadRequest": {
        "header": 1,
        "journal": 2,
        "offset": 3,
        "block": 4,
        "do_not_proxy": 5,
        "metadata_only": 6,
        "end_offset": 7,
        "begin_mod_time": 8,
        "min_etcd_revision": 9,
    },
    "ReadResponse": {
        "status": 1,
        "header": 2,
        "offset": 3,
        "write_head": 4,
        "fragment": 5,
        "fragment_url": 6,
        "content": 7,
    },
    "Fragment": {
        "journal": 1,
        "begin": 2,
        "end": 3,
        "sum": 4,
        "compression_codec": 5,
        "backing_store": 6,
        "mod_time": 7,
        "path_postfix": 8,
    },
    "JournalSpec": {
        "name": 1,
        "replication": 2,
        "labels": 3,
        "fragment": 4,
        "flags": 6,
        "max_append_rate": 7,
        "suspend": 8,
    },
    "FragmentsRequest": {
        "header": 1,
        "journal": 2,
        "begin_mod_time": 3,
        "end_mod_time": 4,
        "next_page_token": 5,
        "page_limit": 6,
        "signatureTTL": 7,
        "do_not_proxy": 8,
    },
    "ListRequest": {"selector": 1, "watch": 4, "watch_resume": 5},
    "ListResponse": {"status": 1, "header": 2, "journals": 3},
    "Label": {"name": 1, "value": 2, "prefix": 3},
}
STATUS = {
    "OK": 0,
    "JOURNAL_NOT_FOUND": 1,
    "NO_JOURNAL_PRIMARY_BROKER": 2,
    "NOT_JOURNAL_PRIMARY_BROKER": 3,
    "INSUFFICIENT_JOURNAL_BROKERS": 4,
    "NOT_JOURNAL_BROKER": 5,
    "OFFSET_NOT_YET_AVAILABLE": 6,
    "WRONG_ROUTE": 7,
    "PROPOSAL_MISMATCH": 8,
    "ETCD_TRANSACTION_FAILED": 9,
    "NOT_ALLOWED": 10,
    "WRONG_APPEND_OFFSET": 11,
    "INDEX_HAS_GREATER_OFFSET": 12,
    "REGISTER_MISMATCH": 13,
    "SUSPENDED": 14,
    "FRAGMENT_STORE_UNHEALTHY": 15,
}


@pytest.mark.parametrize("message", sorted(FIELD_NUMBERS))
def test_field_numbers_match_the_facts_sheet(message):
    desc = getattr(pb, message).DESCRIPTOR
    assert {f.name: f.number for f in desc.fields if f.name in FIELD_NUMBERS[message]} == FIELD_NUMBERS[message]


def test_status_values():
    assert {v.name: v.number for v in pb.Status.DESCRIPTOR.values} == STATUS


def test_sha1sum_types_are_fixed_width():
    from google.protobuf.descriptor import FieldDescriptor as F

    types = {f.name: f.type for f in pb.SHA1Sum.DESCRIPTOR.fields}
    assert types == {"part1": F.TYPE_FIXED64, "part2": F.TYPE_FIXED64, "part3": F.TYPE_FIXED32}


def test_list_is_server_streaming_and_append_client_streaming():
    methods = {m.name: m for m in pb.DESCRIPTOR.services_by_name["Journal"].methods}
    assert methods["List"].server_streaming and not methods["List"].client_streaming
    assert methods["Append"].client_streaming and not methods["Append"].server_streaming
    assert methods["Read"].server_streaming
    assert pb.DESCRIPTOR.services_by_name["Journal"].full_name == "protocol.Journal"


def test_every_fact_of_the_facts_table_matches():
    """Runs tools/check_protocol_facts.py against our compiled descriptors."""
    out = subprocess.run(
        [sys.executable, str(CHECKER)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    facts = json.loads(FACTS.read_text())
    total = sum(len(v) for k in ("messages", "enums", "services") for v in facts[k].values())
    assert f"{total}/{total} protocol facts match" in out.stdout


def test_worked_sha1sum_example_round_trips_byte_for_byte():
    content = b'{"Msg": "Hello, Gazette!"}\n'
    import hashlib

    digest = hashlib.sha1(content).digest()
    assert digest.hex() == "84e511ae015b7b3aea825d67fb1c4ba38c74849d"
    s = sha1sum_from_digest(digest)
    assert (s.part1, s.part2, s.part3) == (0x84E511AE015B7B3A, 0xEA825D67FB1C4BA3, 0x8C74849D)
    wire = bytes.fromhex("093a7b5b01ae11e58411a34b1cfb675d82ea1d9d84748c")
    assert s.SerializeToString() == wire
    parsed = pb.SHA1Sum.FromString(wire)
    assert sha1sum_to_hex(parsed) == digest.hex()
    assert sha1sum_from_hex(digest.hex()) == s


def test_gogo_non_nullable_empty_submessages_decode():
    # gogo always emits non-nullable submessages, even empty: header present with zero length.
    wire = bytes.fromhex("1200")  # ListResponse.header = {} (field 2, length 0)
    resp = pb.ListResponse.FromString(wire)
    assert resp.HasField("header") and resp.header.etcd.revision == 0


def test_generated_stubs_do_not_drift_from_the_proto():
    pytest.importorskip("grpc_tools")
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_protocol.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
