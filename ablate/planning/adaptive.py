"""Adaptive seeding: more seeds only for the cells whose comparison with the baseline is still undecided.

A sweep with `seeds: {min: 6, max: 10, threshold: 0.5}` plans seeds 0..min-1 of every cell. After they are
done, `grow` judges each cell against the baseline and plans the next look's seeds for the undecided ones
(and for the baseline, which every comparison pairs with), until every cell is decided or has `max` seeds.
Seed k of a cell is always the same trial, so relaunching replays the same decisions from the store. It judges
cells against the baseline only: an effect or interaction of a factorial is not its target (the Findings advise
a plain seed count for those, `ablate.reporting.advice`).

The procedure (`procedure`, printed in reports): a group-sequential design with `looks` analyses at seed
counts n_1 = min < ... < n_L = max (evenly spaced), and a Lan-DeMets alpha spending function of the
information fraction t = n / max: Pocock-type alpha ln(1 + (e - 1) t) (the default: it spends early, so a
clear difference stops at `min`) or O'Brien-Fleming-type 2 - 2 Phi(z_{1-alpha/2} / sqrt(t)). At look j, with
a_j = alpha(t_j) - alpha(t_{j-1}), a cell's n per-seed differences to the baseline (a seed's value is the mean
over its folds or splits) get the interval of the small-sample policy (`ablate.evidence`) at level 1 - a_j: from
SMALL_N the t interval mean +- t_{1-a_j/2, n-1} s / sqrt(n), from EXACT_N the interval that inverts the exact
sign-flip test (`evidence.sign_flip`; none where its smallest p, 2 / 2^n, cannot reach a_j: the cell waits for
the next look), never below EXACT_N pairs (the schema's `min` floor; a look below it, in a policy recorded before
that floor, is not judged). The a_j sum to alpha, so (Bonferroni over the looks) every interval a cell ever shows
holds at once with probability at least 1 - alpha: stopping when an interval clears the threshold keeps the
error rate of each cell's decision at most alpha, however many looks it took (tests/planning/test_adaptive.py
simulates it). The cells are not adjusted for one another: alpha is per cell, not per sweep.

A cell is decided when its interval lies wholly above +threshold (higher), wholly below -threshold
(lower), or wholly inside [-threshold, +threshold] (equivalent: any difference is smaller than matters).
Only where the small-sample policy finds a spread to build an interval from (`ablate.evidence.estimable`):
differences that are all the same (two seeds 0.9 and 0.9) have no interval, never one of zero width, and the
cell stays undecided and gets the next look's seeds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from scipy import special

from ablate import evidence
from ablate.planning.chooser import Chosen
from ablate.spec.schema import AdaptiveSeeds

if TYPE_CHECKING:
    from ablate.planning.plan import Plan
    from ablate.store import Store


def procedure(policy: AdaptiveSeeds) -> str:
    """The design in one paragraph, for reports."""
    looks = judged(policy)
    kind = "Pocock" if policy.spending == "pocock" else "O'Brien-Fleming"
    return (f"Adaptive seeds: a group-sequential design with {len(looks)} looks (at {', '.join(map(str, looks))} "
            f"seeds) and {kind}-type Lan-DeMets alpha spending. At each look a cell's paired difference to the "
            f"baseline gets the small-sample policy's interval at the alpha that look spends (the exact sign-flip "
            f"test's below {evidence.SMALL_N} seeds, the t's from {evidence.SMALL_N}, none below "
            f"{evidence.EXACT_N}); the cell stops when it lies wholly above +{policy.threshold:g}, below "
            f"-{policy.threshold:g} or inside +-{policy.threshold:g} (the practical threshold), else it gets the "
            f"next look's seeds, up to {policy.max}. The looks' alphas sum to {policy.alpha:g}, so each cell's "
            f"decision errs with probability at most {policy.alpha:g} however many looks it took (per cell: the "
            f"cells are not adjusted for one another).")  # fmt: skip


HIGHER, LOWER, EQUIVALENT, UNDECIDED, WAITING = "higher", "lower", "equivalent", "undecided", "waiting"


def schedule(policy: AdaptiveSeeds) -> list[int]:
    """Seed counts at which seeds are added: `looks` counts from min to max, evenly spaced."""
    count = min(policy.looks, policy.max - policy.min + 1)
    return sorted({round(x) for x in np.linspace(policy.min, policy.max, count)})


def judged(policy: AdaptiveSeeds) -> list[int]:
    """The looks at which cells are judged: the schedule's from EXACT_N pairs (all of them, since the schema's
    `min` floor; a policy recorded before it may have earlier ones)."""
    return [n for n in schedule(policy) if n >= evidence.EXACT_N]


def spent(policy: AdaptiveSeeds, t: float) -> float:
    """Alpha spent by information fraction `t` (0 < t <= 1) under the policy's spending function."""
    if policy.spending == "pocock":
        return policy.alpha * math.log(1 + (math.e - 1) * t)
    return float(2 - 2 * special.ndtr(special.ndtri(1 - policy.alpha / 2) / math.sqrt(t)))


