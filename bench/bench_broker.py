"""Throughput of the embedded broker over loopback gRPC, beside the raw disk in the same run.

Appends: ``--total`` bytes in ``--append-size`` appends to one journal per codec (NONE and
ZSTANDARD), through the raw generated stubs, with ``--inflight`` appends pipelined (each its
own RPC; the broker group-commits them). Every append is acknowledged only after fsync.
Baseline: the same bytes written to a file in the same directory, ``--append-size`` at a time,
with an fdatasync after each write (the durability an acknowledged append has), and with one
fsync at the end.

Reads: a Read RPC of the same bytes (``block=False``, no ``do_not_proxy``, so the broker streams
everything itself, from its spool or decompressing persisted fragments). Baseline: reading the
same bytes from a file in 1 MiB blocks.

Transport ceiling: the same RPCs against a do-nothing ``protocol.Journal`` servicer (Append
drops the content, Read yields 32,736-byte chunks from memory) in a child process, which is the
most Python gRPC on this machine can carry; the broker's share of it shows what the broker's
own work (spool writes, SHA1s, fsync, persisting) costs.

The broker runs as a child process (``python -m pyspark_gazette.broker``), so client and server
do not share one interpreter.

    .venv/bin/python bench/bench_broker.py [--total-mib 256] [--inflight 4]
"""

from __future__ import annotations

import argparse
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import grpc
from google.protobuf import duration_pb2

from pyspark_gazette.protocol import pb, pb_grpc

MiB = 1 << 20


def start_broker(data_dir: str, file_root: str):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pyspark_gazette.broker",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            data_dir,
            "--file-root",
            file_root,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    m = re.match(r"gazette broker listening on http://(\S+) ", proc.stdout.readline())
    assert m, "broker did not start"
    return proc, m.group(1)


def transport_server() -> None:
    """A ``protocol.Journal`` servicer doing no work, for the transport ceiling."""
    from concurrent import futures

    class Null(pb_grpc.JournalServicer):
        def Append(self, request_iterator, context):
            for _ in request_iterator:
                pass
            return pb.AppendResponse(status=pb.OK)

        def Read(self, request, context):
            data = os.urandom(32_736)
            offset = request.offset
            while offset < request.end_offset:
                n = min(len(data), request.end_offset - offset)
                yield pb.ReadResponse(offset=offset, content=data[:n])
                offset += n

    server = grpc.server(futures.ThreadPoolExecutor(64), options=[("grpc.max_receive_message_length", 4 * MiB)])
    pb_grpc.add_JournalServicer_to_server(Null(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"gazette broker listening on http://127.0.0.1:{port} (transport ceiling)", flush=True)
    server.wait_for_termination()


def start_transport_server():
    proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--transport-server"], stdout=subprocess.PIPE, text=True
    )
    m = re.match(r"gazette broker listening on http://(\S+) ", proc.stdout.readline())
    assert m, "transport server did not start"
    return proc, m.group(1)


