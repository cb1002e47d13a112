"""Seeds spent by adaptive seeding against a fixed-seed sweep that reaches the same decisions.

Simulated cells whose paired difference to the baseline has a true mean of 0 to 10 seed-noise units (unit
noise, threshold 0.5): the fixed design runs `max` seeds everywhere and judges once at alpha; the adaptive
one (`ablate.planning.adaptive`, default Pocock spending, 3 looks: 6, 8 and 10 seeds) runs `min` and adds seeds
only while undecided.
Prints, per true effect, both designs' mean seeds and decisions, then the overall ratio of seeds spent.

    .venv/bin/python bench/adaptive_seeds.py
"""

from __future__ import annotations

import numpy as np

from ablate.planning.adaptive import UNDECIDED, judge, schedule
from ablate.spec.schema import AdaptiveSeeds

EFFECTS = (0.0, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0)
CELLS = 2000


def adaptive(data: np.ndarray, p: AdaptiveSeeds) -> tuple[np.ndarray, np.ndarray]:
    counts = np.full(len(data), p.min)
    decisions = np.array([UNDECIDED] * len(data), dtype=object)
    for n in schedule(p):
        live = (decisions == UNDECIDED) & (counts <= n)
        counts[live] = n
        shown = np.where(np.arange(p.max)[None, :] < n, data[live], np.nan)
        decisions[live] = [v.decision for v in judge(shown, p)]
    return decisions, counts


def fixed(data: np.ndarray, p: AdaptiveSeeds) -> np.ndarray:
    """One look at max seeds with the whole alpha: the same rule, no sequential spending."""
    one = AdaptiveSeeds(min=p.max - 1, max=p.max, threshold=p.threshold, looks=2, alpha=p.alpha)
    single = np.array([v.decision for v in judge(data, one)], dtype=object)
    return single


def main() -> None:
    rng = np.random.default_rng(0)
    p = AdaptiveSeeds(min=6, max=10, threshold=0.5)
    total_adaptive = total_fixed = agree = both = 0
    print(f"{'effect':>6} {'seeds adaptive':>15} {'seeds fixed':>12}  decisions adaptive | fixed")
    for effect in EFFECTS:
        data = effect + rng.standard_normal((CELLS, p.max))
        dec, seeds = adaptive(data, p)
        ref = fixed(data, p)
        total_adaptive += int(seeds.sum())
        total_fixed += CELLS * p.max
        decided = (dec != UNDECIDED) & (ref != UNDECIDED)
        both += int(decided.sum())
        agree += int((dec[decided] == ref[decided]).sum())

        def share(d: np.ndarray) -> str:
            values, counts = np.unique(d, return_counts=True)
            return ", ".join(f"{v} {c / CELLS:.0%}" for v, c in zip(values, counts))

        print(f"{effect:>6} {seeds.mean():>15.2f} {p.max:>12}  {share(dec)} | {share(ref)}")
    print(f"seeds spent adaptive / fixed: {total_adaptive / total_fixed:.2f}; where both decided, the same decision "
          f"in {agree / max(both, 1):.1%} of {both} cells")  # fmt: skip


if __name__ == "__main__":
    main()
