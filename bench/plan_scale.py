"""How fast a large grid plans: seconds to load, validate and expand N trials (default ~10k).

    .venv/bin/python bench/plan_scale.py [--seeds 17] [--repeats 3]     # --seeds 170: 102,000 trials

Prints the time per trial of the full path (`ablate.plan`: read, check and expand) against the time of just
validating one TrialConfig per trial (the planned trials' configs, dumped beforehand), the floor any
pydantic-based planner pays. Wall clock around each whole call, from outside; the same warm-up for both
(one untimed call of each); order alternated between repeats (ABAB, BABA, ...); medians of --repeats.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
from pathlib import Path

import yaml
from timing import alternate

from ablate.config import TrialConfig
from ablate.planner import plan

GRID = {
    "attention.tau": [True, False],
    "attention.mu": [True, False],
    "attention.kappa_pub": ["unit", "head", "off"],
    "attention.kappa_priv": [True, False],
    "attention.beta": [0.1, 0.25, 0.5, 1.0, 2.0],
    "train.lr": [1e-3, 2e-3, 3e-3, 4e-3, 5e-3],
}
BASE = {"model": {"backbone": "vit", "embed_dim": 32, "depths": [2], "num_heads": [2]}, "attention": {"kind": "csan"}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=17)
    ap.add_argument("--repeats", type=int, default=3, help="timed runs of each side; the median is reported")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "big.yaml"
        f.write_text(yaml.safe_dump({"sweeps": {"big": {"base": BASE, "grid": GRID, "seeds": args.seeds}}}))
        dumped = [
            t.config.model_dump() for t in plan(f, "big", max_trials=10**8).trials
        ]  # also the warm-up of the plan side
        sides = {
            "plan": lambda: plan(f, "big", max_trials=10**8),
            "floor": lambda: [TrialConfig.model_validate(c) for c in dumped],
        }
        sides["floor"]()  # the same warm-up for the floor
        gc.freeze()  # the floor's inputs stay out of the collector's passes, which would tax the plan side
        times = alternate(sides, args.repeats)
    n = len(dumped)
    full, floor = statistics.median(times["plan"]), statistics.median(times["floor"])
    print(
        f"trials {n}: plan {full:.2f} s ({full / n * 1e6:.0f} us/trial); one validation per trial {floor:.2f} s; "
        f"medians of {args.repeats}, order alternated; ratio {full / floor:.2f}"
    )


if __name__ == "__main__":
    main()
