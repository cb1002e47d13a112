"""The tests behind best or tied, shown (issue 51 item 2): each variant against its group's best in the report's
"Best or tied" table and best.csv, with p, Δ, interval and the tie's MDD, on real SQLite stores filled with scripted
scores (tests/synthetic.py), every figure recomputed here by hand."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import TINY, write_sweeps
from scipy import stats as sps
from synthetic import fill

from ablate import evidence
from ablate.planning.plan import Plan, plan
from ablate.reporting import advice, plots, report
from ablate.store import Store

#: Ten seeds' shared effect (data order, initialisation): every variant moves with it.
SHIFT = [0.3, -1.2, 0.8, 0.0, -0.4, 1.1, -0.7, 0.5, -0.2, 0.6]
CSAN, SOFT, GAUSS = (
    "CSaN (tau, mu, private; unit readout), attn-FFN",
    "Softmax, attn-FFN",
    "Gaussian kernel (sigma0=1.0), attn-FFN",
)
#: Each kind's score above the shared 70 + SHIFT: CSaN best, +0.5 +- 1 over softmax (a tie), Gaussian 3 below
#: softmax +- 0.2 (CSaN beats it).
OFFSET = {
    "softmax": lambda s: 0.0,
    "csan": lambda s: 0.5 + (-1) ** s,
    "gaussian": lambda s: -3 + 0.2 * (-1) ** s,
}


@pytest.fixture
def store(tmp_path):
    with Store(f"sqlite:///{tmp_path / 't.sqlite'}") as s:
        yield s


def three(store: Store, tmp_path: Path, seeds: int, kinds: list[str] | None = None) -> Plan:
    kinds = kinds or list(OFFSET)
    spec = {"base": TINY, "grid": {"attention.kind": kinds}, "seeds": seeds, "baseline": {"attention.kind": kinds[0]}}
    p = plan(write_sweeps(tmp_path / "three.yaml", {"three": spec}), "three")
    fill(store, p, lambda t: 70 + SHIFT[t.axes["seed"]] + OFFSET[t.axes["attention.kind"]](t.axes["seed"]))
    return p


def section(md: str, title: str) -> str:
    return md.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def rows(text: str) -> dict[str, list[str]]:
    """A Markdown table's body rows by their first cell."""
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("| ")]
    return {c[0]: c[1:] for c in cells[1:]}


def test_a_tie_shows_each_variant_against_the_best_with_its_test_and_mdd(store, tmp_path):
    """CSaN (best mean) ties with softmax and beats Gaussian: both rows carry pairs, Δ = best - variant with its t
    interval, p, Holm's p over the k = 2 comparisons, and the MDD at α/2 at the SD of the differences; the caption
    says that tied is not equivalent, and the Findings' tied line points to the table."""
    three(store, tmp_path, 10)
    report("three", store=store, out=tmp_path / "r", formats=["md", "csv"])
    md = (tmp_path / "r" / "three" / "report.md").read_text()
    table = section(md, "Best or tied")
    diffs = {"softmax": [OFFSET["csan"](s) for s in range(10)],
             "gaussian": [OFFSET["csan"](s) - OFFSET["gaussian"](s) for s in range(10)]}  # fmt: skip
    p = {k: sps.ttest_1samp(d, 0).pvalue for k, d in diffs.items()}
    low, high = sorted(p, key=p.__getitem__)
    holm = {low: min(2 * p[low], 1), high: max(min(2 * p[low], 1), p[high])}
    assert holm["softmax"] > evidence.ALPHA > holm["gaussian"]  # a tie with softmax, Gaussian beaten

    def expect(kind: str, verdict: str) -> list[str]:
        d = np.array(diffs[kind])
        sd = float(np.std(d, ddof=1))
        lo, hi = sps.t.interval(0.95, 9, loc=d.mean(), scale=sd / math.sqrt(10))
        q = sps.t.ppf(1 - evidence.ALPHA / 2 / 2, 9) + sps.t.ppf(advice.POWER, 9)  # α/m, m = 2
        mean = 70 + np.mean(SHIFT) + np.mean([OFFSET[kind](s) for s in range(10)])
        pv = "<0.001" if p[kind] < 0.001 else f"{p[kind]:.3f}"
        adj = "<0.001" if holm[kind] < 0.001 else f"{holm[kind]:.3f}"
        return [f"{mean:.2f}", "10", f"{d.mean():+.2f} [{lo:+.2f}, {hi:+.2f}]", f"{pv} t", adj,
                f"{q * sd / math.sqrt(10):.2f} (SD {sd:.3f})", verdict]  # fmt: skip

    got = rows(table)
    assert list(got) == [f"**{next(iter(got))[2:-2]}**", CSAN, SOFT, GAUSS]  # the group's row, then best first
    assert got[CSAN][:3] == [f"{70 + np.mean(SHIFT) + 0.5:.2f}", "", "best mean"]
    assert got[SOFT] == expect("softmax", "tied") and got[SOFT][2] == "+0.50 [-0.25, +1.25]"
    assert got[GAUSS] == expect("gaussian", "worse than the best")
    assert "Tied is not equivalent: a tie says these seeds do not show the best better" in table
    assert "at α/m" in table and "Holm over the group's m comparisons with the best (m = 2)" in table
    tied = next(line for line in section(md, "Findings").splitlines() if line.startswith("| tied |"))
    assert f"{CSAN} / {SOFT}: the best mean" in tied and "Tied is not equivalent: Best or tied gives" in tied
    csv = pd.read_csv(tmp_path / "r" / "three" / "best.csv")
    assert csv["verdict"].fillna("").tolist() == ["", "tied", "worse than the best"]
    assert csv["p_adj"].iloc[1:].tolist() == pytest.approx([holm["softmax"], holm["gaussian"]])
    assert csv["level"].iloc[1:].tolist() == pytest.approx([evidence.ALPHA / 2] * 2)


