"""What every scale bench (``bench/scale_*.py``) shares: the machine it ran on, the load while it
ran, a process's memory, threads and open files, and the curve's data and plot under docs/scale/.

Each scale bench measures one curve, prints it, and writes ``docs/scale/<curve>.json`` (the
numbers, the machine, the load and the command) and ``docs/scale/<curve>.png`` (the plot).
``bench/scale_plots.py`` draws every PNG again from the JSON files.
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import platform
import shlex
import sys
import threading
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "scale"


def machine() -> dict[str, Any]:
    """The machine: CPUs, their model, memory, Python and the kernel."""
    model = ""
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kib = 0
    try:
        for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "python": platform.python_version(),
        "kernel": platform.release(),
    }


class LoadSampler:
    """The 1-minute load average every ``every`` seconds while the block runs: its min and max
    say how quiet the machine was."""

    def __init__(self, every: float = 5.0):
        self.every = every
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="load-sampler")

    def _run(self) -> None:
        while True:
            self.samples.append(os.getloadavg()[0])
            if self._stop.wait(self.every):
                return

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict[str, float]:
        s = self.samples or [os.getloadavg()[0]]
        return {"min": round(min(s), 2), "max": round(max(s), 2), "mean": round(sum(s) / len(s), 2)}


def _status(pid: int) -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            out[key] = value.strip()
    except OSError:
        pass
    return out


def rss_mib(pid: int) -> float:
    """Resident memory of one process, MiB (0 once it is gone)."""
    value = _status(pid).get("VmRSS", "0 kB").split()[0]
    return int(value) / 1024


def peak_rss_mib(pid: int) -> float:
    """The most resident memory the process ever had, MiB (``VmHWM``)."""
    value = _status(pid).get("VmHWM", "0 kB").split()[0]
    return int(value) / 1024


def threads(pid: int) -> int:
    """Threads of one process."""
    return int(_status(pid).get("Threads", "0"))


def open_files(pid: int) -> int:
    """Open file descriptors of one process (sockets and pipes included)."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def children(pid: int) -> list[int]:
    """Every process below ``pid`` (children, their children, ...)."""
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                kids = pathlib.Path(f"/proc/{parent}/task/{task}/children").read_text().split()
            except OSError:
                continue
            for kid in kids:
                found.append(int(kid))
                todo.append(int(kid))
    return found


def cmdline(pid: int) -> str:
    try:
        return pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def dir_bytes(path: str | os.PathLike[str]) -> tuple[int, int]:
    """Bytes and files under a directory."""
    total = files = 0
    for base, _dirs, names in os.walk(path):
        for name in names:
            try:
                total += os.path.getsize(os.path.join(base, name))
                files += 1
            except OSError:
                pass
    return total, files


def save(curve: str, data: dict[str, Any], load: LoadSampler | None = None) -> pathlib.Path:
    """``docs/scale/<curve>.json``: ``data`` with the machine, the load, the date and the command."""
    OUT.mkdir(parents=True, exist_ok=True)
    record = {
        "curve": curve,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "command": " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]]),
        "machine": machine(),
        "load": load.summary() if load is not None else None,
        **data,
    }
    path = OUT / f"{curve}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"saved {os.path.relpath(path, ROOT)}")
    return path


def load_record(curve: str) -> dict[str, Any]:
    return json.loads((OUT / f"{curve}.json").read_text())


def figure(title: str, record: dict[str, Any], *, panels: int = 1, width: float = 6.4):
    """A matplotlib figure of ``panels`` side by side, captioned with the machine, load and date."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, panels, figsize=(width * panels, 4.2), squeeze=False)
    m, load = record["machine"], record.get("load") or {}
    caption = f"{record['date']}, {m['cpus']} CPUs, {m['memory_gib']} GiB" + (
        f", load average {load['min']}-{load['max']}" if load else ""
    )
    fig.suptitle(title, fontsize=11)
    fig.text(0.99, 0.01, caption, ha="right", va="bottom", fontsize=7, color="0.4")
    return fig, list(axes[0])


def plain_ticks(ax) -> None:  # type: ignore[no-untyped-def]
    """Tick labels as plain numbers (1, 10, 0.5), not powers of ten, on a log-scaled axis."""
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda v, _pos: f"{v:g}")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(FuncFormatter(lambda _v, _pos: ""))


def finish(fig, curve: str) -> pathlib.Path:  # type: ignore[no-untyped-def]
    """Save the figure as ``docs/scale/<curve>.png`` and close it."""
    import matplotlib.pyplot as plt

    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{curve}.png"
    fig.tight_layout(rect=(0, 0.03, 1, 0.95))
    fig.savefig(path, dpi=90)
    plt.close(fig)
    print(f"drew {os.path.relpath(path, ROOT)}")
    return path


def stamp() -> float:
    """Seconds since the epoch, for time series."""
    return time.time()
