#!/usr/bin/env python3
"""Executors: a read on one and on two executors of a Spark cluster, both brokers, and the model
that carries the measured constants to N executors.

    sudo PYSPARK_PYTHON=$PWD/.venv/bin/python .venv/bin/python bench/scale_executors.py [--mib 256] [--rounds 3]
        [--brokers embedded,gazette]

Root is needed (network namespaces). For each broker, bench/bench_cluster.py runs the cluster
tier's set-up (a standalone master and two workers on hosts of their own, one core and 1 GiB
each, executors on a virtualenv with the project's wheel; the journal's ZSTANDARD fragments on a
file store every host mounts) and times a raw and a typed read on one executor and on two,
interleaved, best of ``--rounds``, with the CPU seconds of every process.

The model. One executor alone is the critical path of a read: its wall time ``t1`` is its CPU
seconds ``E`` plus what no executor does (driver planning and scheduling, the answer). The
first broker's journal is also read in ``--coarse-fragment-mib`` fragments (the same bytes in
fewer tasks), and the two one-executor runs of each query give, per task and per byte:

- ``a``: an executor's CPU seconds per task (opening a fragment, a task's set-up), and
  ``r``: the bytes it reads per further CPU second, from ``E = a * k + B / r`` of the two runs;
- ``d``: the driver's CPU seconds per task, from the driver's CPU of the two runs;
- ``s0``: the rest of the serial time, ``t1 - E - d * k``, floored at 0.

A read of ``B`` bytes in ``k`` tasks on N executors of one core each then takes
``T(N) = p + s0 + d * k + (a + B / k / r) * ceil(k / N)``, ``p`` the planning time (the
fragments and journals curves give it for a job's shape; ``--plan-s`` for the predicted job).
Each broker's measured points are drawn with this model of its own run (``a`` and ``d`` from
the first broker's pair: they are Spark's and the connector's costs, not the broker's), and a
job of ``--predict-gb`` in 128 MiB tasks is predicted from 1 to 64 executors. This 2-vCPU
machine cannot give two executors and a driver a whole core each, so its two-executor figures
sit above the model: that is the bound they show.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import scalelib  # noqa: E402

CURVE = "executors"
BROKERS = {"embedded": "embedded broker", "gazette": "real Gazette v0.103.0"}


def one_executor(run: dict, query: str) -> dict:
    """``query``'s one-executor figures of a bench_cluster run: wall time, executor and driver CPU."""
    t1 = next(b["seconds"] for b in run["best"] if b["query"] == query and b["executors"] == 1)
    cpu = next(c for c in run["cpu"] if c["query"] == query and c["executors"] == 1)
    executor = sum(v for k, v in cpu.items() if k.startswith("w") and (" executor JVM" in k or " python" in k))
    driver = sum(v for k, v in cpu.items() if k.startswith("driver"))
    return {"t1": t1, "E": executor, "driver": driver, "B": run["bytes"], "k": run["fragments"]}


def derive(record: dict) -> dict:
    """The model's constants, by broker and query, from the saved runs (module docstring)."""
    runs = record["runs"]
    fine = next(b for b in runs if "MiB fragments" not in b)
    coarse = next(b for b in runs if "MiB fragments" in b)
    out: dict = {}
    for q in ("raw", "typed"):
        f, c = one_executor(runs[fine], q), one_executor(runs[coarse], q)
        dk = f["k"] - c["k"]
        # E = a*k + B/r for both runs: two equations in a and 1/r.
        inv_r = (f["E"] * c["k"] - c["E"] * f["k"]) / (f["B"] * c["k"] - c["B"] * f["k"])
        a = (f["E"] - f["B"] * inv_r) / f["k"]
        if a < 0 or inv_r <= 0:  # noise: fall back to bytes alone
            a, inv_r = 0.0, f["E"] / f["B"]
        d = max(0.0, (f["driver"] - c["driver"]) / dk)
        for broker, run in runs.items():
            if "MiB fragments" in broker:
                continue
            m = one_executor(run, q)
            # This broker's own bytes per CPU second beyond the tasks' cost.
            r = m["B"] / max(1e-9, m["E"] - a * m["k"])
            out.setdefault(broker, {})[q] = {
                "t1": m["t1"],
                "executor_cpu": m["E"],
                "driver_cpu": m["driver"],
                "tasks": m["k"],
                "bytes": m["B"],
                "a_s_per_task": a,
                "r_mb_per_cpu_s": r / 1e6,
                "d_s_per_task": d,
                "s0": max(0.0, m["t1"] - m["E"] - d * m["k"]),
            }
    return out


def predict(m: dict, nbytes: float, tasks: int, executors: int, plan_s: float = 0.0) -> float:
    """``T(N)`` of the module docstring for ``nbytes`` in ``tasks`` on ``executors``."""
    per_task = m["a_s_per_task"] + nbytes / tasks / (m["r_mb_per_cpu_s"] * 1e6)
    return plan_s + m["s0"] + m["d_s_per_task"] * tasks + per_task * math.ceil(tasks / executors)


