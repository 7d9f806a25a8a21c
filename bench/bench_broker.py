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

Real Gazette beside it (``--real-gazette``): the same client, bytes, journal specs and
append/read pattern against a real Gazette broker (v0.103.0 with etcd, tests/realgazette.py's
``GazetteCluster``, one broker, file store under its file root, stopped by PID after each round)
on the same machine; each embedded measurement is reported as a ratio of real Gazette's (goal:
embedded appends >= 0.5 of real Gazette's).

    .venv/bin/python bench/bench_broker.py [--total-mib 256] [--inflight 4] [--rounds 2] [--real-gazette]

This machine is shared and noisy, so every measurement is repeated ``--rounds`` times (the
codec order alternates between rounds) and the best of each is reported beside all values.
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

from pyspark_gazette.broker.main import spawn_broker
from pyspark_gazette.protocol import pb, pb_grpc

MiB = 1 << 20


def start_broker(data_dir: str, file_root: str):
    proc, address = spawn_broker(data_dir, file_root)
    return proc, address.removeprefix("http://")


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


def journal_spec(name: str, codec: int, fragment_mib: int) -> pb.JournalSpec:
    from benchlib import make_spec

    return make_spec(
        name, store="file:///fragments/", length=fragment_mib * MiB, codec=codec, content_type="", refresh_seconds=60
    )


def one_round(args, rnd: int, total: int, block: bytes, out: dict[str, list[float]]) -> None:
    """Raw disk, broker and transport-ceiling measurements; appends each value to ``out``."""
    chunk = args.chunk_kib * 1024

    def put(key: str, value: float) -> None:
        out.setdefault(key, []).append(value)

    base = tempfile.mkdtemp(prefix="bench-broker-", dir=args.dir or os.path.dirname(os.path.abspath(__file__)))
    try:
        raw_file = os.path.join(base, "raw.bin")
        put("disk write, fdatasync per append", raw_write(raw_file, total, block, True))
        put("disk write, one fsync", raw_write(raw_file, total, block, False))
        put("disk read", raw_read(raw_file))
        os.unlink(raw_file)
        proc, target = start_broker(os.path.join(base, "data"), os.path.join(base, "root"))
        channel = grpc.insecure_channel(target, options=[("grpc.max_receive_message_length", 64 * MiB)])
        stub = pb_grpc.JournalStub(channel)
        try:
            codecs = [pb.NONE, pb.ZSTANDARD] if rnd % 2 == 0 else [pb.ZSTANDARD, pb.NONE]
            for codec in codecs:
                cname = pb.CompressionCodec.Name(codec)
                name = f"bench/{cname.lower()}"
                assert (
                    stub.Apply(
                        pb.ApplyRequest(
                            changes=[pb.ApplyRequest.Change(upsert=journal_spec(name, codec, args.fragment_mib))]
                        )
                    ).status
                    == pb.OK
                )
                put(
                    f"append {cname} (inflight {args.inflight})",
                    bench_append(stub, name, total, block, chunk, args.inflight),
                )
                put(f"read {cname}", bench_read(stub, name, total))
            name = "bench/sequential"
            assert (
                stub.Apply(
                    pb.ApplyRequest(
                        changes=[pb.ApplyRequest.Change(upsert=journal_spec(name, pb.NONE, args.fragment_mib))]
                    )
                ).status
                == pb.OK
            )
            put("append NONE (inflight 1)", bench_append(stub, name, total, block, chunk, 1))
        finally:
            channel.close()
            proc.send_signal(signal.SIGTERM)
            proc.wait(120)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if args.real_gazette:
        real_round(args, rnd, total, block, put)
    proc, target = start_transport_server()
    channel = grpc.insecure_channel(target, options=[("grpc.max_receive_message_length", 64 * MiB)])
    stub = pb_grpc.JournalStub(channel)
    try:
        put(
            f"gRPC ceiling: append (inflight {args.inflight})",
            bench_append(stub, "null", total, block, chunk, args.inflight),
        )
        put("gRPC ceiling: append (inflight 1)", bench_append(stub, "null", total, block, chunk, 1))
        put("gRPC ceiling: read", bench_read(stub, "null", total))
    finally:
        channel.close()
        proc.kill()
        proc.wait()


