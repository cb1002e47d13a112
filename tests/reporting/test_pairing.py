"""The pairing plot's data (`ablate.reporting.pairing`), not its pixels: on a store of scripted scores, each seed's
difference from the same seed of the baseline is the value the variant table's test used, its interval the table's,
and where seeds disagree the worst seed and the worse quartile are the ones a count by hand finds."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from conftest import TINY, write_sweeps
from synthetic import fill

from ablate.planning.plan import plan
from ablate.reporting import frames, pairing, plots, report
from ablate.store import Store

#: Scripted test top1 per (attention kind, seed): csan gains on every seed; gaussian gains on most and loses on 2
#: and 5; laplace's seed 3 failed, so it pairs on five seeds.
BASE = [70.0, 71.0, 69.0, 72.0, 70.5, 71.5]
GAIN = {"softmax": [0.0] * 6, "csan": [2.0, 3.0, 1.5, 3.5, 2.5, 2.0], "gaussian": [1.0, 2.0, -3.0, 1.5, 0.5, -1.0],
        "laplace": [1.0, 1.0, 1.0, math.nan, 2.0, 1.0]}  # fmt: skip


@pytest.fixture
def data(tmp_path):
    file = write_sweeps(tmp_path / "p.yaml", {"p": {"base": TINY, "grid": {"attention.kind": list(GAIN)}, "seeds": 6,
                                                   "baseline": {"attention.kind": "softmax"}}})  # fmt: skip
    with Store(f"sqlite:///{tmp_path / 'r.sqlite'}") as store:
        p = plan(file, "p")
        gain = lambda t: GAIN[t.axes["attention.kind"]][t.axes["seed"]]  # noqa: E731
        fill(
            store,
            p,
            lambda t: BASE[t.axes["seed"]] + gain(t),
            state=lambda t: "failed" if math.isnan(gain(t)) else "done",
        )
        yield store, frames.load(store, "p")


def kind(table: pd.DataFrame, variant: str) -> str:
    return str(table.loc[variant, "axis.attention.kind"])


def test_each_seeds_difference_is_the_one_the_test_used_with_the_tables_interval(data):
    _, swept = data
    table = frames.variant_table(swept)
    found = {kind(table, p.variant): p for p in pairing.pairs(table, swept)}
    assert set(found) == {"csan", "gaussian", "laplace"}  # the baseline is not paired with itself
    for name, p in found.items():
        gains = [(str(s), g) for s, g in enumerate(GAIN[name]) if not math.isnan(g)]
        assert list(p.differences.index) == [s for s, _ in gains]
        assert p.differences.to_numpy() == pytest.approx([g for _, g in gains])
        row = table.loc[p.variant]
        assert p.mean == pytest.approx(row["delta"]) == pytest.approx(np.mean([g for _, g in gains]))
        assert (p.lo, p.hi) == pytest.approx((row["lo"], row["hi"]), nan_ok=True)
        assert p.unit == "seed" and p.label == row["label"]
    assert found["csan"].lo > 0 and not found["csan"].split  # six seeds, all better: the sign-flip interval
    assert math.isnan(found["laplace"].lo)  # five pairs: the policy gives no interval, and the plot none
    mixed = found["gaussian"]
    assert mixed.split and mixed.worst == "2" and mixed.differences[mixed.worst] == pytest.approx(-3.0)
    assert mixed.quartile == pytest.approx(np.quantile(GAIN["gaussian"], 0.25))


def test_worst_and_worse_quartile_follow_the_metrics_direction():
    d = pd.Series([1.0, -2.0, 0.5, 3.0], index=["0", "1", "2", "3"])
    lower = pairing.Pairs("v", "v", d, float(d.mean()), math.nan, math.nan, higher=False, unit="fold")
    assert lower.worst == "3" and lower.quartile == pytest.approx(np.quantile(d, 0.75)) and lower.split
    tiny = pairing.Pairs("v", "v", pd.Series([1.0, -1e-13, 2.0]), 1.0, math.nan, math.nan, higher=True, unit="seed")
    assert not tiny.split  # a difference of rounding is no seed going the other way


def test_the_report_shows_the_pairing_plot_beside_the_variants(data, tmp_path):
    store, swept = data
    report("p", store=store, out=tmp_path / "r", formats=["md"])
    md = (tmp_path / "r" / "p" / "report.md").read_text()
    assert "(pairing.png)" in md and md.index("(variants.png)") < md.index("(pairing.png)")
    assert (tmp_path / "r" / "p" / "pairing.png").read_bytes().startswith(b"\x89PNG")
    assert plots.pairing_plot([], swept.metric) is None