def test_no_mdd_where_the_exact_test_cannot_reach_the_tie_level(store, tmp_path):
    """6 seeds, k = 2: the sign-flip test's smallest p, 2/64 = 0.031, is not below α/2 = 0.025, so no difference is
    detectable at these pairs; the table says none, and why, instead of a t-formula MDD."""
    three(store, tmp_path, 6)
    report("three", store=store, out=tmp_path / "r", formats=["md"])
    table = section((tmp_path / "r" / "three" / "report.md").read_text(), "Best or tied")
    got = rows(table)
    assert got[SOFT][3].endswith(" e") and got[SOFT][5].startswith("none (SD ")
    assert got[GAUSS][5].startswith("none (SD ")
    assert "none: at 6 pairs the exact sign-flip test's smallest p, 2/2^n, is not below α/m" in table


def test_a_winner_lists_every_comparison_it_won(store, tmp_path):
    """Softmax 3 points above Gaussian (+- 0.2 over 10 seeds): best, and the one row says worse than the best; the
    Findings' best line points to the table."""
    three(store, tmp_path, 10, kinds=["softmax", "gaussian"])
    report("three", store=store, out=tmp_path / "r", formats=["md"])
    md = (tmp_path / "r" / "three" / "report.md").read_text()
    got = rows(section(md, "Best or tied"))
    assert (
        got[SOFT][2] == "best mean" and got[GAUSS][2].startswith("+3.00 [") and got[GAUSS][6] == "worse than the best"
    )
    best = next(line for line in section(md, "Findings").splitlines() if line.startswith("| best |"))
    assert f"{SOFT} is better than every other variant (largest p adj <0.001; each test in Best or tied)." in best


def test_the_forest_draws_each_difference_with_its_interval_and_mdd_band(store, tmp_path):
    """The figure beside the table: one point per variant at Δ = best - variant with its interval as error bar, a
    band of ± its MDD behind it, the variant's label on its row; report.md shows it in the Best or tied section."""
    three(store, tmp_path, 10)
    report("three", store=store, out=tmp_path / "r", formats=["md", "csv"])
    assert "![each variant against the best](best.png)" in section(
        (tmp_path / "r" / "three" / "report.md").read_text(), "Best or tied"
    )
    frame = pd.read_csv(tmp_path / "r" / "three" / "best.csv", keep_default_na=False, na_values=[""])
    labels = pd.Series(dtype=str)  # no labels: each row is labelled by its variant key
    fig = plots.best_figure(frame, labels, "test.top1")
    assert fig is not None
    [ax] = fig.axes
    rows = frame.iloc[1:]
    assert [t.get_text() for t in ax.texts] == list(rows["variant"])  # the rows' labels (plots._rows)
    bars = sorted(x for p in ax.patches for x in (p.get_x(), p.get_x() + p.get_width()))
    assert bars == pytest.approx(sorted([*-rows["mdd"], *rows["mdd"]]))
    points = [tuple(line.get_xdata()) for line in ax.lines if line.get_marker() == "o"]
    assert sorted(x for xs in points for x in xs) == pytest.approx(sorted(rows["delta"]))
    spans = [seg for c in ax.collections for seg in getattr(c, "get_segments", lambda: [])()]
    ends = sorted(x for s in spans if len(s) == 2 and s[0][1] == s[1][1] for x in (s[0][0], s[1][0]))
    assert ends == pytest.approx(sorted([*rows["lo"], *rows["hi"]]))


def test_under_cross_validation_the_interval_and_mdd_carry_the_resampling_correction(store, tmp_path):
    """3-fold cross-validation repeated 4 times: 12 fold differences, whose variance the corrected resampled t
    inflates by 1/12 + 1/2; the Best or tied row's interval and MDD (k = 1: at α) are those, by hand."""
    base = {"task": "mil", "data": {"name": "musk1", "folds": 3}, "model": {"size": "synpool"},
            "attention": {"kind": "syn"}, "train": {"epochs": 1}}  # fmt: skip
    grid = {"attention.steps": [0, 1], "data.split_seed": [0, 1, 2, 3], "data.fold": [0, 1, 2]}
    spec = {"base": base, "grid": grid, "seeds": 1, "baseline": {"attention.steps": 0}}
    p = plan(write_sweeps(tmp_path / "cv.yaml", {"cv": spec}), "cv")
    noise = dict(zip((t.key for t in p.trials), np.random.default_rng(5).normal(0, 0.02, len(p.trials))))
    fill(store, p, lambda t: 0.8 + 0.01 * t.axes["attention.steps"] + noise[t.key])
    report("cv", store=store, out=tmp_path / "r", formats=["csv"])
    row = pd.read_csv(tmp_path / "r" / "cv" / "best.csv").iloc[1]
    trials = store.trials_frame("cv")
    by = trials.pivot_table(index=["axis.data.split_seed", "axis.data.fold"], columns="variant", values=p.metric)
    d = (by[row["best"]] - by[row["variant"]]).to_numpy()
    sd, scale = float(np.std(d, ddof=1)), math.sqrt(1 / 12 + 1 / 2)
    half = sps.t.ppf(0.975, 11) * sd * scale
    assert row["test"] == "corrected resampled t" and row["pairs"] == 12 and row["k"] == 1
    assert (row["lo"], row["hi"]) == pytest.approx((d.mean() - half, d.mean() + half))
    assert row["mdd"] == pytest.approx((sps.t.ppf(0.975, 11) + sps.t.ppf(advice.POWER, 11)) * sd * scale)