def real_round(args, rnd: int, total: int, block: bytes, put) -> None:  # type: ignore[no-untyped-def]
    """The broker measurements again, against a real Gazette broker."""
    import pathlib

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
    from realgazette import GazetteCluster, require

    require()
    chunk = args.chunk_kib * 1024
    base = tempfile.mkdtemp(prefix="bench-broker-real-", dir=args.dir or os.path.dirname(os.path.abspath(__file__)))
    cluster = GazetteCluster(os.path.join(base, "cluster"), brokers=1)
    try:
        cluster.start()
        specs = {
            pb.NONE: journal_spec("bench/none", pb.NONE, args.fragment_mib),
            pb.ZSTANDARD: journal_spec("bench/zstandard", pb.ZSTANDARD, args.fragment_mib),
            "sequential": journal_spec("bench/sequential", pb.NONE, args.fragment_mib),
        }
        cluster.apply_specs(specs.values())
        channel = grpc.insecure_channel(
            cluster.address.removeprefix("http://"), options=[("grpc.max_receive_message_length", 64 * MiB)]
        )
        stub = pb_grpc.JournalStub(channel)
        try:
            for codec in [pb.NONE, pb.ZSTANDARD] if rnd % 2 == 0 else [pb.ZSTANDARD, pb.NONE]:
                cname = pb.CompressionCodec.Name(codec)
                name = specs[codec].name
                put(
                    f"real gazette: append {cname} (inflight {args.inflight})",
                    bench_append(stub, name, total, block, chunk, args.inflight),
                )
                put(f"real gazette: read {cname}", bench_read(stub, name, total))
            put(
                "real gazette: append NONE (inflight 1)", bench_append(stub, "bench/sequential", total, block, chunk, 1)
            )
        finally:
            channel.close()
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--total-mib", type=int, default=256)
    p.add_argument("--append-mib", type=float, default=1.0)
    p.add_argument("--chunk-kib", type=int, default=1024, help="AppendRequest content chunk size")
    p.add_argument("--inflight", type=int, default=4, help="concurrent appends (1 = strictly sequential)")
    p.add_argument("--fragment-mib", type=int, default=64)
    p.add_argument("--rounds", type=int, default=2, help="repeat everything; the best of each is reported")
    p.add_argument("--dir", default=None, help="working directory (default: a temp dir beside this file)")
    p.add_argument("--real-gazette", action="store_true", help="the same against a real Gazette broker")
    p.add_argument("--transport-server", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.transport_server:
        transport_server()
        return
    block = os.urandom(int(args.append_mib * MiB))
    total = args.total_mib * MiB
    total -= total % len(block)
    runs: dict[str, list[float]] = {}
    for rnd in range(args.rounds):
        one_round(args, rnd, total, block, runs)
    best = {k: max(v) for k, v in runs.items()}

    print(
        f"{total / MiB:.0f} MiB in {len(block) / MiB:g} MiB appends, chunks of {args.chunk_kib} KiB, "
        f"{os.cpu_count()} CPUs, best of {args.rounds} rounds (all rounds in brackets)"
    )
    for k, v in best.items():
        print(f"  {k:40s} {v / MiB:8.1f} MiB/s   [{', '.join(f'{x / MiB:.0f}' for x in runs[k])}]")
    w1, w2, rd = (best[k] for k in ("disk write, fdatasync per append", "disk write, one fsync", "disk read"))
    ceiling_append = best[f"gRPC ceiling: append (inflight {args.inflight})"]
    print("ratios (goal >= 0.50 of the raw disk):")
    for k, v in best.items():
        if k.startswith("append"):
            ceil = best["gRPC ceiling: append (inflight 1)"] if "inflight 1)" in k else ceiling_append
            print(
                f"  {k:34s} {v / w1:5.2f} of disk write+fdatasync per append, {v / w2:5.2f} of disk write+one fsync,"
                f" {v / ceil:5.2f} of the gRPC ceiling"
            )
        elif k.startswith("read"):
            print(f"  {k:34s} {v / rd:5.2f} of disk read, {v / best['gRPC ceiling: read']:5.2f} of the gRPC ceiling")
    if args.real_gazette:
        print(
            f"embedded broker / real Gazette (same client, bytes and pattern; goal appends >= 0.5); load {os.getloadavg()}:"
        )
        for k, v in best.items():
            real = best.get(f"real gazette: {k}")
            if real:
                goal = f"  goal >= 0.5: {'met' if v / real >= 0.5 else 'MISSED'}" if k.startswith("append") else ""
                print(f"  {k:34s} {v / real:5.2f}  ({v / MiB:.0f} vs {real / MiB:.0f} MiB/s){goal}")


if __name__ == "__main__":
    main()
