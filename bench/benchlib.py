"""Pieces every Spark benchmark here sets up the same way: the local session and an ndjson journal spec."""

from __future__ import annotations

import contextlib
import math
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

# The one JournalSpec builder of tests and benches lives in tests/journalspecs.py.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
from journalspecs import make_spec  # noqa: E402


def local_spark(master: str = "local[2]", **conf: Any):
    """A quiet local SparkSession without UI, with the given ``{key: value}`` Spark settings."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).config("spark.ui.enabled", "false")
    for key, value in conf.items():
        builder = builder.config(key, str(value))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def ndjson_spec(
    name: str, length: int, *, store: str = "file:///bench/", refresh_seconds: int = 3600, codec: str = "ZSTANDARD"
):
    """An ndjson journal with ``codec`` (a ``pb.CompressionCodec`` name) fragments of ``length`` bytes in ``store``."""
    return make_spec(name, store=store, length=length, refresh_seconds=refresh_seconds, codec=codec)


def require_rolled_fragment(parser, args) -> None:  # type: ignore[no-untyped-def]
    """Refuse (``parser.error``) a ``--fragment-mib`` at or above ``--mib``: the benches read the
    persisted fragments, and a journal shorter than one fragment never rolls one."""
    if args.fragment_mib >= args.mib:
        parser.error(
            f"--fragment-mib ({args.fragment_mib}) must be below --mib ({args.mib}): no fragment would be persisted"
        )


@contextlib.contextmanager
def jfr_recording(spark, path: str | None):  # type: ignore[no-untyped-def]
    """A JDK Flight Recorder recording (``settings=profile``) of the driver JVM around the block,
    saved to ``path``; in local mode the driver JVM is also the executor. ``jcmd`` is the JDK's.
    Nothing when ``path`` is None."""
    if not path:
        yield
        return
    pid = str(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    name = f"bench-{os.getpid()}"
    subprocess.run(
        ["jcmd", pid, "JFR.start", f"name={name}", "settings=profile"], check=True, capture_output=True, timeout=120
    )
    try:
        yield
    finally:
        subprocess.run(
            ["jcmd", pid, "JFR.stop", f"name={name}", f"filename={os.path.abspath(path)}"],
            check=True,
            capture_output=True,
            timeout=300,
        )
        print(f"JFR recording: {path} (summarise with: .venv/bin/python bench/jfr_top.py {path})")


def process_cpu(pid: int, *, children: bool = False) -> float:
    """User + system CPU seconds of one process so far (/proc), with ``children`` also those of
    its children it has waited for; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(x) for x in fields[11 : 15 if children else 13]) / os.sysconf("SC_CLK_TCK")


def machine_cpu() -> float:
    """Busy CPU seconds of the whole machine so far (/proc/stat: user, nice, system, irq, softirq)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def wait_idle(pids: list[int], *, quiet: float = 0.01, every: float = 0.25, limit: float = 60.0) -> float:
    """Wait until the processes ``pids`` together use less than ``quiet`` CPU seconds in an
    interval of ``every`` seconds (a broker done persisting what an earlier case wrote), at most
    ``limit`` seconds; the seconds waited. A benchmark's next case then does not pay for the
    previous one's background work."""
    start = time.monotonic()
    before = sum(process_cpu(p) for p in pids)
    while time.monotonic() - start < limit:
        time.sleep(every)
        now = sum(process_cpu(p) for p in pids)
        if now - before < quiet:
            break
        before = now
    return time.monotonic() - start


