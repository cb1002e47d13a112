"""Reports on real SQLite stores filled through the store's write API with known values: statistics
against hand computation, factorial effects against the true ones, unfinished trials, errors, output
formats (Markdown tables parse, HTML is self-contained), idempotent re-runs and the CLI."""

from __future__ import annotations

import base64
import dataclasses
import gc
import json
import math
import re
import shutil
import subprocess
import warnings
from html.parser import HTMLParser
from pathlib import Path

import matplotlib as mpl
import numpy as np
import pandas as pd
import pytest
from conftest import KINDS as REGISTERED_KINDS
from conftest import TINY, chromium, write_sweeps
from scipy import stats as sps
from synthetic import DIAGNOSTICS, EPOCH_METRICS, fill
from typer.testing import CliRunner

from ablate.cli import app
from ablate.config import TrialConfig
from ablate.planning.plan import plan
from ablate.registry import TABLES
from ablate.reporting import (
    ReportError,
    describe,
    effects,
    frames,
    ordered,
    output,
    published,
    report,
    stats,
    tables,
    uncollected,
)
from ablate.reporting.plots import pareto
from ablate.reporting.render import Section
from ablate.spec.paths import set_path
from ablate.store import Store

KINDS = {"softmax": 0, "csan": 1}
#: Hand-picked results: csan - softmax per seed = 2, 3, 1.5, 3.5 (seed 4: the baseline failed).
VALUES = {("softmax", 0): 70.0, ("softmax", 1): 71.0, ("softmax", 2): 69.0, ("softmax", 3): 72.0,
          ("csan", 0): 72.0, ("csan", 1): 74.0, ("csan", 2): 70.5, ("csan", 3): 75.5, ("csan", 4): 80.0}  # fmt: skip


@pytest.fixture
def store(tmp_path):
    with Store(f"sqlite:///{tmp_path / 'r.sqlite'}") as s:
        yield s


def planned(tmp_path: Path, name: str, **sweep):
    return plan(write_sweeps(tmp_path / f"{name}.yaml", {name: {"base": TINY, **sweep}}), name)


def pair_store(store: Store, tmp_path: Path, epochs: int = 0):
    p = planned(tmp_path, "pair", grid={"attention.kind": ["softmax", "csan"]}, seeds=5,
                baseline={"attention.kind": "softmax"})  # fmt: skip
    fill(store, p, lambda t: VALUES.get((t.axes["attention.kind"], t.axes["seed"]), math.nan),
         state=lambda t: "failed" if (t.axes["attention.kind"], t.axes["seed"]) == ("softmax", 4) else "done",
         epochs=epochs)  # fmt: skip
    return p


def read_csv(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, index_col=0)


# ------------------------------------------------------------------------------------------ statistics
def test_replicates_are_pivoted_once_and_each_caller_gets_its_own(store, tmp_path):
    """`frames.replicates` pivots the trials once per `by` (`SweepData.pivoted`): a caller changing what it got
    changes no later caller's, and a sweep's data with other trials (`dataclasses.replace`) pivots its own."""
    pair_store(store, tmp_path)
    data = frames.load(store, "pair")
    by_hand = data.trials.pivot_table(index="variant", columns="rep", values="value", aggfunc="mean", dropna=False)
    first = frames.replicates(data)
    first.iloc[:, :] = 0.0
    again = frames.replicates(data)
    pd.testing.assert_frame_equal(again, by_hand.reindex(index=data.variants.index))
    assert set(data.pivoted) == {"rep"}
    shifted = dataclasses.replace(data, trials=data.trials.assign(value=data.trials["value"] + 1))
    pd.testing.assert_frame_equal(frames.replicates(shifted), again + 1)


def test_paired_differences_and_too_few_pairs_for_a_test(store, tmp_path):
    pair_store(store, tmp_path)
    report("pair", store=store, out=tmp_path / "rep", formats=["csv"])
    v = read_csv(tmp_path / "rep" / "pair" / "variants.csv")
    csan = v[v["mixer"].str.startswith("CSaN")].iloc[0]
    base = v[v["is_baseline"]].iloc[0]
    assert csan["pairs"] == 4 and csan["n"] == 5  # seed 4 has no baseline partner: not paired, still counted
    assert csan["delta"] == pytest.approx(2.5)  # differences 2, 3, 1.5, 3.5
    # four positive differences: the exact test's smallest p is 2 / 2^4 = 0.125, so no test and no interval
    assert csan[["lo", "hi", "p", "d"]].isna().all() and csan["why"] == "4 seeds; a test needs 6"
    assert csan["mean"] == pytest.approx(74.4) and csan["std"] == pytest.approx(
        np.std([72, 74, 70.5, 75.5, 80], ddof=1)
    )
    assert base["n"] == 4 and base["done"] == 4 and base["unfinished"] == "1 failed" and base["delta"] == 0


def test_large_n_uses_the_paired_t_test():
    rng = np.random.default_rng(0)
    a, b = rng.normal(1, 1, 12), rng.normal(0, 1, 12)
    row = stats.paired(a - b).iloc[0]
    assert row["test"] == stats.T_TEST and row["p"] == pytest.approx(sps.ttest_rel(a, b).pvalue)
    assert stats.paired(np.full(3, np.nan)).iloc[0]["test"] == ""


def test_pareto_front():
    cost = np.array([1.0, 2.0, 2.0, 3.0, 4.0, np.nan])
    score = np.array([60.0, 65.0, 64.0, 65.0, 70.0, 99.0])
    assert pareto(cost, score).tolist() == [True, True, False, False, True, False]
    assert pareto(cost, -score, higher=False).tolist() == [True, True, False, False, True, False]


# --------------------------------------------------------------------------------------------- effects
def test_main_effects_and_interactions_recover_the_true_ones(store, tmp_path):
    grid = {"attention.tau": [True, False], "attention.mu": [True, False], "attention.kappa_priv": [True, False]}
    base = {**TINY, "attention": {"kind": "csan"}}
    p = plan(write_sweeps(tmp_path / "f.yaml", {"fac": {"base": base, "grid": grid, "seeds": 10, "baseline":
             {"attention.tau": False, "attention.mu": False, "attention.kappa_priv": False}}}), "fac")  # fmt: skip
    rng = np.random.default_rng(1)
    noise = {t.key: 0.05 * rng.normal() for t in p.trials}
    seed_shift = {s: rng.normal() for s in range(10)}

    def value(t):
        a = t.axes
        tau, mu, priv = a["attention.tau"], a["attention.mu"], a["attention.kappa_priv"]
        return 60 + 2 * tau + 1 * mu + 3 * priv + 0.5 * tau * mu + seed_shift[a["seed"]] + noise[t.key]

    fill(store, p, value)
    f = effects.factorial(frames.load(store, "fac"))
    assert sorted(f.factors) == sorted(grid) and f.method == effects.PAIRED and f.complete.sum() == 10
    assert all(lv == ["off", "on"] for lv in f.levels)  # the baseline's level is the reference
    eff = effects.effects(f).set_index(["term", "factor"])
    truth = {("main", "tau"): 2.25, ("main", "mu"): 1.25, ("main", "kappa_priv"): 3.0,
             ("interaction", "tau x mu"): 0.5, ("interaction", "tau x kappa_priv"): 0.0,
             ("interaction", "mu x kappa_priv"): 0.0}  # fmt: skip
    for term, true in truth.items():
        assert eff.loc[term, "effect"] == pytest.approx(true, abs=0.1), term
    # by hand, per seed: mean over cells with mu on minus mean with mu off; then the t interval over seeds
    by_seed = [np.mean([value(t) * (1 if t.axes["attention.mu"] else -1) for t in p.trials if t.axes["seed"] == s]) * 2
               for s in range(10)]  # fmt: skip
    half = sps.t.ppf(0.975, 9) * np.std(by_seed, ddof=1) / math.sqrt(10)
    row = eff.loc[("main", "mu")]
    mean = np.mean(by_seed)
    assert (row["effect"], row["lo"], row["hi"]) == pytest.approx((mean, mean - half, mean + half))
    assert eff.loc[("main", "kappa_priv"), "p"] < 1e-3 and eff.loc[("interaction", "mu x kappa_priv"), "p"] > 0.05


