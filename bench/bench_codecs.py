"""Decode throughput of our fragment codecs against the codec libraries called directly.

For each codec the same compressed bytes (realistic ndjson click events) are decoded by:

* raw:     the library on its own (gzip.GzipFile, zstandard stream_reader, cramjam's framed
           snappy decompress in one call, io.BytesIO for NONE), reading 1 MiB at a time;
* decoder: our ``open_decompressor`` stream, read1() 1 MiB at a time;
* reader:  our ``FragmentReader.iter_chunks`` (decoder + exact-end checks), the path Spark
           executors and the broker use. ``--verify`` adds the SHA1 check.

Throughput is MB/s (10^6 bytes) of uncompressed output, best of ``--repeat`` runs; ratio is
reader / raw. Run: ``.venv/bin/python bench/bench_codecs.py [--size-mib 96] [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import hashlib
import io
import platform
import random
import sys
import time
from collections.abc import Callable

import cramjam
import zstandard

from pyspark_gazette.fragments import FragmentReader, FragmentRef, compress_bytes, open_decompressor
from pyspark_gazette.protocol import codec_name, pb

CHUNK = 1 << 20
CODECS = [pb.NONE, pb.GZIP, pb.ZSTANDARD, pb.SNAPPY, pb.GZIP_OFFLOAD_DECOMPRESSION]


def click_events(target_bytes: int, seed: int = 42) -> bytes:
    """Deterministic ndjson click events, compressible like real event logs."""
    rnd = random.Random(seed)
    pages = [f"/products/{rnd.randrange(10_000)}" for _ in range(500)] + ["/", "/cart", "/checkout", "/search"]
    agents = ["Mozilla/5.0 (X11; Linux x86_64)", "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5)", "curl/8.5.0"]
    countries = ["US", "DE", "FR", "BR", "IN", "JP", "GB", "NL"]
    lines, size, ts, seq = [], 0, 1_763_780_000_000, 0
    while size < target_bytes:
        ts += rnd.randrange(1, 50)
        seq += 1
        line = (
            f'{{"event_id":"{rnd.getrandbits(64):016x}","seq":{seq},"ts":{ts},'
            f'"user_id":{rnd.randrange(1_000_000)},"session":"{rnd.getrandbits(32):08x}",'
            f'"page":"{rnd.choice(pages)}","referrer":"{rnd.choice(pages)}","country":"{rnd.choice(countries)}",'
            f'"agent":"{rnd.choice(agents)}","latency_ms":{rnd.randrange(5, 900)},"ok":{"true" if rnd.random() < 0.97 else "false"}}}\n'
        )
        lines.append(line)
        size += len(line)
    return "".join(lines).encode()


def drain(read: Callable[[int], bytes]) -> int:
    total = 0
    while chunk := read(CHUNK):
        total += len(chunk)
    return total


def raw_decode(codec: int, blob: bytes) -> int:
    if codec == pb.NONE:
        return drain(io.BytesIO(blob).read)
    if codec in (pb.GZIP, pb.GZIP_OFFLOAD_DECOMPRESSION):
        return drain(gzip.GzipFile(fileobj=io.BytesIO(blob), mode="rb").read)
    if codec == pb.ZSTANDARD:
        return drain(zstandard.ZstdDecompressor().stream_reader(io.BytesIO(blob), read_across_frames=True).read)
    if codec == pb.SNAPPY:
        return len(cramjam.snappy.decompress(blob))
    raise ValueError(codec)


def decoder_decode(codec: int, blob: bytes) -> int:
    with open_decompressor(codec, io.BytesIO(blob)) as d:
        return drain(d.read1)


def reader_decode(ref: FragmentRef, blob: bytes, verify: bool) -> int:
    with FragmentReader(io.BytesIO(blob), ref, verify_sha1=verify) as r:
        return sum(len(c) for c in r.iter_chunks(CHUNK))


def best_mbps(fns: list[Callable[[], int]], expected: int, repeat: int) -> list[float]:
    """Best throughput of each function; runs are interleaved so background load hits all alike."""
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            n = fn()
            elapsed = time.perf_counter() - start
            if n != expected:
                raise SystemExit(f"decoded {n} bytes, expected {expected}")
            best[i] = min(best[i], elapsed)
    return [expected / b / 1e6 for b in best]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=96, help="uncompressed data size (default 96)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement, best is kept (default 5)")
    parser.add_argument("--verify", action="store_true", help="reader also checks the SHA1")
    parser.add_argument("--codec", action="append", help="only these codecs (names), repeatable")
    args = parser.parse_args(argv)

    data = click_events(args.size_mib << 20)
    ref_sum = hashlib.sha1(data).hexdigest()
    print(
        f"python {platform.python_version()} on {platform.machine()}, zstandard {zstandard.__version__}, cramjam {cramjam.__version__}"
    )
    print(
        f"{len(data) / 1e6:.1f} MB of ndjson click events, chunk {CHUNK >> 10} KiB, best of {args.repeat}"
        + (", reader verifies SHA1" if args.verify else "")
    )
    header = f"{'codec':<28}{'ratio':>7}{'raw MB/s':>11}{'decoder MB/s':>14}{'reader MB/s':>13}{'reader/raw':>12}"
    print(header)
    print("-" * len(header))
    codecs = CODECS if not args.codec else [pb.CompressionCodec.Value(c.upper()) for c in args.codec]
    for codec in codecs:
        blob = compress_bytes(codec, data)
        ref = FragmentRef("bench/clicks", 0, len(data), ref_sum, codec)
        raw, dec, rdr = best_mbps(
            [
                functools.partial(raw_decode, codec, blob),
                functools.partial(decoder_decode, codec, blob),
                functools.partial(reader_decode, ref, blob, args.verify),
            ],
            len(data),
            args.repeat,
        )
        print(
            f"{codec_name(codec):<28}{len(data) / len(blob):>6.1f}x{raw:>11.0f}{dec:>14.0f}{rdr:>13.0f}{rdr / raw:>12.2f}"
        )
        sys.stdout.flush()


if __name__ == "__main__":
    main()