def same_answers(a: object, b: object) -> bool:
    """Two queries' answers equal, doubles to 1e-12 relative: Spark adds the partial sums of a
    query's partitions in the order its tasks end, so the last bits of a ``sum`` vary by run.
    Rows, lists and tuples compare element by element."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_answers(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def best_of(
    cases: dict[str, Callable[[], Any]],
    rounds: int,
    *,
    alternate: bool = False,
    before: Callable[[], Any] | None = None,
) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Run every case once per round, interleaved; the best time of each and all of them.

    ``alternate``: every other round runs the cases in reverse order, so that no case always
    follows the same one (a case right after a long one can pay that one's JVM garbage collection).
    ``before``: called, untimed, before each case.
    """
    all_times: dict[str, list[float]] = {k: [] for k in cases}
    for r in range(rounds):
        order = list(cases.items())
        for name, fn in reversed(order) if alternate and r % 2 else order:
            if before is not None:
                before()
            t = time.perf_counter()
            fn()
            all_times[name].append(time.perf_counter() - t)
    return {k: min(v) for k, v in all_times.items()}, all_times


def append_lines(client, journal: str, data: bytes, chunk: int = 1 << 20) -> None:
    """Append ``data`` (whole lines) to ``journal`` in appends of about ``chunk`` bytes, each
    ending on a line boundary."""
    view, pos = memoryview(data), 0
    while pos < len(data):
        cut = data.find(b"\n", min(pos + chunk, len(data) - 1)) + 1 or len(data)
        client.append(journal, view[pos:cut])
        pos = cut


class Embedded:
    """The embedded broker, in this process, persisting to the file store ``store``."""

    name = "embedded broker"

    def __init__(self, base: str, store: str):
        from pyspark_gazette.broker import EmbeddedBroker

        self.store = store
        self.broker = EmbeddedBroker(os.path.join(base, "broker"), file_root=store)

    def __enter__(self):
        self.broker.__enter__()
        self.address = self.broker.address
        return self

    def __exit__(self, *exc):
        self.broker.__exit__(*exc)

    def apply(self, client, specs) -> None:
        from pyspark_gazette.client import Change

        client.apply_in_batches([Change(0, upsert=s) for s in specs])

    def refresh(self, name: str) -> None:
        self.broker.refresh(name)

    def persisted(self, timeout: float) -> bool:
        """Whether every journal's content reached the store within ``timeout`` seconds."""
        return self.broker.wait_persisted(timeout)


class EmbeddedProcess(Embedded):
    """The embedded broker in a process of its own (``python -m pyspark_gazette.broker``, as a
    deployment would run it), persisting to the file store ``store``; stopped by PID on exit."""

    name = "embedded broker (own process)"

    def __init__(self, base: str, store: str):
        self.base, self.store = base, store
        self.proc: Any = None

    def __enter__(self):
        from pyspark_gazette.broker.main import spawn_broker

        self.proc, self.address = spawn_broker(os.path.join(self.base, "broker"), self.store)
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def refresh(self, name: str) -> None:
        raise SystemExit("--persisted needs the embedded broker in this process")

    def persisted(self, timeout: float) -> bool:
        raise SystemExit("this bench needs the embedded broker in this process (it waits for persisted fragments)")


class RealGazette:
    """A real Gazette cluster (etcd and ``brokers`` ``gazette serve`` from ``.bin/``, as
    tests/realgazette.py starts them) serving up to ``journals`` journals, stopped by PID on exit."""

    name = "real Gazette"

    def __init__(self, base: str, brokers: int, journals: int):
        from realgazette import GazetteCluster

        # A broker serves at most --broker.limit journals (1024 by default).
        limit = f"--broker.limit={journals + 64}"
        self.cluster = GazetteCluster(os.path.join(base, "gazette"), brokers=brokers, broker_args=[limit])
        self.store = self.cluster.file_root

    def __enter__(self):
        self.cluster.start()
        self.address = self.cluster.address
        return self

    def __exit__(self, *exc):
        self.cluster.stop()

    def apply(self, client, specs) -> None:
        self.cluster.apply_specs(specs, timeout=300)

    def refresh(self, name: str) -> None:
        raise SystemExit("--persisted needs the embedded broker")

    def persisted(self, timeout: float) -> bool:
        """Real Gazette persists a fragment when it rolls; its last one stays with the brokers."""
        return True
