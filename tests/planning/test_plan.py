"""Grid expansion and trial identity."""

from __future__ import annotations

import copy
import json
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path

import golden_keys
import pytest
import yaml
from conftest import BUILTIN_KINDS
from pydantic import BaseModel, ValidationError

from ablate.config import AnyMechanism, TrialConfig, identity
from ablate.errors import SpecError
from ablate.planning.cells import groups
from ablate.planning.keys import trial_key, variant_key
from ablate.planning.plan import Plan, expand, plan, plan_all
from ablate.plugins import load_builtins
from ablate.registry import MECHANISMS
from ablate.spec.problems import SweepProblem
from ablate.spec.schema import SweepSpec
from ablate.spec.sweeps import Sweep

BASE = {
    "data": {"name": "mnist5k"},
    "model": {"backbone": "vit", "embed_dim": 32, "depths": [2], "num_heads": [2], "patch_size": 4, "img_size": 28},
}


def plan_of(tmp_path: Path, sweep: dict, name: str = "s", max_trials: int = 10_000) -> Plan:
    f = tmp_path / "e.yaml"
    f.write_text(yaml.safe_dump({"sweeps": {name: {"base": BASE, **sweep}}}))
    result = plan(f, name, max_trials)
    assert isinstance(result, Plan)
    return result


def sweep_of(body: dict[str, typing.Any]) -> Sweep:
    """A sweep from its YAML as data, with no file: what planning's functions take."""
    spec = SweepSpec.model_validate({"base": BASE, **body})
    return Sweep("s", spec, copy.deepcopy(spec.base))


def test_planning_is_a_function_of_the_sweeps_data_and_names_problems_by_key_path() -> None:
    """Planning reads no file: `expand` makes a plan of a sweep's dicts, or returns its problems as values, each a
    key path in the sweep (where the value is written) and a message; placing them on a file's line is the
    file's (`SweepSource.place`), not planning's."""
    ok = expand(sweep_of({"grid": {"train.lr": [1e-3, 3e-3]}, "seeds": [0, 1]}))
    assert ok.problems == [] and ok.plan is not None and len(ok.plan.trials) == 4 and ok.plan.file == ""
    axes = expand(
        sweep_of({"grid": {"model.nope": [1]}, "linked": [{"train.epochs": [1, 2], "train.batch_size": [8]}]})
    )
    assert axes.plan is None and [p.path for p in axes.problems] == [("grid", "model.nope"), ("linked", 0)]
    assert axes.problems[1].message == "linked axes need lists of one length, got lengths [1, 2]"
    cells = expand(sweep_of({"grid": {"train.lr": [1e-3, -1.0]}, "exclude": [{"train.epochs": 99}]}))
    assert cells.problems == [
        SweepProblem(("grid", "train.lr", 1), "Input should be greater than 0 (value -1.0)"),
        SweepProblem(("exclude", 0, "train.epochs"), "99 matches no value train.epochs takes in this sweep (10)"),
    ]
    three = {"train.lr": [1e-3, 2e-3, 3e-3], "train.epochs": [1, 2], "train.batch_size": [8, 16]}
    design = expand(sweep_of({"grid": three, "design": {"fractional": {"resolution": 3}}}))
    assert [p.path for p in design.problems] == [("design", "fractional")]
    assert design.problems[0].message.startswith("train.lr has 3 values: a fractional design varies two-level axes")
    found: list[SweepProblem] = []
    rows = groups({"train.lr": []}, [], ("when", 0), found, ["softmax"])
    assert rows == [[]] and found == [SweepProblem(("when", 0, "grid", "train.lr"), "empty axis: expected a list "
                                                   "of at least one value")]  # fmt: skip


def test_cartesian_with_seeds(tmp_path: Path) -> None:
    p = plan_of(
        tmp_path,
        {"grid": {"model.stack": ["alternating", "pure"], "attention.kind": ["softmax", "csan", "syn"]}, "seeds": 3},
    )
    assert len(p.trials) == 2 * 3 * 3
    assert len(p.variants) == 6
    assert sorted(p.axes) == ["attention.kind", "model.stack"]
    assert p.counts()["attention.kind"] == {"softmax": 6, "csan": 6, "syn": 6}
    assert {t.axes["seed"] for t in p.trials} == {0, 1, 2}


def test_linked_axes_move_together(tmp_path: Path) -> None:
    p = plan_of(
        tmp_path,
        {
            "grid": {"attention.kind": ["softmax", "csan"]},
            "linked": [{"model.embed_dim": [32, 64], "model.num_heads": [[2], [4]]}],
        },
    )
    assert len(p.trials) == 4
    assert {(t.config.model.embed_dim, t.config.model.num_heads) for t in p.trials} == {(32, (2,)), (64, (4,))}