def test_effects_on_cell_means_when_failures_are_scattered(store, tmp_path):
    grid = {"attention.tau": [True, False], "attention.mu": [True, False]}
    p = planned(tmp_path, "scat", grid=grid, seeds=4, base={**TINY, "attention": {"kind": "csan"}},
                baseline={"attention.tau": False, "attention.mu": False})  # fmt: skip
    lost = {(True, True, 0), (True, False, 1), (False, True, 2)}  # only seed 3 is complete: pool the cells
    cell = {(True, True): [63.1, 63.3, 62.9], (True, False): [62.0, 61.8, 62.2], (False, True): [61.0, 61.1, 60.9],
            (False, False): [60.0, 60.2, 59.8, 60.0]}  # fmt: skip

    def cell_of(t):
        return t.axes["attention.tau"], t.axes["attention.mu"]

    def value(t):
        c = cell_of(t)
        done = [s for s in range(4) if (*c, s) not in lost]
        return cell[c][done.index(t.axes["seed"])] if t.axes["seed"] in done else math.nan

    fill(store, p, value, state=lambda t: "failed" if (*cell_of(t), t.axes["seed"]) in lost else "done")
    f = effects.factorial(frames.load(store, "scat"))
    assert f.method == effects.POOLED
    eff = effects.effects(f).set_index(["term", "factor"])
    means = {c: np.mean(v) for c, v in cell.items()}
    tau = (means[True, True] - means[False, True] + means[True, False] - means[False, False]) / 2
    pooled = sum(((np.array(v) - np.mean(v)) ** 2).sum() for v in cell.values()) / (13 - 4)
    se = math.sqrt(pooled * sum(0.25 / len(v) for v in cell.values()))  # weights +-1/2 on every cell
    half = sps.t.ppf(0.975, 9) * se
    row = eff.loc[("main", "tau")]
    assert (row["effect"], row["lo"], row["hi"], row["n"]) == pytest.approx((tau, tau - half, tau + half, 13))


