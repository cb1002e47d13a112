"""Adaptive seeding: the design's numbers against hand-computed values, its error rate by simulation, and a
real small sweep where a clear difference stops at `min` seeds while a near-tie gets more."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY, write_sweeps
from scipy import stats
from typer.testing import CliRunner

from ablate.cli import app
from ablate.errors import SpecError
from ablate.execution.launcher import RunConfig, launch
from ablate.planning import adaptive
from ablate.planning.plan import plan
from ablate.reporting import report
from ablate.spec.schema import AdaptiveSeeds
from ablate.store import Store


def policy(**kw: object) -> AdaptiveSeeds:
    return AdaptiveSeeds.model_validate({"min": 6, "max": 10, "threshold": 0.2, **kw})


def test_looks_are_evenly_spaced_from_min_to_max() -> None:
    assert adaptive.schedule(policy()) == [6, 8, 10]
    assert adaptive.schedule(policy(looks=4)) == [6, 7, 9, 10]  # linspace 6, 7.33, 8.67, 10
    assert adaptive.schedule(policy(min=6, max=7, looks=5)) == [6, 7]  # no more looks than seed counts


@pytest.mark.parametrize("kind", ["pocock", "obrien-fleming"])
def test_spending_matches_the_lan_demets_functions_by_hand(kind: str) -> None:
    """Hand formulas: Pocock-type 0.05 ln(1 + (e-1) t); O'Brien-Fleming-type erfc(z / sqrt(2 t)) with z the
    0.975 normal quantile; looks at t = 0.6, 0.8, 1.0. The increments sum to alpha."""
    z = 1.959963984540054

    def by_hand(t: float) -> float:
        return 0.05 * math.log(1 + (math.e - 1) * t) if kind == "pocock" else math.erfc(z / math.sqrt(2 * t))

    got = adaptive.spending(policy(spending=kind))
    want = np.diff([0.0, by_hand(0.6), by_hand(0.8), by_hand(1.0)])
    np.testing.assert_allclose(got, want, rtol=1e-9)
    assert sum(got) == pytest.approx(0.05)
    words = adaptive.procedure(policy(spending=kind))
    assert "(at 6, 8, 10 seeds)" in words and "The looks' alphas sum to 0.05, so each cell's decision errs" in words
    if kind == "obrien-fleming":
        assert got[0] == pytest.approx(0.0114, rel=0.01)  # 2 (1 - Phi(1.96 / sqrt(0.6))): little early


def test_judge_decides_by_where_the_repeated_interval_lies() -> None:
    """At the first look (6 seeds, Pocock a_1 = 0.05 ln(1 + 1.718 * 0.6) = 0.0350) the policy's test is the
    exact sign-flip test, whose interval at level 1 - a_1 is the range of the differences (2 / 64 < 0.0350 <
    4 / 64: only the extreme subset means are rejected); at the last look (10 seeds, a_3 = 0.05 - 0.05 ln(1 +
    1.718 * 0.8) = 0.00676) the t interval mean +- t(1 - a_3/2, 9) s / sqrt(10): by hand for the rows below."""
    p = policy()
    a1, a3 = 0.05 * math.log(1 + (math.e - 1) * 0.6), 0.05 - 0.05 * math.log(1 + (math.e - 1) * 0.8)
    rows = np.full((6, 10), np.nan)
    rows[0, :6] = [10.0, 10.5, 9.5, 10.2, 9.8, 10.1]  # clear: [9.5, 10.5] above 0.2
    rows[1, :6] = [-10.0, -10.5, -9.5, -10.2, -9.8, -10.1]  # clear, the other way
    rows[2, :6] = [0.01, -0.01, 0.0, 0.02, -0.02, 0.01]  # tight around 0: inside +-0.2
    rows[3, :6] = [1.0, -1.0, 0.5, 0.2, -0.3, 0.1]  # straddles
    rows[4, :5] = [1.0, 2.0, 1.5, 1.2, 1.1]  # before the first look
    rows[5] = [1.0, 1.2, 0.9, 1.1, 1.3, 0.8, 1.0, 1.2, 0.7, 1.4]  # the last look: a t interval
    v = adaptive.judge(rows, p)
    assert [x.decision for x in v] == ["higher", "lower", "equivalent", "undecided", "waiting", "higher"]
    assert (v[0].lo, v[0].hi, v[0].level) == pytest.approx((9.5, 10.5, 1 - a1))
    d = rows[5]
    half = stats.t.ppf(1 - a3 / 2, 9) * d.std(ddof=1) / math.sqrt(10)
    assert (v[5].lo, v[5].hi, v[5].level) == pytest.approx((d.mean() - half, d.mean() + half, 1 - a3))
    assert "straddles" in v[3].reason and v[4].seeds == 5


def test_a_look_whose_alpha_the_sign_flip_test_cannot_reach_decides_nothing() -> None:
    """O'Brien-Fleming spends 0.0114 at 6 of 10 seeds: below the sign-flip test's smallest p at 6 pairs (2 / 64
    = 0.031), so even six differences of about 10 have no interval there and the cell waits for the next look."""
    v = adaptive.judge(np.array([[10.0, 10.5, 9.5, 10.2, 9.8, 10.1]]), policy(spending="obrien-fleming"))[0]
    assert v.decision == "undecided" and math.isnan(v.lo)
    assert v.reason == "undecided: no interval (6 seeds: the sign-flip test's smallest p, 0.0312, cannot reach 0.0114)"


@pytest.mark.parametrize(("least", "most"), [(6, 11), (7, 32), (8, 81)])
def test_a_pocock_first_look_decides_up_to_the_max_the_docs_give(least: int, most: int) -> None:
    """docs/concepts/experiments-file.md: with Pocock spending the first look at `min` seeds can decide (six clear
    differences and more are "higher") up to these `max`, and beyond them it spends less than 2/2^min."""
    rows = np.full((1, most + 1), np.nan)
    rows[0, :least] = 10 + 0.1 * np.arange(least)
    for top, decision in ((most, "higher"), (most + 1, "undecided")):
        p = policy(min=least, max=top)
        assert adaptive.judge(rows[:, :top], p)[0].decision == decision, top


def test_no_judgement_below_six_pairs_even_from_a_policy_recorded_with_min_3() -> None:
    """The schema refuses `min` below EXACT_N; a policy a store recorded before that floor (looks at 3, 6 and
    10) is judged from its first look at 6 or more pairs: three clear differences are only waiting (ten are
    judged, by the t)."""
    with pytest.raises(ValueError, match=r"min \(3\) must be at least 6: below 6 pairs no test"):
        policy(min=3)
    old = AdaptiveSeeds.model_construct(min=3, max=10, threshold=0.2)
    assert adaptive.schedule(old) == [3, 6, 10] and adaptive.judged(old) == [6, 10]
    rows = np.full((2, 10), np.nan)
    rows[0, :3] = [10.0, 10.5, 9.5]
    rows[1] = [10.0, 10.5, 9.5, 10.2, 9.8, 10.1, 10.0, 9.9, 10.3, 10.4]
    assert [x.decision for x in adaptive.judge(rows, old)] == ["waiting", "higher"]


def test_no_decision_from_differences_without_a_spread() -> None:
    """Identical differences have no interval (the tables give them no test at any n): six or ten seeds of
    0.9 would be "higher" from a zero-width interval and of 0 "equivalent"; they stay undecided, so the cell
    gets the next look's seeds, and at the last look too. Different differences are judged as before."""
    p = policy()
    rows = np.full((4, 10), np.nan)
    rows[0, :6] = 0.9
    rows[1, :6] = 0.0
    rows[2, :10] = 0.9
    rows[3, :6] = [10.0, 10.1, 10.2, 10.3, 10.4, 10.5]
    v = adaptive.judge(rows, p)
    assert [x.decision for x in v] == ["undecided"] * 3 + ["higher"]
    assert v[0].reason == "undecided: no interval (zero spread, 6 seeds)" and np.isnan(v[0].lo)
    assert v[2].seeds == 10 and v[2].reason == "undecided: no interval (zero spread, 10 seeds)"


