"""Durability: acknowledged appends survive kill -9; torn tails are dropped; specs, registers
and fragments come back after a restart; the broker process stops cleanly on SIGTERM."""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import threading

import grpc
import pytest

from journalspecs import make_spec
from pyspark_gazette.broker.fragment.spool import spool_paths
from pyspark_gazette.broker.main import spawn_broker
from pyspark_gazette.protocol import label_set, pb, pb_grpc, sha1sum_to_hex


class BrokerProcess:
    """``python -m pyspark_gazette.broker`` as a child process."""

    def __init__(self, data_dir: str, file_root: str):
        self.proc, address = spawn_broker(data_dir, file_root, stderr=subprocess.PIPE)
        self.target = address.removeprefix("http://")
        self.channel = grpc.insecure_channel(self.target)
        self.stub = pb_grpc.JournalStub(self.channel)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self.channel.close()

    def terminate(self, sig: int = signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        rc = self.proc.wait(60)
        self.channel.close()
        self.proc.stdout.close()
        self.proc.stderr.close()
        return rc


def journal_spec(name, stores, length):
    return make_spec(name, stores=stores, length=length, content_type="", refresh_seconds=60)


def read_all(stub, journal) -> bytes:
    out = bytearray()
    offset = 0
    while True:
        resps = list(stub.Read(pb.ReadRequest(journal=journal, offset=offset, block=False), timeout=60))
        got = b"".join(r.content for r in resps)
        out += got
        offset += len(got)
        if resps[-1].status == pb.OFFSET_NOT_YET_AVAILABLE:
            return bytes(out)


@pytest.mark.slow
def test_acknowledged_appends_survive_kill_9(tmp_path):
    data_dir, file_root = str(tmp_path / "data"), str(tmp_path / "root")
    broker = BrokerProcess(data_dir, file_root)
    j = "durable/journal"
    spec = journal_spec(j, ["file:///frags/"], 64 * 1024)  # small fragments: rolls and persists during the run
    assert broker.stub.Apply(pb.ApplyRequest(changes=[pb.ApplyRequest.Change(upsert=spec)])).status == pb.OK

    acked: dict[str, tuple[int, int, str]] = {}  # record id -> (begin, end, sha1)
    lock = threading.Lock()
    enough = threading.Event()
    stop = threading.Event()
    n_threads = 4

    def writer(w: int) -> None:
        seq = 0
        while not stop.is_set():
            rid = f"w{w}-{seq:06d}"
            body = f"<{rid}|".encode() + os.urandom(6000).hex().encode() + b">\n"
            chunks = [body[i : i + 4096] for i in range(0, len(body), 4096)]  # several chunks per append
            msgs = [pb.AppendRequest(journal=j, union_registers=label_set({"last": rid}))]
            msgs += [pb.AppendRequest(content=c) for c in chunks] + [pb.AppendRequest()]
            try:
                r = broker.stub.Append(iter(msgs), timeout=30)
            except grpc.RpcError:
                return  # the broker died under us
            assert r.status == pb.OK
            with lock:
                acked[rid] = (r.commit.begin, r.commit.end, sha1sum_to_hex(r.commit.sum))
                if len(acked) >= 300:
                    enough.set()
            seq += 1

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(n_threads)]
    for t in threads:
        t.start()
    assert enough.wait(120)
    broker.kill()  # SIGKILL while appends are in flight
    stop.set()
    for t in threads:
        t.join(30)

    broker = BrokerProcess(data_dir, file_root)
    try:
        content = read_all(broker.stub, j)
        # Every acknowledged append is there, at its acknowledged offsets, byte for byte.
        for rid, (begin, end, sha) in acked.items():
            assert hashlib.sha1(content[begin:end]).hexdigest() == sha, rid
            assert content[begin:end].startswith(f"<{rid}|".encode())
        # The journal holds only whole appends: no torn tail of an append that never committed.
        records = re.findall(rb"<(w\d-\d{6})\|[0-9a-f]{12000}>\n", content)
        assert sum(len(r) for r in re.findall(rb"<w\d-\d{6}\|[0-9a-f]{12000}>\n", content)) == len(content)
        # Appends beyond the acknowledged ones can only be those in flight at the kill (their
        # commit was durable but the acknowledgement never reached the client).
        extra = {r.decode() for r in records} - set(acked)
        assert len(extra) <= n_threads, extra
        # Registers are those of the last durable append.
        r = broker.stub.Append(iter([pb.AppendRequest(journal=j), pb.AppendRequest()]))
        assert r.status == pb.OK and r.commit.end == len(content)
        assert r.registers == label_set({"last": records[-1].decode()})
        # The journal keeps going where it stopped.
        r = broker.stub.Append(
            iter([pb.AppendRequest(journal=j), pb.AppendRequest(content=b"after\n"), pb.AppendRequest()])
        )
        assert r.commit.begin == len(content)
    finally:
        assert broker.terminate() == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signals_stop_cleanly_and_persist_spools(tmp_path, sig):
    data_dir, file_root = str(tmp_path / "data"), str(tmp_path / "root")
    broker = BrokerProcess(data_dir, file_root)
    spec = journal_spec("term/journal", ["file:///frags/"], 1 << 20)
    assert broker.stub.Apply(pb.ApplyRequest(changes=[pb.ApplyRequest.Change(upsert=spec)])).status == pb.OK
    msgs = [pb.AppendRequest(journal="term/journal"), pb.AppendRequest(content=b"persist me"), pb.AppendRequest()]
    assert broker.stub.Append(iter(msgs)).status == pb.OK
    assert broker.terminate(sig) == 0
    files = [f for _, _, fs in os.walk(os.path.join(file_root, "frags", "term", "journal")) for f in fs]
    assert files == [f"0000000000000000-000000000000000a-{hashlib.sha1(b'persist me').hexdigest()}.zst"]


