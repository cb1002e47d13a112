"""experiments.yaml -> validated sweeps.

A file holds named sweeps. Each sweep is a base config (a partial `TrialConfig`, merged over the file's
`defaults`) and a grid over dotted config paths: cartesian `grid` axes, `linked` axes that move together,
`when` blocks whose axes apply only where a condition holds, `exclude` rules, `seeds` and a `baseline`.
Everything wrong in a file is collected and raised as one `SpecError` whose problems name the file, the
key path and the YAML line. This module reads and checks the file's structure (`read_sweeps`) into each sweep's
data (`Sweep`) and where it is written (`SweepSource`); expanding a sweep into trials, which finds the errors
inside cells, is `ablate.planning.plan`'s job (`load_plans` does both): a function of the `Sweep` whose problems
are key paths in it (`SweepProblem`), which its `SweepSource` places on their lines.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ablate.errors import Problem, SpecError
from ablate.plugins import PluginError, Plugins
from ablate.registry import MECHANISMS
from ablate.spec.paths import get_path
from ablate.spec.problems import SweepProblem, validation_problems
from ablate.spec.registry_check import metric_problems, unregistered_names
from ablate.spec.schema import Linked, SpecFile, SweepSpec, When
from ablate.spec.yaml_doc import Loc, absolute_data_path, nearest_line, read_yaml

if TYPE_CHECKING:
    from ablate.spec.overrides import Override


@dataclass
class Sweep:
    """A sweep's plain data, ready to plan: its spec and merged base, without its file: planning is a function of
    this, and names each problem by its key path in the sweep (`SweepProblem`), which `SweepSource` places."""

    name: str
    spec: SweepSpec
    base: dict[str, Any]
    """defaults merged with the sweep's base, relative data paths made absolute."""
    plugins: Plugins = field(default_factory=Plugins)
    """The file's plugins: loaded here, and by every process that runs or reports this sweep's trials."""
    placeholders: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Dotted path -> (value, text as written) where the base's value came from environment variables
    (`${TOKEN}`): records keep the text, the trial runs with the value."""
    knobs: tuple[Override, ...] = ()
    """The overrides of a knob that only some of the sweep's mechanisms have: set on each cell whose mechanism
    has it (`ablate.planning.cells.raw_config`), not on `base`, so the other cells keep their keys."""

    def taken(self, path: str, default: Any = None) -> list[Any]:
        """The values cells may take at `path`: those the sweep's axes give it (its when blocks' included), or
        its base's where the grid gives none."""
        return [value for value, _ in self.written(path, default)]

    def written(self, path: str, default: Any = None) -> list[tuple[Any, Loc]]:
        """`taken(path)` with where each value is written in the sweep."""
        spec = self.spec
        found = list(_written(spec.grid, spec.linked, path, ()))
        if not found:
            found.append((get_path(self.base, path, default), ("base", *path.split("."))))
        for w, block in enumerate(spec.when):
            found += _written(block.grid, block.linked, path, ("when", w))
        return found

    def kinds(self, block: When | None = None) -> list[str]:
        """The attention kinds cells may have (an unknown knob is compared with their knobs; a kind that no
        mechanism is registered as makes its knobs uncheckable, see `path_problem`): those `block`'s condition
        names, if it names any; else those the sweep's axes give attention.kind, or its base's."""
        taken = [k for k in self.taken("attention.kind", "softmax") if isinstance(k, str)]
        named = block.when.get("attention.kind") if block is not None else None
        if named is None:
            return sorted(set(taken))
        return sorted({k for k in _listed(named) if isinstance(k, str) and (k in MECHANISMS or k in taken)})


@dataclass
class SweepSource:
    """A sweep as its file gives it: its data (`Sweep`) and where it is written, the one place a sweep's problems
    (key paths in it) become the file's (file, key path from the top, YAML line)."""

    sweep: Sweep
    file: Path
    lines: dict[tuple[str | int, ...], int] = field(default_factory=dict, repr=False)
    overrides: tuple[Override, ...] = ()
    """Command-line overrides (`with_overrides`): a problem at their path is theirs."""

    @property
    def source(self) -> str:
        return str(self.file)

    def place(self, problems: Iterable[SweepProblem]) -> list[Problem]:
        """Each problem at its path inside this sweep's YAML, with the nearest known line; a problem in the base
        at a path an override set is the override's, one at a path the file's `defaults:` give is named there."""
        return [self._placed(p.path, p.message) for p in problems]

    def _placed(self, path: Loc, message: str) -> Problem:
        full: Loc = ("sweeps", self.sweep.name, *path)
        if path[:1] == ("base",) and len(path) > 1:
            dotted = ".".join(str(p) for p in path[1:])
            if (o := next((o for o in self.overrides if o.overlaps(dotted)), None)) is not None:
                return o.problem(message)
            if self._inherited(path[1:]):
                full = ("defaults", *path[1:])
        return located(self.source, self.lines, full, message)

    def _inherited(self, keys: Loc) -> bool:
        """Whether the base's value at `keys` is the file's `defaults:` (the sweep's own base leaves it out),
        so a problem there is named once, where it is written, not once per sweep."""
        own: Any = self.sweep.spec.base
        merged: Any = self.sweep.base
        for k in keys:
            if not isinstance(merged, dict) or k not in merged:
                return False
            merged = merged[k]
            if not isinstance(own, dict) or k not in own:
                return True
            own = own[k]
        return False


