"""How stable `report --time`'s relative step time is: the side-by-side timing (`ablate.probe.steptime`) of a
shipped sweep's architectures, repeated, at the trials' own batch and at others, with several round counts.

    .venv/bin/python bench/steptime.py [--sweep cpu] [--runs 3] [--rounds 5 15] [--batch 4]

Each line is one run: the rounds, the batch, and each architecture's step time over the fastest's (the figure the
report prints), by its axis values. A figure that ranks architectures gives the same order in every run at any
load; the spread between runs is what the load leaves in it. `--batch` adds batches to the trials' own.
"""

from __future__ import annotations

import argparse

from ablate.planning.plan import plan
from ablate.probe import steptime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", default="experiments.yaml")
    parser.add_argument("--sweep", default="cpu")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, nargs="+", default=[5, steptime.ROUNDS])
    parser.add_argument("--batch", type=int, nargs="*", default=[4])
    args = parser.parse_args()
    p = plan(args.file, args.sweep)
    configs = {t.variant: t.config for t in p.trials}
    names = {t.variant: ", ".join(f"{k}={v}" for k, v in t.axes.items() if k != "seed") for t in p.trials}
    own = steptime.batch_of(configs)
    print(f"{args.sweep}: {len(set(steptime.architectures(configs).values()))} architectures, trials' batch {own}")
    for batch in dict.fromkeys([own, *args.batch]):
        for rounds in args.rounds:
            for run in range(args.runs):
                rel = steptime.side_by_side(configs, rounds=rounds, batch=batch).relative()
                shown = "  ".join(f"{names[v]} ×{r:.2f}" for v, r in rel.items())
                print(f"batch {batch:4d}  rounds {rounds:3d}  run {run + 1}: {shown}")


if __name__ == "__main__":
    main()
