"""Adaptive seeding: the design's numbers against hand-computed values, its error rate by simulation, and a
real small sweep where a clear difference stops at `min` seeds while a near-tie gets more."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY, write_sweeps
from typer.testing import CliRunner

from ablate.cli import app
from ablate.errors import SpecError
from ablate.execution.launcher import RunConfig, launch
from ablate.planning import adaptive as sequential
from ablate.planning.plan import plan
from ablate.reporting import report
from ablate.spec.schema import AdaptiveSeeds
from ablate.store import Store


def policy(**kw: object) -> AdaptiveSeeds:
    return AdaptiveSeeds.model_validate({"min": 3, "max": 10, "threshold": 0.2, **kw})


def test_looks_are_evenly_spaced_from_min_to_max() -> None:
    assert sequential.schedule(policy()) == [3, 6, 10]  # linspace 3, 6.5, 10 (6.5 rounds to even)
    assert sequential.schedule(policy(looks=4)) == [3, 5, 8, 10]
    assert sequential.schedule(policy(min=3, max=4, looks=5)) == [3, 4]  # no more looks than seed counts


@pytest.mark.parametrize("kind", ["pocock", "obrien-fleming"])
def test_spending_matches_the_lan_demets_functions_by_hand(kind: str) -> None:
    """Hand formulas: Pocock-type 0.05 ln(1 + (e-1) t); O'Brien-Fleming-type erfc(z / sqrt(2 t)) with z the
    0.975 normal quantile; looks at t = 0.3, 0.6, 1.0. The increments sum to alpha."""
    z = 1.959963984540054

    def by_hand(t: float) -> float:
        return 0.05 * math.log(1 + (math.e - 1) * t) if kind == "pocock" else math.erfc(z / math.sqrt(2 * t))

    got = sequential.spending(policy(spending=kind))
    want = np.diff([0.0, by_hand(0.3), by_hand(0.6), by_hand(1.0)])
    np.testing.assert_allclose(got, want, rtol=1e-9)
    assert sum(got) == pytest.approx(0.05)
    if kind == "obrien-fleming":
        assert got[0] == pytest.approx(3.46e-4, rel=0.01)  # 2 (1 - Phi(1.96 / sqrt(0.3))): almost nothing early


def test_judge_decides_by_where_the_repeated_interval_lies() -> None:
    """At the first look (3 seeds, Pocock a_1 = 0.05 ln(1 + 1.718 * 0.3) = 0.02077) the interval is
    mean +- t(1 - a_1/2, 2) s / sqrt(3), t = 6.7: by hand for the rows below."""
    p = policy()
    a1 = 0.05 * math.log(1 + (math.e - 1) * 0.3)
    rows = np.full((5, 10), np.nan)
    rows[0, :3] = [10.0, 10.5, 9.5]  # clear: 10 +- 6.7 * 0.289 -> [8.03, 11.97] above 0.2
    rows[1, :3] = [-10.0, -10.5, -9.5]  # clear, the other way
    rows[2, :3] = [0.01, -0.01, 0.0]  # tight around 0: inside +-0.2
    rows[3, :3] = [1.0, -1.0, 0.5]  # straddles
    rows[4, :2] = [1.0, 2.0]  # before the first look
    v = sequential.judge(rows, p)
    assert [x.decision for x in v] == ["higher", "lower", "equivalent", "undecided", "waiting"]
    q = 1 - a1 / 2
    t2 = (2 * q - 1) * math.sqrt(2 / (4 * q * (1 - q)))  # Student t quantile with 2 df, in closed form
    half = t2 * 0.5 / math.sqrt(3)
    assert (v[0].lo, v[0].hi) == pytest.approx((10 - half, 10 + half), rel=1e-3)
    assert v[0].level == pytest.approx(1 - a1)
    assert "straddles" in v[3].reason and v[4].seeds == 2


def test_no_decision_from_differences_without_a_spread() -> None:
    """Identical differences have no interval (the tables give them no test at any n): two or three seeds of
    0.9 were "higher" ([0.9, 0.9] at min 2) and of 0 "equivalent"; they stay undecided, so the cell gets the
    next look's seeds, and at the last look too. Different differences at min 2 are judged as before."""
    p = policy(min=2, max=6)
    rows = np.full((5, 6), np.nan)
    rows[0, :2] = [0.9, 0.9]
    rows[1, :2] = [0.0, 0.0]
    rows[2, :3] = [0.9, 0.9, 0.9]
    rows[3, :6] = 0.9
    rows[4, :2] = [10.0, 10.1]
    v = sequential.judge(rows, p)
    assert [x.decision for x in v] == ["undecided"] * 4 + ["higher"]
    assert v[0].reason == "undecided: no interval (zero spread, 2 seeds)" and np.isnan(v[0].lo)
    assert v[3].seeds == 6 and v[3].reason == "undecided: no interval (zero spread, 6 seeds)"


def run_adaptive(effects: np.ndarray, p: AdaptiveSeeds, rng: np.random.Generator) -> tuple[list[str], np.ndarray]:
    """Simulate adaptive seeding on cells with true paired-difference means `effects` (unit noise): each
    cell gets the next look's seeds while undecided. Returns final decisions and seeds spent per cell."""
    data = effects[:, None] + rng.standard_normal((len(effects), p.max))
    counts = np.full(len(effects), p.min)
    decisions = np.array(["undecided"] * len(effects), dtype=object)
    for n in sequential.schedule(p):
        live = (decisions == "undecided") & (counts <= n)
        counts[live] = n
        shown = np.where(np.arange(p.max)[None, :] < counts[live][:, None], data[live], np.nan)
        decisions[live] = [v.decision for v in sequential.judge(shown, p)]
    return list(decisions), counts