def located(file: str, lines: dict[tuple[str | int, ...], int], path: Loc, message: str) -> Problem:
    """A problem at `path` (from the top of the file) with the nearest line written there (`nearest_line`)."""
    return Problem(file, path, message, nearest_line(lines, path))


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` merged into a copy of `base`, mapping by mapping."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def load_plugins(entries: Any, path: Path, lines: dict[tuple[str | int, ...], int]) -> Plugins:
    """Import a file's `plugins:` (after the built-ins and entry points); a SpecError naming the entry if one
    cannot be found, imported or registered, before any sweep is looked at."""
    src = str(path)
    if entries is None:
        entries = []
    if not isinstance(entries, list) or not all(isinstance(e, str) and e for e in entries):
        raise SpecError([located(src, lines, ("plugins",), "expected a list of module names or .py paths")])
    try:
        plugins = Plugins.from_list(entries, path.resolve().parent)
        plugins.load()
    except PluginError as e:
        at = next((i for i, entry in enumerate(entries) if entry in str(e) or Path(entry).name in str(e)), None)
        where = ("plugins",) if at is None else ("plugins", at)
        raise SpecError([located(src, lines, where, str(e))]) from None
    return plugins


@dataclass
class SweepFile:
    """An experiments file read and checked: its well-formed sweeps, and every problem found so far (the
    planner adds the problems inside cells and raises them together)."""

    path: Path
    sweeps: dict[str, SweepSource]
    default: str | None
    """The sweep to run when none is named; None when the file has no well-formed sweep."""
    problems: list[Problem] = field(default_factory=list)


DEPENDS: dict[str, tuple[str, ...]] = {
    "grid": ("when", "exclude", "baseline", "seeds", "design"),
    "linked": ("when", "exclude", "baseline", "seeds", "design"),
    "when": ("exclude", "baseline", "seeds", "design"),
    "baseline": ("seeds", "design"),
}
"""Parts of a sweep that are checked against others: when one of these is malformed, the parts that depend
on it are left unchecked too (a `when:` value looks for the grid's values; adaptive seeds need a baseline;
a design chooses among the grid's cells)."""


def _checkable(body: Any) -> SweepSpec | None:
    """A sweep whose structure has errors (already reported through SpecFile), less the parts they are in and
    the parts that depend on those, so its base and the rest of its grid are still checked: a file's problems
    are named at once, across sections. None when its base is malformed (then no cell can be checked)."""
    if not isinstance(body, dict):
        return None
    try:
        return SweepSpec.model_validate(body)
    except ValidationError as err:
        bad = {str(e["loc"][0]) for e in err.errors() if e["loc"]}
    if not bad or "base" in bad:
        return None
    bad |= {d for part in bad for d in DEPENDS.get(part, ())}
    with contextlib.suppress(ValidationError):
        return SweepSpec.model_validate({k: v for k, v in body.items() if k not in bad})
    return None


def read_sweeps(path: str | Path) -> SweepFile:
    """Read and check `path`: YAML, plugins, and each sweep's structure. Problems that stop the file from
    being read at all (unreadable YAML, a failing plugin) raise SpecError; the rest are collected."""
    path = Path(path)
    src = str(path)
    doc = read_yaml(path)
    data, lines = doc.data, doc.lines
    if not isinstance(data, dict):
        raise SpecError([*doc.duplicates, Problem(src, (), "expected a mapping with a `sweeps` key", 1)])
    try:
        plugins = load_plugins(data.get("plugins"), path, lines)
    except SpecError as e:
        raise SpecError([*doc.duplicates, *e.problems]) from None
    problems: list[Problem] = list(doc.duplicates)
    try:
        spec = SpecFile.model_validate(data)
        defaults, specs, default = spec.defaults, spec.sweeps, spec.default
    except ValidationError as err:
        # Keep going with the sweeps that are well-formed, so one run reports every problem of the file.
        problems += validation_problems(err, data, lambda p, m: located(src, lines, p, m), SpecFile)
        defaults = data["defaults"] if isinstance(data.get("defaults"), dict) else {}
        raw = data["sweeps"] if isinstance(data.get("sweeps"), dict) else {}
        specs = {name: checked for name, body in raw.items() if (checked := _checkable(body)) is not None}
        default = data.get("default") if data.get("default") in specs else None
    folder = path.resolve().parent
    sweeps = {}
    for name, body in specs.items():
        base, missing, written = absolute_data_path(deep_merge(defaults, body.base), folder)
        if missing:
            where: tuple[str, ...] = ("sweeps", name, "base", "data", "path")
            if get_path(defaults, "data.path") is not None and get_path(body.base, "data.path") is None:
                where = ("defaults", "data", "path")
            problems.append(located(src, lines, where, f"environment variable {', '.join(missing)} is not set (give "
                                    "a default with ${VAR:-value})"))  # fmt: skip
            continue
        secret = {"data.path": (base["data"]["path"], written)} if written else {}
        sweep = Sweep(name, body, base, plugins, secret)
        sweeps[name] = SweepSource(sweep, path, lines)
        problems += sweeps[name].place(unregistered_names(sweep) + metric_problems(sweep))
    return SweepFile(path, sweeps, default or next(iter(sweeps), None), problems)


def _written(grid: dict[str, list[Any]], linked: list[Linked], path: str, at: Loc) -> Iterator[tuple[Any, Loc]]:
    """Every value a grid and its linked groups (under `at` in the sweep) give `path`, with where it is written."""
    yield from ((v, (*at, "grid", path, i)) for i, v in enumerate(grid.get(path, [])))
    for g, group in enumerate(linked):
        if isinstance(group, dict):
            yield from ((v, (*at, "linked", g, path, i)) for i, v in enumerate(group.get(path, [])))
        else:
            yield from ((row[path], (*at, "linked", g, i, path)) for i, row in enumerate(group) if path in row)


def _listed(value: Any) -> list[Any]:
    """A rule's value as the values it matches (a list matches any of its items)."""
    return value if isinstance(value, list) else [value]
