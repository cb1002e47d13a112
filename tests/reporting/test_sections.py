"""Report sections that mechanisms contribute (issue 31): Syn's paper tables against tables worked out by hand on
a synthetic store whose results are chosen, the cosine example's section, and a plugin's sections (one that
raises) in a written report."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import TINY, write_sweeps
from synthetic import fill

from ablate.planning.keys import Trial
from ablate.planning.plan import Plan, plan
from ablate.reporting import report
from ablate.store import Store

ROOT = Path(__file__).resolve().parents[2]
STEPS = [-2, -1, 0, 1, 2]
#: Mean AUC per (gamma, I); "mean" = SynPooling ablated. gamma 0.9 ties I = 1 and 2 for the best.
MEANS = {
    0.5: {-2: 0.90, -1: 0.85, 0: 0.80, 1: 0.82, 2: 0.78, "mean": 0.70},
    0.9: {-2: 0.70, -1: 0.75, 0: 0.80, 1: 0.85, 2: 0.85, "mean": 0.60},
}
#: Each trial's lowest winner-transfer rate, by the sign of its I (mean pooling has no attention to record).
LOWEST = {-1: 0.2, 0: 0.15, 1: 0.1}


def cell(t: Trial) -> int | str:
    return "mean" if t.config.model.pool == "mean" else t.config.attention.steps


def sign(i: int) -> int:
    return (i > 0) - (i < 0)


def auc(t: Trial) -> float:
    """The cell's mean, plus a per-fold wiggle that sums to zero over the 3 folds and differs between cells (so
    paired differences have a spread)."""
    wiggle = 0.01 * (t.config.data.fold - 1) * (1 + STEPS.index(0 if cell(t) == "mean" else t.config.attention.steps))
    return MEANS[t.config.attention.gamma][cell(t)] + wiggle


def syn_markdown(tmp_path: Path, grid: dict[str, list[object]] | None = None) -> str:
    """The report of a Syn sweep over gamma (and `grid`'s axes), its results `auc`, winner-transfer rates
    `LOWEST`."""
    linked = [[{"attention.steps": s, "model.pool": "attention"} for s in STEPS]
              + [{"attention.steps": 0, "model.pool": "mean"}]]  # fmt: skip
    sweep = {
        "base": {"task": "mil", "data": {"name": "musk1", "folds": 3}, "model": {"size": "synpool"},
                 "attention": {"kind": "syn"}, "train": {"epochs": 1, "batch_size": 1}},
        "linked": linked, "grid": {"attention.gamma": [0.5, 0.9], "data.fold": [0, 1, 2], **(grid or {})},
        "baseline": {"attention.steps": 0, "model.pool": "attention", "attention.gamma": 0.5},
    }  # fmt: skip
    p = plan(write_sweeps(tmp_path / "e.yaml", {"syn": sweep}), "syn")
    with Store(f"sqlite:///{tmp_path / 'r.sqlite'}") as store:
        fill(store, p, auc)
        rates = [(t.key, "diag.winner_transfer", e, v, None) for t in p.trials if cell(t) != "mean"
                 for e, v in ((1, 0.8), (2, LOWEST[sign(t.config.attention.steps)]), (3, 0.5))]  # fmt: skip
        store.log_metric_rows(rates)
        report("syn", store=store, out=tmp_path / "rep", formats=["md"])
    return (tmp_path / "rep" / "syn" / "report.md").read_text()


@pytest.fixture
def syn_report(tmp_path: Path) -> str:
    return syn_markdown(tmp_path)


def rows(md: str, caption_start: str) -> dict[str, list[str]]:
    """The rows of the markdown table whose caption starts with `caption_start`, by setting (gamma's value)."""
    lines = md.splitlines()
    end = next(i for i, line in enumerate(lines) if line.startswith(f"*{caption_start}")) - 1  # a blank line
    start = max(i for i in range(end) if not lines[i].startswith("|")) + 1
    table = lines[start:end][2:]  # less the header and its rule
    out = {}
    for line in table:
        cells = [c.strip() for c in line.strip("|").split("|")]
        gamma = cells[0].split("gamma=")[1].rstrip(")")
        out[gamma if gamma not in out else f"{gamma}/{len(out)}"] = cells[1:]
    return out


def test_syn_top_and_bottom_mean_with_their_iterations(syn_report: str) -> None:
    r = rows(syn_report, "Top and bottom mean")
    assert r["0.5"][:4] == ["0.9000 ± 0.0100", "-2", "0.7800 ± 0.0500", "2"]
    assert r["0.9"][1] == "1, 2" and r["0.9"][2:4] == ["0.7000 ± 0.0100", "-2"]  # a tie names both
    assert "from distraction in 1 of 2 settings and from concentration in 1; the bottom from distraction in 1 " \
           "and from concentration in 1" in syn_report  # fmt: skip
    assert "| top mean | I | bottom mean |" in syn_report and "best" not in syn_report.split("## Syn")[1]


def test_syn_average_rank_of_concentration_and_distraction(syn_report: str) -> None:
    r = rows(syn_report, "Average rank")
    # gamma 0.5: -2, -1, 1, 0, 2 rank 1..5; gamma 0.9: 1 and 2 share 1.5, then 0 (3), -1 (4), -2 (5)
    assert r["0.5"] == ["4.00 (of 2)", "1.50 (of 2)", "4.00 (of 1)", "5"]
    assert r["0.9"] == ["1.50 (of 2)", "4.50 (of 2)", "3.00 (of 1)", "5"]


def test_syn_and_synpooling_ablated_from_the_top_mean_variant(syn_report: str) -> None:
    r = rows(syn_report, "Drop in")
    assert r["0.5"][:2] == ["Syn (I = 0)", "I = -2"] and r["0.5"][2].startswith("+0.1000 [")
    assert r["0.5/1"][:2] == ["SynPooling (mean pooling)", "I = -2"] and r["0.5/1"][2].startswith("+0.2000 [")
    assert r["0.9"][1] == "I = 1" and r["0.9"][2].startswith("+0.0500 [")  # the first of the tied top means
    assert r["0.9/3"][2].startswith("+0.2500 [")


def test_syn_minimum_winner_transfer_per_mode(syn_report: str) -> None:
    r = rows(syn_report, "Minimum winner-transfer")
    assert r["0.5"] == ["10.0% (6)", "15.0% (3)", "20.0% (6)", "20.0% (I = -2)"]
    assert r["0.9"] == ["10.0% (6)", "15.0% (3)", "20.0% (6)", "10.0% (I = 1)"]


def test_syn_settings_differ_in_every_axis_but_the_mechanisms(tmp_path: Path) -> None:
    """A `data.*` axis that leaves the dataset's name as it is (the share held out for validation) makes two
    settings of each gamma, not one that ranks the variants of both together."""
    md = syn_markdown(tmp_path, {"data.val_fraction": [0.0, 0.1]})
    settings = {g: r[-1] for g, r in rows(md, "Average rank").items()}  # gamma, val_fraction: variants ranked
    assert settings == {f"{g}, data.val_fraction={v}": "5" for g in ("0.5", "0.9") for v in ("0.0", "0.1")}


def filled(tmp_path: Path, f: Path, sweep: str, value: float = 50.0) -> str:
    """`sweep` of `f` (its plugins loaded by planning) filled with results, and its markdown report."""
    p: Plan = plan(f, sweep)
    with Store(f"sqlite:///{tmp_path / 'r.sqlite'}") as store:
        fill(store, p, lambda t: value + t.config.seed + (3.0 if t.config.attention.kind != "softmax" else 0.0))
        report(sweep, store=store, out=tmp_path / "rep", formats=["md"])
    return (tmp_path / "rep" / sweep / "report.md").read_text()


def test_the_cosine_example_adds_its_section(tmp_path: Path) -> None:
    md = filled(tmp_path, ROOT / "examples" / "cosine_attention" / "experiments.yaml", "cosine")
    assert "## Cosine attention: temperature" in md
    section = md.split("## Cosine attention: temperature")[1]
    assert "| learnt | 10 | 53.50 | 2 | +3.00 |" in section and "| fixed | 10 | 53.50 | 2 | +3.00 |" in section


PLUGIN = """
from ablate.components import ReportSection
from ablate.registry import register_section
from ablate.reporting.sections import Table


def shown(results):
    if results.data.name != "mine":
        return []
    cells = results.cells(["attention.kind"])
    return ["What this plugin says.", Table("Means.", ["kind", "mean"],
            [[r["attention.kind"], f"{r['mean']:.1f}"] for _, r in cells.iterrows()])]


def broken(results):
    return [] if results.data.name != "mine" else [1 / 0]


register_section(ReportSection("Plugin: means", "softmax", shown))
register_section(ReportSection("Plugin: broken", "softmax", broken))
"""


def test_a_plugin_adds_sections_and_one_that_raises_leaves_the_report_whole(tmp_path: Path) -> None:
    (tmp_path / "sections.py").write_text(PLUGIN)
    sweep = {"base": TINY, "grid": {"attention.kind": ["softmax", "csan"]}, "seeds": 2}
    f = tmp_path / "e.yaml"
    f.write_text(yaml.safe_dump({"plugins": ["./sections.py"], "sweeps": {"mine": sweep, "other": sweep}}))
    md = filled(tmp_path, f, "mine")
    means = md.split("## Plugin: means")[1].split("## ")[0]
    assert "What this plugin says." in means and "| softmax | 50.5 |" in means and "| csan | 53.5 |" in means
    broken = md.split("## Plugin: broken")[1].split("## ")[0]
    assert "This section failed: ZeroDivisionError: division by zero (in " in broken and "sections.py" in broken
    assert md.index("## Variants") < md.index("## Plugin: means") < md.index("## Training")
    assert "## Plugin" not in filled(tmp_path, f, "other")  # a section with nothing to say is left out
