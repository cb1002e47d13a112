"""The report's section on a sweep over several datasets (`ablate.reporting.across_datasets`), on synthetic stores
whose results are chosen so that the normalised scores, their IQM and the per-dataset table are worked out by hand.

The results: test AUC = the dataset's level + 0.02 I + 0.01 x split seed, equal over the folds of a repeat. On each
dataset the runs (repeats, folds averaged) of I = -1, 0, 1 are level - 0.02, level, level + 0.02, each + 0, 0.01,
0.02: the worst run is level - 0.02 and the best level + 0.04, so the normalised runs are {0, 1/6, 2/6} for I = -1,
{2/6, 3/6, 4/6} for I = 0 and {4/6, 5/6, 1} for I = 1, on every dataset. Of the 9 runs of I = -1 the IQM cuts
int(9 / 4) = 2 from each end: the mean of 0, 1/6, 1/6, 1/6, 2/6 is 1/6."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import write_sweeps
from synthetic import fill

from ablate.evidence import aggregates
from ablate.planning.keys import Trial
from ablate.planning.plan import plan
from ablate.reporting import across_datasets, frames, report
from ablate.store import Store

ROOT = Path(__file__).resolve().parents[2]
LEVEL = {"musk1": 0.85, "musk2": 0.80, "elephant": 0.90}


def auc(t: Trial) -> float:
    c = t.config
    return LEVEL[c.data.name] + 0.02 * c.attention.steps + 0.01 * c.data.split_seed


def skipped(t: Trial) -> str:
    """I = 1 never ran on elephant."""
    return "pending" if t.config.attention.steps == 1 and t.config.data.name == "elephant" else "done"


def sweep_report(tmp_path: Path, names: list[str], metric: str | None = None, missing: bool = False) -> Path:
    """The Markdown report's folder of a Syn sweep on `names` (I in -1, 0, 1; 3 repeats of 3-fold CV), its results
    `auc` (`missing`: I = 1 never ran on elephant)."""
    grid = {"attention.steps": [-1, 0, 1], "data.split_seed": [0, 1, 2], "data.fold": [0, 1, 2]}
    sweep = {"base": {"task": "mil", "data": {"name": names[0], "folds": 3}, "model": {"size": "synpool"},
                      "attention": {"kind": "syn"}, "train": {"epochs": 1, "batch_size": 1}},
             "grid": {"data.name": names, **grid},
             "baseline": {"attention.steps": 0}, **({"metric": metric} if metric else {})}  # fmt: skip
    p = plan(write_sweeps(tmp_path / "e.yaml", {"mil": sweep}), "mil")
    with Store(f"sqlite:///{tmp_path / 'r.sqlite'}") as store:
        fill(store, p, auc if metric is None else lambda t: 1 - auc(t), state=skipped if missing else lambda t: "done")
        report("mil", store=store, out=tmp_path / "rep", formats=["md"])
    return tmp_path / "rep" / "mil"


def section(md: str) -> list[str]:
    lines = md.splitlines()
    start = lines.index("## Across datasets")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("## "))
    return lines[start:end]


def row(lines: list[str], label: str) -> list[str]:
    """The cells of the first table row of `lines` whose arm starts with `label`."""
    found = next(line for line in lines if line.startswith(f"| {label}"))
    return [c.strip() for c in found.strip("|").split("|")]


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sweep_report(tmp_path_factory.mktemp("three"), list(LEVEL))


def test_each_arms_iqm_of_normalised_runs_over_the_datasets(three: Path) -> None:
    lines = section((three / "report.md").read_text())
    for label, iqm in (("Syn (I=-1", "0.167"), ("Syn (I=0", "0.500"), ("Syn (I=1", "0.833")):
        cells = row(lines, label)
        assert cells[1] == "9", "3 repeats (folds averaged) on each of 3 datasets"
        value, interval = cells[2].split(" ", 1)
        assert value == iqm
        lo, hi = (float(x) for x in interval.strip("[]").split(", "))
        assert lo < float(iqm) < hi
    assert row(lines, "Syn (I=0")[3] == "0.500", "the mean beside it"
    assert any("min-max over every arm's runs" in line for line in lines), "the section states its normalisation"


def test_the_per_dataset_table_and_each_datasets_scale(three: Path) -> None:
    lines = section((three / "report.md").read_text())
    header = next(line for line in lines if line.startswith("| arm | musk1"))
    assert header == "| arm | musk1 | musk2 | elephant |"
    assert row(lines[lines.index(header) :], "Syn (I=0")[1:] == ["0.8600 (3)", "0.8100 (3)", "0.9100 (3)"]
    caption = next(line for line in lines if line.startswith("*test.auc per dataset"))
    assert "musk1 0.8300 to 0.8900; musk2 0.7800 to 0.8400; elephant 0.8800 to 0.9400" in caption


def test_the_performance_profile_is_drawn(three: Path) -> None:
    assert "](profile.png)" in (three / "report.md").read_text()
    assert (three / "profile.png").read_bytes().startswith(b"\x89PNG")


def test_a_metric_where_lower_is_better_is_flipped(tmp_path: Path) -> None:
    # 1 - AUC: I = 1 has the lowest values, so the highest normalised scores
    lines = section((sweep_report(tmp_path, list(LEVEL), metric="test.loss") / "report.md").read_text())
    assert row(lines, "Syn (I=1")[2].startswith("0.833 ")
    assert row(lines, "Syn (I=-1")[2].startswith("0.167 ")
    assert any("lower test.loss is better" in line for line in lines)


def test_an_arm_missing_a_dataset_gets_no_aggregate(tmp_path: Path) -> None:
    lines = section((sweep_report(tmp_path, list(LEVEL), missing=True) / "report.md").read_text())
    assert row(lines, "Syn (I=1")[1:3] == ["6", "- [n/a: no runs on elephant]"]
    assert row(lines, "Syn (I=0")[2].startswith("0.")
    table = lines[next(i for i, line in enumerate(lines) if line.startswith("| arm | musk1")) :]
    assert row(table, "Syn (I=1")[3] == "-"


def test_a_sweep_on_one_dataset_has_no_section(tmp_path: Path) -> None:
    # an axis on data.name with one value: one dataset
    folder = sweep_report(tmp_path, ["musk1"])
    md = (folder / "report.md").read_text()
    assert "## Across datasets" not in md and not (folder / "profile.png").exists()
    with Store(f"sqlite:///{tmp_path / 'r.sqlite'}") as store:
        assert across_datasets.datasets(frames.load(store, "mil")) is None


def test_the_shipped_syn_mil_sweep_is_five_arms_over_five_datasets(tmp_path: Path) -> None:
    # experiments.yaml's syn-mil: I in -3, -1, 0, 1, 3 on five MIL sets, 5 repeats of 10-fold CV each
    p = plan(ROOT / "experiments.yaml", "syn-mil")
    with Store(f"sqlite:///{tmp_path / 'r.sqlite'}") as store:
        fill(store, p, lambda t: 0.8 + 0.01 * t.config.attention.steps + 0.001 * t.config.data.split_seed)
        found = across_datasets.datasets(frames.load(store, "syn-mil"))
    assert found is not None and found.names == ["musk1", "musk2", "elephant", "fox", "tiger"]
    assert [a.label.split(":")[0] for a in found.arms] == [f"Syn (I={i}" for i in (-3, -1, 0, 1, 3)]
    assert [a.baseline for a in found.arms] == [False, False, True, False, False]
    assert all([len(r) for r in a.raw] == [5] * 5 for a in found.arms), "a run is a repeat: its 10 folds averaged"


def test_the_findings_lead_with_the_arms_whose_iqm_interval_excludes_the_baselines(three: Path) -> None:
    """I = 1's IQM 0.833 and I = -1's 0.167 lie each wholly beyond the baseline I = 0's 0.500: the first line of
    the Findings says so with the aggregate table's own cells."""
    md = (three / "report.md").read_text()
    lines = section(md)
    base, up, down = (row(lines, label)[2] for label in ("Syn (I=0", "Syn (I=1", "Syn (I=-1"))
    first = next(line for line in md.splitlines() if line.startswith("| across datasets |"))
    findings = md.split("## Findings", 1)[1].split("\n## ", 1)[0]
    assert findings.split("|:---|:---|\n", 1)[1].startswith(first)
    labels = {a: row(lines, a)[0] for a in ("Syn (I=0", "Syn (I=1", "Syn (I=-1")}
    assert (f"Across the 3 datasets (IQM of normalised scores, 95% stratified bootstrap intervals), against the "
            f"baseline {labels['Syn (I=0']}'s {base}: {labels['Syn (I=-1']}'s {down} lies wholly below; "
            f"{labels['Syn (I=1']}'s {up} lies wholly above.") in first  # fmt: skip