def spending(policy: AdaptiveSeeds) -> list[float]:
    """The alpha each look may spend; they sum to `policy.alpha`."""
    return list(np.diff([0.0, *(spent(policy, n / policy.max) for n in schedule(policy))]))


@dataclass(frozen=True)
class Verdict:
    """One cell's standing against the baseline at its latest look."""

    seeds: int
    """Seeds both the cell and the baseline have done (the pairs judged)."""
    decision: str
    """higher, lower, equivalent, undecided (more seeds wanted or max reached) or waiting (look not reached)."""
    mean: float = math.nan
    lo: float = math.nan
    hi: float = math.nan
    level: float = math.nan
    """Confidence of the interval (1 - the look's spent alpha)."""
    why: str = ""
    """Why an undecided cell has no interval (`ablate.evidence.why`), empty where it has one."""

    @property
    def reason(self) -> str:
        """Why the cell has the seeds it has, in words for the report."""
        if self.decision == WAITING:
            return f"{self.seeds} paired seeds: first look not reached"
        if self.why:
            return f"undecided: no interval ({self.why})"
        where = f"[{self.lo:+.3g}, {self.hi:+.3g}] at {self.level:.2%}"
        return {HIGHER: f"higher: {where} above the threshold", LOWER: f"lower: {where} below the threshold",
                EQUIVALENT: f"equivalent: {where} inside the threshold",
                UNDECIDED: f"undecided: {where} straddles the threshold"}[self.decision]  # fmt: skip


def judge(diffs: np.ndarray, policy: AdaptiveSeeds) -> list[Verdict]:
    """Verdict per row of `diffs` (cell x seed, differences to the baseline, NaN where a seed is missing):
    judged at the latest look its count of paired seeds reaches, by the small-sample policy at that look's
    spent alpha."""
    looks, alphas = schedule(policy), spending(policy)
    out = []
    for row in np.atleast_2d(np.asarray(diffs, dtype=float)):
        d = row[~np.isnan(row)]
        reached = [j for j, n in enumerate(looks) if len(d) >= n >= evidence.EXACT_N]
        if not reached:
            out.append(Verdict(len(d), WAITING))
            continue
        j = reached[-1]
        d, level = d[: looks[j]], 1 - alphas[j]  # the look's seeds: later ones are the next look's
        mean = float(d.mean())
        lo, hi, why = interval(d, level)
        if why:
            out.append(Verdict(len(d), UNDECIDED, mean, level=level, why=why))
            continue
        t = policy.threshold
        decision = HIGHER if lo > t else LOWER if hi < -t else EQUIVALENT if -t <= lo and hi <= t else UNDECIDED
        out.append(Verdict(len(d), decision, mean, lo, hi, level))
    return out