def raw_write(path: str, total: int, block: bytes, per_block_sync: bool) -> float:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    t0 = time.perf_counter()
    for _ in range(total // len(block)):
        os.write(fd, block)
        if per_block_sync:
            os.fdatasync(fd)
    os.fsync(fd)
    elapsed = time.perf_counter() - t0
    os.close(fd)
    return total / elapsed


def raw_read(path: str) -> float:
    t0 = time.perf_counter()
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(MiB)
            if not b:
                break
            n += len(b)
    return n / (time.perf_counter() - t0)


def bench_append(stub, journal: str, total: int, block: bytes, chunk: int, inflight: int) -> float:
    count = total // len(block)
    chunks = [block[i : i + chunk] for i in range(0, len(block), chunk)]
    work: queue.Queue = queue.Queue()
    for i in range(count):
        work.put(i)
    errors: list[BaseException] = []

    def worker():
        while True:
            try:
                work.get_nowait()
            except queue.Empty:
                return
            msgs = (
                [pb.AppendRequest(journal=journal)]
                + [pb.AppendRequest(content=c) for c in chunks]
                + [pb.AppendRequest()]
            )
            try:
                r = stub.Append(iter(msgs))
                assert r.status == pb.OK, r
            except BaseException as e:
                errors.append(e)
                return

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(inflight)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return total / (time.perf_counter() - t0)


def bench_read(stub, journal: str, total: int) -> float:
    t0 = time.perf_counter()
    offset = 0
    while offset < total:
        for r in stub.Read(pb.ReadRequest(journal=journal, offset=offset, end_offset=total)):
            offset += len(r.content)
    assert offset == total
    return total / (time.perf_counter() - t0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--total-mib", type=int, default=256)
    p.add_argument("--append-mib", type=float, default=1.0)
    p.add_argument("--chunk-kib", type=int, default=1024, help="AppendRequest content chunk size")
    p.add_argument("--inflight", type=int, default=4, help="concurrent appends (1 = strictly sequential)")
    p.add_argument("--fragment-mib", type=int, default=64)
    p.add_argument("--dir", default=None, help="working directory (default: a temp dir under the repo)")
    p.add_argument("--transport-server", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.transport_server:
        transport_server()
        return
    total = args.total_mib * MiB
    block = os.urandom(int(args.append_mib * MiB))
    total -= total % len(block)
    base = tempfile.mkdtemp(prefix="bench-broker-", dir=args.dir or os.path.dirname(os.path.abspath(__file__)))
    data_dir, file_root = os.path.join(base, "data"), os.path.join(base, "root")
    proc, target = start_broker(data_dir, file_root)
    channel = grpc.insecure_channel(target, options=[("grpc.max_receive_message_length", 64 * MiB)])
    stub = pb_grpc.JournalStub(channel)
    results = {}
    try:
        raw_file = os.path.join(base, "raw.bin")
        results["disk write, fdatasync per append"] = raw_write(raw_file, total, block, True)
        results["disk write, one fsync"] = raw_write(raw_file, total, block, False)
        results["disk read"] = raw_read(raw_file)
        os.unlink(raw_file)
        for codec in (pb.NONE, pb.ZSTANDARD):
            name = f"bench/{pb.CompressionCodec.Name(codec).lower()}"
            spec = pb.JournalSpec(
                name=name,
                replication=1,
                fragment=pb.JournalSpec.Fragment(
                    length=args.fragment_mib * MiB,
                    compression_codec=codec,
                    stores=["file:///fragments/"],
                    refresh_interval=duration_pb2.Duration(seconds=60),
                ),
            )
            assert stub.Apply(pb.ApplyRequest(changes=[pb.ApplyRequest.Change(upsert=spec)])).status == pb.OK
            cname = pb.CompressionCodec.Name(codec)
            results[f"append {cname} (inflight {args.inflight})"] = bench_append(
                stub, name, total, block, args.chunk_kib * 1024, args.inflight
            )
            results[f"read {cname}"] = bench_read(stub, name, total)
        results["append NONE (inflight 1)"] = bench_append(stub, "bench/none", total, block, args.chunk_kib * 1024, 1)
    finally:
        channel.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
        shutil.rmtree(base, ignore_errors=True)
    proc, target = start_transport_server()
    channel = grpc.insecure_channel(target, options=[("grpc.max_receive_message_length", 64 * MiB)])
    stub = pb_grpc.JournalStub(channel)
    try:
        ceiling = {
            "append": bench_append(stub, "null", total, block, args.chunk_kib * 1024, args.inflight),
            "append1": bench_append(stub, "null", total, block, args.chunk_kib * 1024, 1),
            "read": bench_read(stub, "null", total),
        }
    finally:
        channel.close()
        proc.kill()
        proc.wait()
    results[f"gRPC ceiling: append (inflight {args.inflight})"] = ceiling["append"]
    results["gRPC ceiling: append (inflight 1)"] = ceiling["append1"]
    results["gRPC ceiling: read"] = ceiling["read"]

    print(
        f"{total / MiB:.0f} MiB in {len(block) / MiB:g} MiB appends, chunks of {args.chunk_kib} KiB, {os.cpu_count()} CPUs"
    )
    for k, v in results.items():
        print(f"  {k:40s} {v / MiB:8.1f} MiB/s")
    w1, w2, rd = (results[k] for k in ("disk write, fdatasync per append", "disk write, one fsync", "disk read"))
    print("ratios (goal >= 0.50 of the raw disk):")
    for k, v in results.items():
        if k.startswith("append"):
            ceil = ceiling["append1" if "inflight 1)" in k else "append"]
            print(
                f"  {k:34s} {v / w1:5.2f} of disk write+fdatasync per append, {v / w2:5.2f} of disk write+one fsync,"
                f" {v / ceil:5.2f} of the gRPC ceiling"
            )
        elif k.startswith("read"):
            print(f"  {k:34s} {v / rd:5.2f} of disk read, {v / ceiling['read']:5.2f} of the gRPC ceiling")


if __name__ == "__main__":
    main()
