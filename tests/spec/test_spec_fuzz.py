"""Property: whatever a mutated experiments file says, planning it either succeeds or raises SpecError (exit 2
with file, line and key path), never another exception (a traceback for the user)."""

from __future__ import annotations

import contextlib
import copy
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import TINY
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ablate.errors import SpecError
from ablate.planning.plan import load_plans

VALID: dict[str, Any] = {
    "defaults": {"train": {"epochs": 1}},
    "sweeps": {
        "s": {
            "base": copy.deepcopy(TINY),
            "grid": {"attention.kind": ["softmax", "csan"], "train.lr": [0.001, 0.002]},
            "seeds": 2,
            "baseline": {"attention.kind": "softmax"},
        }
    },
}

SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
)  # fmt: skip
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                      max_size=3), max_leaves=6)  # fmt: skip


def paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += paths(v, (*prefix, i))
    return out


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    doc = copy.deepcopy(VALID)
    for _ in range(draw(st.integers(1, 3))):
        if not (places := paths(doc)):
            break
        where = draw(st.sampled_from(places))
        parent = doc
        for part in where[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "delete" and isinstance(parent, dict):
            del parent[where[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=8))] = draw(VALUES)
        else:
            parent[where[-1]] = draw(VALUES)
    return doc


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_a_mutated_file_plans_or_is_a_spec_error(doc: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        f = Path(folder) / "e.yaml"
        f.write_text(yaml.safe_dump(doc, allow_unicode=True))
        with contextlib.suppress(SpecError):
            load_plans(f)


# ------------------------------------------------------------------------------------ hazards, combined
# Each hazard draws a parameter that may or may not be a defect, and knows which (an oracle written apart from
# the planner). The property: a file plans exactly when it has no defect, and its SpecError names every defect
# at once, across sections. Pairs that share one pydantic model are not drawn together: a model whose fields
# fail is not checked across fields (pydantic runs a model's own checks only on valid fields), and a grid whose
# axes are malformed has no cells for `when:` and `exclude:` values to be checked against, nor cells that fail to
# validate (a bad model) for two of them to be found the same.
KINDS = ["softmax", "csan"]
LRS = [0.001, 0.002]


def _when(doc: dict[str, Any], value: str) -> str | None:
    doc["sweeps"]["s"]["when"] = [{"when": {"attention.kind": value}, "grid": {"train.weight_decay": [0.0, 0.1]}}]
    return None if value in KINDS else 'when[0].when["attention.kind"]'


def _exclude(doc: dict[str, Any], value: tuple[str, float]) -> str | None:
    doc["sweeps"]["s"]["exclude"] = [{"attention.kind": value[0], "train.lr": value[1]}]
    return None if value[0] in KINDS and value[1] in LRS else "exclude[0]"


def _linked(doc: dict[str, Any], path: str) -> str | None:
    values = {"attention.kind": KINDS, "train.lr": LRS, "train.weight_decay": [0.0, 0.1]}[path]
    doc["sweeps"]["s"]["linked"] = [{path: values, "train.epochs": [1, 2]}]
    return "linked[0]" if path in doc["sweeps"]["s"]["grid"] else None


def _boolean_depth(doc: dict[str, Any], depth: bool | int) -> str | None:
    doc["sweeps"]["s"]["base"]["model"]["depths"] = [depth]
    return "model.depths" if isinstance(depth, bool) else None


def _patches(doc: dict[str, Any], sizes: tuple[int, int]) -> str | None:
    img, patch = sizes
    doc["sweeps"]["s"]["base"]["model"].update(img_size=img, patch_size=patch)
    return "model.patch_size" if patch > img or img % patch else None


def _seeds(doc: dict[str, Any], seeds: list[int]) -> str | None:
    doc["sweeps"]["s"]["seeds"] = seeds
    return "seeds[" if any(s >= 2**63 for s in seeds) else None


def _data_path(doc: dict[str, Any], exists: bool) -> str | None:
    doc["sweeps"]["s"]["base"]["data"]["path"] = "." if exists else "./surely-not-here"
    return None if exists else "data.path"


def _boolean_axis(doc: dict[str, Any], values: list[Any]) -> str | None:
    """A boolean field's axis (as a mechanism's knob would be): a value pydantic would convert ("no", 1), or two
    values that are one boolean, would plan fewer cells than the grid says."""
    doc["sweeps"]["s"]["grid"]["train.amp"] = values
    booleans = [v for v in values if isinstance(v, bool)]
    return 'grid["train.amp"]' if len(booleans) < len(values) or len(set(booleans)) < len(booleans) else None


HAZARDS = {
    "when": (_when, st.sampled_from([*KINDS, "csna", "sparsemax"])),
    "exclude": (_exclude, st.tuples(st.sampled_from([*KINDS, "Softmax"]), st.sampled_from([*LRS, 0.003]))),
    "linked": (_linked, st.sampled_from(["attention.kind", "train.lr", "train.weight_decay"])),
    "depth": (_boolean_depth, st.sampled_from([True, False, 1, 2])),
    "patches": (_patches, st.tuples(st.integers(2, 20), st.integers(1, 24))),
    "seeds": (_seeds, st.lists(st.integers(0, 2**70), min_size=1, max_size=3, unique=True)),
    "data": (_data_path, st.booleans()),
    "boolean axis": (
        _boolean_axis,
        st.lists(st.sampled_from([True, False, "no", "true", 1, 0]), min_size=1, max_size=3),
    ),
}
APART = [
    {"depth", "patches"},
    {"linked", "when"},
    {"linked", "exclude"},
    *({"boolean axis", h} for h in ("depth", "patches", "linked")),
]


@st.composite
def hazardous(draw: st.DrawFn) -> tuple[dict[str, Any], list[str]]:
    """A valid file with some hazards applied, and the key paths of the defects among them."""
    names = draw(st.lists(st.sampled_from(sorted(HAZARDS)), min_size=1, max_size=4, unique=True))
    names = [n for i, n in enumerate(names) if not any({n, m} <= pair for m in names[:i] for pair in APART)]
    doc = copy.deepcopy(VALID)
    doc["sweeps"]["s"]["base"]["train"] = {"epochs": 1}
    defects = []
    for name in names:
        apply, values = HAZARDS[name]
        if (where := apply(doc, draw(values))) is not None:
            defects.append(where)
    return doc, defects


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hazardous())
def test_a_file_plans_exactly_when_it_has_no_defect_and_every_defect_is_named(
    case: tuple[dict[str, Any], list[str]],
) -> None:
    doc, defects = case
    with tempfile.TemporaryDirectory() as folder:
        f = Path(folder) / "e.yaml"
        f.write_text(yaml.safe_dump(doc, allow_unicode=True))
        if not defects:
            load_plans(f)
            return
        try:
            load_plans(f)
        except SpecError as e:
            missing = [d for d in defects if d not in str(e)]
            assert missing == [], str(e)
        else:
            raise AssertionError(f"planned a file with defects at {defects}")


@pytest.mark.parametrize("where", ["base: &x {model: *x}", "grid: &x {train.lr: [*x]}", "exclude: &x [{a: *x}]",
                                   "baseline: &x {attention.kind: [*x]}"])  # fmt: skip
def test_a_recursive_alias_anywhere_is_a_spec_error_naming_its_path(tmp_path: Path, where: str) -> None:
    """PyYAML builds a recursive alias as a structure that contains itself: refused where it is written."""
    f = tmp_path / "e.yaml"
    f.write_text(f"sweeps:\n  s:\n    {where}\n")
    with pytest.raises(SpecError, match=re.escape(f"sweeps.s.{where.split(':')[0]}") + ".*a recursive alias"):
        load_plans(f)
