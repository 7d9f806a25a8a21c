#!/usr/bin/env python3
"""Top frames of a JDK Flight Recorder file's CPU samples (``jdk.ExecutionSample``).

    .venv/bin/python bench/jfr_top.py RECORDING.jfr [--top 15] [--threads]

Prints the methods most often on top of the stack (self time) and most often anywhere in it
(inclusive, each method once per sample), as shares of all samples, from
``jfr print --events jdk.ExecutionSample --stack-depth 64`` (``jfr`` is the JDK's tool).
With ``--threads``, the sampled threads' names (numbers stripped) too.
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys

_FRAME = re.compile(r"^\s+([\w$.<>/]+)\(.*\)\s+line:")
_THREAD = re.compile(r'sampledThread = "([^"]*)"')


def samples(path: str):  # type: ignore[no-untyped-def]
    """(thread, [frames, top first]) of every execution sample."""
    out = subprocess.run(
        ["jfr", "print", "--events", "jdk.ExecutionSample", "--stack-depth", "64", path],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    ).stdout
    thread, frames = "", []
    for line in out.splitlines():
        if line.startswith("jdk.ExecutionSample"):
            if frames:
                yield thread, frames
            thread, frames = "", []
            continue
        m = _THREAD.search(line)
        if m:
            thread = re.sub(r"\d+(\.\d+)?", "N", m.group(1))
            continue
        m = _FRAME.match(line)
        if m:
            frames.append(m.group(1))
    if frames:
        yield thread, frames


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("recording")
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--threads", action="store_true")
    args = p.parse_args()
    self_counts: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    threads: collections.Counter[str] = collections.Counter()
    n = 0
    for thread, frames in samples(args.recording):
        n += 1
        self_counts[frames[0]] += 1
        incl.update(set(frames))
        threads[thread] += 1
    print(f"{n} CPU samples in {args.recording}")
    for title, counter in (("self (top of stack)", self_counts), ("inclusive (anywhere in the stack)", incl)):
        print(f"\n{title}:")
        for frame, c in counter.most_common(args.top):
            print(f"  {100 * c / max(n, 1):5.1f}%  {frame}")
    if args.threads:
        print("\nthreads:")
        for t, c in threads.most_common(args.top):
            print(f"  {100 * c / max(n, 1):5.1f}%  {t}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