def test_linked_rows_may_set_different_paths(tmp_path: Path) -> None:
    p = plan_of(
        tmp_path,
        {
            "linked": [
                [
                    {"attention.kind": "softmax"},
                    {"attention.kind": "csan", "attention.kappa_pub": "head"},
                    {"attention.kind": "csan", "model.stack": "pure"},
                ]
            ]
        },
    )
    got = [
        (t.config.attention.kind, getattr(t.config.attention, "kappa_pub", None), t.config.model.stack)
        for t in p.trials
    ]
    assert got == [("softmax", None, "alternating"), ("csan", "head", "alternating"), ("csan", "unit", "pure")]


def test_exclude_drops_matching_cells(tmp_path: Path) -> None:
    p = plan_of(
        tmp_path,
        {
            "grid": {"model.stack": ["alternating", "pure"], "attention.kind": ["softmax", "csan"]},
            "exclude": [{"model.stack": "pure", "attention.kind": "softmax"}],
        },
    )
    assert len(p.trials) == 3
    assert not any(t.config.model.stack == "pure" and t.config.attention.kind == "softmax" for t in p.trials)


def test_exclude_with_any_of_list(tmp_path: Path) -> None:
    p = plan_of(
        tmp_path,
        {
            "grid": {"attention.kind": ["softmax", "csan", "syn", "sparsemax"]},
            "exclude": [{"attention.kind": ["syn", "sparsemax"]}],
        },
    )
    assert [t.config.attention.kind for t in p.trials] == ["softmax", "csan"]


def test_conditional_axes_apply_only_where_condition_holds(tmp_path: Path) -> None:
    p = plan_of(
        tmp_path,
        {
            "grid": {"attention.kind": ["softmax", "csan"]},
            "when": [
                {
                    "when": {"attention.kind": "csan"},
                    "grid": {"attention.tau": [True, False], "attention.mu": [True, False]},
                }
            ],
            "seeds": 2,
        },
    )
    kinds = [t.config.attention.kind for t in p.trials]
    assert kinds.count("softmax") == 2  # no duplicate softmax cells
    assert kinds.count("csan") == 4 * 2
    assert len({t.key for t in p.trials}) == len(p.trials)
    assert all(t.axes["attention.tau"] is None for t in p.trials if t.config.attention.kind == "softmax")


def test_conditions_see_base_values(tmp_path: Path) -> None:
    f = tmp_path / "e.yaml"
    f.write_text(
        yaml.safe_dump(
            {
                "sweeps": {
                    "s": {
                        "base": {**BASE, "attention": {"kind": "syn"}},
                        "when": [{"when": {"attention.kind": "syn"}, "grid": {"attention.steps": [-1, 0, 1]}}],
                    }
                }
            }
        )
    )
    assert len(plan(f, "s").trials) == 3


def test_baseline_is_a_variant(tmp_path: Path) -> None:
    p = plan_of(
        tmp_path, {"grid": {"attention.kind": ["softmax", "csan"]}, "seeds": 2, "baseline": {"attention.kind": "csan"}}
    )
    base = [t for t in p.trials if t.variant == p.baseline]
    assert len(base) == 2 and all(t.config.attention.kind == "csan" for t in base)


def test_folds_are_replicates_of_one_variant(tmp_path: Path) -> None:
    f = tmp_path / "e.yaml"
    f.write_text(
        yaml.safe_dump(
            {
                "sweeps": {
                    "m": {
                        "base": {"task": "mil", "data": {"name": "musk1"}, "model": {"size": "synpool"}},
                        "grid": {"data.fold": [0, 1, 2]},
                        "seeds": 2,
                    }
                }
            }
        )
    )
    p = plan(f, "m")
    assert len(p.trials) == 6 and len(p.variants) == 1
    assert p.metric == "test.auc"


def test_relative_data_paths_resolve_against_the_file(tmp_path: Path) -> None:
    f = tmp_path / "sub" / "e.yaml"
    f.parent.mkdir()
    (tmp_path / "mil").mkdir()
    f.write_text(
        yaml.safe_dump(
            {
                "sweeps": {
                    "m": {
                        "base": {"task": "mil", "data": {"name": "fox", "path": "../mil"}, "model": {"size": "synpool"}}
                    }
                }
            }
        )
    )
    cfg = plan(f, "m").trials[0].config
    assert cfg.data.path == str((tmp_path / "mil").resolve())
    assert cfg.data.id == "mil"