def run_adaptive(effects: np.ndarray, p: AdaptiveSeeds, rng: np.random.Generator) -> tuple[list[str], np.ndarray]:
    """Simulate adaptive seeding on cells with true paired-difference means `effects` (unit noise): each
    cell gets the next look's seeds while undecided. Returns final decisions and seeds spent per cell."""
    data = effects[:, None] + rng.standard_normal((len(effects), p.max))
    counts = np.full(len(effects), p.min)
    decisions = np.array(["undecided"] * len(effects), dtype=object)
    for n in adaptive.schedule(p):
        live = (decisions == "undecided") & (counts <= n)
        counts[live] = n
        shown = np.where(np.arange(p.max)[None, :] < counts[live][:, None], data[live], np.nan)
        decisions[live] = [v.decision for v in adaptive.judge(shown, p)]
    return list(decisions), counts


@pytest.mark.parametrize("kind", ["pocock", "obrien-fleming"])
def test_with_no_true_effect_adaptive_seeding_claims_a_difference_at_most_alpha_of_the_time(kind: str) -> None:
    """4,000 cells whose true difference is 0, judged with a threshold near 0 (the worst case: any interval
    off 0 is a claim): the share declared higher or lower stays under alpha (0.033 Pocock, 0.034 O'Brien-
    Fleming, looks at 6, 8 and 10 seeds). Spending the full alpha at every look instead claims 0.086."""
    rng = np.random.default_rng(0)
    p = policy(spending=kind, threshold=1e-6)
    decisions, seeds = run_adaptive(np.zeros(4000), p, rng)
    false_positive = np.mean([d in ("higher", "lower") for d in decisions])
    assert false_positive <= p.alpha
    assert seeds.max() <= p.max and seeds.min() >= p.min


