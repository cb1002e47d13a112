"""A Plackett-Burman screen is analysed as a screen: main effects only, its unused columns dummy contrasts that
measure the error; and the smaller claims of a designed report: the effects CSV's `method` names Lenth where Lenth
tested the row, the effect column states the interaction's scale (checked against the textbook's AB), and a
resolution IV main effect says which three-factor interactions it assumes away."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import TINY, write_sweeps
from synthetic import fill, switches

from ablate.evidence import lenth
from ablate.evidence.aliasing import structure
from ablate.planning import screens
from ablate.planning.plan import Plan, plan
from ablate.reporting import designed, effects, frames, report, stats
from ablate.reporting.tables import EFFECT_HEADER
from ablate.store import Store

DOCS = Path(__file__).resolve().parents[2] / "docs" / "concepts" / "designs.md"
SWITCHES = switches(8)
NAMES = ["tau", "mu", "kappa_priv", "bounded", "kappa_pub", "stack", "lr", "mlp_ratio"]
ACTIVE = {"tau": 2.0, "stack": 1.0}
"""Planted main effects (mean at the second level minus at the first): two active switches of eight."""
PAIR = 1.5
"""Planted tau x mu interaction (tau's effect at mu on minus at mu off): a screen's main effects carry it partly."""


@pytest.fixture
def store(tmp_path: Path):
    with Store(f"sqlite:///{tmp_path / 's.sqlite'}") as s:
        yield s


def coded(t, grid: dict) -> dict[str, int]:
    return {n: 1 if t.axes.get(a, v[0]) == v[1] else -1 for n, (a, v) in zip(NAMES, grid.items())}


def value(t, grid: dict = SWITCHES, pair: float = PAIR) -> float:
    """The planted effects, tau x mu, a seed shift every cell of a replicate shares, and a per-cell noise of SD 0.1
    drawn from the cell's levels (the same for every seed: scripted, not trained)."""
    x = coded(t, grid)
    noise = np.random.default_rng([(v + 1) // 2 for v in x.values()]).normal(0, 0.1)
    y = 80 + 0.3 * t.axes["seed"] + sum(e / 2 * x[n] for n, e in ACTIVE.items() if n in x) + noise
    return y + pair / 4 * x["tau"] * x["mu"]


def planned(
    tmp_path: Path, store: Store, name: str, design, seeds: int, grid: dict = SWITCHES, pair: float = PAIR
) -> Plan:
    body = {"base": {**TINY, "attention": {"kind": "csan"}}, "grid": grid, "seeds": seeds, "design": design,
            "baseline": {a: v[0] for a, v in grid.items()}}  # fmt: skip
    p = plan(write_sweeps(tmp_path / f"{name}.yaml", {name: body}), name)
    fill(store, p, lambda t: value(t, grid, pair))
    return p


def means(store: Store, name: str, variants: list[str]) -> np.ndarray:
    return frames.replicates(frames.load(store, name)).reindex(variants).mean(axis=1).to_numpy()


def test_a_screen_plans_main_effects_only_and_its_unused_columns_as_dummy_contrasts(tmp_path, store) -> None:
    p = planned(tmp_path, store, "screen", {"screening": "plackett-burman"}, seeds=1)
    assert p.design is not None and len(p.variants) == 12
    s = p.design.structure()
    assert s.model == [(i,) for i in range(8)]
    text = "\n".join(p.design.lines(1))
    assert "estimable: tau, mu, kappa_priv, bounded, kappa_pub, stack, lr, mlp_ratio\n" in text + "\n"
    assert "3 unused columns of the 12-cell Plackett-Burman design are dummy contrasts" in text
    assert "over 11 contrasts" in text and "loads ±1/3 on main effects" in text
    record = p.design.record(1)
    assert record["dummy_contrasts"] == 3 and all(len(t) == 1 for t in record["estimable"])


def test_a_replicated_screens_main_effects_are_the_main_effects_only_least_squares_fit(tmp_path, store) -> None:
    """Three seeds: each main effect is twice the slope of a least-squares fit on the mean and the main effects
    alone (an independent fit of the cell means); with interactions picked into the model they would shift."""
    p = planned(tmp_path, store, "screen", {"screening": "plackett-burman"}, seeds=3)
    assert p.design is not None
    eff = designed.effects(frames.load(store, "screen"), p.design)
    x = np.column_stack([np.ones(12), p.design.coded(p.variants)])
    slopes = np.linalg.lstsq(x, means(store, "screen", p.variants), rcond=None)[0][1:]
    assert list(eff["factor"]) == NAMES and set(eff["n"]) == {3}
    assert eff["effect"].to_numpy() == pytest.approx(2 * slopes, abs=1e-9)
    assert set(eff["method"]) == {effects.PAIRED}


def test_a_one_seed_screen_is_tested_by_lenth_over_its_main_effects_and_dummy_contrasts(tmp_path, store) -> None:
    """One seed: Lenth's test over the 11 contrasts of the 12-cell design (8 main effects, 3 dummies read off
    pyDOE's unused columns here), the main effects reported; with no interaction planted (the screen's premise) the
    two planted switches are decided, no other."""
    p = planned(tmp_path, store, "screen", {"screening": "plackett-burman"}, seeds=1, pair=0.0)
    assert p.design is not None
    eff = designed.effects(frames.load(store, "screen"), p.design)
    full = screens.plackett_burman(11)
    full = full * -full[0]  # signed as the plan signs it: the baseline is the first row
    dummy = {tuple(row[:8]): row[8:] for row in full.tolist()}
    mains = p.design.coded(p.variants)
    cols = np.column_stack([mains, [dummy[tuple(r)] for r in mains.tolist()]])
    y = means(store, "screen", p.variants)
    contrasts = cols.T @ y / 6  # mean at +1 minus at -1 over 12 balanced cells
    found = lenth.test(contrasts, np.ones(11))
    assert found is not None
    assert list(eff["factor"]) == NAMES and set(eff["test"]) == {stats.LENTH}
    assert eff["effect"].to_numpy() == pytest.approx(contrasts[:8], abs=1e-9)
    assert eff["p"].to_numpy() == pytest.approx(found.p[:8], abs=1e-12)
    assert set(eff["method"]) == {effects.LENTH_PSE}
    assert set(eff.loc[eff["p_adj"] < stats.ALPHA, "factor"]) == set(ACTIVE)
    report("screen", store=store, out=tmp_path / "reports", formats=["md"])
    text = (tmp_path / "reports" / "screen" / "report.md").read_text()
    caption = text.split("## Effects of each knob")[1]
    assert (
        "The screen's 3 unused columns (dummy contrasts: noise where interactions are negligible) join its 8 main "
        "effects in Lenth's pseudo standard error (11 contrasts)" in caption
    )
    findings = text.split("## Findings")[1].split("\n## ")[0]
    assert (
        "Confounded by the design: each main effect carries ±1/3 of up to 21 two-factor interactions of the "
        "other switches (partial aliasing)." in findings
    )


def _docs_loadings() -> dict[int, str]:
    table = DOCS.read_text().split("<!-- screen loadings -->")[1]
    return {int(n): w.strip() for n, w in re.findall(r"^\| (\d+) \| ([^|]+) \|", table, flags=re.M)}


def test_the_documented_loadings_of_each_screen_size_are_its_own() -> None:
    """docs/concepts/designs.md lists, per screen size pyDOE offers, how a two-factor interaction loads on the
    main effects; each is what the design's alias matrix gives, with every column a switch and with the fewest."""
    documented = _docs_loadings()
    sizes = [n for n in range(8, 49, 4) if n not in (28, 36, 44)]
    assert sorted(documented) == sizes
    for n in sizes:
        for k in sorted({n - 4, n - 1}):
            s = structure(screens.plackett_burman(k)[:, :k], [f"x{i}" for i in range(k)], interactions=False)
            assert screens.loadings_text(s) == documented[n], (n, k)


def _grid(k: int) -> dict:
    return dict(list(SWITCHES.items())[:k])


def test_the_effects_csv_method_says_lenth_where_lenths_test_read_the_row(tmp_path, store) -> None:
    planned(tmp_path, store, "full", "full", seeds=1, grid=_grid(4))
    fac = effects.factorial(frames.load(store, "full"))
    assert fac is not None
    eff = effects.effects(fac)
    assert (eff["test"] == stats.LENTH).any()
    assert ((eff["method"] == effects.LENTH_PSE) == (eff["test"] == stats.LENTH)).all()


def test_the_effect_column_states_the_interactions_scale_twice_the_textbooks_ab(tmp_path, store) -> None:
    """Box, Hunter & Hunter's AB is the mean where the product of the two columns is +1 minus where it is -1;
    the table's interaction, as its header says, is twice that."""
    p = planned(tmp_path, store, "full", "full", seeds=3, grid=_grid(2))
    data = frames.load(store, "full")
    fac = effects.factorial(data)
    assert fac is not None
    eff = effects.effects(fac)
    y = frames.replicates(data).mean(axis=1)
    product = pd.Series({t.variant: np.prod(list(coded(t, _grid(2)).values())) for t in p.trials})[y.index]
    textbook = y[product > 0].mean() - y[product < 0].mean()
    assert eff.loc[eff["term"] == "interaction", "effect"].iloc[0] == pytest.approx(2 * textbook, abs=1e-9)
    report("full", store=store, out=tmp_path / "reports", formats=["md"])
    text = (tmp_path / "reports" / "full" / "report.md").read_text().split("## Effects of each knob")[1]
    assert f"| {EFFECT_HEADER} |" in text and "twice the textbook's AB" in EFFECT_HEADER


def test_a_resolution_iv_main_effect_names_the_three_factor_interactions_it_assumes_away(tmp_path, store) -> None:
    """2^(4-1), I = tau x mu x kappa_priv x bounded: each main effect is also the other three's interaction."""
    p = planned(tmp_path, store, "half", {"fractional": {"resolution": 4}}, seeds=2, grid=_grid(4))
    assert p.design is not None and p.design.structure().resolution == 4
    eff = designed.effects(frames.load(store, "half"), p.design)
    for name in NAMES[:4]:
        others = " x ".join(n for n in NAMES[:4] if n != name)
        row = eff[eff["factor"] == name].iloc[0]
        assert f"{others} (three-factor, assumed zero)" in row["aliases"], name
    report("half", store=store, out=tmp_path / "reports", formats=["md"])
    text = (tmp_path / "reports" / "half" / "report.md").read_text().split("## Effects of each knob")[1]
    assert f"| {EFFECT_HEADER} |" in text
    assert (
        "Resolution IV: main effects are confounded with three-factor interactions (tau with mu x kappa_priv x "
        "bounded; mu with tau x kappa_priv x bounded;" in text
    )


def test_a_one_seed_screen_read_from_another_baseline_keeps_its_dummy_contrasts(tmp_path, store) -> None:
    """`report --baseline` on a cell where some switches are on: their effects change sign, and Lenth's test, still
    over the same 11 contrasts (dummies included), gives every term the p it had."""
    p = planned(tmp_path, store, "screen", {"screening": "plackett-burman"}, seeds=1, pair=0.0)
    assert p.design is not None
    planned_eff = designed.effects(frames.load(store, "screen"), p.design)
    moved = next(v for v, levels in p.design.runs.items() if sum(levels) >= 3)
    data = frames.load(store, "screen", baseline=moved)
    assert data.design is not None
    eff = designed.effects(data, data.design)
    sign = np.where(p.design.runs[moved], -1.0, 1.0)
    assert eff["effect"].to_numpy() == pytest.approx(sign * planned_eff["effect"].to_numpy(), abs=1e-9)
    assert eff["p"].to_numpy() == pytest.approx(planned_eff["p"].to_numpy(), abs=1e-12)


@pytest.mark.parametrize("k", [3, 5, 7, 8])
def test_what_the_plan_says_of_a_one_seed_screens_error_is_what_its_report_tests_with(tmp_path, store, k) -> None:
    """At every size: the contrasts the plan names (the switches' and the dummies') are those Lenth's test reads,
    each p as an independent Lenth's test over them gives; too few for the test (4 cells), no test."""
    grid = _grid(k)
    p = planned(tmp_path, store, "screen", {"screening": "plackett-burman"}, seeds=1, grid=grid, pair=0.0)
    assert p.design is not None
    line = next(x for x in p.design.lines(1) if "a screen fits main effects only" in x)
    eff = designed.effects(frames.load(store, "screen"), p.design)
    if "too few for Lenth's test" in line:
        assert not (eff["test"] == stats.LENTH).any() and eff["p"].isna().all()
        return
    said = re.search(r"over (\d+) contrasts|off the (\d+) main effects", line)
    assert said is not None
    m = int(said.group(1) or said.group(2))
    full = screens.plackett_burman(k)
    full = full * -full[0]
    rows = {tuple(row[:k]): row for row in full.tolist()}
    cols = np.array([rows[tuple(r)] for r in p.design.coded(p.variants).tolist()])
    contrasts = cols.T @ means(store, "screen", p.variants) / (len(cols) / 2)
    found = lenth.test(contrasts, np.ones(len(contrasts)))
    assert found is not None and m == len(contrasts) == len(cols) - 1
    assert eff["p"].to_numpy() == pytest.approx(found.p[:k], abs=1e-12)


def test_a_crossed_screen_reads_each_strata_error_off_its_own_dummy_contrasts(tmp_path, store) -> None:
    """`crossed: [train.weight_decay]` runs the 12-cell screen at each value: each stratum is tested by Lenth's test
    over its own 11 contrasts."""
    grid = {**SWITCHES, "train.weight_decay": [0.0, 0.05]}
    design = {"screening": {"crossed": ["train.weight_decay"]}}
    p = planned(tmp_path, store, "screen", design, seeds=1, grid=grid, pair=0.0)
    assert p.design is not None and len(p.variants) == 24
    eff = designed.effects(frames.load(store, "screen"), p.design)
    assert len(eff) == 16 and set(eff["test"]) == {stats.LENTH}
    full = screens.plackett_burman(8)
    full = full * -full[0]
    rows = {tuple(row[:8]): row for row in full.tolist()}
    for stratum in dict.fromkeys(p.design.strata.values()):
        cells = [v for v in p.variants if p.design.strata[v] == stratum]
        cols = np.array([rows[tuple(r)] for r in p.design.coded(cells).tolist()])
        found = lenth.test(cols.T @ means(store, "screen", cells) / 6, np.ones(11))
        assert found is not None
        got = eff[eff["factor"].str.endswith(f"({stratum})")]
        assert got["p"].to_numpy() == pytest.approx(found.p[:8], abs=1e-12), stratum
