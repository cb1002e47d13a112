"""The experiments file and what it can use, before anything runs: what `ablate check`, `schema` and `plugins`
report (`check`, `schema`, `components`), each as a typed result the CLI only formats."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ablate.planning.plan import Plan
    from ablate.probe.check import Checked


def load_plugins(file: Path | None) -> None:
    """Load the built-ins, the entry points and, with a `file`, its `plugins:`: a SpecError naming a file's
    plugin, a ValueError (`ablate.registry.PluginError`) an entry point's, where one fails."""
    from ablate.plugins import load_builtins, load_entry_points
    from ablate.spec.sweeps import load_plugins as load_file_plugins
    from ablate.spec.yaml_doc import read_yaml

    load_builtins()
    load_entry_points()
    if file is not None:
        doc = read_yaml(file)
        load_file_plugins(doc.data.get("plugins") if isinstance(doc.data, dict) else None, file, doc.lines)


def schema(file: Path | None = None) -> dict[str, Any]:
    """The JSON schema of experiments.yaml as `ablate schema` prints it, `file`'s plugins included
    (`load_plugins`)."""
    from ablate.spec.schema import json_schema

    load_plugins(file)
    return json_schema()


@dataclass(frozen=True)
class Component:
    """A registered component as `ablate plugins` lists it: its kind, name and where it came from."""

    kind: str
    name: str
    source: str


def components(file: Path | None = None) -> list[Component]:
    """Every registered component, `file`'s plugins included (`load_plugins`): mechanisms, backbones, datasets,
    tasks and report tables, each in the order it was registered."""
    from ablate.registry import BACKBONES, DATASETS, MECHANISMS, TABLES, TASKS

    load_plugins(file)
    return [Component(r.kind, e.name, e.source) for r in (MECHANISMS, BACKBONES, DATASETS, TASKS, TABLES)
            for e in r.entries()]  # fmt: skip


@dataclass(frozen=True)
class CheckedVariant:
    """One variant's training step in `ablate check`: the probe's check of it (sweep, key, size, error), with its
    axis values but the replicates and its params against its sweep's baseline."""

    checked: Checked
    axes: dict[str, Any]
    delta: int | None
    """Params minus the baseline variant's (None where either is unknown)."""


def check(plans: list[Plan], data: bool = True) -> list[CheckedVariant]:
    """Build every distinct model of `plans`, step it once on CPU and, with `data`, run a batch of each dataset
    through it (`ablate.probe.check.check`): what `ablate check` prints, a row per variant."""
    from ablate.config import REPLICATES
    from ablate.probe.check import check as step

    results = step(plans, data=data)
    base = {p.sweep: next((c.params for c in results if c.sweep == p.sweep and c.variant == p.baseline), None)
            for p in plans}  # fmt: skip
    axes: dict[tuple[str, str], dict[str, Any]] = {}
    for p in plans:  # a variant is a cell without its replicates
        for t in p.trials:
            axes.setdefault((p.sweep, t.variant), {k: v for k, v in t.axes.items() if k not in REPLICATES})
    out = []
    for c in results:
        ref = base.get(c.sweep)
        delta = None if c.params is None or ref is None else c.params - ref
        out.append(CheckedVariant(c, axes.get((c.sweep, c.variant), {}), delta))
    return out