def test_adaptive_seeding_stops_clear_cells_at_min_and_runs_ties_to_max() -> None:
    """Clear effects (8 noise units: six differences of 8 +- 1 all clear 0.2, so does their range, the first
    look's interval) stop at min; exact ties with a noise of 1 and a threshold of 0.2 cannot be decided and run
    to max."""
    rng = np.random.default_rng(1)
    decisions, seeds = run_adaptive(np.array([8.0] * 200 + [0.0] * 200), policy(), rng)
    assert all(d == "higher" for d in decisions[:200]) and (seeds[:200] == 6).mean() > 0.9
    assert (seeds[200:] == 10).mean() > 0.9


def test_adaptive_seeds_need_a_baseline_and_a_valid_range(tmp_path: Path) -> None:
    sweep = {"base": TINY, "grid": {"train.lr": [1e-3, 2e-3]}, "seeds": {"min": 6, "max": 8, "threshold": 0.5}}
    with pytest.raises(SpecError, match="adaptive seeds compare every cell with the baseline"):
        plan(write_sweeps(tmp_path / "a.yaml", {"s": sweep}))
    with pytest.raises(SpecError, match=r"seeds.*max \(6\) must exceed min \(6\)"):
        plan(write_sweeps(tmp_path / "b.yaml", {"s": {**sweep, "seeds": {"min": 6, "max": 6, "threshold": 1}}}))


def test_plan_says_how_many_trials_adaptive_seeding_may_add(tmp_path: Path) -> None:
    sweep = {"base": TINY, "grid": {"train.lr": [1e-3, 2e-3]}, "baseline": {"train.lr": 1e-3},
             "seeds": {"min": 6, "max": 9, "threshold": 0.5}}  # fmt: skip
    result = CliRunner().invoke(app, ["plan", str(write_sweeps(tmp_path / "e.yaml", {"s": sweep})), "--no-costs"])
    assert result.exit_code == 0, result.output
    assert "total 12;" in result.output
    assert "adaptive seeds: 6 per cell now; up to 6 more trials (9 seeds)" in " ".join(result.output.split())


def test_a_real_sweep_adds_seeds_only_where_undecided(ray_local, tmp_path: Path) -> None:
    """Real training (3 epochs: about 24% top-1 against 10% chance): lr 1e-7 never learns, differs clearly
    from the baseline and stops at min = 6 seeds (the sign-flip interval of the first look, their range); lr 1.1e-2
    against 1e-2 is a near-tie (seed noise, threshold 0.2 points) and gets the next look's 2 more seeds, as does
    the baseline it pairs with.
    Relaunching the file reruns nothing and adds nothing."""
    base = {**TINY, "train": {"epochs": 3, "batch_size": 64, "lr": 1e-2}}
    sweep = {
        "base": base,
        "grid": {"train.lr": [1e-2, 1e-7, 1.1e-2]},
        "seeds": {"min": 6, "max": 8, "looks": 2, "threshold": 0.2},
        "baseline": {"train.lr": 1e-2},
    }
    f = write_sweeps(tmp_path / "e.yaml", {"s": sweep})
    p = plan(f)
    assert len(p.trials) == 18 and len(p.reserve) == 6
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        result = launch(p, store, run=RunConfig(storage=tmp_path / "ck"))
        assert result.rounds == 2 and result.counts["done"] == 22
        frame = store.trials_frame("s")
        seeds = frame.groupby("variant")["seed"].apply(sorted).to_dict()
        assert [seeds[v] for v in p.variants] == [list(range(8)), list(range(6)), list(range(8))]  # plan order of lr
        verdicts = adaptive.from_trials(frame, p.baseline or "", p.metric, p.adaptive or policy())
        clear, near = p.variants[1], p.variants[2]
        assert verdicts[clear].decision == "lower" and verdicts[clear].seeds == 6
        assert verdicts[near].seeds == 8
        again = launch(plan(f), store, run=RunConfig(storage=tmp_path / "ck"))
        assert sum(again.counts.values()) == 0 and again.rounds == 2
        assert store.outside_plan("s") == []  # the seeds later looks added are the plan's: its reserve
        (md,) = [f for f in report("s", store=store, out=tmp_path / "rep", formats=["md"]) if f.name == "report.md"]
    section = md.read_text().split("## Adaptive seeds", 1)[1].split("\n## ", 1)[0]
    assert "Pocock-type Lan-DeMets alpha spending" in section
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in section.splitlines() if line.startswith("| ")]
    decided = {row[1]: row for row in rows[1:]}  # after the header: decision -> [variant, decision, seeds, why]
    assert decided["baseline"][2] == "8" and decided["lower"][2] == "6"
    assert "below the threshold" in decided["lower"][3] and "lr=1e-07" in decided["lower"][0]