@pytest.mark.parametrize("kind", ["pocock", "obrien-fleming"])
def test_with_no_true_effect_adaptive_seeding_claims_a_difference_at_most_alpha_of_the_time(kind: str) -> None:
    """4,000 cells whose true difference is 0, judged with a threshold near 0 (the worst case: any interval
    off 0 is a claim): the share declared higher or lower stays under alpha (0.046 Pocock, 0.049 O'Brien-
    Fleming). Spending the full alpha at every look instead claims 0.119."""
    rng = np.random.default_rng(0)
    p = policy(spending=kind, threshold=1e-6)
    decisions, seeds = run_adaptive(np.zeros(4000), p, rng)
    false_positive = np.mean([d in ("higher", "lower") for d in decisions])
    assert false_positive <= p.alpha
    assert seeds.max() <= p.max and seeds.min() >= p.min


def test_adaptive_seeding_stops_clear_cells_at_min_and_runs_ties_to_max() -> None:
    """Clear effects (8 noise units: at 3 seeds the first look's half-width is about 3.9 noise units) stop at
    min; exact ties with a noise of 1 and a threshold of 0.2 cannot be decided and run to max."""
    rng = np.random.default_rng(1)
    decisions, seeds = run_adaptive(np.array([8.0] * 200 + [0.0] * 200), policy(), rng)
    assert all(d == "higher" for d in decisions[:200]) and (seeds[:200] == 3).mean() > 0.9
    assert (seeds[200:] == 10).mean() > 0.9


def test_adaptive_seeds_need_a_baseline_and_a_valid_range(tmp_path: Path) -> None:
    sweep = {"base": TINY, "grid": {"train.lr": [1e-3, 2e-3]}, "seeds": {"min": 3, "max": 5, "threshold": 0.5}}
    with pytest.raises(SpecError, match="adaptive seeds compare every cell with the baseline"):
        plan(write_sweeps(tmp_path / "a.yaml", {"s": sweep}))
    with pytest.raises(SpecError, match=r"seeds.*max \(3\) must exceed min \(3\)"):
        plan(write_sweeps(tmp_path / "b.yaml", {"s": {**sweep, "seeds": {"min": 3, "max": 3, "threshold": 1}}}))


def test_plan_says_how_many_trials_adaptive_seeding_may_add(tmp_path: Path) -> None:
    sweep = {"base": TINY, "grid": {"train.lr": [1e-3, 2e-3]}, "baseline": {"train.lr": 1e-3},
             "seeds": {"min": 3, "max": 6, "threshold": 0.5}}  # fmt: skip
    result = CliRunner().invoke(app, ["plan", str(write_sweeps(tmp_path / "e.yaml", {"s": sweep})), "--no-costs"])
    assert result.exit_code == 0, result.output
    assert "total 6;" in result.output
    assert "adaptive seeds: 3 per cell now; up to 6 more trials (6 seeds)" in " ".join(result.output.split())


def test_a_real_sweep_adds_seeds_only_where_undecided(ray_local, tmp_path: Path) -> None:
    """Real training (3 epochs: about 24% top-1 against 10% chance): lr 1e-7 never learns, differs clearly
    from the baseline and stops at min = 3 seeds; lr 1.1e-2 against 1e-2 is a near-tie (seed noise,
    threshold 0.2 points) and gets the next look's 2 more seeds, as does the baseline it pairs with.
    Relaunching the file reruns nothing and adds nothing."""
    base = {**TINY, "train": {"epochs": 3, "batch_size": 64, "lr": 1e-2}}
    sweep = {
        "base": base,
        "grid": {"train.lr": [1e-2, 1e-7, 1.1e-2]},
        "seeds": {"min": 3, "max": 5, "looks": 2, "threshold": 0.2},
        "baseline": {"train.lr": 1e-2},
    }
    f = write_sweeps(tmp_path / "e.yaml", {"s": sweep})
    p = plan(f)
    assert len(p.trials) == 9 and len(p.reserve) == 6
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        result = launch(p, store, run=RunConfig(storage=tmp_path / "ck"))
        assert result.rounds == 2 and result.counts["done"] == 13
        frame = store.trials_frame("s")
        seeds = frame.groupby("variant")["seed"].apply(sorted).to_dict()
        assert [seeds[v] for v in p.variants] == [[0, 1, 2, 3, 4], [0, 1, 2], [0, 1, 2, 3, 4]]  # plan order of lr
        verdicts = sequential.from_trials(frame, p.baseline or "", p.metric, p.adaptive or policy())
        clear, near = p.variants[1], p.variants[2]
        assert verdicts[clear].decision == "lower" and verdicts[clear].seeds == 3
        assert verdicts[near].seeds == 5
        again = launch(plan(f), store, run=RunConfig(storage=tmp_path / "ck"))
        assert sum(again.counts.values()) == 0 and again.rounds == 2
        assert store.outside_plan("s") == []  # the seeds later looks added are the plan's: its reserve
        (md,) = [f for f in report("s", store=store, out=tmp_path / "rep", formats=["md"]) if f.suffix == ".md"]
    section = md.read_text().split("## Adaptive seeds", 1)[1].split("\n## ", 1)[0]
    assert "Pocock-type Lan-DeMets alpha spending" in section
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in section.splitlines() if line.startswith("| ")]
    decided = {row[1]: row for row in rows[1:]}  # after the header: decision -> [variant, decision, seeds, why]
    assert decided["baseline"][2] == "5" and decided["lower"][2] == "3"
    assert "below the threshold" in decided["lower"][3] and "lr=1e-07" in decided["lower"][0]
