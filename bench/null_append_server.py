#!/usr/bin/env python3
"""A do-nothing Gazette Journal server for write benchmarks: the cost of the gRPC itself.

    .venv/bin/python bench/null_append_server.py [--port 0] [--journal bench/clicks]

It serves ``List`` (every requested name is one ndjson journal, this server its only member and
primary) and ``Append`` (reads the request stream, keeps a write head per journal, answers OK
with the commit's offsets and no sum, stores nothing, syncs nothing). Other RPCs are
UNIMPLEMENTED. It prints ``listening on http://127.0.0.1:PORT`` once ready. A writer that is
slower against it than against a real broker is not bound by the broker; the difference between
the two is what the broker costs. Run as its own process (:func:`spawn`), so it does not share
the benchmark's interpreter lock.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
from concurrent import futures

HERE = os.path.dirname(os.path.abspath(__file__))


def serve(port: int) -> None:
    import grpc

    from pyspark_gazette.protocol import pb
    from pyspark_gazette.protocol._gen import protocol_pb2_grpc as rpc
    from pyspark_gazette.protocol.labels import CONTENT_TYPE

    heads: dict[str, int] = {}
    lock = threading.Lock()
    pid = pb.ProcessSpec.ID(zone="local", suffix="null-append")
    endpoint = f"http://127.0.0.1:{port}"

    def header() -> pb.Header:
        route = pb.Route(members=[pid], primary=0, endpoints=[endpoint])
        etcd = pb.Header.Etcd(cluster_id=1, member_id=1, revision=1, raft_term=1)
        return pb.Header(process_id=pid, route=route, etcd=etcd)

    def spec(name: str) -> pb.JournalSpec:
        return pb.JournalSpec(
            name=name,
            replication=1,
            labels=pb.LabelSet(labels=[pb.Label(name=CONTENT_TYPE, value="application/x-ndjson")]),
            fragment=pb.JournalSpec.Fragment(length=1 << 30, compression_codec=pb.CompressionCodec.NONE),
        )

    class Journal(rpc.JournalServicer):
        def List(self, request, context):  # noqa: N802 - the RPC's name
            names = [label.value for label in request.selector.include.labels if label.name == "name" and label.value]
            route = header().route
            yield pb.ListResponse(
                status=pb.OK,
                header=header(),
                journals=[
                    pb.ListResponse.Journal(spec=spec(n), mod_revision=1, create_revision=1, route=route) for n in names
                ],
            )

        def Append(self, request_iterator, context):  # noqa: N802
            first = next(request_iterator)
            size = 0
            for req in request_iterator:
                size += len(req.content)
            with lock:
                begin = heads.get(first.journal, 0)
                heads[first.journal] = end = begin + size
            commit = pb.Fragment(journal=first.journal, begin=begin, end=end)
            return pb.AppendResponse(status=pb.OK, header=header(), commit=commit)

    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=64), options=[("grpc.max_receive_message_length", 1 << 26)]
    )
    rpc.add_JournalServicer_to_server(Journal(), server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    if bound != port:
        raise SystemExit(f"bound port {bound}, wanted {port}")
    server.start()
    print(f"listening on {endpoint}", flush=True)
    server.wait_for_termination()


def spawn(go: bool = False) -> tuple[subprocess.Popen, str]:
    """Start the server in a child process; its process and address (stop it with terminate()).
    ``go``: the Go twin instead, ``gazette-peer null-append`` (tests/peers/gazette-peer, built by
    ``make gazette`` into .bin/): the same answers, received by Go's gRPC as Gazette's brokers do."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    if go:
        peer = os.path.join(os.path.dirname(HERE), ".bin", "gazette-peer")
        if not os.path.exists(peer):
            raise SystemExit(f"{peer} is missing: run `make gazette` (needs Go) for the null-go sink")
        argv = [peer, "null-append", "--port", str(port)]
    else:
        argv = [sys.executable, os.path.abspath(__file__), "--port", str(port)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("listening on "):
        proc.kill()
        raise RuntimeError(f"the null append server did not start: {line!r}")
    return proc, line.split()[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True)
    serve(ap.parse_args().port)


if __name__ == "__main__":
    main()
