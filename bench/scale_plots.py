#!/usr/bin/env python3
"""Draw every scale curve again from its saved numbers: docs/scale/<curve>.json -> <curve>.png.

    .venv/bin/python bench/scale_plots.py [curve ...]

Each ``bench/scale_*.py`` bench saves its curve's numbers and draws its plot when it runs; this
redraws the plots (after a change to how they are drawn) without measuring again.
"""

from __future__ import annotations

import importlib
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import scalelib  # noqa: E402


def benches() -> dict[str, object]:
    """Every scale bench module, by the curve it draws."""
    out = {}
    for path in sorted(HERE.glob("scale_*.py")):
        if path.stem == "scale_plots":
            continue
        module = importlib.import_module(path.stem)
        out[module.CURVE] = module
    return out


def main() -> int:
    wanted = sys.argv[1:]
    drawn = 0
    for curve, module in benches().items():
        if wanted and curve not in wanted:
            continue
        if not (scalelib.OUT / f"{curve}.json").exists():
            print(f"{curve}: no docs/scale/{curve}.json yet (run bench/{module.__name__}.py)")
            continue
        module.draw(scalelib.load_record(curve))
        drawn += 1
    return 0 if drawn or not wanted else 1


if __name__ == "__main__":
    sys.exit(main())
