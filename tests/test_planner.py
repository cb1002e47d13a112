"""Grid expansion and trial identity."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ablate.config import TrialConfig
from ablate.errors import SpecError
from ablate.planner import Plan, plan, trial_key, variant_key

BASE = {
    "data": {"name": "mnist5k"},
    "model": {"backbone": "vit", "embed_dim": 32, "depths": [2], "num_heads": [2], "patch_size": 4, "img_size": 28},
}


def plan_of(tmp_path: Path, sweep: dict, name: str = "s") -> Plan:
    f = tmp_path / "e.yaml"
    f.write_text(yaml.safe_dump({"sweeps": {name: {"base": BASE, **sweep}}}))
    result = plan(f, name)
    assert isinstance(result, Plan)
    return result


def test_cartesian_with_seeds(tmp_path: Path) -> None:
    p = plan_of(tmp_path, {"grid": {"model.stack": ["alternating", "pure"], "attention.kind": ["softmax", "csan", "syn"]}, "seeds": 3})
    assert len(p.trials) == 2 * 3 * 3
    assert len(p.variants) == 6
    assert sorted(p.axes) == ["attention.kind", "model.stack"]
    assert p.counts()["attention.kind"] == {"softmax": 6, "csan": 6, "syn": 6}
    assert {t.axes["seed"] for t in p.trials} == {0, 1, 2}


def test_linked_axes_move_together(tmp_path: Path) -> None:
    p = plan_of(tmp_path, {
        "grid": {"attention.kind": ["softmax", "csan"]},
        "linked": [{"model.embed_dim": [32, 64], "model.num_heads": [[2], [4]]}],
    })
    assert len(p.trials) == 4
    assert {(t.config.model.embed_dim, t.config.model.num_heads) for t in p.trials} == {(32, (2,)), (64, (4,))}


def test_linked_rows_may_set_different_paths(tmp_path: Path) -> None:
    p = plan_of(tmp_path, {"linked": [[
        {"attention.kind": "softmax"},
        {"attention.kind": "csan", "attention.kappa_pub": "head"},
        {"attention.kind": "csan", "model.stack": "pure"},
    ]]})
    got = [(t.config.attention.kind, getattr(t.config.attention, "kappa_pub", None), t.config.model.stack) for t in p.trials]
    assert got == [("softmax", None, "alternating"), ("csan", "head", "alternating"), ("csan", "unit", "pure")]


def test_exclude_drops_matching_cells(tmp_path: Path) -> None:
    p = plan_of(tmp_path, {
        "grid": {"model.stack": ["alternating", "pure"], "attention.kind": ["softmax", "csan"]},
        "exclude": [{"model.stack": "pure", "attention.kind": "softmax"}],
    })
    assert len(p.trials) == 3
    assert not any(t.config.model.stack == "pure" and t.config.attention.kind == "softmax" for t in p.trials)


def test_exclude_with_any_of_list(tmp_path: Path) -> None:
    p = plan_of(tmp_path, {"grid": {"attention.kind": ["softmax", "csan", "syn", "sparsemax"]},
                           "exclude": [{"attention.kind": ["syn", "sparsemax"]}]})
    assert [t.config.attention.kind for t in p.trials] == ["softmax", "csan"]


def test_conditional_axes_apply_only_where_condition_holds(tmp_path: Path) -> None:
    p = plan_of(tmp_path, {
        "grid": {"attention.kind": ["softmax", "csan"]},
        "when": [{"when": {"attention.kind": "csan"}, "grid": {"attention.tau": [True, False], "attention.mu": [True, False]}}],
        "seeds": 2,
    })
    kinds = [t.config.attention.kind for t in p.trials]
    assert kinds.count("softmax") == 2  # no duplicate softmax cells
    assert kinds.count("csan") == 4 * 2
    assert len({t.key for t in p.trials}) == len(p.trials)
    assert all(t.axes["attention.tau"] is None for t in p.trials if t.config.attention.kind == "softmax")


def test_conditions_see_base_values(tmp_path: Path) -> None:
    f = tmp_path / "e.yaml"
    f.write_text(yaml.safe_dump({"sweeps": {"s": {
        "base": {**BASE, "attention": {"kind": "syn"}},
        "when": [{"when": {"attention.kind": "syn"}, "grid": {"attention.steps": [-1, 0, 1]}}],
    }}}))
    assert len(plan(f, "s").trials) == 3


def test_baseline_is_a_variant(tmp_path: Path) -> None:
    p = plan_of(tmp_path, {"grid": {"attention.kind": ["softmax", "csan"]}, "seeds": 2, "baseline": {"attention.kind": "csan"}})
    base = [t for t in p.trials if t.variant == p.baseline]
    assert len(base) == 2 and all(t.config.attention.kind == "csan" for t in base)


def test_folds_are_replicates_of_one_variant(tmp_path: Path) -> None:
    f = tmp_path / "e.yaml"
    f.write_text(yaml.safe_dump({"sweeps": {"m": {
        "base": {"task": "mil", "data": {"name": "musk1"}, "model": {"size": "synpool"}},
        "grid": {"data.fold": [0, 1, 2]}, "seeds": 2}}}))
    p = plan(f, "m")
    assert len(p.trials) == 6 and len(p.variants) == 1
    assert p.metric == "test.auc"


def test_relative_data_paths_resolve_against_the_file(tmp_path: Path) -> None:
    f = tmp_path / "sub" / "e.yaml"
    f.parent.mkdir()
    f.write_text(yaml.safe_dump({"sweeps": {"m": {"base": {"task": "mil", "data": {"name": "fox", "path": "../mil"}, "model": {"size": "synpool"}}}}}))
    cfg = plan(f, "m").trials[0].config
    assert cfg.data.path == str((tmp_path / "mil").resolve())
    assert cfg.data.id == "mil"


# ------------------------------------------------------------------------------------------- identity
def test_key_ignores_key_order_and_explicit_defaults() -> None:
    a = TrialConfig.model_validate({"model": BASE["model"], "data": {"name": "mnist5k"}})
    b = TrialConfig.model_validate({
        "data": {"split_seed": 0, "name": "mnist5k"},
        "model": {**BASE["model"], "stack": "alternating", "mlp_ratio": 4},
        "attention": {"kind": "softmax"},
        "train": {"lr": 0.001, "epochs": 10},
        "seed": 0,
    })
    assert trial_key(a) == trial_key(b)


def test_named_size_and_its_values_share_a_key() -> None:
    named = TrialConfig.model_validate({"model": {"size": "swin-min"}})
    explicit = TrialConfig.model_validate({"model": {"backbone": "swin", "embed_dim": 96, "depths": [1, 1, 1, 1], "num_heads": [3, 6, 12, 24]}})
    assert trial_key(named) == trial_key(explicit)


def test_key_ignores_paths_resources_and_logging() -> None:
    a = TrialConfig.model_validate({"task": "mil", "data": {"name": "fox", "path": "/a/mil"}, "model": {"size": "synpool"}})
    b = TrialConfig.model_validate({
        "task": "mil", "data": {"name": "fox", "path": "/elsewhere/mil", "workers": 4}, "model": {"size": "synpool"},
        "resources": {"cpus": 4, "gpus": 0.5, "retries": 2}, "train": {"diagnostics": True, "compile": True, "eval_batch_size": 7},
    })
    assert trial_key(a) == trial_key(b)


@pytest.mark.parametrize("change", [
    {"seed": 1},
    {"train": {"lr": 0.002}},
    {"train": {"epochs": 11}},
    {"train": {"amp": True}},
    {"data": {"name": "digits"}},
    {"data": {"name": "mnist5k", "split_seed": 1}},
    {"data": {"name": "mnist5k", "val_fraction": 0.2}},
    {"model": {**BASE["model"], "stack": "pure"}},
    {"model": {**BASE["model"], "embed_dim": 64}},
    {"attention": {"kind": "csan"}},
    {"attention": {"kind": "csan", "tau": False}},
    {"attention": {"kind": "syn", "steps": 2}},
])
def test_key_changes_with_every_result_relevant_value(change: dict) -> None:
    base = {"model": BASE["model"], "data": {"name": "mnist5k"}}
    assert trial_key(TrialConfig.model_validate(base)) != trial_key(TrialConfig.model_validate({**base, **change}))


def test_variant_key_ignores_seed_only() -> None:
    a = TrialConfig.model_validate({"model": BASE["model"]})
    assert variant_key(a) == variant_key(a.model_copy(update={"seed": 5}))
    assert trial_key(a) != trial_key(a.model_copy(update={"seed": 5}))


def test_same_config_in_two_sweeps_is_the_same_trial(tmp_path: Path) -> None:
    f = tmp_path / "e.yaml"
    f.write_text(yaml.safe_dump({"sweeps": {
        "a": {"base": BASE, "grid": {"attention.kind": ["softmax", "csan"]}},
        "b": {"base": {**BASE, "attention": {"kind": "csan"}}, "grid": {"model.stack": ["alternating", "pure"]}},
    }}))
    a, b = plan(f)
    shared = {t.key for t in a.trials} & {t.key for t in b.trials}
    assert len(shared) == 1


def test_large_grid_plans(tmp_path: Path) -> None:
    """10,000+ trials expand (speed is measured in bench/plan_scale.py, not asserted here)."""
    p = plan_of(tmp_path, {
        "base": {**BASE, "attention": {"kind": "csan"}},
        "grid": {"attention.tau": [True, False], "attention.mu": [True, False], "attention.kappa_pub": ["unit", "head", "off"],
                 "attention.kappa_priv": [True, False], "attention.beta": [0.1, 0.25, 0.5, 1.0, 2.0],
                 "train.lr": [1e-3, 2e-3, 3e-3, 4e-3, 5e-3]},
        "seeds": 17,
    })
    assert len(p.trials) == 2 * 2 * 3 * 2 * 5 * 5 * 17 == 10200
    assert len({t.key for t in p.trials}) == 10200


def test_unreachable_match_params_is_a_spec_error_naming_the_key(tmp_path: Path) -> None:
    """A target no accepted width reaches: a SpecError at the linked entry, with the target and closest count."""
    base = {"data": {"name": "digits"}, "train": {"epochs": 1},
            "model": {"backbone": "vit", "embed_dim": 16, "depths": [2], "num_heads": [2], "patch_size": 2, "img_size": 8}}
    f = tmp_path / "e.yaml"
    f.write_text(yaml.safe_dump({"sweeps": {"m": {"base": base, "grid": {"attention.kind": ["csan"]},
                                                  "linked": [[{"model.match_params": 3000}]]}}}))  # fmt: skip
    with pytest.raises(SpecError) as err:
        plan(f, "m")
    (problem,) = err.value.problems
    text = str(problem)
    assert "model.match_params" in text and "e.yaml:" in text
    assert "target 3,000 parameters" in text and "closest: embed_dim 8 -> " in text