def scripted(runs: dict[str, list[list[float]]], baseline: str = "b") -> across_datasets.Datasets:
    """Arms with the given normalised runs per dataset (raw = normalised), the first dataset's range 0 to 1."""
    arms = [across_datasets.Arm(k, k == baseline, [np.array(r) for r in v], [np.array(r) for r in v])
            for k, v in runs.items()]  # fmt: skip
    names = [f"d{i}" for i in range(len(next(iter(runs.values()))))]
    return across_datasets.Datasets(names, arms, np.zeros(len(names)), np.ones(len(names)))


def said(found: across_datasets.Datasets) -> str:
    estimates = [aggregates.aggregate(a.scores) if a.complete else None for a in found.arms]
    f = across_datasets.finding(found, estimates)
    assert f is not None and f.kind == "across datasets"
    return f.text


def test_none_excludes_the_baseline_or_the_baseline_has_no_interval() -> None:
    """Scripted normalised runs on two datasets: arms interleaved with the baseline overlap it, and the line says
    that none excludes it; an arm with one run on a dataset has no interval, said; a baseline without one compares
    nothing; a sweep without a baseline has no line."""
    base = [[0.40, 0.45, 0.50, 0.55, 0.60], [0.42, 0.47, 0.52, 0.57, 0.62]]
    near = [[0.41, 0.46, 0.51, 0.56, 0.61], [0.43, 0.48, 0.53, 0.58, 0.63]]
    found = scripted({"b": base, "near": near, "lone": [[0.9], [0.9, 0.95]]})
    e = aggregates.aggregate(found.arms[0].scores)
    assert said(found) == (
        "Across the 2 datasets (IQM of normalised scores, 95% stratified bootstrap intervals): no "
        f"arm's interval excludes the baseline b's {e.value:.3f} [{e.lo:.3f}, {e.hi:.3f}] (near "
        "overlaps it); no interval to compare for lone (0.917 [n/a: 1 run on a dataset])."
    )
    far = scripted({"b": base, "far": [[x + 0.3 for x in r] for r in base]})
    assert "far's 0.810 [" in said(far) and "] lies wholly above." in said(far)
    assert said(scripted({"b": [[0.5], [0.5, 0.6]], "near": near})).endswith(
        "no arm is compared with the baseline b, whose aggregate is 0.533 [n/a: 1 run on a dataset]."
    )
    assert across_datasets.finding(scripted({"a": base, "c": near}, baseline="none"), [None, None]) is None