# ------------------------------------------------------------------------------------------- identity
def test_key_ignores_key_order_and_explicit_defaults() -> None:
    a = TrialConfig.model_validate({"model": BASE["model"], "data": {"name": "mnist5k"}})
    b = TrialConfig.model_validate(
        {
            "data": {"split_seed": 0, "name": "mnist5k"},
            "model": {**BASE["model"], "stack": "alternating", "mlp_ratio": 4},
            "attention": {"kind": "softmax"},
            "train": {"lr": 0.001, "epochs": 10},
            "seed": 0,
        }
    )
    assert trial_key(a) == trial_key(b)


def test_named_size_and_its_values_share_a_key() -> None:
    named = TrialConfig.model_validate({"model": {"size": "swin-min"}})
    explicit = TrialConfig.model_validate(
        {"model": {"backbone": "swin", "embed_dim": 96, "depths": [1, 1, 1, 1], "num_heads": [3, 6, 12, 24]}}
    )
    assert trial_key(named) == trial_key(explicit)


def test_key_ignores_paths_resources_and_logging() -> None:
    a = TrialConfig.model_validate(
        {"task": "mil", "data": {"name": "fox", "path": "/a/mil"}, "model": {"size": "synpool"}}
    )
    b = TrialConfig.model_validate(
        {
            "task": "mil",
            "data": {"name": "fox", "path": "/elsewhere/mil", "workers": 4},
            "model": {"size": "synpool"},
            "resources": {"cpus": 4, "gpus": 0.5, "retries": 2},
            "train": {"diagnostics": True, "compile": True, "eval_batch_size": 7},
        }
    )
    assert trial_key(a) == trial_key(b)


@pytest.mark.parametrize(
    "change",
    [
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
    ],
)
def test_key_changes_with_every_result_relevant_value(change: dict) -> None:
    base = {"model": BASE["model"], "data": {"name": "mnist5k"}}
    assert trial_key(TrialConfig.model_validate(base)) != trial_key(TrialConfig.model_validate({**base, **change}))


def test_variant_key_ignores_seed_only() -> None:
    a = TrialConfig.model_validate({"model": BASE["model"]})
    assert variant_key(a) == variant_key(a.model_copy(update={"seed": 5}))
    assert trial_key(a) != trial_key(a.model_copy(update={"seed": 5}))


def test_same_config_in_two_sweeps_is_the_same_trial(tmp_path: Path) -> None:
    f = tmp_path / "e.yaml"
    f.write_text(
        yaml.safe_dump(
            {
                "sweeps": {
                    "a": {"base": BASE, "grid": {"attention.kind": ["softmax", "csan"]}},
                    "b": {
                        "base": {**BASE, "attention": {"kind": "csan"}},
                        "grid": {"model.stack": ["alternating", "pure"]},
                    },
                }
            }
        )
    )
    a, b = plan_all(f)
    shared = {t.key for t in a.trials} & {t.key for t in b.trials}
    assert len(shared) == 1


def test_plan_without_a_name_is_the_default_sweep(tmp_path: Path) -> None:
    """`plan(file)` is the file's `default:` sweep, else its first; a default naming no sweep is a problem."""
    f = tmp_path / "e.yaml"
    sweeps = {"a": {"base": BASE}, "b": {"base": BASE, "grid": {"attention.kind": ["softmax", "csan"]}}}
    f.write_text(yaml.safe_dump({"sweeps": sweeps}, sort_keys=False))
    assert plan(f).sweep == "a"
    f.write_text(yaml.safe_dump({"default": "b", "sweeps": sweeps}, sort_keys=False))
    assert plan(f).sweep == "b" and [p.sweep for p in plan_all(f)] == ["a", "b"]
    f.write_text(yaml.safe_dump({"default": "c", "sweeps": sweeps}, sort_keys=False))
    with pytest.raises(SpecError) as err:
        plan(f)
    (problem,) = err.value.problems
    assert problem.path == ("default",) and "'c' names no sweep" in str(problem)