def interval(d: np.ndarray, level: float) -> tuple[float, float, str]:
    """(lo, hi, why): the small-sample policy's interval of n >= EXACT_N paired differences at `level` (t from
    SMALL_N, the sign-flip test's inversion below), or NaN and why there is none."""
    if not evidence.estimable(d):
        return math.nan, math.nan, evidence.why(len(d), len(d) - 1, False, True, "seed")
    if len(d) >= evidence.SMALL_N:
        mean, se = float(d.mean()), float(d.std(ddof=1) / math.sqrt(len(d)))
        half = float(special.stdtrit(len(d) - 1, 0.5 + level / 2)) * se
        return mean - half, mean + half, ""
    _, lo, hi = evidence.sign_flip(d, level)
    if math.isnan(lo):
        return (
            lo,
            hi,
            f"{len(d)} seeds: the sign-flip test's smallest p, {2 / 2 ** len(d):.3g}, cannot reach {1 - level:.3g}",
        )
    return lo, hi, ""


def from_trials(frame: pd.DataFrame, baseline: str, metric: str, policy: AdaptiveSeeds) -> dict[str, Verdict]:
    """Each non-baseline variant's verdict from a trials frame (`Store.trials_frame`: variant, seed, state,
    the metric), judged on its done trials; a seed's value is the mean over its folds or splits."""
    variants = list(dict.fromkeys(frame["variant"]))
    if metric not in frame or baseline not in variants:
        return {v: Verdict(0, WAITING) for v in variants if v != baseline}
    done = frame[(frame["state"] == "done") & frame[metric].notna() & (frame["seed"] < policy.max)]
    means = done.astype({metric: float}).groupby(["variant", "seed"])[metric].mean()
    grid = np.full((len(variants), policy.max), np.nan)
    for (variant, seed), value in means.items():
        grid[variants.index(variant), int(seed)] = value
    base = grid[variants.index(baseline)]
    others = [v for v in variants if v != baseline]
    diffs = np.array([grid[variants.index(v)] - base for v in others]).reshape(len(others), policy.max)
    return dict(zip(others, judge(diffs, policy)))


def grow(plan: Plan, store: Store) -> Plan:
    """The plan with the next look's seeds added for every undecided cell (and the baseline), judged on the
    store's results; the same plan when no cell wants more."""
    if plan.adaptive is None:
        return plan
    assert plan.baseline is not None  # the planner refuses adaptive seeds without one
    keys = {t.key for t in plan.trials}
    frame = store.trials_frame(plan.sweep)
    verdicts = from_trials(frame[frame["key"].isin(keys)], plan.baseline, plan.metric, plan.adaptive)
    looks = schedule(plan.adaptive)
    want: dict[str, int] = {}
    for variant, verdict in verdicts.items():
        if verdict.decision == UNDECIDED and (later := [n for n in looks if n > verdict.seeds]):
            want[variant] = later[0]
    if not want:
        return plan
    want[plan.baseline] = max(want.values())
    new = [t for t in plan.reserve if t.config.seed < want.get(t.variant, 0)]
    if not new:
        return plan
    added = {t.key for t in new}
    return replace(plan, trials=plan.trials + new, reserve=[t for t in plan.reserve if t.key not in added])


class Adaptive:
    """A sweep with adaptive seeds as a chooser (`ablate.planning.chooser.Chooser`): first the seeds every cell
    runs, then after each round the next look's seeds of the cells still undecided (`grow`)."""

    def __init__(self, plan: Plan) -> None:
        self.planned = plan
        self.plan = plan
        """The plan as far as it grew (a tuned sweep sets it to its arms at their best, `ablate.planning.tuning`)."""

    def first(self, store: Store | None) -> Chosen:
        self.plan = self.planned
        return Chosen([self.plan])

    def grow(self, store: Store) -> Chosen:
        before = len(self.plan.trials)
        self.plan = grow(self.plan, store)
        more = len(self.plan.trials) - before
        return Chosen([self.plan], [f"adaptive seeds: {more} more trials for cells still undecided"] if more else [])


__all__ = [
    "Adaptive",
    "Verdict",
    "from_trials",
    "grow",
    "interval",
    "judge",
    "judged",
    "procedure",
    "schedule",
    "spending",
    "spent",
]
