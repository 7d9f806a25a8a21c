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

From the one-executor run of each query the model takes:

- ``r``: bytes an executor reads per CPU second (its JVM and Python workers together);
- ``s``: the part of the wall time no executor spends reading (driver planning, task scheduling,
  the answer), ``t1 - bytes / r`` floored at 0;
- ``k``: the tasks (the planned partitions: here one per fragment);
- ``d``: the driver's CPU seconds (its JVM and Python) per task.

and predicts ``T(N) = s + (bytes / r / k) * ceil(k / N)`` for N executors of one core each
(a whole core each, which this 2-vCPU machine cannot give two executors and a driver at once:
its two-executor figure is drawn beside the prediction to show that bound). A larger job of
``--predict-gb`` in 128 MiB tasks is predicted the same way with ``s`` = ``--plan-s`` (the
planning time docs/scale.md's fragments and journals curves give for its shape) + ``d`` times
its tasks; ``d`` comes from the first broker run again with ``--coarse-fragment-mib``
fragments (fewer tasks, same bytes): the driver's CPU difference over the tasks' difference.
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


def model(run: dict, query: str) -> dict:
    """The constants of ``query``'s one-executor run and the prediction's parameters."""
    t1 = next(b["seconds"] for b in run["best"] if b["query"] == query and b["executors"] == 1)
    cpu = next(c for c in run["cpu"] if c["query"] == query and c["executors"] == 1)
    executor_cpu = sum(v for k, v in cpu.items() if k.startswith("w") and (" executor JVM" in k or " python" in k))
    driver_cpu = sum(v for k, v in cpu.items() if k.startswith("driver"))
    r = run["bytes"] / executor_cpu if executor_cpu else float("inf")
    s = max(0.0, t1 - run["bytes"] / r)
    return {
        "t1": t1,
        "executor_cpu": executor_cpu,
        "driver_cpu": driver_cpu,
        "r_mb_per_cpu_s": r / 1e6,
        "s": s,
        "tasks": run["fragments"],
    }


def predict(m: dict, nbytes: float, executors: int, tasks: int | None = None, s: float | None = None) -> float:
    k = tasks or m["tasks"]
    serial = m["s"] if s is None else s
    return serial + nbytes / (m["r_mb_per_cpu_s"] * 1e6) / k * math.ceil(k / executors)


def draw(record: dict) -> None:
    fig, (ax_m, ax_p) = scalelib.figure("Executors: measured on 1 and 2, and the model to N", record, panels=2)
    ns = [1, 2, 4, 8, 16, 32, 50, 64]
    for broker, run in record["runs"].items():
        if "MiB fragments" in broker:
            continue
        for query, marker in (("raw", "o"), ("typed", "s")):
            m = record["models"][broker][query]
            pts = sorted((b["executors"], b["seconds"]) for b in run["best"] if b["query"] == query)
            label = f"{query}, {BROKERS.get(broker, broker)}"
            ax_m.plot([p[0] for p in pts], [p[1] for p in pts], marker, label=f"measured: {label}")
            ax_m.plot(ns, [predict(m, run["bytes"], n) for n in ns], "--", lw=0.8, label=f"model: {label}")
    ax_m.set_title(f"the bench's journal ({next(iter(record['runs'].values()))['bytes'] / 1e6:.0f} MB)", fontsize=9)
    big = record["prediction"]
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
        scalelib.plain_ticks(ax)
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
    models = {b: {q: model(run, q) for q in ("raw", "typed")} for b, run in runs.items()}
    # The driver's CPU per task: the same bytes in fewer, larger fragments (tasks) on the first broker.
    fine, coarse = cases[0][0], f"{cases[0][0]}, {args.coarse_fragment_mib} MiB fragments"
    per_task = {}
    for q in ("raw", "typed"):
        a, b = models[fine][q], models[coarse][q]
        per_task[q] = max(0.0, (a["driver_cpu"] - b["driver_cpu"]) / (a["tasks"] - b["tasks"]))
    # The prediction: a job of --predict-gb in 128 MiB tasks (Spark's maxPartitionBytes). Its serial
    # part: the planning time given, the fixed part of the bench's serial time (query set-up,
    # the answer) and the driver's CPU per task times its tasks.
    base = models.get("gazette") or models[fine]
    task_mib = 128
    tasks = math.ceil(args.predict_gb * 1e9 / (task_mib << 20))
    prediction: dict = {"gb": args.predict_gb, "task_mib": task_mib, "tasks": tasks, "plan_s": args.plan_s}
    for q, m in base.items():
        fixed = max(0.0, m["s"] - per_task[q] * m["tasks"])
        serial = args.plan_s + fixed + per_task[q] * tasks
        prediction[q] = [
            {"executors": n, "seconds": predict(m, args.predict_gb * 1e9, n, tasks=tasks, s=serial)}
            for n in (1, 2, 4, 8, 16, 32, 50, 64)
        ]
        prediction[f"{q}_serial_s"] = serial
        prediction[f"{q}_fixed_s"] = fixed
        prediction[f"{q}_driver_cpu_per_task_s"] = per_task[q]
    print(json.dumps(models, indent=1))
    for q in ("raw", "typed"):
        at50 = next(p["seconds"] for p in prediction[q] if p["executors"] == 50)
        print(f"predicted {args.predict_gb:.0f} GB {q} read on 50 executors: {at50:.0f} s")
    path = scalelib.save(CURVE, {"runs": runs, "models": models, "prediction": prediction}, load)
    draw(json.loads(path.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
