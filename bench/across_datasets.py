"""What the Across datasets section costs a report: seconds of its parts on a sweep shaped like syn-mil, and of the
check a sweep on one dataset pays instead.

    .venv/bin/python bench/across_datasets.py [--repeats 5]

Generates, in a temporary store, the syn-mil grid (5 MIL datasets x I in -3, -1, 0, 1, 3 x 5 repeats x 10 folds =
1,250 trials, synthetic results) and the same grid on Musk1 alone (250 trials). Times, on the loaded sweeps
(`alternate`: order alternated, medians of --repeats): the section with its profile plot, without it (tables
only, as for `--format tex`), the five arms' IQM intervals alone (the bootstrap), the Findings' line from them, the
whole Markdown report of the five-dataset sweep for scale, and `across_datasets.report` on the one-dataset sweep
(the skip).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import yaml
from timing import alternate, medians

from ablate.evidence import aggregates
from ablate.planning.plan import plan
from ablate.reporting import across_datasets, frames, report
from ablate.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the synthetic-store filler
from synthetic import fill

NAMES = ["musk1", "musk2", "elephant", "fox", "tiger"]
LEVEL = dict(zip(NAMES, (0.88, 0.84, 0.86, 0.62, 0.80)))


def auc(t) -> float:
    c = t.config
    wiggle = ((c.data.split_seed * 7 + c.data.fold * 3 + c.attention.steps) % 11 - 5) / 250
    return LEVEL[c.data.name] + 0.01 * c.attention.steps + wiggle


def sweep(names: list[str]) -> dict:
    return {"base": {"task": "mil", "data": {"name": names[0], "folds": 10}, "model": {"size": "synpool"},
                     "attention": {"kind": "syn"}, "train": {"epochs": 1, "batch_size": 1}},
            "grid": {"data.name": names, "attention.steps": [-3, -1, 0, 1, 3], "data.split_seed": [0, 1, 2, 3, 4],
                     "data.fold": list(range(10))},
            "baseline": {"attention.steps": 0}}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "e.yaml"
        spec.write_text(yaml.safe_dump({"sweeps": {"five": sweep(NAMES), "one": sweep(NAMES[:1])}}, sort_keys=False))
        with Store(f"sqlite:///{Path(tmp) / 'r.sqlite'}") as store:
            for name in ("five", "one"):
                fill(store, plan(spec, name), auc)
            five, one = frames.load(store, "five"), frames.load(store, "one")
            found = across_datasets.datasets(five)
            assert found is not None and across_datasets.datasets(one) is None
            estimates = [aggregates.aggregate(a.scores) for a in found.arms]
            sides = {
                "section with profile plot": lambda: across_datasets.report(five),
                "section, tables only": lambda: across_datasets.report(five, draw=False),
                "IQM intervals (bootstrap)": lambda: [aggregates.aggregate(a.scores) for a in found.arms],
                "Findings line (given IQMs)": lambda: across_datasets.finding(found, estimates),
                "whole report (md)": lambda: report("five", store=store, out=Path(tmp) / "rep", formats=["md"]),
                "one dataset: the skip": lambda: across_datasets.report(one),
            }
            for side in sides.values():  # the same warm-up for every side
                side()
            times = medians(alternate(sides, args.repeats))
    print(f"{len(five.trials)} trials, {len(found.arms)} arms x {len(found.names)} datasets; "
          f"load average {os.getloadavg()[0]:.1f}; medians of {args.repeats}")  # fmt: skip
    for name, seconds in times.items():
        print(f"  {name:28s} {seconds * 1e3:10.3f} ms")


if __name__ == "__main__":
    main()