def test_a_grid_over_the_cap_is_refused_before_expanding_and_max_trials_raises_it(tmp_path: Path) -> None:
    """102,000 trials: refused by arithmetic under the default cap of 10,000 (naming the sizes and the option)
    without expanding; with a higher --max-trials they expand (a few seconds: bench/plan_scale.py measures it)."""
    sweep = {
        "base": {**BASE, "attention": {"kind": "csan"}},
        "grid": {
            "attention.tau": [True, False],
            "attention.mu": [True, False],
            "attention.kappa_pub": ["unit", "head", "off"],
            "attention.kappa_priv": [True, False],
            "attention.beta": [0.1, 0.25, 0.5, 1.0, 2.0],
            "train.lr": [1e-3, 2e-3, 3e-3, 4e-3, 5e-3],
        },
        "seeds": 170,
    }
    with pytest.raises(SpecError, match=r"up to 102,000 trials \(.* cells x 170 seeds\).*--max-trials"):
        plan_of(tmp_path, sweep)
    p = plan_of(tmp_path, sweep, max_trials=200_000)
    assert len(p.trials) == 2 * 2 * 3 * 2 * 5 * 5 * 170 == 102_000
    assert len({t.key for t in p.trials}) == 102_000


def test_unreachable_match_params_is_a_spec_error_naming_the_key(tmp_path: Path) -> None:
    """A target no accepted width reaches: a SpecError at the linked entry, with the target and closest count."""
    base = {
        "data": {"name": "digits"},
        "train": {"epochs": 1},
        "model": {"backbone": "vit", "embed_dim": 16, "depths": [2], "num_heads": [2], "patch_size": 2, "img_size": 8},
    }
    f = tmp_path / "e.yaml"
    f.write_text(yaml.safe_dump({"sweeps": {"m": {"base": base, "grid": {"attention.kind": ["csan"]},
                                                  "linked": [[{"model.match_params": 3000}]]}}}))  # fmt: skip
    with pytest.raises(SpecError) as err:
        plan(f, "m")
    (problem,) = err.value.problems
    text = str(problem)
    assert "model.match_params" in text and "e.yaml:" in text
    assert "target 3,000 parameters" in text and "closest: embed_dim 8 -> " in text


# ------------------------------------------------------------------------------------ key stability
def test_shipped_sweeps_keep_their_golden_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every trial key of the shipped experiments.yaml equals the one pinned in tests/golden_keys.json."""
    monkeypatch.setenv("IMAGENET_DIR", golden_keys.IMAGENET_DIR)
    golden = json.loads(golden_keys.GOLDEN.read_text())
    now = golden_keys.current_keys()
    if now == golden:
        return
    moved = {}
    for s, keys in now["sweeps"].items():
        old = golden["sweeps"].get(s, [])
        moved[s] = sum(a != b for a, b in zip(keys, old)) + abs(len(keys) - len(old))
    why = (
        f"KEY_VERSION was bumped ({golden['key_version']} -> {now['key_version']}): regenerate the golden keys"
        if now["key_version"] != golden["key_version"]
        else "a change to the config models or to the key computation moved them without a KEY_VERSION bump"
    )
    pytest.fail(
        f"trial keys of the shipped sweeps changed (keys moved per sweep: {moved}; sweeps now {sorted(now['sweeps'])}, "
        f"golden {sorted(golden['sweeps'])}). {why}.\n"
        "Changing keys orphans every stored result: existing stores no longer match these trials and a relaunch "
        "runs them all again. Only a change in what a config means may do that, and then "
        "ablate.planning.keys.KEY_VERSION must be bumped deliberately. A new result-relevant field must be declared "
        "with config.added(default) (it "
        "joins the key only away from its default; a plain Field re-keys every trial), and a field that does not "
        "change results must be marked nokey.\n"
        "After a deliberate KEY_VERSION bump (or an edit of experiments.yaml) regenerate with: "
        f"{golden_keys.REGENERATE}"
    )


# Every leaf field of TrialConfig (through nested models and every attention kind), found from the model
# classes, so a new field is covered without editing this file.

#: The fields that do NOT change a trial's result (marked nokey), by hand: a field missing here changes
#: the key when perturbed, and one listed here must not. Marking another field nokey must be deliberate.
EXPECTED_NOKEY = {
    "model.size", "data.path", "data.remote", "data.workers", "attention[csan].chunk",
    "train.compile", "train.channels_last", "train.diagnostics", "train.eval_batch_size",
    "resources.cpus", "resources.gpus", "resources.gpu_headroom", "resources.retries", "resources.workers",
    "train.accum_steps", "train.device_batch",
}  # fmt: skip
#: The replicate fields: a variant's trials differ only in these.
REPLICATES = {"seed", "data.split_seed", "data.fold"}
#: Perturbations that need a hand-picked valid value (tried before the generic candidates).
HAND_PICKED: dict[str, list] = {"model.size": ["vit-small"], "data.name": ["digits"], "model.backbone": ["swin"],
                              "train.opt": ["sgd"], "attention.patch": [3]}  # fmt: skip
#: Fields that validation ties to others, so no valid config differs in them alone: set without validation.
UNVALIDATED: dict[str, object] = {"task": "mil"}  # task follows data.name and model.backbone (TrialConfig._check)
#: Valid bases a perturbation is tried on, in order (a model field may need another backbone: dwconv is swin;
#: or another stack: twin_width and match_by: twin_width need a pure stack, the latter a match_params; or a MIL
#: network: model.pool).
#: Every optional field that derives another (data.path -> data.id) is set, so a base is fully explicit.
BASES = [
    {"data": {"name": "mnist5k", "path": "/data/mnist5k"}, "model": {"size": "vit-tiny"}},
    {"data": {"name": "mnist5k", "path": "/data/mnist5k"}, "model": {"size": "swin-min"}},
    {
        "data": {"name": "mnist5k", "path": "/data/mnist5k"},
        "model": {"backbone": "vit", "embed_dim": 96, "depths": [2], "num_heads": [3]},
    },
    {
        "data": {"name": "mnist5k", "path": "/data/mnist5k"},
        "model": {"size": "swin-min", "stack": "pure", "match_params": 1.0e7},
    },
    {"task": "mil", "data": {"name": "musk1"}, "model": {"size": "synpool"}},  # MIL-only fields: model.pool
]


@dataclass(frozen=True)
class Leaf:
    path: str  # dotted config path
    kind: str | None  # attention kind for attention fields
    annotation: object
    tag: bool = False  # the discriminator of a tagged union: a new value replaces the whole section

    @property
    def id(self) -> str:
        return self.path.replace("attention.", f"attention[{self.kind}].", 1) if self.kind else self.path


def _leaves(model: type[BaseModel], prefix: str = "", kind: str | None = None) -> list[Leaf]:
    out = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        models = [a for a in (typing.get_args(field.annotation) or (field.annotation,))
                  if isinstance(a, type) and issubclass(a, BaseModel)]  # fmt: skip
        if any(isinstance(meta, AnyMechanism) for meta in field.metadata):  # every registered mechanism, by kind
            models = [cls for _, cls in MECHANISMS.items()]
            for m in models:
                tag = typing.get_args(m.model_fields["kind"].annotation)[0]
                # kind, and a knob a kind fixes (nlm's projections: Literal["identity"]), have no other value
                out += [leaf for leaf in _leaves(m, f"{path}.", tag) if not _fixed(leaf.annotation)]
            tags = tuple(typing.get_args(m.model_fields["kind"].annotation)[0] for m in models)
            out.append(Leaf(f"{path}.kind", None, typing.Literal[tags], tag=True))
        elif models:
            (m,) = models
            out += _leaves(m, f"{path}.", kind)
        else:
            out.append(Leaf(path, kind, field.annotation))
    return out


def _fixed(annotation: object) -> bool:
    """A one-value Literal: a field a mechanism's kind fixes."""
    return typing.get_origin(annotation) is typing.Literal and len(typing.get_args(annotation)) == 1


