"""One word per concept: a module is called by its own name wherever it is imported, and a test module is named
after the module it tests, so a reader who meets `adaptive` in a test, an import and a report finds one module."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from test_layout import FOLDERS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "ablate"
SOURCES = ("ablate", "tests", "bench", "examples", "docs/_hooks")

NOT_A_MODULE = {
    "project": "the repository as a whole: docs, import layers, test marks, constraints",
    "cli/test_api.py": "`ablate.api`, whose layer has no folder of its own: the CLI's folder holds what it calls",
    "cli/test_cli_library.py": "that the CLI stays a thin layer over `ablate.api`: both layers at once",
    "contract/test_knobs.py": "a plugin mechanism's knobs as its author writes them, through `plan` (the contract)",
    "contract/test_plugin_checks.py": "a wrong plugin named by `ablate plan` or `ablate check` (the contract)",
    "execution/test_cluster.py": "end to end: a real two-node Ray cluster, store, MLflow and report",
    "execution/test_faults.py": "end to end: database faults during a launch, across store, journal and launcher",
    "execution/test_placement.py": "end to end: which device launched trials train on (launcher, fan-out, loop)",
    "execution/test_soak.py": "the chaos soak's own parts (tests/chaos.py), not a module of ablate",
    "execution/test_team.py": "end to end: a team's set-up on loopback",
    "nn/test_attention.py": "every mechanism against the same checks (nn/'s mechanisms are one package each)",
    "nn/test_mil_model.py": "the MIL backbone (`ablate.nn.mil`) built as a model, with its dataset",
    "planning/test_recipes.py": "the papers' recipes as the shipped sweeps (experiments.yaml), planned",
    "planning/test_reference_seeds.py": "a design's replicated reference cell, through plan and designs",
    "reporting/test_costs.py": "the report's cost figures (`nn.costs` measured, reporting draws them)",
    "reporting/test_followup.py": "a design's follow-up (`planning.followup`) as the report reads it",
    "reporting/test_report.py": "the report as a whole (`ablate.reporting.report`)",
    "reporting/test_screens.py": "a screen (`planning.screens`) as the report analyses it",
    "reporting/test_seed_noise.py": "what a design's report says measures seed noise (designed, evidence)",
    "spec/test_spec_fuzz.py": "a property over the whole spec check: mutated files fail as SpecError",
}
"""Test modules (or a whole folder) named for no module of their layer, each with what it tests instead: ends to ends
and checks across modules. A test of one module is named after it; this list stays short."""


def _modules(unit: str) -> set[str]:
    """The names of a unit's modules and packages at any depth, the unit itself included (`ablate.store`)."""
    where = PACKAGE / unit
    found = {p.stem for p in where.rglob("*.py") if p.stem != "__init__"} if where.is_dir() else set()
    return found | {p.name for p in where.rglob("*") if p.is_dir()} | {unit}


def test_each_test_module_is_named_after_a_module_of_its_layer() -> None:
    wrong = []
    for path in sorted((ROOT / "tests").glob("*/test_*.py")):
        folder, name = path.parent.name, path.stem.removeprefix("test_")
        if folder in NOT_A_MODULE or f"{folder}/{path.name}" in NOT_A_MODULE:
            continue
        if not any(name in _modules(u) for u in FOLDERS.get(folder, (folder,))):
            wrong.append(f"tests/{folder}/{path.name}")
    assert not wrong, f"test modules named for no module of their layer (rename, or list why in NOT_A_MODULE): {wrong}"


def test_every_exception_is_still_a_test_module_of_no_module() -> None:
    """An exception whose file was renamed after its module (or removed) leaves the list."""
    for entry in NOT_A_MODULE:
        path = ROOT / "tests" / entry
        assert path.exists(), f"NOT_A_MODULE lists tests/{entry}, which is gone"
        if path.is_file():
            name = path.stem.removeprefix("test_")
            units = FOLDERS.get(path.parent.name, (path.parent.name,))
            assert not any(name in _modules(u) for u in units), f"tests/{entry} is named after a module now"


def _is_module(dotted: str) -> bool:
    """Whether `dotted` (`ablate.x.y`) names a module of ablate: a module or package on disk that its package does
    not shadow with a name of its own (`ablate.reporting.compare` is the function `compare` its package defines)."""
    parts = dotted.split(".")
    base = ROOT.joinpath(*parts)
    if parts[0] != "ablate" or not (base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()):
        return False
    bound = getattr(importlib.import_module(".".join(parts[:-1])), parts[-1], None)
    return bound is None or isinstance(bound, ModuleType)


def _renamed(path: Path) -> Iterator[str]:
    """Each import in `path` that binds an ablate module under a name other than its own, as `line: statement`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and _is_module(alias.name) and alias.asname != alias.name.split(".")[-1]:
                    yield f"{node.lineno}: import {alias.name} as {alias.asname}"
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            for alias in node.names:
                if alias.asname and alias.asname != alias.name and _is_module(f"{base}.{alias.name}"):
                    yield f"{node.lineno}: from {base} import {alias.name} as {alias.asname}"


@pytest.mark.parametrize("source", SOURCES)
def test_no_module_of_ablate_is_imported_under_another_name(source: str) -> None:
    """`from ablate.planning import adaptive as sequential` gives one module two names: a reader of the importing
    file looks for `sequential` and finds no such module. Names of functions and classes may be aliased."""
    found = [f"{p.relative_to(ROOT)}:{line}" for p in sorted((ROOT / source).rglob("*.py")) for line in _renamed(p)]
    assert not found, f"ablate modules imported under another name: {found}"
