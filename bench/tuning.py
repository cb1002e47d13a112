"""What tuning adds per configuration, against what planning a plain trial costs (issue 30).

    .venv/bin/python bench/tuning.py [--budget 64] [--batch 4] [--repeats 5]

A tuned arm's configurations are not stored as proposals: every launch replays the arm's search from the seed
and the stored results (`ablate.planning.search.proposals`). Timed, for an arm of --budget configurations on the issue's
space (train.lr log-uniform, train.weight_decay a list), TPE, results made up:
  replay   one call with every result known (what a relaunch of a finished arm pays), per configuration
  search   one call per round as the search goes (round 0 with nothing known, then after each round), the whole
           search's tuning cost, per configuration
  kept     the same rounds through one `ablate.planning.search.Search` kept in memory (told and asked only what is new)
against, from experiments.yaml's smallest sweep written alone to a temp file:
  sweep    `ablate.planning.plan.plan` of that sweep, per trial
  trial    `plan` of a file holding one trial of it (its base, seed 0)
Wall clock around each call, from outside; one untimed call of each side first; order alternated between repeats
(ABAB, BABA, ...); medians of --repeats.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import yaml
from timing import alternate

from ablate.planning.plan import plan, plan_all
from ablate.planning.search import Search, proposals
from ablate.spec.sweeps import read_sweeps
from ablate.spec.tuning import TuneSpec

ROOT = Path(__file__).resolve().parents[1]
SPACE = {"train.lr": {"log": [1e-4, 3e-3]}, "train.weight_decay": [0.01, 0.05]}


def made_up(i: int) -> float:
    """A validation score for the i-th configuration: varied, so TPE's densities have something to split."""
    return 90.0 + (i * 37 % 23) / 10


def plain_files(folder: Path) -> tuple[str, Path, Path, int]:
    """experiments.yaml's smallest untuned sweep alone in a file, and one trial of it alone in another."""
    smallest = min((p for p in plan_all(ROOT / "experiments.yaml") if p.tuning is None), key=lambda p: len(p.trials))
    source = read_sweeps(ROOT / "experiments.yaml").sweeps[smallest.sweep].sweep
    body = {**source.spec.model_dump(exclude_defaults=True), "base": source.base}
    sweep, one = folder / "sweep.yaml", folder / "one.yaml"
    sweep.write_text(yaml.safe_dump({"sweeps": {smallest.sweep: body}}))
    one.write_text(yaml.safe_dump({"sweeps": {smallest.sweep: {"base": source.base, "seeds": [0]}}}))
    return smallest.sweep, sweep, one, len(smallest.trials)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=int, default=64)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=5, help="timed runs of each side; the median is reported")
    args = ap.parse_args()
    spec = TuneSpec.model_validate({"space": SPACE, "budget": args.budget, "batch": args.batch, "metric": "val.top1"})
    results = [made_up(i) for i in range(args.budget)]
    rounds = range(0, args.budget, args.batch)
    with tempfile.TemporaryDirectory() as d:
        name, sweep_file, one_file, n = plain_files(Path(d))
        assert len(plan(one_file).trials) == 1 and len(plan(sweep_file).trials) == n
        sides = {
            "replay": lambda: proposals(spec, results),
            "search": lambda: [proposals(spec, results[:k]) for k in rounds],
            "kept": lambda: [kept.advance(results[:k]) for kept in [Search(spec)] for k in rounds],
            "sweep": lambda: plan(sweep_file),
            "trial": lambda: plan(one_file),
        }
        for side in sides.values():  # the same warm-up for every side
            side()
        times = {k: statistics.median(v) for k, v in alternate(sides, args.repeats).items()}
    per = {"replay": args.budget, "search": args.budget, "kept": args.budget, "sweep": n, "trial": 1}
    ms = {k: times[k] / per[k] * 1e3 for k in times}
    print(f"tuning, budget {args.budget}, batch {args.batch}, TPE: replay {ms['replay']:.2f} ms/configuration; "
          f"whole search ({len(rounds)} calls) {ms['search']:.2f} ms/configuration replayed, {ms['kept']:.2f} kept "
          "in memory")  # fmt: skip
    print(f"planning, sweep {name} ({n} trials) alone: {ms['sweep']:.2f} ms/trial; one trial: {ms['trial']:.2f} ms")
    ratios = {base: ", ".join(f"{k} {ms[k] / ms[base]:.2f}" for k in ("replay", "search", "kept")) for base in per}
    print(f"medians of {args.repeats}, order alternated; ratios to planning one trial: {ratios['trial']}; to the "
          f"sweep's planning per trial: {ratios['sweep']}")  # fmt: skip


if __name__ == "__main__":
    main()