def prediction(record: dict, gb: float, plan_s: float, task_mib: int = 128) -> dict:
    """A job of ``gb`` GB in ``task_mib`` MiB tasks, from 1 to 64 executors, on real Gazette's
    constants (the first broker's without it)."""
    models = derive(record)
    base = models.get("gazette") or next(iter(models.values()))
    tasks = math.ceil(gb * 1e9 / (task_mib << 20))
    out: dict = {"gb": gb, "task_mib": task_mib, "tasks": tasks, "plan_s": plan_s}
    for q, m in base.items():
        out[q] = [
            {"executors": n, "seconds": predict(m, gb * 1e9, tasks, n, plan_s)} for n in (1, 2, 4, 8, 16, 32, 50, 64)
        ]
    return out


def draw(record: dict) -> None:
    fig, (ax_m, ax_p) = scalelib.figure("Executors: measured on 1 and 2, and the model to N", record, panels=2)
    ns = [1, 2, 4, 8, 16, 32, 50, 64]
    models = derive(record)
    colour = 0
    for broker, run in record["runs"].items():
        if "MiB fragments" in broker:
            continue
        for query, marker in (("raw", "o"), ("typed", "s")):
            m = models[broker][query]
            pts = sorted((b["executors"], b["seconds"]) for b in run["best"] if b["query"] == query)
            label = f"{query}, {BROKERS.get(broker, broker)}"
            c = f"C{colour}"
            colour += 1
            ax_m.plot([p[0] for p in pts], [p[1] for p in pts], marker, color=c, label=f"measured: {label}")
            ax_m.plot(
                ns,
                [predict(m, run["bytes"], m["tasks"], n) for n in ns],
                "--",
                color=c,
                lw=0.8,
                label=f"model: {label}",
            )
    ax_m.set_title(f"the bench's journal ({next(iter(record['runs'].values()))['bytes'] / 1e6:.0f} MB)", fontsize=9)
    big = prediction(record, record["prediction"]["gb"], record["prediction"]["plan_s"])
    for query in ("raw", "typed"):
        ax_p.plot(ns, [p["seconds"] for p in big[query]], "o-", label=f"{query}")
    ax_p.set_title(
        f"predicted: {big['gb']:.0f} GB in {big['tasks']} tasks of {big['task_mib']} MiB, planning {big['plan_s']:.1f} s",
        fontsize=9,
    )
    for ax in (ax_m, ax_p):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("executors (one core each)")
        ax.set_ylabel("seconds")
        ax.legend(fontsize=6)
        ax.grid(True, which="both", lw=0.3)
        ax.set_xticks(ns)
        scalelib.plain_ticks(ax)
    ax_m.set_yticks([0.5, 1, 2, 4, 8])
    ax_p.set_yticks([10, 20, 50, 100, 200, 500, 1000, 2000])
    scalelib.finish(fig, CURVE)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mib", type=int, default=256)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--brokers", default="embedded,gazette")
    p.add_argument("--fragment-mib", type=int, default=4, help="fragment length (a task each)")
    p.add_argument(
        "--coarse-fragment-mib", type=int, default=16, help="again on the first broker: the driver's cost per task"
    )
    p.add_argument("--predict-gb", type=float, default=100, help="the predicted job's size")
    p.add_argument("--plan-s", type=float, default=1.0, help="the predicted job's planning time (docs/scale.md)")
    args = p.parse_args()
    runs: dict[str, dict] = {}
    with scalelib.LoadSampler() as load, tempfile.TemporaryDirectory(prefix="scale-executors-") as tmp:
        cases = [(b, args.fragment_mib) for b in args.brokers.split(",")]
        cases.append((cases[0][0], args.coarse_fragment_mib))
        for broker, fragment_mib in cases:
            out = os.path.join(tmp, f"{broker}-{fragment_mib}.json")
            cmd = [sys.executable, os.path.join(HERE, "bench_cluster.py"), "--mib", str(args.mib)]
            cmd += ["--rounds", str(args.rounds), "--broker", broker, "--fragment-mib", str(fragment_mib)]
            print("$", " ".join([*cmd, "--save", out]), flush=True)
            subprocess.run([*cmd, "--save", out], check=True)
            with open(out) as f:
                key = broker if fragment_mib == args.fragment_mib else f"{broker}, {fragment_mib} MiB fragments"
                runs[key] = json.load(f)
    record = {"runs": runs}
    models = derive(record)
    predicted = prediction(record, args.predict_gb, args.plan_s)
    print(json.dumps(models, indent=1))
    for q in ("raw", "typed"):
        at50 = next(p["seconds"] for p in predicted[q] if p["executors"] == 50)
        print(f"predicted {args.predict_gb:.0f} GB {q} read on 50 executors: {at50:.0f} s")
    path = scalelib.save(CURVE, {"runs": runs, "models": models, "prediction": predicted}, load)
    draw(json.loads(path.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
