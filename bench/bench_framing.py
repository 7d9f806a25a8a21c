"""Benchmark of the newline (ndjson) decoders against a plain ``data.split(b"\\n")`` baseline.

Run: ``.venv/bin/python bench/bench_framing.py [--mib 64] [--chunk-kib 1024] [--msg-bytes 100]``

Every decoder gets the same bytes in the same run, fed in chunks like a fragment reader would
(``--chunk-kib``), and reports messages/s and MB/s (best of ``--repeat`` runs).
"""

from __future__ import annotations

import argparse
import json
import time

from pyspark_gazette.message import NDJSON, PROTOBUF_FIXED, ArrowLineDecoder


def make_ndjson(total: int, msg_bytes: int) -> bytes:
    lines = []
    size = i = 0
    while size < total:
        doc = {"_meta": {"uuid": "83fc2f95-cc5f-11e9-82aa-010203040506"}, "i": i, "pad": ""}
        line = json.dumps(doc, separators=(",", ":"))
        line = line.replace('"pad":""', '"pad":"' + "x" * max(0, msg_bytes - len(line) - 1) + '"')
        lines.append(line)
        size += len(line) + 1
        i += 1
    return ("\n".join(lines) + "\n").encode()


def chunks(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def baseline(parts: list[bytes]) -> int:
    # The cheapest possible split: no offsets, no carry-over between chunks (not even correct).
    return sum(len(p.split(b"\n")) - 1 for p in parts)


def decoder_tuples(parts: list[bytes]) -> int:
    dec = NDJSON.decoder(0)
    n = sum(len(dec.feed(p)) for p in parts)
    return n + len(dec.finish())


def decoder_arrow(parts: list[bytes]) -> int:
    dec = ArrowLineDecoder(0)
    n = sum(len(dec.feed(p)) for p in parts)
    dec.finish()
    return n


def fixed_tuples(parts: list[bytes]) -> int:
    dec = PROTOBUF_FIXED.decoder(0)
    n = sum(len(dec.feed(p)) for p in parts)
    return n + len(dec.finish())


def run(name: str, fn, parts: list[bytes], nbytes: int, repeat: int) -> float:
    best = float("inf")
    count = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        count = fn(parts)
        best = min(best, time.perf_counter() - t0)
    print(
        f"{name:<34} {count:>10,} msgs {best * 1e3:9.1f} ms {count / best / 1e6:8.2f} M msg/s {nbytes / best / 1e6:9.1f} MB/s"
    )
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--chunk-kib", type=int, default=1024)
    ap.add_argument("--msg-bytes", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    data = make_ndjson(args.mib << 20, args.msg_bytes)
    parts = chunks(data, args.chunk_kib << 10)
    print(
        f"{len(data) / 1e6:.1f} MB of ndjson, ~{args.msg_bytes} B/message, {len(parts)} chunks of {args.chunk_kib} KiB"
    )
    base = run("baseline bytes.split", baseline, parts, len(data), args.repeat)
    t = run("NDJSON.decoder -> (offset, bytes)", decoder_tuples, parts, len(data), args.repeat)
    a = run("ArrowLineDecoder -> Arrow arrays", decoder_arrow, parts, len(data), args.repeat)
    print(f"tuples: {t / base:.2f}x baseline time; arrow: {a / base:.2f}x baseline time")

    lines = data.split(b"\n")[:-1]
    fixed = PROTOBUF_FIXED.encode_all(lines)
    fparts = chunks(fixed, args.chunk_kib << 10)
    run("FixedDecoder -> (offset, bytes)", fixed_tuples, fparts, len(fixed), args.repeat)


if __name__ == "__main__":
    main()
