"""The report of a designed sweep, on stores whose true effects are planted: a fraction recovers each effect
exactly where its plan says it can, and the sum of a confounded chain where it says they are confounded; a
one-at-a-time design reads as a paper's ablation table."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import TINY, write_sweeps
from synthetic import fill, switches

from ablate.planning.plan import Plan, plan
from ablate.reporting import designed, effects, frames, report, stats
from ablate.store import Store

GRID = switches(6)
NAMES = ["tau", "mu", "kappa_priv", "bounded", "kappa_pub", "stack"]
MAIN = {"tau": 2.0, "mu": 0.75, "kappa_priv": -0.5, "bounded": 0.0, "kappa_pub": 0.25, "stack": 1.0}
"""Planted main effects (mean at the second level minus at the first)."""
PAIRS = {("tau", "mu"): 1.5, ("bounded", "stack"): -0.5}
"""Planted two-factor interactions (A's effect at B's second level minus at its first): in the 2^(6-2) fraction
tau x mu = kappa_priv x kappa_pub = bounded x stack, so the chain reads 1.5 - 0.5 = 1.0."""
SHIFT = [0.0, 0.7, -0.4]
"""Per seed: shared by every cell of a replicate, so the paired analysis removes it."""


def coded(t) -> dict[str, int]:
    return {n: 1 if t.axes.get(a, GRID[a][0]) == GRID[a][1] else -1 for n, a in zip(NAMES, GRID)}


def value(t) -> float:
    x = coded(t)
    y = 80 + SHIFT[t.axes["seed"]] + sum(e / 2 * x[n] for n, e in MAIN.items())
    return y + sum(e / 4 * x[a] * x[b] for (a, b), e in PAIRS.items())


@pytest.fixture
def store(tmp_path: Path):
    with Store(f"sqlite:///{tmp_path / 'f.sqlite'}") as s:
        yield s


def planned(tmp_path: Path, store: Store, name: str, design) -> Plan:
    body = {"base": {**TINY, "attention": {"kind": "csan"}}, "grid": GRID, "seeds": 3, "design": design,
            "baseline": {a: v[0] for a, v in GRID.items()}}  # fmt: skip
    p = plan(write_sweeps(tmp_path / f"{name}.yaml", {name: body}), name)
    fill(store, p, value)
    return p


def rows(eff: pd.DataFrame) -> dict[str, float]:
    return dict(zip(eff["factor"], eff["effect"]))


def test_a_resolution_iv_fraction_recovers_main_effects_and_the_sums_of_confounded_pairs(tmp_path, store) -> None:
    p = planned(tmp_path, store, "quarter", {"fractional": {"resolution": 4}})
    assert p.design is not None and len(p.variants) == 16
    eff = designed.effects(frames.load(store, "quarter"), p.design)
    got = rows(eff)
    for name, truth in MAIN.items():  # clear of two-factor interactions: exact
        assert got[name] == pytest.approx(truth, abs=1e-9), name
    chain = next(f for f in got if f.startswith("tau x mu"))
    assert "bounded x stack" in chain and got[chain] == pytest.approx(1.5 - 0.5, abs=1e-9)
    assert all(v == pytest.approx(0, abs=1e-9) for f, v in got.items() if " x " in f and f != chain)
    assert set(eff["n"]) == {3}


def test_the_full_grid_and_the_fraction_agree_on_every_main_effect(tmp_path, store) -> None:
    planned(tmp_path, store, "full", "full")
    fac = effects.factorial(frames.load(store, "full"))
    assert fac is not None
    full = effects.effects(fac)
    mains = dict(zip(full.loc[full["term"] == "main", "factor"], full.loc[full["term"] == "main", "effect"]))
    for name, truth in MAIN.items():
        assert mains[name] == pytest.approx(truth, abs=1e-9)


def test_a_resolution_iii_main_effect_carries_the_interactions_confounded_with_it(tmp_path, store) -> None:
    p = planned(tmp_path, store, "eighth", {"fractional": {"resolution": 3}})
    assert p.design is not None and len(p.variants) == 8
    s = p.design.structure()
    eff = designed.effects(frames.load(store, "eighth"), p.design)
    for t, (factor, estimate) in zip(s.model, rows(eff).items()):
        truth = MAIN[NAMES[t[0]]] if len(t) == 1 else 0.0
        for other, w in s.aliases.get(t, []):  # an interaction in the chain adds in, with the chain's sign
            pair = tuple(NAMES[i] for i in other)
            truth += w * PAIRS.get(pair, 0.0) * (2.0 ** len(t) / 4) if len(other) == 2 else w * MAIN[pair[0]] * 2
        assert estimate == pytest.approx(truth, abs=1e-9), factor


def test_the_report_names_the_confounding_and_the_design_that_separates_it(tmp_path, store) -> None:
    planned(tmp_path, store, "quarter", {"fractional": {"resolution": 4}})
    report("quarter", store=store, out=tmp_path / "reports", formats=["md", "csv"])
    text = (tmp_path / "reports" / "quarter" / "report.md").read_text()
    findings = text.split("## Findings")[1].split("##")[0]
    assert "| confounded | Confounded by the design: tau x mu = kappa_priv x kappa_pub = bounded x stack" in findings
    assert "To tell more of them apart, add `follow-up: {" in findings  # tests/reporting/test_followup.py: which
    effects_md = text.split("## Effects of each knob")[1]
    assert "Defining relation I = " in effects_md and "| tau x mu = " in effects_md
    csv = pd.read_csv(tmp_path / "reports" / "quarter" / "effects.csv")
    assert "aliases" in csv and len(csv) == len(designed.effects(frames.load(store, "quarter"), _design(store)))


def _design(store: Store):
    chosen = frames.load(store, "quarter").design
    assert chosen is not None
    return chosen


def test_one_at_a_time_reads_as_an_ablation_table_of_drops_from_the_full_model(tmp_path, store) -> None:
    grid = dict(list(GRID.items())[:2])
    body = {"base": {**TINY, "attention": {"kind": "csan"}}, "grid": grid, "seeds": 3,
            "design": {"one-at-a-time": {"from": "full"}}}  # fmt: skip
    p = plan(write_sweeps(tmp_path / "oat.yaml", {"oat": body}), "oat")
    fill(store, p, value)
    report("oat", store=store, out=tmp_path / "reports", formats=["md"])
    text = (tmp_path / "reports" / "oat" / "report.md").read_text()
    table = text.split("## Ablation, one axis at a time")[1]
    # from (tau, mu) both on: dropping tau loses its main effect and the tau x mu interaction's half at mu on
    drop_tau = -(MAIN["tau"] + PAIRS[("tau", "mu")] / 2)
    assert "| tau: true -> false | " in table and f"| {drop_tau:+.2f} |" in table


def test_a_cell_that_failed_leaves_only_the_terms_the_other_cells_can_tell(tmp_path, store) -> None:
    """The saturated 2^(6-3) (8 cells, the mean and 7 terms): without one cell, one term cannot be estimated."""
    body = {"base": {**TINY, "attention": {"kind": "csan"}}, "grid": GRID, "seeds": 3,
            "design": {"fractional": {"resolution": 3}}, "baseline": {a: v[0] for a, v in GRID.items()}}  # fmt: skip
    p = plan(write_sweeps(tmp_path / "q.yaml", {"q": body}), "q")
    assert p.design is not None
    lost = next(v for v in p.variants if v != p.baseline)
    fill(store, p, value, state=lambda t: "failed" if t.variant == lost else "done")
    eff = designed.effects(frames.load(store, "q"), p.design)
    s = p.design.structure([v for v in p.variants if v != lost])
    assert len(eff) == len(s.model) == len(p.design.structure().model) - 1
    assert list(eff["factor"]) == [s.chain(t) for t in s.model]
    report("q", store=store, out=tmp_path / "reports", formats=["md"])
    assert "## Effects of each knob" in (tmp_path / "reports" / "q" / "report.md").read_text()


SPARSE = {"tau": 2.0, "stack": 1.0}
"""Planted main effects of a one-seed screen: two active axes among six, as Lenth's test assumes."""