load_builtins()
LEAVES = _leaves(TrialConfig)


def _candidates(ann: object, value: object) -> list:
    """Values of type `ann` other than `value` (constraints are left to validation)."""
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Literal:
        return [a for a in args if a != value]
    if origin in (typing.Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        return [c for a in members for c in _candidates(a, value)] + ([None] if len(members) < len(args) else [])
    if ann is bool:
        return [not value] if isinstance(value, bool) else [True, False]
    if ann is int:
        v = value if isinstance(value, int) else 0
        return [v + 1, v - 1, v * 2, 1, 2, 16]
    if ann is float:
        v = float(value) if isinstance(value, (int, float)) else 0.0
        return [v * 2, v / 2, v + 0.1, v - 0.1, 0.5, 1.0]
    if ann is str:
        return [f"{value}-other" if isinstance(value, str) else "other"]
    if origin is tuple:
        v = tuple(value) if isinstance(value, tuple) and value else (1,)
        return [(v[0] + 1, *v[1:]), (v[0] * 2, *v[1:]), (*v, v[-1])]
    if origin is dict:
        return [{"model.stack": "pure"}]
    return []


def _flat(data: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in data.items():
        if isinstance(v, dict) and not (prefix + k).endswith(("match_params", "match_as")):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def _perturb(leaf: Leaf) -> tuple[TrialConfig, TrialConfig, object]:
    """A valid base config and a valid config that differs from it in `leaf` alone (and the new value)."""
    tried = []
    for raw in BASES:
        base = TrialConfig.model_validate({**raw, "attention": {"kind": leaf.kind or "softmax"}})
        dump = base.model_dump()
        flat = _flat(base.model_dump(mode="json"))
        node = dump
        *parents, name = leaf.path.split(".")
        for p in parents:
            node = node[p]
        if leaf.tag:  # a new tag starts its section afresh (the other kind's fields would be unknown keys)
            node.clear()
            node[name] = getattr(base.attention, name)
        if leaf.path in UNVALIDATED:
            value = UNVALIDATED[leaf.path]
            return base, base.model_copy(update={name: value}), value
        current = node[name]
        for value in [*HAND_PICKED.get(leaf.path, []), *_candidates(leaf.annotation, current)]:
            if value == current and type(value) is type(current):
                continue
            node[name] = value
            try:
                other = TrialConfig.model_validate(dump)
            except ValidationError as e:
                tried.append(f"{value!r}: {e.errors()[0]['msg']}")
                continue
            finally:
                node[name] = current
            changed = {p for p, v in _flat(other.model_dump(mode="json")).items() if flat.get(p, object()) != v}
            # another attention kind brings its own fields along
            alone = {leaf.path} | (
                {p for p in changed if p.startswith("attention.")} if leaf.path == "attention.kind" else set()
            )
            if changed == alone:
                return base, other, value
            tried.append(f"{value!r}: also changed {sorted(changed - {leaf.path})}")
    pytest.fail(
        f"{leaf.id}: no valid value changes this field alone (tried {tried}); add one to HAND_PICKED "
        "(or to UNVALIDATED if validation ties it to other fields)"
    )


def test_the_walk_finds_every_leaf_of_every_section() -> None:
    ids = {leaf.id for leaf in LEAVES}
    assert ids >= EXPECTED_NOKEY, f"EXPECTED_NOKEY names fields that no longer exist: {EXPECTED_NOKEY - ids}"
    assert {"seed", "task", "data.fold", "train.lr", "model.embed_dim", "attention.kind", "attention[csan].tau",
            "attention[ista].step_size", "attention[syn].gamma", "attention[laplace].sigma"} <= ids  # fmt: skip
    assert {"attention[softmax].projections", "attention[nlm].patch"} <= ids
    assert {leaf.kind for leaf in LEAVES if leaf.kind} == set(BUILTIN_KINDS)  # every kind has projections


@pytest.mark.parametrize("leaf", LEAVES, ids=lambda leaf: leaf.id)
def test_exactly_the_result_relevant_fields_change_the_key(leaf: Leaf) -> None:
    """Perturb one leaf field: the trial key changes iff the field changes results (is not nokey), and the
    variant key changes iff it does and is no replicate field (seed, data.split_seed, data.fold)."""
    base, other, value = _perturb(leaf)
    relevant = leaf.id not in EXPECTED_NOKEY
    changed = trial_key(base) != trial_key(other)
    assert changed == relevant, (
        f"{leaf.id} -> {value!r} {'left' if relevant else 'changed'} the trial key, but {leaf.id} "
        + (
            "changes a trial's result: it must be part of the key (not nokey)"
            if relevant
            else "is expected not to change results (nokey); if it now does, remove it from EXPECTED_NOKEY"
        )
    )
    assert (variant_key(base) != variant_key(other)) == (relevant and leaf.id not in REPLICATES), (
        f"{leaf.id} -> {value!r}: the variant key must ignore exactly the replicate fields {sorted(REPLICATES)} "
        "(and the nokey fields)"
    )


def test_when_and_exclude_match_list_valued_fields_against_tuple_defaults(tmp_path: Path) -> None:
    """`when: {model.num_heads: [3]}` matches a default (3,) the file never wrote (the tuple branch of
    `matches`), and only there (a condition no cell meets is refused); exclude rules match a list-valued axis
    value exactly."""
    f = tmp_path / "e.yaml"
    sweep = {"base": {"train": {"epochs": 1}}, "grid": {"attention.kind": ["softmax", "sparsemax"]},
             "when": [{"when": {"model.num_heads": [3]}, "grid": {"train.lr": [0.1, 0.01]}}]}  # fmt: skip
    f.write_text(yaml.safe_dump({"sweeps": {"w": sweep}}))
    assert len(plan(f, "w").trials) == 4  # vit-tiny's default num_heads (3,) matched: 2 kinds x 2 lr
    sweep["when"][0]["when"] = {"model.num_heads": [6]}
    f.write_text(yaml.safe_dump({"sweeps": {"w": sweep}}))
    with pytest.raises(SpecError, match=re.escape("[6] matches no value model.num_heads takes in this sweep ((3,))")):
        plan(f, "w")
    excl = {"base": {"train": {"epochs": 1}, "model": {"size": "vit-tiny"}}, "grid": {"model.depths": [[2], [3]]},
            "exclude": [{"model.depths": [3]}]}  # fmt: skip
    f.write_text(yaml.safe_dump({"sweeps": {"x": excl}}))
    assert [t.config.model.depths for t in plan(f, "x").trials] == [(2,)]


def test_a_value_from_an_environment_variable_is_recorded_as_its_placeholder(tmp_path: Path, monkeypatch) -> None:
    """data.path written as ${SECRET_DIR}/cifar: the trial runs with the value, while the store's config and
    the MLflow run's params keep the text; the value appears in neither database file."""
    from ablate.store import Store
    from ablate.tracking.tracker import Tracker

    secret = tmp_path / "s3cr3t-token-dir"
    (secret / "cifar").mkdir(parents=True)
    monkeypatch.setenv("SECRET_DIR", str(secret))
    f = tmp_path / "e.yaml"
    f.write_text(yaml.safe_dump({"sweeps": {"s": {"base": {
        "data": {"name": "cifar10", "path": "${SECRET_DIR}/cifar", "id": "cifar10"},
        "model": {"backbone": "vit", "embed_dim": 32, "depths": [2], "num_heads": [2], "patch_size": 4,
                  "img_size": 32}}}}}))  # fmt: skip
    (t,) = plan(f, "s").trials
    assert t.config.data.path == str(secret / "cifar")
    with Store(f"sqlite:///{tmp_path / 'r.sqlite'}") as store:
        store.add_trials("s", [t])
        assert store.trial(t.key).config["data"]["path"] == "${SECRET_DIR}/cifar"
        tracker = Tracker(f"sqlite:///{tmp_path / 'm.sqlite'}", str(tmp_path / "art"))
        run = tracker.client.get_run(tracker.start_trial(store, "s", t.key))
        assert run.data.params["data.path"] == "${SECRET_DIR}/cifar"
    files = [p for p in tmp_path.iterdir() if p.name.startswith(("r.sqlite", "m.sqlite"))]  # with -wal files
    assert len(files) >= 2 and not [p.name for p in files if b"s3cr3t" in p.read_bytes()]


def test_the_store_keeps_each_trials_config_and_axes_at_its_own_seed(tmp_path: Path, monkeypatch) -> None:
    """A cell's config and axes are serialised once with a place for the seed (`planner.Recording`): what the
    store keeps for every trial is its own recorded config and axes, seed included, placeholders kept."""
    from ablate.store import Store

    monkeypatch.setenv("SEEDED_DIR", str(tmp_path))
    f = tmp_path / "e.yaml"
    model = {"backbone": "vit", "embed_dim": 32, "depths": [2], "num_heads": [2], "patch_size": 4}
    base = {"data": {"name": "cifar10", "path": "${SEEDED_DIR}", "id": "cifar10"}, "model": model}
    f.write_text(yaml.safe_dump({"sweeps": {"s": {"base": base, "grid": {"train.lr": [0.1, 0.2]},
                                                 "seeds": [3, 11, 12]}}}))  # fmt: skip
    trials = plan(f, "s").trials
    assert len(trials) == 6 and all(t.recording is not None for t in trials)
    with Store(f"sqlite:///{tmp_path / 'r.sqlite'}") as store:
        store.add_trials("s", trials)
        for t in trials:
            kept = store.trial(t.key)
            assert kept.config == t.recorded() and kept.config["seed"] == t.seed
            assert kept.config["data"]["path"] == "${SEEDED_DIR}"
            assert store.membership("s", t.key).axes == t.axes == {"train.lr": t.config.train.lr, "seed": t.seed}


HEAVY = ("torch", "timm", "torchvision", "pandas", "mlflow", "ray", "sklearn", "h5py")
"""What `ablate plan` must not import: every built-in component's declaration is torch-free, so validation and
planning cost a fraction of a second (issue 17's 2 s budget; measured in bench/startup.py)."""


def test_planning_shipped_sweeps_and_showing_their_costs_imports_no_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ablate plan` in a fresh process, costs shown, once the cost cache holds them (the first plan of an
    architecture builds it on the meta device; warmed here in this process): no torch, timm, pandas, mlflow or
    Ray. csan-paper solves param-matched widths (`model.match_params`), syn-musk1 is MIL."""
    import os
    import subprocess
    import sys

    from conftest import ROOT

    from ablate.nn import costs, widths

    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(costs, "_COSTS", {})  # figures this process knows would not reach the file
    monkeypatch.setattr(widths, "_SOLVED", {})
    report = "import atexit, sys; atexit.register(lambda: print(sorted(m for m in %r if m in sys.modules)))"
    run_cli = "import runpy; sys.argv = ['ablate', *sys.argv[1:]]; runpy.run_module('ablate.cli', run_name='__main__')"
    for sweep in ("cpu", "syn-musk1", "csan-paper", "cpu-tuned"):
        planned = plan(ROOT / "experiments.yaml", sweep)
        for trial in [*planned.trials, *planned.arms]:  # a tuned sweep's configurations share its arms' models
            costs.model_cost(trial.config)
        args = ["plan", str(ROOT / "experiments.yaml"), sweep]
        code = f"{report % (HEAVY,)}; {run_cli}"
        done = subprocess.run([sys.executable, "-c", code, *args], env=os.environ, capture_output=True, text=True,
                              timeout=300)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "total" in done.stdout and done.stdout.strip().splitlines()[-1] == "[]", (sweep, done.stdout)


def test_seed_keys_serialise_the_identity_once_and_equal_a_digest_per_seed(tmp_path: Path) -> None:
    """The planner's fast path (one serialisation per cell) gives each seed the key a whole digest gives, also
    when a value of the identity holds the text of the seed's mark; each trial's config is its cell's at its
    seed."""
    from ablate.planning.keys import _SEED_MARK, digest, seed_keys

    f = tmp_path / "e.yaml"
    f.write_text(yaml.safe_dump({"sweeps": {"s": {"base": BASE, "grid": {"train.lr": [0.1, 0.2]}, "seeds": 3}}}))
    trials = plan(f, "s").trials
    ident = identity(trials[0].config)
    for marked in (ident, {**ident, "data": {**ident["data"], "id": _SEED_MARK}}):
        assert seed_keys(marked, [0, 7, 2**63 - 1]) == [digest({**marked, "seed": s}) for s in (0, 7, 2**63 - 1)]
    assert [t.config.seed for t in trials] == [t.axes["seed"] for t in trials] == [0, 1, 2, 0, 1, 2]
    assert [trial_key(t.config) for t in trials] == [t.key for t in trials]


def test_an_exclude_that_removes_the_cells_a_knob_refuses_is_valid(tmp_path: Path) -> None:
    """nlm takes only identity projections: an `exclude:` of (nlm, learned), or a `when:` giving softmax alone
    the projections axis, says so, and the cell it removes is never an error; without either the value is
    refused, and a rule naming a value the grid never gives, or cells no cell of the grid is, still is."""
    grid = {"attention.kind": ["softmax", "nlm"], "attention.projections": ["learned", "identity"]}
    rule = {"attention.kind": "nlm", "attention.projections": "learned"}
    p = plan_of(tmp_path, {"grid": grid, "exclude": [rule]})
    cells = {(t.axes["attention.kind"], t.axes["attention.projections"]) for t in p.trials}
    assert cells == {("softmax", "learned"), ("softmax", "identity"), ("nlm", "identity")}
    softmax_only = {"when": {"attention.kind": "softmax"}, "grid": {"attention.projections": ["learned", "identity"]}}
    when = {"grid": {"attention.kind": ["softmax", "nlm"]}, "when": [softmax_only]}
    assert len(plan_of(tmp_path, when).trials) == 3
    with pytest.raises(SpecError, match=re.escape("Input should be 'identity' (got 'learned')")):
        plan_of(tmp_path, {"grid": grid})
    typo = {**rule, "attention.projections": "lerned"}
    said = "'lerned' matches no value attention.projections takes in this sweep ('learned', 'identity'); did you mean"
    with pytest.raises(SpecError, match=re.escape(f"{said} 'learned'?")):
        plan_of(tmp_path, {"grid": grid, "exclude": [rule, typo]})
    linked = {"linked": [{"attention.kind": ["softmax", "nlm"], "attention.projections": ["learned", "identity"]}]}
    with pytest.raises(SpecError, match=re.escape("exclude[0]: matches no cell: no cell has all of")):
        plan_of(tmp_path, {**linked, "exclude": [{"attention.kind": "softmax", "attention.projections": "identity"}]})


def test_a_mistyped_baseline_value_is_answered_with_the_nearest_value_of_its_axis(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        plan_of(tmp_path, {"grid": {"attention.kind": ["softmax", "nlm"]}, "baseline": {"attention.kind": "sofmax"}})
    assert str(err.value).endswith(
        "baseline: matches no cell of the grid: {'attention.kind': 'sofmax'}; 'sofmax' matches no value "
        "attention.kind takes in this sweep ('softmax', 'nlm'); did you mean 'softmax'?"
    )
