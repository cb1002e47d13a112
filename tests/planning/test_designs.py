"""Designs (`design:`): the cells each runs are cells of the full grid with their keys, the baseline among them,
and what the plan says the cells can tell is the textbook's for known designs."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pydoe
from conftest import TINY, write_sweeps
from typer.testing import CliRunner

from ablate.cli import app
from ablate.evidence.aliasing import structure
from ablate.planning.plan import Plan, plan

SWITCHES = {
    "attention.tau": [False, True],
    "attention.mu": [False, True],
    "attention.kappa_priv": [False, True],
    "attention.bounded": [False, True],
}
CSAN = {**TINY, "attention": {"kind": "csan"}}
OFF = {path: False for path in SWITCHES}


def planned(tmp_path: Path, design, grid=None, **more) -> Plan:
    body = {"base": CSAN, "grid": grid or SWITCHES, "seeds": 2, "design": design, **more}
    return plan(write_sweeps(tmp_path / "e.yaml", {"s": body}), "s")


def cells(p: Plan) -> set[tuple]:
    return {tuple(t.axes[a] for a in p.axes) for t in p.trials}


def test_a_fraction_runs_cells_of_the_full_grid_with_their_keys_and_the_baseline(tmp_path: Path) -> None:
    full = planned(tmp_path, "full", baseline=OFF)
    half = planned(tmp_path, {"fractional": {"resolution": 4}}, baseline={**OFF, "attention.mu": True})
    assert len(full.variants) == 16 and len(half.variants) == 8
    assert {t.key for t in half.trials} < {t.key for t in full.trials}  # a later `full` trains only the rest
    assert half.baseline in half.variants
    assert half.design is not None and half.design.runs[half.baseline] == [0, 0, 0, 0]  # the reference level
    assert all(sum(levels) % 2 == sum(half.design.runs[half.baseline]) % 2 for levels in half.design.runs.values())


def test_the_half_fraction_of_four_switches_is_the_textbooks_resolution_iv(tmp_path: Path) -> None:
    half = planned(tmp_path, {"fractional": {"resolution": 4}}, baseline=OFF)
    assert half.design is not None
    lines = half.design.lines(2)
    assert lines[0].startswith(
        "design: fractional factorial 2^(4-1), minimum aberration, resolution IV; 8 of the full grid's 16 cells"
    )
    buys = "main effects clear of two-factor interactions, which are confounded with each other"
    assert lines[1] == f"  resolution IV at 8 cells: {buys}"
    assert "defining relation: I = +tau x mu x kappa_priv x bounded" in lines[2]
    assert "tau x mu = kappa_priv x bounded" in lines[4]
    s = half.design.structure()
    assert s.resolution == 4 and len(s.confounded) == 3 and not s.lost
    for variant, levels in half.design.runs.items():  # the cells: an even number of switches on (I = +ABCD)
        assert sum(levels) % 2 == 0, variant


def test_a_fold_over_contains_the_fraction_and_clears_main_effects_of_interactions(tmp_path: Path) -> None:
    five = {**SWITCHES, "attention.kappa_pub": ["off", "unit"]}
    three = planned(tmp_path, {"fractional": {"resolution": 3}}, grid=five)
    folded = planned(tmp_path, {"fractional": {"resolution": 3, "foldover": True}}, grid=five)
    assert three.design is not None and folded.design is not None
    assert {t.key for t in three.trials} < {t.key for t in folded.trials}
    assert len(three.variants) == 8 and three.design.structure().resolution == 3
    assert any(chain.startswith("tau = ") for chain in three.design.structure().confounded)
    clear = folded.design.structure()
    assert len(folded.variants) == 16 and clear.resolution == 4
    assert not any(len(t) == 1 for t in clear.aliases if t)  # no main effect confounded any more


def test_one_at_a_time_moves_each_axis_alone_from_the_reference(tmp_path: Path) -> None:
    grid = {**SWITCHES, "attention.kappa_pub": ["off", "unit", "head"]}
    p = planned(tmp_path, {"one-at-a-time": {"from": "full"}}, grid=grid)
    assert p.design is not None and len(p.variants) == 1 + 4 + 2  # a three-level axis moves to each other value
    ref = {a: v for a, v in zip(p.axes, next(iter(sorted(cells(p), key=lambda c: -sum(map(bool, c))))))}
    assert p.baseline == next(v for v, levels in p.design.runs.items() if not any(levels))
    base = next(t for t in p.trials if t.variant == p.baseline)
    assert [base.axes[a] for a in SWITCHES] == [True] * 4 and base.axes["attention.kappa_pub"] == "head"
    for t in p.trials:  # every other cell differs from the reference in one axis
        assert sum(t.axes[a] != base.axes[a] for a in grid) <= 1, (t.axes, ref)
    on_first = {**{a: [True, False] for a in SWITCHES}, "attention.kappa_pub": ["off", "head"]}
    listed_on_first = planned(tmp_path, {"one-at-a-time": {"from": "full"}}, grid=on_first)
    full = next(t for t in listed_on_first.trials if t.variant == listed_on_first.baseline)
    assert [full.axes[a] for a in SWITCHES] == [True] * 4  # a switch's full value is true, wherever it is listed
    assert full.axes["attention.kappa_pub"] == "head"  # other axes: the last listed
    given = planned(tmp_path, {"one-at-a-time": {"from": {**OFF, "attention.kappa_pub": "unit"}}}, grid=grid)
    by_baseline = planned(tmp_path, {"one-at-a-time": {"from": "baseline"}}, grid=grid,
                          baseline={**OFF, "attention.kappa_pub": "unit"})  # fmt: skip
    assert given.baseline == by_baseline.baseline and cells(given) == cells(by_baseline)


def test_crossed_axes_repeat_the_design_at_each_of_their_values(tmp_path: Path) -> None:
    grid = {**SWITCHES, "attention.kappa_pub": ["off", "unit", "head"]}
    p = planned(tmp_path, {"fractional": {"resolution": 4, "crossed": ["attention.kappa_pub"]}}, grid=grid)
    assert p.design is not None and len(p.variants) == 3 * 8
    assert sorted(set(p.design.strata.values())) == [f"attention.kappa_pub={v}" for v in ("head", "off", "unit")]
    one = [v for v, s in p.design.strata.items() if s == "attention.kappa_pub=off"]
    assert p.design.structure(one).resolution == 4


def test_plackett_burman_screens_seven_switches_in_eight_cells(tmp_path: Path) -> None:
    grid = {**SWITCHES, "attention.kappa_pub": ["off", "unit"], "model.stack": ["pure", "alternating"],
            "train.lr": [0.001, 0.002]}  # fmt: skip
    p = planned(tmp_path, {"screening": "plackett-burman"}, grid=grid)
    assert p.design is not None and len(p.variants) == 8 and p.design.structure().resolution == 3


def test_known_alias_structures() -> None:
    """2^(6-2) resolution IV (BHH table 6.14: I = ABCE = ABDF = CDEF); the 12-cell Plackett-Burman, whose
    two-factor interactions load +-1/3 on the main effects they leave out (partial aliasing)."""
    s = structure(pydoe.fracfact_by_res(6, 4), list("ABCDEF"))
    assert s.words_text() == "I = +A x B x C x E = +A x B x D x F = +C x D x E x F" and s.resolution == 4
    assert "A x B = C x E = D x F" in s.confounded
    pb = structure(pydoe.pbdesign(11), [f"x{i}" for i in range(11)])
    assert [len(t) for t in pb.model] == [1] * 11 and pb.resolution is None and not pb.words_text()
    weights = {round(abs(w), 6) for chain in pb.aliases.values() for _, w in chain}
    assert weights == {round(1 / 3, 6)}
    full = structure(np.array(list(itertools.product((-1, 1), repeat=3))), list("abc"))
    assert full.resolution is None and not full.confounded and len(full.model) == 6


def test_ablate_plan_prints_what_the_design_can_tell(tmp_path: Path) -> None:
    body = {"base": CSAN, "grid": SWITCHES, "seeds": 2, "design": {"fractional": {"resolution": 4}}, "baseline": OFF}
    path = write_sweeps(tmp_path / "e.yaml", {"half": body})
    result = CliRunner().invoke(app, ["plan", str(path), "--no-costs"])
    assert result.exit_code == 0, result.output
    assert "8 of the full grid's 16 cells (16 of 32 trials)" in result.output
    assert "confounded (up to two-factor interactions): tau x mu = kappa_priv x bounded" in result.output
    dry = CliRunner().invoke(app, ["launch", str(path), "--dry-run", "--db", f"sqlite:///{tmp_path / 'none.sqlite'}"])
    assert dry.exit_code == 0, dry.output
    assert (
        "design: fractional factorial 2^(4-1), minimum aberration, resolution IV; 8 of the full grid's 16" in dry.output
    )


def test_plan_json_gives_each_sweeps_design_as_the_text_says_it(tmp_path: Path) -> None:
    """`ablate plan --format json` of the shipped half fraction: its design as data (cells and trials against the full
    grid's, resolution, defining relation, estimable terms, alias chains), saying what the text under its table says;
    a sweep without `design:` (the shipped `cpu`) and one with `design: full` have none; the rows stay `trials`."""
    shipped = Path(__file__).parents[2] / "experiments.yaml"
    doc = json.loads(
        CliRunner().invoke(app, ["plan", str(shipped), "cpu-csan-half", "cpu", "--no-costs", "-f", "json"]).output
    )
    assert [s["sweep"] for s in doc["sweeps"]] == ["cpu-csan-half", "cpu"] and doc["sweeps"][1]["design"] is None
    d = doc["sweeps"][0]["design"]
    assert (d["kind"], d["cells"], d["full_cells"], d["trials"], d["full_trials"]) == ("fractional", 8, 16, 16, 32)
    assert [f["short"] for f in d["factors"]] == ["tau", "mu", "kappa_pub", "kappa_priv"]
    assert d["resolution"] == 4 and d["defining_relation"] == [["tau", "mu", "kappa_pub", "kappa_priv"]]
    assert {tuple(a["term"]): [(tuple(w["term"]), w["loading"]) for w in a["with"]] for a in d["aliases"]} == {
        ("tau", "mu"): [(("kappa_pub", "kappa_priv"), 1.0)],
        ("tau", "kappa_pub"): [(("mu", "kappa_priv"), 1.0)],
        ("tau", "kappa_priv"): [(("mu", "kappa_pub"), 1.0)],
    }
    text = CliRunner().invoke(app, ["plan", str(shipped), "cpu-csan-half", "--no-costs"]).output
    assert f"{d['title']}, resolution IV; 8 of the full grid's 16 cells (16 of 32 trials)" in text
    assert d["defining_relation_signs"] == [1]
    assert "defining relation: I = +" + " x ".join(d["defining_relation"][0]) in text
    assert "estimable: " + ", ".join(" x ".join(t) for t in d["estimable"]) + "\n" in text
    assert "confounded (up to two-factor interactions): " + "; ".join(a["text"] for a in d["aliases"]) in text
    keys = [t.key for name in ("cpu-csan-half", "cpu") for t in plan(shipped, name).trials]
    assert [r["key"] for r in doc["trials"]] == keys
    full = write_sweeps(tmp_path / "e.yaml", {"s": {"base": CSAN, "grid": SWITCHES, "design": "full"}})
    doc = json.loads(CliRunner().invoke(app, ["plan", str(full), "--no-costs", "-f", "json"]).output)
    assert doc["sweeps"] == [{"sweep": "s", "design": None}] and len(doc["trials"]) == 16


def test_one_at_a_time_takes_adaptive_seeds_against_its_reference(tmp_path: Path) -> None:
    seeds = {"min": 6, "max": 9, "threshold": 0.5}
    p = planned(tmp_path, {"one-at-a-time": {"from": "baseline"}}, seeds=seeds, baseline=OFF)
    assert p.adaptive is not None and p.design is not None and len(p.variants) == 1 + 4
    assert {t.config.seed for t in p.trials} == set(range(6)) and {t.config.seed for t in p.reserve} == {6, 7, 8}
    assert p.design.runs[p.baseline] == [0, 0, 0, 0]
