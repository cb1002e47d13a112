"""The half-normal (Daniel) reading of an unreplicated design: Lenth's and Dong's pseudo standard errors, their
simulated margins ME and SME, checked against a textbook example and against fresh simulations; and the report
section that draws them for every sweep whose terms Lenth's test read."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import TINY, write_sweeps
from scipy import integrate
from scipy import stats as sps
from synthetic import fill

from ablate.evidence import boxmeyer, lenth
from ablate.planning.plan import plan
from ablate.reporting import designed, effects, frames, halfnormal, plots, report
from ablate.reporting.stats import ALPHA, LENTH
from ablate.store import Store

FILTRATION = [45, 71, 48, 65, 68, 60, 80, 65, 43, 100, 45, 104, 75, 86, 70, 96]
"""Montgomery, Design and Analysis of Experiments, Example 6.2: filtration rate of a 2^4 unreplicated factorial
(A temperature, B pressure, C formaldehyde concentration, D stirring rate), in standard order (1), a, b, ab, ..."""
PUBLISHED = {"A": 21.625, "B": 3.125, "C": 9.875, "D": 14.625, "AB": 0.125, "AC": -18.125, "AD": 16.625,
             "BC": 2.375, "BD": -0.375, "CD": -1.125, "ABC": 1.875, "ABD": 4.125, "ACD": -1.625, "BCD": -2.625,
             "ABCD": 1.375}  # fmt: skip
"""The effect estimates Montgomery publishes for it (Table 6.11); the active ones he names: A, C, D, AC, AD."""


def yates() -> dict[str, float]:
    """The 15 effects of FILTRATION, each the mean at + minus the mean at - of its column of signs."""
    signs = np.array(list(itertools.product([-1, 1], repeat=4)))[:, ::-1]  # standard order: A varies fastest
    y = np.array(FILTRATION, dtype=float)
    out = {}
    for r in range(1, 5):
        for term in itertools.combinations(range(4), r):
            col = np.prod(signs[:, term], axis=1)
            out["".join("ABCD"[i] for i in term)] = float(col @ y / 8)
    return out


def test_the_filtration_example_reads_as_the_textbook_reads_it() -> None:
    """From the published data: the published effects; Lenth's PSE 1.5 x 1.75 = 2.625 (the median of the ten |c|
    below 2.5 s0 = 9.84); Dong's the root mean square of those ten. The textbook's margins are Lenth's
    t-approximation (t on m/3 = 5 df: ME = 6.75, SME = 13.70), which is conservative: the simulated ones are
    narrower, and both name A, C, D, AC, AD past ME and all of them but C past SME."""
    eff = yates()
    assert eff == pytest.approx(PUBLISHED, abs=1e-12)
    c = np.array(list(eff.values()))
    found = lenth.margins(c)
    assert found.pse == pytest.approx(2.625, abs=1e-12)
    ten = np.sort(np.abs(c))[:10]
    assert lenth.margins(c, lenth.DONG).pse == pytest.approx(np.sqrt(np.mean(ten**2)), abs=1e-12)
    gamma = (1 + 0.95 ** (1 / 15)) / 2
    textbook = sps.t.ppf(0.975, 5) * 2.625, sps.t.ppf(gamma, 5) * 2.625
    assert textbook == pytest.approx((6.75, 13.70), abs=0.005)
    assert found.me < textbook[0] and found.sme < textbook[1]
    for me, sme in ((found.me, found.sme), textbook):
        assert {k for k, v in eff.items() if abs(v) > me} == {"A", "C", "D", "AC", "AD"}
        assert {k for k, v in eff.items() if abs(v) > sme} == {"A", "D", "AC", "AD"}


@pytest.mark.parametrize("method", lenth.METHODS)
@pytest.mark.parametrize("m", [7, 15])
def test_the_margins_hold_their_rates_on_fresh_null_designs(method: str, m: int) -> None:
    """ME is crossed by 5% of terms, SME by the largest term of 5% of designs, on null designs drawn apart from the
    ones the margins were simulated from; Lenth's ME is Ye & Hamada's critical value (2.30 for 7 terms, 2.16 for
    15)."""
    c = np.random.default_rng(12345).standard_normal((20_000, m))
    t = np.abs(c) / np.array([lenth.pse(row, method) for row in c])[:, None]
    critical = lenth.margins(np.linspace(-1, 1, m), method)
    me, sme = critical.me / critical.pse, critical.sme / critical.pse
    assert np.mean(t > me) == pytest.approx(0.05, abs=0.004)
    assert np.mean(t.max(axis=1) > sme) == pytest.approx(0.05, abs=0.006)
    if method == lenth.LENTH:
        assert me == pytest.approx({7: 2.30, 15: 2.16}[m], abs=0.01)


def test_dongs_pse_varies_less_where_the_active_terms_stand_clear_of_the_trim() -> None:
    """What lenth's docstring claims: 4 active terms of 15 at 10 sigma, Dong's PSE has the smaller root mean square
    error about sigma = 1 (0.23 against Lenth's 0.35 over these designs)."""
    rng = np.random.default_rng(7)
    c = rng.standard_normal((3000, 15))
    c[:, :4] += 10 * rng.choice([-1, 1], size=(3000, 4))
    error = {m: np.sqrt(np.mean((np.array([lenth.pse(row, m) for row in c]) - 1) ** 2)) for m in lenth.METHODS}
    assert error[lenth.DONG] == pytest.approx(0.23, abs=0.02) and error[lenth.LENTH] == pytest.approx(0.35, abs=0.02)


GRID = {"attention.tau": [False, True], "attention.mu": [False, True], "attention.kappa_priv": [False, True],
        "attention.bounded": [False, True], "attention.kappa_pub": ["off", "unit"],
        "model.stack": ["pure", "alternating"]}  # fmt: skip


@pytest.fixture
def store(tmp_path: Path):
    with Store(f"sqlite:///{tmp_path / 'h.sqlite'}") as s:
        yield s


def sweep(tmp_path: Path, store: Store, name: str, grid: dict, value, seeds: int = 1, design=None):  # type: ignore[no-untyped-def]
    body = {"base": {**TINY, "attention": {"kind": "csan"}}, "grid": grid, "seeds": seeds,
            "baseline": {a: v[0] for a, v in grid.items()}, **({"design": design} if design else {})}  # fmt: skip
    p = plan(write_sweeps(tmp_path / f"{name}.yaml", {name: body}), name)
    fill(store, p, value)
    return p


def filtration(t) -> float:  # type: ignore[no-untyped-def]
    """Montgomery's run whose levels the trial's first four axes take (A = tau, ..., D = bounded)."""
    index = sum(2**i for i, a in enumerate(list(GRID)[:4]) if t.axes[a] == GRID[a][1])
    return float(FILTRATION[index])


def test_a_one_seed_full_grid_reports_the_textbook_effects_with_its_half_normal_plot(tmp_path, store) -> None:
    """Montgomery's data as a one-seed 2^4 grid: the main effects are the published ones, an interaction twice the
    published (ablate's is the difference of conditional effects), and the report draws the half-normal plot and
    names the terms past Lenth's margins."""
    grid = dict(list(GRID.items())[:4])
    sweep(tmp_path, store, "filt", grid, filtration)
    eff = effects.effects(effects.factorial(frames.load(store, "filt")))  # type: ignore[arg-type]
    got = dict(zip(eff["factor"], eff["effect"]))
    assert [got[n] for n in ("tau", "mu", "kappa_priv", "bounded")] == pytest.approx([21.625, 3.125, 9.875, 14.625])
    assert got["tau x kappa_priv"] == pytest.approx(2 * -18.125) and got["tau x bounded"] == pytest.approx(2 * 16.625)
    report("filt", store=store, out=tmp_path / "r", formats=["md"])
    md = (tmp_path / "r" / "filt" / "report.md").read_text().split("## Effects of each knob")[1]
    assert "Half-normal (Daniel) plot" in md and "halfnormal.png" in md
    # the table's 10 terms on the book's scale: |c| median 6.5, none above 2.5 x 9.75, so PSE = 1.5 x 6.5 for a main
    # effect; with half the terms active Lenth's noise is inflated and only A passes ME (the book's 15 terms: 5)
    assert "10 terms read together; Lenth's pseudo standard error (9.750 " in md
    assert "Past ME (active at the per-term 5% rate): tau;" in md
    assert (tmp_path / "r" / "filt" / "halfnormal.png").stat().st_size > 1000


def sparse(t) -> float:  # type: ignore[no-untyped-def]
    """Two active axes among six and a per-cell noise of SD 0.1 drawn from the cell's levels."""
    x = [1 if t.axes[a] == v[1] else -1 for a, v in GRID.items()]
    noise = np.random.default_rng([(v + 1) // 2 for v in x]).normal(0, 0.1)
    return 80 + 1.0 * x[0] + 0.5 * x[5] + noise


def test_the_terms_past_me_are_those_whose_unadjusted_p_is_under_5_percent(tmp_path, store) -> None:
    """ME is the cut of the table's own p (both from one simulated null), and the words list exactly the terms past
    each margin: Lenth's and Dong's, ME and SME."""
    p = sweep(tmp_path, store, "quarter", GRID, sparse, design={"fractional": {"resolution": 4}})
    assert p.design is not None
    eff = designed.effects(frames.load(store, "quarter"), p.design)
    [screen] = halfnormal.screens(eff)
    assert set(screen.beyond(lenth.LENTH, "me")) == set(eff.loc[eff["p"] < ALPHA, "factor"])
    assert {"tau", "stack"} <= set(screen.beyond(lenth.LENTH, "sme"))
    c = eff["effect"] / np.where(eff["term"] == "main", 1.0, 2.0)  # an interaction (4 b) has twice a main's (2 b) SE
    assert np.allclose(screen.t, c / lenth.pse(c.to_numpy()))
    report("quarter", store=store, out=tmp_path / "r", formats=["md"])
    assert (tmp_path / "r" / "quarter" / "halfnormal.png").exists()


def test_a_replicated_sweep_gets_no_half_normal_plot(tmp_path, store) -> None:
    """Three seeds test each term over replicates: no Lenth's test, so no half-normal section or figure."""
    sweep(tmp_path, store, "rep", dict(list(GRID.items())[:4]), lambda t: filtration(t) + t.axes["seed"], seeds=3)
    report("rep", store=store, out=tmp_path / "r", formats=["md"])
    assert "Half-normal" not in (tmp_path / "r" / "rep" / "report.md").read_text()
    assert not (tmp_path / "r" / "rep" / "halfnormal.png").exists()


def test_the_words_name_the_terms_past_each_margin_of_each_method() -> None:
    """Scripted t's whose ME and SME sets differ, by Lenth's and by Dong's margins: each list is the one its
    sentence claims."""
    t = np.r_[9.0, -3.0, 2.6, np.linspace(-1.2, 1.2, 12)]
    terms = [f"x{i}" for i in range(len(t))]
    margins = {m: lenth.margins(t, m) for m in lenth.METHODS}
    screen = halfnormal.Screen("", terms, t, 0.5, margins, boxmeyer.posterior(t))
    lists = {(m, g): ", ".join(screen.beyond(m, g)) or "none" for m in lenth.METHODS for g in ("me", "sme")}
    assert lists[lenth.LENTH, "me"] == "x0, x1, x2" and lists[lenth.LENTH, "sme"] == "x0"
    assert lists[lenth.DONG, "me"] != lists[lenth.DONG, "sme"]
    text = halfnormal.words([screen], "val.top1")
    assert f"Past ME (active at the per-term 5% rate): {lists[lenth.LENTH, 'me']}; " in text
    assert f"past SME (at the family's 5% rate): {lists[lenth.LENTH, 'sme']}. " in text
    assert f"past ME: {lists[lenth.DONG, 'me']}; past SME: {lists[lenth.DONG, 'sme']}." in text
    assert "(0.500 val.top1 for a main effect)" in text
    likely = [f"{terms[i]} ({screen.active[i]:.2f})" for i in np.argsort(-screen.active) if screen.active[i] > 0.5]
    assert f"above 0.5: {', '.join(likely)}." in text and 1 <= len(likely) < len(t)


REACTOR = [61, 53, 63, 61, 53, 56, 54, 61, 69, 61, 94, 93, 66, 60, 95, 98, 56, 63, 70, 65, 59, 55, 67, 65, 44, 45, 78,
           77, 49, 42, 81, 82]  # fmt: skip
"""Box, Hunter & Hunter's reactor experiment (Statistics for Experimenters, 2nd ed., the 2^5 example that Box and
Meyer's analysis is shown on): % reacted, standard order; factors 1 feed rate, 2 catalyst, 3 agitation,
4 temperature, 5 concentration. Its published effects: 2 = 19.5, 4 = 10.75, 5 = -6.25, 24 = 13.25, 45 = -11.0,
the rest within 2.5 of zero."""


def test_box_meyer_finds_the_reactors_five_active_effects_as_quadrature_does() -> None:
    """The 31 effects of the reactor data: the published five, and those five (only) more likely active than not;
    each posterior equals an independent quadrature over sigma of the same model."""
    signs = np.array(list(itertools.product([-1, 1], repeat=5)))[:, ::-1]
    terms = [t for r in range(1, 6) for t in itertools.combinations(range(5), r)]
    c = np.array([np.prod(signs[:, t], axis=1) @ np.array(REACTOR, dtype=float) / 16 for t in terms])
    names = ["".join(str(i + 1) for i in t) for t in terms]
    big = {n: v for n, v in zip(names, c) if abs(v) > 2.5}
    assert big == pytest.approx({"2": 19.5, "4": 10.75, "5": -6.25, "24": 13.25, "45": -11.0})
    got = boxmeyer.posterior(c)
    assert {n for n, p in zip(names, got) if p > 0.5} == set(big)
    a, k = boxmeyer.ALPHA, boxmeyer.K

    def joint(sigma: float) -> float:
        each = (1 - a) * np.exp(-(c**2) / (2 * sigma**2)) + a / k * np.exp(-(c**2) / (2 * k**2 * sigma**2))
        return float(np.prod(each) / sigma ** (len(c) + 1))

    def active(sigma: float, i: int) -> float:
        odds = (1 - a) * k / a * np.exp(-(c[i] ** 2) * (1 - 1 / k**2) / (2 * sigma**2))
        return joint(sigma) / (1 + odds)

    z = integrate.quad(joint, 0.1, 200, points=[1, 2, 5], limit=400)[0]
    want = [integrate.quad(active, 0.1, 200, args=(i,), points=[1, 2, 5], limit=400)[0] / z for i in range(len(c))]
    assert got == pytest.approx(want, abs=1e-5)


def test_each_family_lenths_test_read_is_its_own_screen_with_its_own_margins() -> None:
    """Two strata read apart (a crossed axis, or two factorial parts): two screens in table order, each with the
    margins of its own number of terms, and a plot of one panel each; rows no Lenth's test read are left out."""
    t = {"a": np.r_[8.0, np.linspace(-1, 1, 7)], "b": np.r_[-5.0, 4.0, np.linspace(-1, 1, 13)]}
    rows = [{"factor": f"{s}{i}", "term": "main", "effect": 2 * v, "t": v, "test": LENTH, "screen": s,
             "terms": len(values)} for s, values in t.items() for i, v in enumerate(values)]  # fmt: skip
    rows.append({"factor": "other", "term": "main", "effect": 1.0, "t": np.nan, "test": "paired t", "screen": "",
                 "terms": 0})  # fmt: skip
    found = halfnormal.screens(pd.DataFrame(rows))
    assert [s.name for s in found] == ["a", "b"] and [len(s.t) for s in found] == [8, 15]
    for s in found:
        assert s.margins[lenth.LENTH] == lenth.margins(t[s.name]) and s.unit == 2.0
        sme = s.margins[lenth.LENTH].sme
        assert s.beyond(lenth.LENTH, "sme") == [f"{s.name}{i}" for i in np.argsort(-np.abs(s.t)) if abs(s.t[i]) > sme]
    assert found[0].beyond(lenth.LENTH, "sme") == ["a0"] and found[1].beyond(lenth.LENTH, "sme")[0] == "b0"
    one, two = (plots.halfnormal_plot(x) for x in (found[:1], found))
    assert one is not None and two is not None and len(two) > len(one)


def test_a_family_shown_in_part_gets_no_half_normal_reading_and_says_why() -> None:
    """A table that leaves out some of the terms Lenth's test read (a screen's dummy contrasts measure the noise
    without being rows) cannot give the family's margins from its rows: no screen, and a sentence that says so."""
    t = np.r_[8.0, -3.0, np.linspace(-1, 1, 13)]
    t = t / lenth.pse(t)
    rows = [{"factor": f"x{i}", "term": "main", "effect": v, "t": v, "test": LENTH, "screen": "", "terms": len(t)}
            for i, v in enumerate(t)]  # fmt: skip
    whole = pd.DataFrame(rows)
    assert len(halfnormal.screens(whole)) == 1 and halfnormal.missing(whole) is None
    shown = whole.iloc[:9]
    assert halfnormal.screens(shown) == [] and "(9 of its 15; the others only measure" in str(halfnormal.missing(shown))
