"""One bench, the package of two git revisions, rounds interleaved: before/after figures of a change.

Each bench already prints its figures as ratios against a baseline it measures in the same run
(Spark's own file sources, plain reads). This script runs one bench script several times, taking
turns between the package of ``--base`` (a git revision, checked out into a temporary worktree)
and the package of this checkout, and prints the lines of each run that match ``--pick``, side by
side, so a change's effect is read as the change in those ratios on the same machine, at the same
load. The bench script itself is this checkout's in both runs; only ``pyspark_gazette`` differs.
Where the two revisions' C sources are the same, the base revision uses this checkout's compiled
extension; otherwise it is compiled into the worktree first (``setup.py build_ext --inplace``).

    python bench/compare_refs.py --base 56cdddb --pick 'committed|/ plain' -- bench/bench_stream.py --parts committed
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = "connector/pyspark_gazette"


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout


def _prepare(base: str, into: pathlib.Path) -> pathlib.Path:
    """A worktree of ``base`` with a usable C extension; returns its ``connector`` directory."""
    _git("worktree", "add", "--detach", str(into), base)
    same_c = not _git("diff", "--name-only", base, "--", f"{PACKAGE}/_native").strip()
    built = sorted((ROOT / PACKAGE).glob("_jsonscan*.so"))
    if same_c and built:
        shutil.copy2(built[0], into / PACKAGE / built[0].name)
    else:
        subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=into, check=True)
    return into / "connector"


def _run(connector: pathlib.Path, bench: list[str]) -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(connector), env.get("PYTHONPATH", "")) if p)
    check = "import pyspark_gazette, sys; print(pyspark_gazette.__file__)"
    where = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, text=True, check=True)
    if not where.stdout.strip().startswith(str(connector)):
        raise SystemExit(f"PYTHONPATH={connector} does not select that package: {where.stdout.strip()}")
    out = subprocess.run([sys.executable, *bench], env=env, cwd=ROOT, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{' '.join(bench)} failed with {connector}:\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}")
    return out.stdout


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--base", required=True, help="git revision to compare this checkout with")
    p.add_argument("--rounds", type=int, default=2, help="runs of the bench per revision, taking turns")
    p.add_argument("--pick", default="x[0-9]|ratio|/", help="regex: the lines of the bench's output to show")
    p.add_argument("bench", nargs=argparse.REMAINDER, help="-- bench script and its arguments")
    args = p.parse_args()
    bench = args.bench[1:] if args.bench[:1] == ["--"] else args.bench
    if not bench:
        p.error("give the bench script and its arguments after --")
    pick = re.compile(args.pick)
    head = _git("rev-parse", "--short", "HEAD").strip() + (" (+ uncommitted)" if _git("status", "--porcelain") else "")
    with tempfile.TemporaryDirectory(prefix="compare-refs-") as tmp:
        base_tree = pathlib.Path(tmp) / "base"
        try:
            trees = [(f"base {args.base}", _prepare(args.base, base_tree)), (f"this {head}", ROOT / "connector")]
            for n in range(args.rounds):
                for name, connector in trees if n % 2 == 0 else trees[::-1]:
                    print(f"== round {n + 1}, {name}: {' '.join(bench)}", flush=True)
                    for line in _run(connector, bench).splitlines():
                        if pick.search(line):
                            print("   ", line, flush=True)
        finally:
            _git("worktree", "remove", "--force", str(base_tree))


if __name__ == "__main__":
    main()