def test_a_cell_with_no_finished_trial_gives_effects_without_numpy_warnings():
    """A 2 x 2 part estimated on cell means (no replicate complete) where one cell has no value at all (every
    trial of it failed or diverged): the effects come out, and numpy's "Mean of empty slice" and division
    warnings are not printed under the report."""
    values = np.array(
        [[[60.0, 62.0], [61.0, np.nan]], [[np.nan, 63.0], [62.0, np.nan]], [[61.0, np.nan], [60.0, np.nan]]]
    )
    f = effects.Factorial(
        ["attention.tau", "attention.mu"],
        [["off", "on"], ["off", "on"]],
        values,
        knobs=("attention.tau", "attention.mu"),
    )
    assert f.method == effects.POOLED
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        eff = effects.effects(f)
    assert len(eff) and [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == []


def test_the_effects_caption_names_the_test_its_rows_used(store, tmp_path):
    """A 2 x 2 over 6 seeds: its effects are tested by the exact sign-flip test (too few seeds for a t), which
    the caption names; over 12 seeds, the paired t-test."""
    grid = {"attention.tau": [False, True], "attention.mu": [False, True]}
    noise = [0.3, -1.2, 0.8, 0.0, -0.4, 1.1]

    def value(t) -> float:
        s = t.axes["seed"]
        return 60 + noise[s % 6] + 2 * t.axes["attention.tau"] * (1 + s % 3) + t.axes["attention.mu"] * (s % 2)

    for seeds in (6, 12):
        p = planned(tmp_path, f"s{seeds}", grid=grid, seeds=seeds, base={**TINY, "attention": {"kind": "csan"}},
                    baseline={"attention.tau": False, "attention.mu": False})  # fmt: skip
        fill(store, p, value)
        report(p.sweep, store=store, out=tmp_path / "r", formats=["md", "csv"])
        tests = set(read_csv(tmp_path / "r" / p.sweep / "effects.csv")["test"].dropna())
        caption = next(line for line in (tmp_path / "r" / p.sweep / "report.md").read_text().splitlines()
                       if line.startswith("*Factorial part"))  # fmt: skip
        said = "exact sign-flip test (below 10 replicates) p over replicates" in caption
        assert (tests, said, "paired t-test" in caption) == (({"sign-flip"}, True, False) if seeds == 6
                                                             else ({"paired t"}, False, True)), caption  # fmt: skip


def test_factorial_part_of_linked_and_conditional_grids(store, tmp_path):
    def row(stack, kind, **more):
        return {"model.stack": stack, "attention.kind": kind, **more}

    rows = [row("alternating", "softmax"), row("pure", "softmax"),
            row("pure", "softmax", **{"model.match_params": {"model.stack": "alternating"}}),
            row("pure", "csan"), row("alternating", "csan")]  # fmt: skip
    p = planned(tmp_path, "linked", linked=[rows], seeds=2, baseline=rows[0])
    fill(store, p, lambda t: 60.0 + t.axes["seed"])
    f = effects.factorial(frames.load(store, "linked"))
    assert f.factors == ["model.stack", "attention.kind"] and f.levels == [["alternating", "pure"], ["softmax", "csan"]]
    q = planned(tmp_path, "cond", grid={"attention.kind": ["softmax", "sparsemax", "ista"]}, seeds=1,
                when=[{"when": {"attention.kind": "ista"}, "grid": {"attention.steps": [1, 3]}}],
                baseline={"attention.kind": "softmax"})  # fmt: skip
    fill(store, q, lambda t: 50.0)
    g = effects.factorial(frames.load(store, "cond"))
    # ISTA's steps do not apply to the others: held at its first value (1), so ISTA joins as a level
    assert (
        g.factors == ["attention.kind"]
        and g.levels == [["softmax", "sparsemax", "ista"]]
        and g.method == effects.POOLED
    )
    assert np.isnan(effects.effects(g)["lo"]).all()  # one trial per cell: no variance to build an interval on


def test_a_knob_of_one_mixer_with_three_levels_gets_a_row_per_level(store, tmp_path):
    """`steps: [1, 2, 3]` under `when: ista`: the first part compares the kinds (steps held at 1), a second
    part within ISTA's variants has one row per level against 1; one Holm family over every row."""
    from ablate.reporting import tables

    p = planned(tmp_path, "nest", grid={"attention.kind": ["softmax", "ista"]}, seeds=10,
                when=[{"when": {"attention.kind": "ista"}, "grid": {"attention.steps": [1, 2, 3]}}],
                baseline={"attention.kind": "softmax"})  # fmt: skip
    gain = {None: 0.0, 1: 1.0, 2: 4.0, 3: 2.0}
    fill(store, p, lambda t: 60 + gain[t.axes["attention.steps"]] + t.axes["seed"] + 0.1 * t.axes["seed"] ** 2
         * (t.axes["attention.steps"] or 0))  # fmt: skip
    data = frames.load(store, "nest")
    f = effects.factorial(data)
    assert f.factors == ["attention.kind"] and f.held == {"attention.steps": "1"} and len(f.parts) == 2
    nested = f.more[0]
    assert nested.factors == ["attention.steps"] and nested.levels == [["1", "2", "3"]]
    assert nested.within == {"attention.kind": "ista"} and nested.method == effects.PAIRED
    eff = effects.effects(f).set_index(["factor", "contrast"])
    assert len(eff) == 3 and eff["p_adj"].to_numpy() == pytest.approx(stats.adjust(eff["p"].to_numpy()))
    for contrast, level in (("2 vs 1", 2), ("3 vs 1", 3)):  # per seed: gain + 0.1 seed^2 (level - 1)
        by_seed = [gain[level] - gain[1] + 0.1 * s**2 * (level - 1) for s in range(10)]
        row = eff.loc[("steps (kind=ista)", contrast)]
        assert row["effect"] == pytest.approx(np.mean(by_seed))
        assert row["p"] == pytest.approx(sps.ttest_1samp(by_seed, 0).pvalue)
    assert eff.loc[("kind", "ista vs softmax"), "effect"] == pytest.approx(1 + 0.1 * 285 / 10)
    shown = tables.effects(effects.effects(f), f, data)
    assert "(1) attention.kind: softmax, ista (attention.steps = 1); (2) within attention.kind = ista: " \
           "attention.steps: 1, 2, 3" in shown.caption  # fmt: skip
    assert "Holm-adjusted over the family of the 3 terms" in shown.caption


def test_no_interval_where_the_spread_cannot_be_estimated(store, tmp_path):
    """Two seeds whose differences are equal (in print; in floating point up to the last bits): no zero-width
    "[+19.75, +19.75]", no test, nothing called significant; the caption says why."""
    from ablate.reporting import tables

    p = planned(tmp_path, "flat", grid={"attention.kind": ["softmax", "csan"]}, seeds=2,
                baseline={"attention.kind": "softmax"})  # fmt: skip
    values = {("softmax", 0): 41.55, ("softmax", 1): 61.35, ("csan", 0): 61.3, ("csan", 1): 81.1}
    fill(store, p, lambda t: values[t.axes["attention.kind"], t.axes["seed"]])
    data = frames.load(store, "flat")
    table = frames.variant_table(data)
    shown = tables.variants(table, data)
    row = next(r for r in shown.rows if r[1].startswith("CSaN"))
    assert row[6:10] == ["+19.75 [n/a: zero spread, 2 seeds]", "-", "-", "-"]
    assert "n/a: no interval and no test: one seed, every seed with the same difference (zero spread" in shown.caption
    f = effects.factorial(data)
    eff = effects.effects(f)
    assert np.isnan(eff.loc[0, "p"]) and np.isnan(eff.loc[0, "p_adj"])
    cells = tables.effects(eff, f, data).rows[0]
    assert cells[3:7] == ["+19.75", "[n/a: zero spread, 2 seeds]", "-", "-"]
    one = planned(tmp_path, "one", grid={"attention.kind": ["softmax", "csan"]}, seeds=1,
                  baseline={"attention.kind": "softmax"})  # fmt: skip
    fill(store, one, lambda t: 60.0 + (t.axes["attention.kind"] == "csan"))
    data = frames.load(store, "one")
    shown = tables.variants(frames.variant_table(data), data)
    assert next(r for r in shown.rows if r[1].startswith("CSaN"))[6] == "+1.00 [n/a: 1 seed]"


# ------------------------------------------------------------------------------ MIL: folds x seeds, strata
@pytest.mark.parametrize("seeds", [2, 3, 6, 10])
def test_the_variant_and_effects_tables_give_the_same_pairs_the_same_test(store, tmp_path, seeds):
    """Issue 38: in a 2-seed sweep the effects table printed `+22.36 [+20.60, +24.13], p 0.004` (a t over two
    seeds) beside the variant table's refusal. The effect of the kind is the variant's paired difference per
    seed, so both tables must show the same test, p and interval: none below 6 seeds, the exact sign-flip test
    from 6, the t from 10."""
    from ablate.reporting import tables

    p = planned(tmp_path, f"s{seeds}", grid={"attention.kind": ["softmax", "csan"]}, seeds=seeds,
                baseline={"attention.kind": "softmax"})  # fmt: skip
    gain = [22.36 + 0.9 * math.sin(3 * s) for s in range(seeds)]  # consistent, different differences
    fill(store, p, lambda t: 50 + t.axes["seed"] + (gain[t.axes["seed"]] if t.axes["attention.kind"] == "csan" else 0))
    data = frames.load(store, f"s{seeds}")
    row = frames.variant_table(data).loc[p.variants[1]]
    f = effects.factorial(data)
    eff = effects.effects(f).iloc[0]
    want = {2: "", 3: "", 6: stats.SIGN_FLIP, 10: stats.T_TEST}[seeds]
    assert row["test"] == eff["test"] == want
    for col in ("lo", "hi", "p"):
        assert eff[col] == pytest.approx(row[col], nan_ok=True), col
    cell = tables.effects(effects.effects(f), f, data).rows[0]
    if want:
        assert cell[5] == tables.pvalue(row["p"]) != "-"
    else:
        assert cell[4:6] == [f"[n/a: {seeds} seeds; a test needs 6]", "-"]


def test_mil_pairs_folds_and_seeds_within_each_dataset(store, tmp_path):
    base = {"task": "mil", "data": {"name": "musk1", "folds": 3}, "model": {"size": "synpool"},
            "attention": {"kind": "syn"}, "train": {"epochs": 1}}  # fmt: skip
    grid = {"data.name": ["musk1", "elephant"], "attention.steps": [0, 1], "data.fold": [0, 1, 2]}
    p = plan(write_sweeps(tmp_path / "m.yaml", {"mil": {"base": base, "grid": grid, "seeds": 2,
                                                        "baseline": {"attention.steps": 0}}}), "mil")  # fmt: skip
    shift = {"musk1": 0.0, "elephant": 0.1}
    fill(
        store,
        p,
        lambda t: 0.8 + shift[t.axes["data.name"]] + 0.02 * t.axes["attention.steps"] + 0.001 * t.axes["data.fold"],
    )
    data = frames.load(store, "mil")
    assert data.metric == "test.auc" and set(data.trials["rep"]) == {f"{s}/{f}" for s in (0, 1) for f in (0, 1, 2)}
    table = frames.variant_table(data).set_index("label")
    row = table.loc["SynPool MIL (D=256) · elephant: Syn (I=1: concentrate; gamma=0.5)"]
    assert row["pairs"] == 6 and row["delta"] == pytest.approx(0.02)  # against elephant's baseline, not musk1's


# ------------------------------------------------------------------------------------ words, published
@pytest.mark.parametrize("kind", REGISTERED_KINDS)
def test_every_attention_kind_has_words(kind):
    cfg = TrialConfig.model_validate({"attention": {"kind": kind}}).model_dump(mode="json")
    words = describe.mixer(cfg)
    assert words.endswith(", attn-FFN") and len(words) > len(", attn-FFN")
    if kind == "csan":
        assert words.startswith("CSaN (tau, mu, private; unit readout)")


def test_variant_words_and_published_rows():
    def cfg(**kw):
        raw = {"data": {"name": "imagefolder", "path": "/x", "id": "imagenet-1k"}, "model": {"size": "swin-min"}}
        for path, v in TABLES.get("csan-imagenet").recipe.items():  # the paper's recipe: comparable runs
            set_path(raw, path, v)
        for path, v in kw.items():
            section, key = path.split("__")
            raw.setdefault(section, {})[key] = v
        return TrialConfig.model_validate(raw).model_dump(mode="json")

    pure_csan = cfg(model__stack="pure", attention__kind="csan")
    assert describe.architecture(pure_csan) == "Swin-Min"
    assert describe.mixer(pure_csan) == "CSaN (tau, mu, private; unit readout), pure attention"
    assert describe.architecture(cfg(model__size="vit-base-slim")) == "ViT-Base-Slim/16"
    found = published.match(pure_csan)
    assert found is not None
    assert (found.row.model, found.row.setting, found.row.top1, found.comparable) == (
        "Swin-Min",
        "CSaN pure attention",
        72.4,
        True,
    )
    assert found.table.source.startswith("CSaN: Selection-as-Nonlinearity")
    diamond = cfg(model__stack="pure", attention__kind="softmax", model__match_params={"model.stack": "alternating"})
    assert describe.mixer(diamond).endswith("pure attention ♢") and published.match(diamond).row.top1 == 67.5
    v2 = cfg(attention__kind="csan", model__dwconv=True)
    assert published.match(v2).row.setting == "CSaN-V2"
    head = cfg(model__size="swin-tiny", attention__kind="csan", attention__kappa_pub="head")
    assert published.match(head).row.setting == "CSaN head-wise"
    mnist = TrialConfig.model_validate({"attention": {"kind": "csan"}}).model_dump(mode="json")
    found = published.match(mnist)
    assert found is not None and not found.comparable  # for orientation only
    assert found.differs[:2] == ("size vit-tiny (published vit-base-slim)", "data mnist5k (published ImageNet-1K)")
    unnamed = TrialConfig.model_validate({"model": {"embed_dim": 16, "depths": [1], "num_heads": [1]}})
    assert published.match(unnamed.model_dump(mode="json")).differs[0] == "size unnamed (published vit-base)"
    small_batch = published.match(cfg(model__stack="pure", attention__kind="csan", train__batch_size=256))
    assert small_batch is not None and small_batch.differs == ("train.batch_size 256 (published 2048)",)
    ablated = cfg(attention__kind="csan", attention__mu=False)
    assert published.match(ablated) is None


def published_section(md: str) -> list[str]:
    """The non-empty lines of report.md's "Published numbers" section."""
    body = md.split("\n## Published numbers\n", 1)[1].split("\n## ", 1)[0]
    return [line for line in body.splitlines() if line.strip()]


def test_published_numbers_are_one_line_when_no_variant_is_comparable(store, tmp_path):
    """A sweep on other data than every published table (here digits against ImageNet-1K rows) gets one line
    saying why, not each variant's list of differences from the paper."""
    pair_store(store, tmp_path)
    report("pair", store=store, out=tmp_path / "r", formats=["md"])
    lines = published_section((tmp_path / "r" / "pair" / "report.md").read_text())
    assert lines == [
        "None comparable (the published rows are ImageNet-1K; this sweep is digits): "
        f"{TABLES.get('csan-imagenet').source}."
    ]


def test_published_numbers_in_full_when_a_variant_is_comparable(store, tmp_path):
    """Trained on the table's dataset with its recipe at a published size: measured beside published, and the
    variant at an unpublished size listed with what differs."""
    base = {"data": {"name": "imagefolder", "path": str(tmp_path), "id": "imagenet-1k"}}
    for path, v in TABLES.get("csan-imagenet").recipe.items():
        set_path(base, path, v)
    p = planned(tmp_path, "inet", base=base, grid={"model.size": ["swin-min", "swin-micro"]}, seeds=1)
    fill(store, p, lambda t: 70.0)
    report("inet", store=store, out=tmp_path / "r", formats=["md"])
    text = "\n".join(published_section((tmp_path / "r" / "inet" / "report.md").read_text()))
    assert "*Measured vs published (" in text and "| Swin-Min, original (attn-FFN) | 1.00M | 11.8M |" in text
    assert "*Not compared with the published numbers (" in text and "size swin-micro (published swin-min)" in text
    assert "None comparable" not in text


def test_a_variant_off_the_recipe_by_its_own_axis_is_not_compared(store, tmp_path):
    """A recipe axis the variant words do not say (train.epochs): the 30-epoch variant is not put beside the
    paper's 300-epoch row, though it reads the same as the 300-epoch one. Each variant's own config leaves the
    config the two share as it was."""
    base = {"data": {"name": "imagefolder", "path": str(tmp_path), "id": "imagenet-1k"}, "model": {"size": "swin-min"}}
    for path, v in TABLES.get("csan-imagenet").recipe.items():
        set_path(base, path, v)
    p = planned(tmp_path, "ep", base=base, grid={"train.epochs": [300, 30]}, seeds=1)
    fill(store, p, lambda t: 70.0)
    report("ep", store=store, out=tmp_path / "r", formats=["md"])
    text = "\n".join(published_section((tmp_path / "r" / "ep" / "report.md").read_text()))
    measured = text.split("*Measured vs published (")[0]
    assert measured.count("| Swin-Min") == 1 and "train.epochs 30 (published 300)" in text, text
    data = frames.load(store, "ep")
    shared = json.dumps(list(data.variants["config"]), sort_keys=True)
    assert sorted(frames.own_config(data, v)["train"]["epochs"] for v in data.variants.index) == [30, 300]
    assert json.dumps(list(data.variants["config"]), sort_keys=True) == shared


def test_none_comparable_names_the_differences_every_variant_shares():
    """On the table's dataset but off its recipe: the line names what all variants share, and counts the rest."""
    recipe = TABLES.get("csan-imagenet").recipe
    base = {"data": {"name": "imagefolder", "path": "/x", "id": "imagenet-1k"}, "model": {"size": "swin-min"}}
    for path, v in {**recipe, "train.batch_size": 256, "train.epochs": 100, "train.lr": 1e-3, "train.mixup": 0}.items():
        set_path(base, path, v)
    found = [published.match(TrialConfig.model_validate({**base, "attention": {"kind": k}}).model_dump(mode="json"))
             for k in ("softmax", "csan")]  # fmt: skip
    assert published.none_comparable([m for m in found if m is not None]) == (
        "None comparable (every variant differs from its nearest published row in train.batch_size 256 (published "
        "2048), train.lr 0.001 (published 0.002), train.epochs 100 (published 300) and 1 more): "
        f"{TABLES.get('csan-imagenet').source}."
    )


# --------------------------------------------------------------------- the report: files, formats, CLI
class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def md_tables(text: str) -> list[list[list[str]]]:
    """Every Markdown table of `text` as rows of cells (escaped pipes are not separators)."""
    tables, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            current.append(cells)
        elif current:
            tables.append(current)
            current = []
    return tables


def test_report_files_formats_and_unfinished_trials(store, tmp_path):
    p = planned(tmp_path, "u", grid={"attention.kind": ["softmax", "csan"], "model.stack": ["alternating", "pure"]},
                seeds=2, baseline={"attention.kind": "softmax", "model.stack": "alternating"})  # fmt: skip
    odd = {
        p.trials[1].key: "failed",
        p.trials[2].key: "diverged",
        p.trials[5].key: "running",
        p.trials[6].key: "pending",
    }
    fill(store, p, lambda t: 60.0 + 2 * (t.axes["attention.kind"] == "csan") + t.axes["seed"], epochs=3,
         state=lambda t: odd.get(t.key, "done"), names=EPOCH_METRICS + DIAGNOSTICS,
         cost=lambda t: (1_000_000 + 50_000 * (t.axes["model.stack"] == "pure"), 2_000_000_000))  # fmt: skip
    out = tmp_path / "reports"
    files = report(None, store=store, out=out)
    folder = out / "u"
    names = {f.name for f in files}
    assert {"index.html", "report.md", "trials.csv", "variants.csv", "effects.csv", "summary.json"} <= names
    assert {"variants.png", "pairing.png", "cost.png", "curves.png", "diagnostics.png", "effects.png"} <= names
    assert out / "index.html" in files

    trials = pd.read_csv(folder / "trials.csv")
    counts = {"done": 4, "failed": 1, "diverged": 1, "running": 1, "pending": 1}
    assert len(trials) == 8 and trials["state"].value_counts().to_dict() == counts
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["trials"] == 8 and summary["states"]["pending"] == 1
    variants = read_csv(folder / "variants.csv")
    assert variants["trials"].sum() == 8 and variants["done"].sum() == 4
    assert sorted(u for u in variants["unfinished"].dropna()) == ["1 diverged", "1 failed", "1 pending", "1 running"]

    md = (folder / "report.md").read_text()
    tables = md_tables(md)
    assert tables and all(len(row) == len(t[0]) for t in tables for row in t)
    assert all(set(t[1]) <= {":---", "---:"} for t in tables)
    assert tables[0][0] == ["", "finding"]  # the Findings open the report, the variant table follows
    variant_table = tables[1]
    assert (
        variant_table[0][0] == "Architecture" and len(variant_table) == 2 + 4 + 1
    )  # header, rule, 4 variants, 1 group
    assert "baseline" in [row[6] for row in variant_table]
    unfinished = next(t for t in tables if t[0] == ["trial", "variant", "replicate", "state", "error"])
    assert sorted(r[3] for r in unfinished[2:]) == ["diverged", "failed", "pending", "running"]
    assert "4 of 8 trials are not done" in md
    for image in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md):
        assert (folder / image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    page = Page()
    page.feed((folder / "index.html").read_text())
    imgs = [a["src"] for t, a in page.tags if t == "img"]
    assert len(imgs) == 7  # variants, pairing, best or tied, cost, effects, curves, diagnostics
    for src in imgs:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [t for t, a in page.tags if t in ("script", "link", "iframe", "object")]
    assert not [
        a for t, a in page.tags for k, v in a.items() if k in ("src", "href") and re.match(r"https?:|//", v or "")
    ]
    assert sum(t == "table" for t, _ in page.tags) == len(tables)

    overview = (out / "index.html").read_text()
    assert 'href="u/index.html"' in overview and "data:" not in overview


def test_csv_writes_utc_times_as_pandas_does():
    """trials.csv formats its UTC times a column at a time (output.csv): the text is pandas' own, decimals
    (none, 3, 6, 9) per column, missing times empty, other time zones left to pandas."""
    times = {"whole": ["2026-11-25 14:17:34", "2026-11-25", None], "milli": ["2026-11-25 14:17:34.5", None],
             "micro": ["2026-11-25 14:17:34.000123", "2026-11-25 14:17:34"], "midnight": ["2026-11-25", "2026-11-26"],
             "nano": ["2026-11-25 14:17:34.000000001", None], "old": ["1969-12-31 23:59:59.999", "1970-01-01"],
             "missing": [None, None]}  # fmt: skip
    frame = pd.DataFrame(
        {f"{name}.{unit}": pd.Series(pd.to_datetime(values + [None] * (3 - len(values)), utc=True, format="ISO8601"))
         .astype(f"datetime64[{unit}, UTC]") for name, values in times.items() for unit in ("s", "ms", "us", "ns")}
    )  # fmt: skip
    frame["berlin"] = frame["micro.us"].dt.tz_convert("Europe/Berlin")
    assert output.csv(frame) == frame.to_csv()
    assert output.csv(frame.head(1), index=False) == frame.head(1).to_csv(index=False)


def test_drawing_leaves_matplotlibs_settings_as_they_were(store, tmp_path):
    """The figures draw with their own hinting (plots.HINTING) set only while they draw."""
    pair_store(store, tmp_path, epochs=2)
    before = dict(mpl.rcParams)
    report("pair", store=store, out=tmp_path / "reports", formats=["html"])
    assert dict(mpl.rcParams) == before


def test_the_collector_is_paused_while_a_sweep_is_read_or_written_and_as_it_was_after(store, tmp_path):
    """`uncollected`: no cycle collection inside (a report's objects over a large heap), the collector's state as it
    was after, an exception too; a report leaves it enabled."""
    gc.enable()
    with uncollected():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(KeyError), uncollected():
        raise KeyError("x")
    assert gc.isenabled()
    gc.disable()
    try:
        with uncollected():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
    pair_store(store, tmp_path, epochs=2)
    report("pair", store=store, out=tmp_path / "reports", formats=["csv"])
    assert gc.isenabled()


def test_rerun_is_idempotent_and_index_lists_every_report(store, tmp_path):
    pair_store(store, tmp_path, epochs=2)
    out = tmp_path / "reports"
    first = {f: f.read_bytes() for f in report("pair", store=store, out=out)}
    second = {f: f.read_bytes() for f in report("pair", store=store, out=out)}
    assert first == second
    other = planned(tmp_path, "other", grid={"attention.kind": ["softmax", "csan"]}, seeds=1)
    fill(store, other, lambda t: 50.0)
    report("other", store=store, out=out, formats=["html"])
    overview = (out / "index.html").read_text()
    assert 'href="pair/index.html"' in overview and 'href="other/index.html"' in overview


def test_unknown_sweep_baseline_or_metric_is_a_clear_error(store, tmp_path):
    pair_store(store, tmp_path)
    out = tmp_path / "reports"
    with pytest.raises(ReportError, match=r"no sweep 'nope' in the store .*pair"):
        report("nope", store=store, out=out)
    with pytest.raises(ReportError, match="matches no variant"):
        report("pair", store=store, out=out, baseline="attention.kind=gaussian")
    with pytest.raises(ReportError, match="not an axis"):
        report("pair", store=store, out=out, baseline="train.lr=0.1")
    with pytest.raises(ReportError, match="is not a variant"):
        report("pair", store=store, out=out, baseline="ffff")
    with pytest.raises(ReportError, match=r"metric 'test\.top5' is not among the results.*test\.top1"):
        report("pair", store=store, out=out, metric="test.top5")
    assert not out.exists()  # nothing written on an error
    files = report("pair", store=store, out=out, baseline="attention.kind=csan", formats=["csv"])
    v = read_csv(out / "pair" / "variants.csv")
    assert v.loc[v["is_baseline"], "mixer"].iloc[0].startswith("CSaN")
    assert {f.name for f in files} == {"trials.csv", "variants.csv", "effects.csv", "best.csv", "summary.json"}


def test_cli_report(store, tmp_path):
    pair_store(store, tmp_path)
    runner = CliRunner()
    db = ["--db", store.url]
    ok = runner.invoke(app, ["report", "pair", "--out", str(tmp_path / "r"), "--format", "html,csv", *db])
    assert ok.exit_code == 0, ok.output
    assert ok.output.split() == [str(tmp_path / "r" / "pair" / "index.html"), str(tmp_path / "r" / "index.html")]
    assert not (tmp_path / "r" / "pair" / "report.md").exists()
    missing = runner.invoke(app, ["report", "nope", *db])
    assert missing.exit_code == 2 and "no sweep 'nope'" in missing.output
    bad = runner.invoke(app, ["report", "pair", "--baseline", "attention.kind=laplace", *db])
    assert bad.exit_code == 2 and "matches no variant" in bad.output


def relaunched(store: Store, tmp_path: Path) -> None:
    """Sweep `th` launched at 2 epochs (softmax 80 + seed, csan +1), then again at 3 (`-s train.epochs=3`: softmax
    70 + seed, csan +4): each launch writes its plan as a launch does (the trials of the other plan outside it)."""
    for epochs, score, gain in ((2, 80, 1.0), (3, 70, 4.0)):
        base = {**TINY, "train": {**TINY["train"], "epochs": epochs}}
        p = planned(tmp_path, "th", base=base, grid={"attention.kind": ["softmax", "csan"]}, seeds=6,
                    baseline={"attention.kind": "softmax"})  # fmt: skip
        fill(store, p, lambda t, s=score, g=gain: s + t.config.seed + g * (t.axes["attention.kind"] == "csan"))
        store.add_trials("th", p.trials, [t.key for t in p.trials])


def test_a_report_covers_the_current_plan_and_earlier_trials_only_when_asked(store, tmp_path):
    """A sweep launched again under other settings holds both launches' trials: its report covers the current
    plan (one row per label, the 3-epoch gain, a line saying what was left out); `--all-trials` adds the others
    with the config path they differ in as a column and in their labels (no two rows share a label)."""
    relaunched(store, tmp_path)
    run = CliRunner().invoke(app, ["report", "th", "--out", str(tmp_path / "r"), "-f", "md,csv", "--db", store.url])
    assert run.exit_code == 0, run.output
    v = read_csv(tmp_path / "r" / "th" / "variants.csv")
    assert len(v) == 2 and v["label"].is_unique and v["delta"].max() == pytest.approx(4.0)
    md = (tmp_path / "r" / "th" / "report.md").read_text()
    assert ("Left out: 12 trials of this sweep that its current plan no longer makes (launched before under other "
            "settings); `ablate report th --all-trials` includes them.") in md  # fmt: skip
    every = ["report", "th", "--all-trials", "--out", str(tmp_path / "a"), "-f", "md,csv", "--db", store.url]
    assert CliRunner().invoke(app, every).exit_code == 0
    v = read_csv(tmp_path / "a" / "th" / "variants.csv")
    assert len(v) == 4 and v["label"].is_unique
    assert sorted(v["axis.train.epochs"]) == [2, 2, 3, 3]
    gains = v[v["delta"] != 0].set_index("axis.train.epochs")["delta"]
    assert gains.to_dict() == pytest.approx({2: 1.0, 3: 4.0})  # each against the baseline at its own epochs
    assert all("epochs=" in label for label in v["label"])
    md = (tmp_path / "a" / "th" / "report.md").read_text()
    assert "Includes 12 trials outside the sweep's current plan, labelled by what they differ in: train.epochs." in md


def test_report_of_a_real_launch(ray_local, store, tmp_path):
    """What the launcher really records (results, costs, per-epoch metrics, diagnostics) reports whole."""
    from ablate.execution.launcher import RunConfig, launch
    from ablate.execution.progress import Display

    base = {**TINY, "train": {**TINY["train"], "diagnostics": True}}
    p = planned(tmp_path, "real", base=base, grid={"attention.kind": ["softmax", "csan"]}, seeds=1,
                baseline={"attention.kind": "softmax"})  # fmt: skip
    launch([p], store, run=RunConfig(storage=tmp_path / "ck"), progress=Display(live=False))
    files = {f.name: f for f in report("real", store=store, out=tmp_path / "reports")}
    assert {"curves.png", "diagnostics.png", "cost.png"} <= set(files)
    v = read_csv(files["variants.csv"])
    trials = store.trials_frame("real").set_index("variant")
    assert (v["params"] == trials["params"].reindex(v.index).astype(float)).all()
    assert v["gflops"].to_numpy() == pytest.approx(trials["flops"].reindex(v.index).astype(float).to_numpy() / 2e9)
    assert (v["samples_s"] > 0).all() and (v["n"] == 1).all() and v["mean"].between(0, 100).all()
    md = files["report.md"].read_text()
    assert "CSaN (tau, mu, private; unit readout), attn-FFN" in md and "None comparable (the published rows" in md


@pytest.mark.parametrize("name", ["..", ".", "index.html", "a/b", "/".join(["..", "..", "up"]), "cpu"])
def test_a_sweep_folder_never_leaves_the_report_folder(name: str, tmp_path: Path) -> None:
    from ablate.reporting import folder

    out = tmp_path / "reports"
    path = (out / folder(name)).resolve()
    assert path.parent == out.resolve() and path.name != "index.html"
    assert folder("cpu") == "cpu"  # a safe name is its own folder


# ------------------------------------------------------------ issue 16: design-aware statistics, exports
def three_kinds(store: Store, tmp_path: Path, name: str, gains: dict[str, float], seeds: int = 10):
    """softmax (baseline), csan and gaussian over `seeds` seeds: 70 + gain + a seed effect all share + noise."""
    p = planned(tmp_path, name, grid={"attention.kind": ["softmax", "csan", "gaussian"]}, seeds=seeds,
                baseline={"attention.kind": "softmax"})  # fmt: skip
    rng = np.random.default_rng(7)
    shift = rng.normal(0, 1.0, seeds)
    noise = {t.key: rng.normal(0, 0.3) for t in p.trials}
    fill(store, p, lambda t: 70 + gains.get(t.axes["attention.kind"], 0) + shift[t.axes["seed"]] + noise[t.key])
    data = frames.load(store, name)
    return data, frames.variant_table(data)


def test_bold_only_where_significantly_better_than_every_other_after_correction(store, tmp_path):
    from ablate.reporting import tables

    tie, table = three_kinds(store, tmp_path, "tie", {"csan": 3.0, "gaussian": 2.95})
    shown = tables.variants(table, tie)
    metric = shown.header.index(f"{tie.metric} (mean ± std)")
    assert not [c for c in shown.bold if c[1] == metric]  # csan has the best mean but gaussian is indistinguishable
    [(group, tied)] = tables.verdicts(table, tie).items()
    assert not tied.significant and tied.tied[:2] == tuple(table["mean"].nlargest(2).index)  # csan / gaussian
    clear, table = three_kinds(store, tmp_path, "clear", {"csan": 3.0, "gaussian": 1.0})
    shown = tables.variants(table, clear)
    best = list(table.index).index(table["mean"].idxmax())
    assert table.loc[table["mean"].idxmax(), "mixer"].startswith("CSaN")
    assert {c for c in shown.bold if c[1] == metric} == {(best, metric)} and tables.verdicts(table, clear)[
        group
    ].significant
    # every comparison with the baseline is adjusted (Holm over the two) and the caption names the family
    compared = table[~table["is_baseline"]]
    assert compared["p_adj"].to_numpy() == pytest.approx(stats.adjust(compared["p"].to_numpy()))
    assert "Holm-adjusted over the family of the 2 comparisons with the baseline" in shown.caption


def test_noise_floor_is_the_baselines_seed_std_and_smaller_differences_are_flagged(store, tmp_path):
    from ablate.reporting import tables

    data, table = three_kinds(store, tmp_path, "floor", {"csan": 3.0, "gaussian": 0.1})
    base = table[table["is_baseline"]].iloc[0]
    seeds = data.trials[data.trials["variant"] == data.baseline].sort_values("seed")["value"]
    assert base["seed_std"] == pytest.approx(np.std(seeds, ddof=1)) and base["n"] == 10
    by_kind = table.set_index(table["mixer"].str.split(" ").str[0])
    assert bool(by_kind.loc["Gaussian", "below_floor"]) and not bool(by_kind.loc["CSaN", "below_floor"])
    shown = tables.variants(table, data)
    assert f"the baseline's seed std = {base['seed_std']:.3f}" in shown.caption
    cells = {r[1].split(" ")[0]: r[6] for r in shown.rows}
    assert cells["Gaussian"].endswith("‡") and cells["CSaN"].endswith("*")


def test_cross_validation_sweeps_use_the_corrected_resampled_t(store, tmp_path):
    base = {"task": "mil", "data": {"name": "musk1", "folds": 3}, "model": {"size": "synpool"},
            "attention": {"kind": "syn"}, "train": {"epochs": 1}}  # fmt: skip
    grid = {"attention.steps": [0, 1], "data.split_seed": [0, 1, 2, 3], "data.fold": [0, 1, 2]}
    p = plan(write_sweeps(tmp_path / "cv.yaml", {"cv": {"base": base, "grid": grid, "seeds": 1,
                                                        "baseline": {"attention.steps": 0}}}), "cv")  # fmt: skip
    rng = np.random.default_rng(5)
    fold_noise = {t.key: rng.normal(0, 0.02) for t in p.trials}
    fill(store, p, lambda t: 0.8 + 0.01 * t.axes["attention.steps"] + fold_noise[t.key])
    data = frames.load(store, "cv")
    assert data.replicates == stats.Replicates(folds=3)
    table = frames.variant_table(data)
    row = table[~table["is_baseline"]].iloc[0]
    values = data.trials.pivot_table(index="rep", columns="variant", values="value")
    d = (values[row.name] - values[data.baseline]).to_numpy()
    se = np.std(d, ddof=1) * math.sqrt(1 / 12 + 1 / 2)  # 12 fold differences, n_test / n_train = 1/2
    assert row["test"] == stats.CORRECTED and row["pairs"] == 12 and row["n"] == 4 and row["values"] == 12
    assert row["p"] == pytest.approx(2 * sps.t.sf(abs(d.mean()) / se, 11))
    md = (report("cv", store=store, out=tmp_path / "r", formats=["md"])[0]).read_text()
    assert "4 (12 folds)" in md and "corrected resampled t-test (Nadeau & Bengio 2003)" in md
    eff = pd.read_csv(report("cv", store=store, out=tmp_path / "c", formats=["csv"])[2])
    assert set(eff["test"]) == {stats.CORRECTED}


def latex_tables(text: str) -> list[list[list[str]]]:
    """Every tabular of a LaTeX source as rows of cells, checking its booktabs structure on the way: the
    rules in order, every row with as many cells as the column spec (or one spanning multicolumn)."""
    found = []
    for spec, body in re.findall(r"\\begin\{tabular\}\{([lr]+)\}\n(.*?)\\end\{tabular\}", text, re.S):
        lines = body.strip().splitlines()
        assert lines[0] == r"\toprule" and lines[2] == r"\midrule" and lines[-1] == r"\bottomrule", lines
        rows = []
        for line in lines[1:-1]:
            if line == r"\midrule":
                continue
            assert line.endswith(r" \\"), line
            cells = re.split(r"(?<!\\)&", line[:-3])
            span = re.fullmatch(r"\\multicolumn\{(\d+)\}\{l\}\{.*\}", cells[0].strip())
            assert len(cells) == len(spec) or (len(cells) == 1 and span and int(span[1]) == len(spec)), line
            rows.append([c.strip() for c in cells])
        found.append(rows)
    return found


def test_latex_tables_are_booktabs_and_compile_where_a_tex_engine_exists(store, tmp_path):
    pair_store(store, tmp_path)
    files = report("pair", store=store, out=tmp_path / "r", formats=["tex"])
    tex = next(f for f in files if f.name == "tables.tex").read_text()
    assert tex.isascii() and tex.count("{") == tex.count("}")
    tables = latex_tables(tex)
    assert len(tables) == 4 and tables[0][0][0] == r"\textbf{Architecture}"  # variants, best or tied, effects, ...
    assert tables[1][0][0] == r"\textbf{Variant}" and tables[-1][0][0] == r"\textbf{trial}"  # ... unfinished
    assert r"$\pm$" in tex and r"\caption{" in tex and r"\usepackage{booktabs}" in tex
    engine = shutil.which("pdflatex") or shutil.which("lualatex")
    if engine:
        done = subprocess.run([engine, "-interaction=nonstopmode", "-halt-on-error", "tables.tex"],
                              cwd=files[0].parent, capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stdout[-2000:]


def test_a_bar_in_a_cell_is_text_in_latex_and_markdown():
    """`|` is an em dash in LaTeX's default font encoding (and a column rule in a tabular spec); in Markdown it
    ends a cell. A knob value or label holding one prints as a bar in both."""
    from ablate.reporting import render

    table = render.Table("Caption a|b.", ["x|y", "n"], [["p|q", "1"]])
    tex = render.latex("t", [], [render.Section("s", [table])])
    assert latex_tables(tex) == [[[r"\textbf{x\textbar{}y}", r"\textbf{n}"], [r"p\textbar{}q", "1"]]]
    assert r"\caption{Caption a\textbar{}b.}" in tex and "|" not in tex
    md = render.markdown("t", [], [render.Section("s", [table])])
    assert "| p\\|q | 1 |" in md and "*Caption a\\|b.*" in md


def test_code_in_backticks_is_code_in_html_and_latex_never_a_literal_backtick():
    """The Findings write advice as Markdown code (`seeds: 6`): the HTML page sets it in <code>, tables.tex in
    \\texttt, Markdown keeps the backticks; text around it is escaped as before."""
    from ablate.reporting import render

    said = "Run `seeds: {min: 10}` or `a<b`; then 5 < 6."
    table = render.Table(said, ["finding"], [[said]])
    page = render.html_page("t", [said], [render.Section("s", [table, said])])
    code = "<code>seeds: {min: 10}</code> or <code>a&lt;b</code>; then 5 &lt; 6."
    assert page.count(code) == 4 and "`" not in page  # meta, caption, cell, paragraph
    tex = render.latex("t", [], [render.Section("s", [table])])
    assert r"\texttt{seeds: \{min: 10\}} or \texttt{a$<$b}; then 5 $<$ 6." in tex and "`" not in tex
    assert "Run `seeds: {min: 10}` or `a<b`" in render.markdown("t", [], [render.Section("s", [said])])


def test_compare_two_sweeps_pairs_the_seeds_both_ran(store, tmp_path):
    grid = {"attention.kind": ["softmax", "csan"]}
    a = planned(tmp_path, "a", grid=grid, seeds=6, baseline={"attention.kind": "softmax"})
    b = planned(tmp_path, "b", grid=grid, seeds=8, baseline={"attention.kind": "softmax"},
                base={**TINY, "train": {**TINY["train"], "lr": 5e-4}})  # fmt: skip
    rng = np.random.default_rng(2)
    shift = rng.normal(0, 1, 8)
    fill(store, a, lambda t: 70 + shift[t.axes["seed"]] + rng.normal(0, 0.2))
    fill(store, b, lambda t: 71 + shift[t.axes["seed"]] + rng.normal(0, 0.2))
    runner = CliRunner()
    out = tmp_path / "r"
    ok = runner.invoke(app, ["report", "--compare", "a", "b", "--latex", "--correction", "bh", "--out", str(out),
                             "--db", store.url])  # fmt: skip
    assert ok.exit_code == 0, ok.output
    folder = out / "compare-a-vs-b"
    assert {f.name for f in folder.iterdir()} == {"index.html", "report.md", "compare.csv", "tables.tex"}
    c = pd.read_csv(folder / "compare.csv").set_index("variant_a")
    trials = {n: store.trials_frame(n).pivot_table(index="seed", columns="variant", values="test.top1")
              for n in "ab"}  # fmt: skip
    for va, row in c.iterrows():
        d = (trials["b"][row["variant_b"]] - trials["a"][va]).dropna()
        assert row["pairs"] == 6 and row["a_n"] == 6 and row["b_n"] == 8  # seeds 6, 7 of b have no partner
        flips = sps.permutation_test((d.to_numpy(),), np.mean, permutation_type="samples", n_resamples=np.inf)
        assert row["delta"] == pytest.approx(d.mean()) and row["test"] == stats.SIGN_FLIP
        assert row["p"] == pytest.approx(flips.pvalue)
    assert c["p_adj"].to_numpy() == pytest.approx(stats.adjust(c["p"].to_numpy(), "bh"))
    assert "Benjamini-Hochberg-adjusted over the family of the 2 shared variants" in (folder / "report.md").read_text()
    assert latex_tables((folder / "tables.tex").read_text())
    bad = runner.invoke(app, ["report", "pair", "--correction", "bonferroni", "--db", store.url])
    assert bad.exit_code == 2 and "correction must be one of holm, bh, not 'bonferroni'" in bad.output
    none = runner.invoke(app, ["report", "--compare", "a", "nope", "--db", store.url])
    assert none.exit_code == 2 and "no sweep 'nope'" in none.output


def test_bands_stay_in_the_metrics_range_and_a_cost_with_one_value_gets_no_plot(store, tmp_path):
    from ablate.reporting import plots

    lower, upper = plots.band(np.array([0.99, 0.02]), np.array([0.05, 0.05]), "test.auc")
    assert upper.tolist() == [1.0, 0.07] and lower == pytest.approx([0.94, 0.0])
    assert plots.band(np.array([99.0]), np.array([3.0]), "val.top1")[1][0] == 100.0
    assert plots.band(np.array([0.1]), np.array([0.5]), "train.loss")[0][0] == 0.0
    pair_store(store, tmp_path)  # every trial has the same params and FLOPs and takes no time
    files = {f.name for f in report("pair", store=store, out=tmp_path / "r", formats=["md"])}
    assert "cost.png" not in files and "variants.png" in files
    assert "No cost on which the finished variants differ" in (tmp_path / "r" / "pair" / "report.md").read_text()


def test_report_renders_in_headless_chromium_without_console_errors(store, tmp_path):
    browser = chromium()
    pair_store(store, tmp_path, epochs=3)
    page = next(f for f in report("pair", store=store, out=tmp_path / "r", formats=["html"]) if f.parent.name == "pair")
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
                           f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0 and "<table>" in done.stdout
    assert not [line for line in done.stderr.splitlines() if "CONSOLE" in line], done.stderr[-2000:]
    # the Findings come first: before them only the title and the meta lines, then their table, then the rest
    body = done.stdout[done.stdout.index("<body>") :]
    assert set(re.findall(r"<(\w+)", body[: body.index("<h2>")])) == {"body", "h1", "p"}
    assert re.findall(r"<h2>(.*?)</h2>", body)[:2] == ["Findings", "Variants"]
    first = body[body.index("<table>") : body.index("</table>")]
    assert "<caption>From the tables below" in first and body.index("<table>") < body.index("<h2>Variants</h2>")
    # synthetic curves still rising at their third epoch, said first; 4 seeds: no test, no winner
    assert re.findall(r"<tr><td>([^<]*)</td>", first) == ["still improving", "tied", "no test"]


TAU_PLUGIN = '''
from typing import Literal
from ablate.config import Mechanism
from ablate.registry import register_mechanism


@register_mechanism
class TauPlug(Mechanism):
    """Softmax at temperature tau; its words leave tau out."""

    kind: Literal["tauplug"] = "tauplug"
    tau: float = 1.0
    """The temperature."""

    def build(self, dim, num_heads, in_dim=None):
        raise NotImplementedError

    def describe(self):
        return "Tau plug"
'''


def test_a_plugin_knob_named_like_a_said_builtin_knob_still_labels_its_variants(store, tmp_path):
    """CSaN's words say `tau`; a plugin's `tau` that its own words leave out must still be appended, or two
    variants of the plugin read the same in every table."""
    (tmp_path / "tauplug.py").write_text(TAU_PLUGIN)
    f = tmp_path / "t.yaml"
    f.write_text(json.dumps({"plugins": ["tauplug.py"], "sweeps": {"t": {"base": {**TINY, "attention": {
        "kind": "tauplug"}}, "grid": {"attention.tau": [1.0, 2.0]}, "seeds": 2}}}))  # fmt: skip
    p = plan(f, "t")
    p.plugins.load()
    assert describe.said("attention.tau", {"csan"}) and not describe.said("attention.tau", {"tauplug"})
    fill(store, p, lambda t: 60.0 + t.axes["attention.tau"] + t.axes["seed"])
    labels = frames.load(store, "t").variants["label"].tolist()
    assert labels == ["Tau plug, attn-FFN; tau=1", "Tau plug, attn-FFN; tau=2"]
    csan = {"base": {**TINY, "attention": {"kind": "csan"}}, "grid": {"attention.tau": [True, False]}, "seeds": 2}
    c = plan(write_sweeps(tmp_path / "c.yaml", {"c": csan}), "c")
    fill(store, c, lambda t: 60.0 + t.axes["seed"])  # a CSaN sweep's words say tau: nothing appended
    assert not any("tau=" in label for label in frames.load(store, "c").variants["label"])


def test_a_reports_sections_follow_the_declared_order_and_an_undeclared_place_is_refused(store, tmp_path):
    pair_store(store, tmp_path, epochs=2)
    (md,) = [f for f in report("pair", store=store, out=tmp_path / "rep", formats=["md"]) if f.name == "report.md"]
    headings = re.findall(r"^## (.+)$", md.read_text(), flags=re.M)
    assert headings == ["Findings", "Variants", "Best or tied", "Cost", "Published numbers", "Effects of each knob",
                        "Training", "Unfinished trials"]  # fmt: skip
    with pytest.raises(ValueError, match=r"outside ORDER: \['appendix'\]"):
        ordered({"variants": [], "appendix": [Section("Appendix", ["text"])]})


def test_the_bca_option_adds_its_interval_and_a_bad_interval_is_named(store, tmp_path):
    p = planned(tmp_path, "twelve", grid={"attention.kind": ["softmax", "csan"]}, seeds=12,
                baseline={"attention.kind": "softmax"})  # fmt: skip
    fill(
        store, p, lambda t: 70 + (t.axes["seed"] * 7 % 5) + (t.axes["seed"] % 3) * (t.axes["attention.kind"] == "csan")
    )
    report("twelve", store=store, out=tmp_path / "plain", formats=["csv", "md"])
    report("twelve", store=store, out=tmp_path / "bca", formats=["csv", "md"], interval="bca")
    plain, bca = (read_csv(tmp_path / f / "twelve" / "variants.csv") for f in ("plain", "bca"))
    assert "b_lo" not in plain and {"rho", "removed", "better"} <= set(plain)
    csan = bca[~bca["is_baseline"]].iloc[0]
    assert csan["test"] == stats.T_TEST and csan["b_lo"] < csan["delta"] < csan["b_hi"]
    assert "Δ [95% BCa]" in (tmp_path / "bca" / "twelve" / "report.md").read_text()
    assert "BCa" not in (tmp_path / "plain" / "twelve" / "report.md").read_text()
    assert (
        "paired bootstrap intervals beside the t-tests (BCa, 9,999 resamples"
        in (tmp_path / "bca" / "twelve" / "methods.md").read_text()
    )  # the methods paragraph says how the intervals it shows were computed
    assert "BCa" not in (tmp_path / "plain" / "twelve" / "methods.md").read_text()
    shown = tables.variants(frames.variant_table(frames.load(store, "twelve")), frames.load(store, "twelve"))
    cells = dict(zip(shown.header, shown.rows[1]))  # the csan row, after the baseline
    assert csan["better"] == pytest.approx((8 + 4 / 2) / 12)  # seeds 0, 3, 6 and 9 tie: half each
    assert cells["P(seed better)"] == f"{csan['better']:.2f}"
    assert cells["ρ (var. removed)"] == f"{csan['rho']:+.2f} ({csan['removed']:.0%})"
    swept = frames.load(store, "twelve")
    resampled = tables.variants(frames.variant_table(swept, resampled=True), swept)
    cells = dict(zip(resampled.header, resampled.rows[1]))
    assert cells["Δ [95% BCa]"] == f"[{csan['b_lo']:+.2f}, {csan['b_hi']:+.2f}]" != cells["Δ vs baseline [95% CI]"]
    with pytest.raises(ReportError, match="interval must be one of policy, bca, not 'bc'"):
        report("twelve", store=store, out=tmp_path / "no", interval="bc")
    runner, db = CliRunner(), ["--db", store.url]
    bad = runner.invoke(app, ["report", "twelve", "--interval", "bootstrap", "--out", str(tmp_path / "no"), *db])
    assert bad.exit_code == 2 and "interval must be one of policy, bca, not 'bootstrap'" in bad.output
    both = runner.invoke(app, ["report", "--compare", "twelve", "twelve", "--interval", "bca", *db])
    assert both.exit_code == 2 and "--interval" in both.output
    assert not (tmp_path / "no").exists()