def test_torn_tail_is_truncated_on_recovery(gz):
    j = gz.create(stores=[], length=1 << 20).name
    gz.append(j, b"acknowledged", union_registers=label_set({"owner": "me"}))
    journal = gz.broker.core.journal(j)
    state_dir = journal.state_dir
    spool_begin = journal.current.begin
    gz.broker.stop()
    # Simulate a crash mid-append: content bytes with no commit record, and half a record.
    data_path, log_path = spool_paths(state_dir, spool_begin)
    with open(data_path, "ab") as f:
        f.write(b"NOT ACKNOWLEDGED")
    with open(log_path, "ab") as f:
        f.write(b"PSZG\x40\x00\x00\x00garbage")
    gz.restart()
    assert gz.content(j) == b"acknowledged"
    r = gz.append(j, b"!")
    assert (r.commit.begin, r.commit.end) == (12, 13)
    assert r.registers == label_set({"owner": "me"})
    assert gz.content(j) == b"acknowledged!"


def test_specs_registers_and_revisions_survive_restart(gz):
    spec = gz.create("keep/journal", stores=[], labels={"app.gazette.dev/tag": "t"})
    gz.append(spec.name, b"data", union_registers=label_set({"key": "v"}))
    before = gz.list()[0]
    gz.restart()
    after = gz.list()[0]
    assert [j.spec for j in after.journals] == [j.spec for j in before.journals]
    assert after.journals[0].mod_revision == before.journals[0].mod_revision
    assert after.header.etcd.revision == before.header.etcd.revision
    assert after.header.etcd.cluster_id == before.header.etcd.cluster_id
    assert after.header.etcd.raft_term > before.header.etcd.raft_term
    r = gz.append(spec.name)
    assert r.registers == label_set({"key": "v"}) and r.commit.end == 4


def test_broker_main_rejects_a_bad_listen_address(tmp_path, capsys):
    from pyspark_gazette.broker import broker_main

    with pytest.raises(SystemExit) as exc:
        broker_main(["--listen", "nonsense", "--data-dir", str(tmp_path)])
    assert exc.value.code == 2
    assert "HOST:PORT" in capsys.readouterr().err


def test_broker_main_help_says_it_binds_loopback(capsys):
    from pyspark_gazette.broker import broker_main

    with pytest.raises(SystemExit):
        broker_main(["--help"])
    assert "loopback" in capsys.readouterr().out