def sparse(t) -> float:
    """One seed: the planted effects and a per-cell noise of SD 0.1, drawn from the cell's levels (no seed shift)."""
    x = coded(t)
    noise = np.random.default_rng([(v + 1) // 2 for v in x.values()]).normal(0, 0.1)
    return 80 + sum(e / 2 * x[n] for n, e in SPARSE.items()) + noise


def one_seed(tmp_path: Path, store: Store, name: str, design) -> pd.DataFrame:
    body = {"base": {**TINY, "attention": {"kind": "csan"}}, "grid": GRID, "seeds": 1, "design": design,
            "baseline": {a: v[0] for a, v in GRID.items()}}  # fmt: skip
    p = plan(write_sweeps(tmp_path / f"{name}.yaml", {name: body}), name)
    fill(store, p, sparse)
    if p.design is None:
        fac = effects.factorial(frames.load(store, name))
        assert fac is not None
        return effects.effects(fac)
    return designed.effects(frames.load(store, name), p.design)


def test_a_one_seed_fraction_and_the_one_seed_full_grid_find_the_same_active_axes_by_lenths_test(
    tmp_path, store
) -> None:
    """Without replicates each table tests its terms by Lenth's pseudo standard error: the 16-cell fraction and the
    64-cell full grid both decide tau and stack (Holm over their terms) and nothing else."""
    for name, design in (("quarter", {"fractional": {"resolution": 4}}), ("full", "full")):
        eff = one_seed(tmp_path, store, name, design)
        assert set(eff["test"]) == {stats.LENTH} and set(eff["n"]) == {1 if name == "quarter" else 64}, name
        decided = set(eff.loc[eff["p_adj"] < stats.ALPHA, "factor"])
        assert decided == set(SPARSE), (name, decided)


def test_the_report_of_a_one_seed_fraction_says_its_test_is_lenths(tmp_path, store) -> None:
    one_seed(tmp_path, store, "quarter", {"fractional": {"resolution": 4}})
    report("quarter", store=store, out=tmp_path / "reports", formats=["md"])
    effects_md = (tmp_path / "reports" / "quarter" / "report.md").read_text().split("## Effects of each knob")[1]
    assert "from Lenth's test instead" in effects_md and "n/a" not in effects_md.split("\n\n")[1]


def test_a_report_from_another_baseline_reads_the_fractions_effects_from_it(tmp_path, store) -> None:
    """`report --baseline` on the cell where tau, kappa_pub and stack are on: their effects are read from on to off
    (their signs flip), the other main effects stay, and tau x mu and bounded x stack (one flipped axis each) flip
    in their chain; a one-at-a-time design, whose cells move one axis from its own reference only, says why it shows
    no table instead of Δ from the wrong cell."""
    p = planned(tmp_path, store, "quarter", {"fractional": {"resolution": 4}})
    assert p.design is not None
    moved = next(v for v, levels in p.design.runs.items() if levels == [1, 0, 0, 0, 1, 1])
    data = frames.load(store, "quarter", baseline=moved[:12])
    assert data.baseline == moved and data.design is not None
    eff = designed.effects(data, data.design)
    got = rows(eff)
    for name, truth in MAIN.items():
        assert got[name] == pytest.approx(-truth if name in ("tau", "kappa_pub", "stack") else truth, abs=1e-9), name
    chain = next(f for f in got if f.startswith("tau x mu"))
    assert got[chain] == pytest.approx(-(1.5 - 0.5), abs=1e-9)
    assert eff.set_index("factor").loc["tau", "contrast"] == "false vs true"

    grid = dict(list(GRID.items())[:2])
    body = {"base": {**TINY, "attention": {"kind": "csan"}}, "grid": grid, "seeds": 3,
            "design": {"one-at-a-time": {"from": "full"}}}  # fmt: skip
    fill(store, plan(write_sweeps(tmp_path / "oat.yaml", {"oat": body}), "oat"), value)
    report("oat", store=store, out=tmp_path / "reports", formats=["md"], baseline="attention.tau=false")
    table = (tmp_path / "reports" / "oat" / "report.md").read_text().split("## Ablation, one axis at a time")[1]
    assert "is not the design's reference (attention.tau=true, attention.mu=true)" in table
