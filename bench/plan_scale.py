"""How fast a large grid plans: seconds to load, validate and expand N trials (default ~10k).

    .venv/bin/python bench/plan_scale.py [--seeds 17]

Prints the time per trial of the full path (`load_sweeps` + `expand`) against the time of just
validating one TrialConfig per trial, the floor any pydantic-based planner pays.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import yaml

from ablate.config import TrialConfig
from ablate.planner import plan

GRID = {
    "attention.tau": [True, False], "attention.mu": [True, False], "attention.kappa_pub": ["unit", "head", "off"],
    "attention.kappa_priv": [True, False], "attention.beta": [0.1, 0.25, 0.5, 1.0, 2.0], "train.lr": [1e-3, 2e-3, 3e-3, 4e-3, 5e-3],
}
BASE = {"model": {"backbone": "vit", "embed_dim": 32, "depths": [2], "num_heads": [2]}, "attention": {"kind": "csan"}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=17)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "big.yaml"
        f.write_text(yaml.safe_dump({"sweeps": {"big": {"base": BASE, "grid": GRID, "seeds": args.seeds}}}))
        t0 = time.perf_counter()
        p = plan(f, "big")
        full = time.perf_counter() - t0
    n = len(p.trials)
    t0 = time.perf_counter()
    for t in p.trials:
        TrialConfig.model_validate(t.config.model_dump())
    floor = time.perf_counter() - t0
    print(f"trials {n}: plan {full:.2f} s ({full / n * 1e6:.0f} us/trial); one validation per trial {floor:.2f} s; ratio {full / floor:.2f}")


if __name__ == "__main__":
    main()
