"""Replicated reference runs (`reference_seeds`): a two-level design's reference cell also runs at more seeds, the
full grid's trials at those seeds, so its spread measures seed noise; the plan says so, or says that one seed
measures none."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import TINY, write_sweeps
from synthetic import switches
from typer.testing import CliRunner

from ablate.cli import app
from ablate.planning.plan import Plan, plan

SWITCHES = switches(5)
OFF = {"attention.tau": False, "attention.mu": False, "attention.kappa_priv": False, "attention.bounded": False,
       "attention.kappa_pub": "off"}  # fmt: skip


def body(design, seeds, grid=None) -> dict:
    return {"base": {**TINY, "attention": {"kind": "csan"}}, "grid": grid or SWITCHES, "seeds": seeds,
            "design": design, "baseline": OFF}  # fmt: skip


def planned(tmp_path: Path, design, seeds, grid=None) -> Plan:
    return plan(write_sweeps(tmp_path / "r.yaml", {"s": body(design, seeds, grid)}), "s")


def test_the_reference_cell_runs_at_the_next_seeds_with_the_full_grids_keys(tmp_path: Path) -> None:
    for design in ({"fractional": {"resolution": 3, "reference_seeds": 4}},
                   {"screening": {"method": "plackett-burman", "reference_seeds": 4}}):  # fmt: skip
        p = planned(tmp_path, design, [0])
        full = planned(tmp_path, "full", [0, 1, 2, 3])
        assert p.design is not None and p.design.replicated == [1, 2, 3]
        seeds = {v: sorted(t.seed for t in p.trials if t.variant == v) for v in p.variants}
        assert seeds.pop(p.baseline) == [0, 1, 2, 3]  # the reference is the baseline
        assert set(map(tuple, seeds.values())) == {(0,)}
        assert {t.key for t in p.trials} < {t.key for t in full.trials}  # `design: full` later trains only the rest
        assert p.seeds == 1 and len(p.trials) == len(p.variants) + 3
        assert p.design.lines(p.seeds)[0].endswith(f"({len(p.variants) + 3} of 32 trials)")


def test_the_extra_seeds_are_the_first_the_sweep_does_not_use_and_each_stratum_replicates_its_reference(
    tmp_path: Path,
) -> None:
    grid = {**SWITCHES, "model.stack": ["pure", "alternating"]}
    design = {"fractional": {"resolution": 3, "reference_seeds": 4, "crossed": ["model.stack"]}}
    p = planned(tmp_path, design, [2], grid)
    assert p.design is not None and p.design.replicated == [0, 1, 3]
    references = [v for v, levels in p.design.runs.items() if not any(levels)]
    assert len(references) == 2  # one per value of the crossed axis
    for v in p.variants:
        assert sorted(t.seed for t in p.trials if t.variant == v) == ([0, 1, 2, 3] if v in references else [2])
    record = p.design.record(p.seeds)
    assert record["reference_seeds"] == [0, 1, 3] and record["trials"] == len(p.trials) == 2 * 8 + 2 * 3


def test_the_plan_says_what_measures_seed_noise(tmp_path: Path) -> None:
    one = planned(tmp_path, {"fractional": {"resolution": 3}}, [0])
    replicated = planned(tmp_path, {"fractional": {"resolution": 3, "reference_seeds": 3}}, [0])
    two = planned(tmp_path, {"fractional": {"resolution": 3}}, [0, 1])
    assert one.design is not None and replicated.design is not None and two.design is not None
    said = "\n".join(one.design.lines(one.seeds))
    assert "one seed: no seed variation measured, so the report's p assumes effect sparsity" in said
    assert "`reference_seeds: 4` in design.fractional" in said
    said = "\n".join(replicated.design.lines(replicated.seeds))
    assert "the reference cell also runs at seeds 1, 2 (reference_seeds: 3): their spread is the pure error" in said
    assert "no seed variation" not in said
    assert not any("seed" in line for line in two.design.lines(two.seeds)[1:])  # replicates measure it


def test_reference_seeds_beside_more_than_one_seed_is_an_error_naming_the_key(tmp_path: Path) -> None:
    """With 2 seeds the report compares each effect over them: the reference's runs would be tested by nothing."""
    path = write_sweeps(tmp_path / "bad.yaml",
                        {"s": body({"fractional": {"resolution": 3, "reference_seeds": 4}}, [0, 1])})  # fmt: skip
    result = CliRunner().invoke(app, ["plan", str(path), "--no-costs"])
    assert result.exit_code == 2, result.output
    assert "design.fractional.reference_seeds" in result.output
    assert "replicates the reference cell of a one-seed design; this sweep runs every cell at 2 seeds" in result.output
    path = write_sweeps(tmp_path / "one.yaml", {"s": body({"screening": {"reference_seeds": 1}}, [0])})
    result = CliRunner().invoke(app, ["plan", str(path), "--no-costs"])
    assert result.exit_code == 2 and "design.screening.reference_seeds" in result.output, result.output


def test_plan_json_lists_the_reference_seeds(tmp_path: Path) -> None:
    path = write_sweeps(tmp_path / "j.yaml", {"s": body({"fractional": {"resolution": 3, "reference_seeds": 4}}, [0])})
    doc = json.loads(CliRunner().invoke(app, ["plan", str(path), "--no-costs", "-f", "json"]).output)
    design = doc["sweeps"][0]["design"]
    assert design["reference_seeds"] == [1, 2, 3] and design["trials"] == 8 + 3


def test_a_replicated_screens_plan_says_its_error_is_the_references_seeds(tmp_path: Path) -> None:
    """A screen of one seed reads its error from its dummy contrasts (Lenth's test); with `reference_seeds` the
    report tests against the reference's runs instead, and the plan says that, not the dummies."""
    one = planned(tmp_path, {"screening": {"method": "plackett-burman"}}, [0])
    replicated = planned(tmp_path, {"screening": {"method": "plackett-burman", "reference_seeds": 4}}, [0])
    assert one.design is not None and replicated.design is not None
    assert "dummy contrast" in "\n".join(one.design.lines(one.seeds))
    said = "\n".join(replicated.design.lines(replicated.seeds))
    assert "the reference cell's seeds measure the error (pure error), not its unused columns" in said
    assert "Lenth" not in said and "dummy contrast" not in said