def test_each_datasets_baseline_cell_is_a_baseline_and_the_datasets_are_no_effect(three: Path) -> None:
    """Each dataset's I = 0 is the baseline there: marked so and compared with nothing (it was compared with itself:
    Δ 0, zero spread, in the Findings' no-test line); a group's name is said once in the Findings' verdicts; the
    effects have the knob's main effects and its interactions with the dataset, and no main effect of the dataset
    (a gallery run said "name: fox trails musk1": one dataset's AUC against another's measures the datasets)."""
    md = (three / "report.md").read_text()
    variants = md[md.index("## Variants") : md.index("\n## ", md.index("## Variants"))].splitlines()
    bases = [line for line in variants if "| Syn (I=0: no steps" in line]
    assert len(bases) == 3 and all("| baseline |" in line for line in bases)
    findings = md[md.index("## Findings") : md.index("## Variants")].splitlines()
    assert not any("(I=0: no steps; gamma=0.5) vs" in line for line in findings)
    tied = [line for line in findings if line.startswith("| tied |")]
    assert len(tied) == 3 and all(line.count("SynPool MIL (D=256) ·") == 1 for line in tied)
    effects = md[md.index("## Effects of each knob") : md.index("\n## ", md.index("## Effects of each knob"))]
    assert "| main | steps |" in effects and "| interaction | name x steps |" in effects
    assert "| main | name |" not in effects
