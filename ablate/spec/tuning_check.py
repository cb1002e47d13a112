"""A sweep's `tune:` block checked against the sweep (`ablate.spec.tuning.TuneSpec` checks the block alone).

A searched path must name a config field that changes a trial's key, and no axis, `when:` condition,
`exclude:` rule or baseline of the sweep may name it too (a searched path has no one value per cell, so
they would mean nothing); seeds, the data and the task are not searched (the search compares configurations on
one validation split). Every arm's config must take the values at the ends of each range and every listed
value, and its task must report the metric on a validation split it has. Problems name the file and key path
(`SweepProblem`, placed by `SweepSource.place`); the planner returns them with the sweep's other problems.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import ValidationError

from ablate.config import TrialConfig, identity
from ablate.errors import format_path
from ablate.registry import TASKS
from ablate.spec.paths import overlaps, set_path
from ablate.spec.problems import SweepProblem, error_message
from ablate.spec.registry_check import path_problem
from ablate.spec.schema import SweepSpec
from ablate.spec.sweeps import Sweep
from ablate.spec.tuning import IntDim, LogDim, RangeDim
from ablate.spec.yaml_doc import Loc

FIXED = {
    "seed": "seed is the sweep's replicate (`seeds:`): a search chooses a configuration at one seed, then the "
    "sweep's seeds run at it",
    "data": "the search compares configurations on one validation split: the data belongs in the base or the grid",
    "task": "the task sets what is measured: it belongs in the base or the grid",
}
"""Paths no search may take, and why."""


def path_problems(sweep: Sweep, kinds: list[str]) -> list[SweepProblem]:
    """What is wrong with the searched paths themselves (named with the sweep's axis problems, before any cell
    is built): a path no config has, a fixed one (`FIXED`), or one the sweep also names elsewhere."""
    if sweep.spec.tune is None:
        return []
    problems = []
    for path in sweep.spec.tune.space:
        at: Loc = ("tune", "space", path)
        if (msg := path_problem(path, kinds)) is not None:
            problems.append(SweepProblem(at, msg))
            continue
        problems += [SweepProblem(at, why) for fixed, why in FIXED.items() if overlaps(path, fixed)]
        for other, where in _named(sweep.spec):
            if overlaps(path, other):
                problems.append(SweepProblem(at, f"{other} is also at {format_path(where)}: a path is either "
                                              "searched (each arm tries values of it) or the grid's (an axis, a "
                                              "when: condition, an exclude: rule or the baseline give it one value "
                                              "per cell)"))  # fmt: skip
    return problems


def _named(spec: SweepSpec) -> Iterator[tuple[str, Loc]]:
    """Every path the sweep's grid, linked groups, when blocks, exclude rules and baseline name, with where."""
    blocks: list[tuple[Loc, dict[str, list[Any]], list[Any]]] = [((), spec.grid, spec.linked)]
    for w, block in enumerate(spec.when):
        blocks.append((("when", w), block.grid, block.linked))
        yield from ((path, ("when", w, "when", path)) for path in block.when)
    for at, grid, linked in blocks:
        yield from ((path, (*at, "grid", path)) for path in grid)
        for g, group in enumerate(linked):
            paths = group if isinstance(group, dict) else {p: None for row in group for p in row}
            yield from ((path, (*at, "linked", g)) for path in paths)
    for i, rule in enumerate(spec.exclude):
        yield from ((path, ("exclude", i, path)) for path in rule)
    yield from ((path, ("baseline", path)) for path in spec.baseline or {})


def cell_problems(sweep: Sweep, arms: Mapping[str, TrialConfig]) -> list[SweepProblem]:
    """What is wrong with the search in the sweep's arms (`arms`: each arm's config at the base's values, by
    its axis values in words): a value an arm's config refuses, a path outside the trial key, a metric the
    task does not report on validation data, or no validation split."""
    tune = sweep.spec.tune
    if tune is None or not arms:
        return []
    found: dict[tuple[Loc, str], dict[str, None]] = {}
    """(where, what) -> the arms it holds for: a problem of every arm is named once, without them."""
    for words, cfg in arms.items():
        raw = cfg.model_dump(mode="json")
        for path, dim in tune.space.items():
            valid = []
            for value, at in _candidates(path, dim):
                try:
                    valid.append(TrialConfig.model_validate(_with(raw, path, value)))
                except ValidationError as err:
                    for e in err.errors():
                        found.setdefault(_placed(e, at, value), {})[words] = None
            if len(valid) > 1 and identity(valid[0]) == identity(valid[1]):
                what = f"{path} is not part of a trial's key (it changes how a trial runs, not its result): every "
                found.setdefault((("tune", "space", path), what + "configuration would be one trial"), {})[words] = None
        scores = TASKS.get(cfg.task).scores
        if scores and tune.metric.removeprefix("val.") not in scores:
            what = f"{cfg.task} reports no {tune.metric} (it reports {', '.join(f'val.{s}' for s in scores)})"
            found.setdefault((("tune", "metric"), what), {})[words] = None
        if cfg.data.val_fraction == 0:
            what = (f"the search chooses on the validation split, and data.val_fraction is 0 ({cfg.data.name}'s "
                    "default): set it above 0 in the base")  # fmt: skip
            found.setdefault((("tune", "metric"), what), {})[words] = None
    problems = []
    for (at, what), holding in found.items():
        some = (
            f" (in the arm{'s' if len(holding) > 1 else ''} {'; '.join(holding)})" if len(holding) < len(arms) else ""
        )
        problems.append(SweepProblem(at, what + some))
    return problems


def _placed(e: Any, at: Loc, value: Any) -> tuple[Loc, str]:
    """Where an arm's refusal of a value is named, and how: an unknown key (a knob of another kind) at the path,
    once for all its values; any other at the value, which the message shows."""
    msg = error_message(e, TrialConfig)
    if e["type"] == "extra_forbidden":
        return at[:3], msg
    return at, msg if "(got " in msg or ", got " in msg else f"{msg} (value {value!r})"


def _candidates(path: str, dim: Any) -> list[tuple[Any, Loc]]:
    """The values of a dimension an arm's config must take, with where each is written: both ends of a range,
    every listed value."""
    at: Loc = ("tune", "space", path)
    if isinstance(dim, LogDim):
        return [(v, (*at, "log", i)) for i, v in enumerate(dim.log)]
    if isinstance(dim, RangeDim):
        return [(v, (*at, "range", i)) for i, v in enumerate(dim.range)]
    if isinstance(dim, IntDim):
        return [(v, (*at, "int", i)) for i, v in enumerate(dim.int)]
    return [(v, (*at, i)) for i, v in enumerate(dim)]


def _with(raw: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(raw)
    set_path(out, path, value)
    return out
