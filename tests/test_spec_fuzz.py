"""Property: whatever a mutated experiments file says, planning it either succeeds or raises SpecError (exit 2
with file, line and key path), never another exception (a traceback for the user)."""

from __future__ import annotations

import contextlib
import copy
import tempfile
from pathlib import Path
from typing import Any

import yaml
from conftest import TINY
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ablate.errors import SpecError
from ablate.planner import load_plans

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
