"""Grid expansion: a sweep -> [Trial(key, config)], every problem inside its cells named at once.

The cells of a sweep's grid, linked groups and when blocks (`ablate.planning.cells`, or those a `design:` chose)
are validated and keyed (the keys are `ablate.planning.keys`'s), less its exclusions; a `Plan` holds the trials
with the sweep's baseline and metric. `expand` is a function of the sweep's data (`Sweep`): its problems are key
paths in the sweep (`SweepProblem`), placed on the file's lines once (`load_plans`, `plan`) through the sweep's
`SweepSource`.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ablate.config import TrialConfig, identity
from ablate.errors import SpecError, format_path
from ablate.planning.cells import (
    base_problems,
    data_path_problem,
    dead_values,
    given,
    groups,
    product,
    raw_config,
    refused,
    taken,
    varied_twice,
    where,
    with_whens,
)
from ablate.planning.designs import Cell, Chosen, DesignPlan, choose
from ablate.planning.keys import Recording, Trial, seed_keys, variant_key
from ablate.plugins import Plugins
from ablate.registry import TASKS
from ablate.spec import tuning_check
from ablate.spec.overrides import with_overrides
from ablate.spec.paths import get_path, matches
from ablate.spec.problems import SweepError, SweepProblem
from ablate.spec.registry_check import path_problem
from ablate.spec.schema import AdaptiveSeeds, SweepSpec
from ablate.spec.sweeps import Sweep, SweepFile, read_sweeps
from ablate.spec.tuning import Searches

Resolved = tuple[Cell, dict[str, Any]]
"""A cell with its validated config (as JSON data)."""


@dataclass
class Plan:
    """A sweep expanded: its trials, the axis paths that vary, and the baseline variant."""

    sweep: str
    trials: list[Trial]
    axes: list[str]
    baseline: str | None
    metric: str
    file: str = ""
    description: str = ""
    plugins: Plugins = field(default_factory=Plugins)
    """What every process that runs these trials must import first (see `ablate.plugins`)."""
    stale: str = "warn"
    """What a launch does with done trials whose code changed (`SweepSpec.stale`)."""
    adaptive: AdaptiveSeeds | None = None
    """Adaptive seeding (`ablate.planning.adaptive`): `trials` holds the seeds planned so far, `reserve` the rest."""
    reserve: list[Trial] = field(default_factory=list)
    """Trials of seeds an adaptive sweep may still add (min..max-1 of each cell), in seed order."""
    tuning: Searches | None = None
    """A tuned sweep's `tune:` and each arm's search so far (`ablate.planning.tuning`): `trials` and `reserve` hold the
    arms' trials at their best configurations, added as their searches end, `arms` the grid as written."""
    arms: list[Trial] = field(default_factory=list)
    """A tuned sweep's grid at the base's values: each arm's trials, every seed (the adaptive reserve's too)."""
    design: DesignPlan | None = None
    """The cells a `design:` chose and what they can tell (`ablate.planning.designs`); None: the full grid."""
    variants: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.variants = list(dict.fromkeys(t.variant for t in self.trials))

    def recorded_spec(self) -> dict[str, Any]:
        """What the store keeps of the plan beside its trials (`SweepRecord.spec`), for reports and later launches."""
        return {"axes": self.axes, "plugins": self.plugins.to_json(),
                "adaptive": self.adaptive.model_dump() if self.adaptive else None,
                "tuning": self.tuning and self.tuning.model_dump(mode="json"),
                "design": self.design and self.design.to_json()}  # fmt: skip

    @property
    def seeds(self) -> int:
        """Distinct seeds of the planned trials but those only a design's reference runs at (`reference_seeds`):
        what a design's cells are multiplied by in trials."""
        return len({t.axes["seed"] for t in self.trials} - set(self.design.replicated if self.design else []))

    def counts(self) -> dict[str, Counter[Any]]:
        """Trials per value of each axis."""
        return {a: Counter(_hashable(t.axes[a]) for t in self.trials) for a in self.axes}


def _hashable(v: Any) -> Any:
    return json.dumps(v) if isinstance(v, (list, dict, tuple)) else v


def match_problem(cfg: TrialConfig) -> str | None:
    """Why `model.match_params` cannot be met (no width within tolerance of the target), else None.

    Solved here, on the meta device and cached per model, so an unreachable target is a spec error
    naming its key before anything runs, not a traceback inside a trial.
    """
    if cfg.model.match_params is None:
        return None
    from ablate.nn.costs import data_dims
    from ablate.nn.widths import match_width

    try:
        in_chans, num_classes = data_dims(cfg)
        match_width(cfg, num_classes, in_chans)
    except ValueError as e:
        return str(e).removeprefix("model.match_params: ")
    return None


MAX_TRIALS = 10_000
"""Trials a sweep may plan unless raised (`--max-trials`): checked by arithmetic before anything expands."""


@dataclass
class Expanded:
    """A sweep expanded: its plan, or the problems that stop it (by key path in the sweep, for its `SweepSource`
    to place in the file)."""

    plan: Plan | None
    problems: list[SweepProblem]


@dataclass
class Grid:
    """A sweep's cells, checked and ready to validate: a design's, or the grid's with its when blocks' axes."""

    cells: list[Cell]
    chosen: Chosen | None
    kinds: list[str]
    """The attention kinds its cells may have (a bad path is named among their knobs)."""
    dead: list[SweepProblem]
    """`when:` conditions that can never hold: named with the cells' problems."""
    axes: list[str] = field(init=False)
    """The paths its cells vary."""

    def __post_init__(self) -> None:
        self.axes = list(dict.fromkeys(p for cell in self.cells for p, _, _ in cell))


def expand(sweep: Sweep, max_trials: int = MAX_TRIALS) -> Expanded:
    """Expand a sweep's data into trials, or name every bad axis value (a grid over `max_trials` alone): its
    cells, their trials, its baseline, then its plan, each step stopping at the problems it finds."""
    try:
        grid = _grid(sweep, max_trials)
        trials = _trials(sweep, grid)
        return Expanded(_plan(sweep, grid, trials, _baseline(sweep, grid, trials)), [])
    except SweepError as err:
        return Expanded(None, err.problems)


def _seeds(spec: SweepSpec) -> list[int]:
    """The seeds every cell may run at (an adaptive sweep's up to its maximum)."""
    return spec.seeds.seeds if isinstance(spec.seeds, AdaptiveSeeds) else spec.seeds


def _grid(sweep: Sweep, max_trials: int) -> Grid:
    """The sweep's cells; SweepError naming every bad axis, condition, exclude path or searched path (with the
    base's own problems), or a grid whose trials could exceed `max_trials`, counted before any cell is built."""
    spec, problems = sweep.spec, list[SweepProblem]()
    kinds = sweep.kinds()
    top = groups(spec.grid, spec.linked, (), problems, kinds)
    whens = [groups(b.grid, b.linked, ("when", w), problems, sweep.kinds(b)) for w, b in enumerate(spec.when)]
    chosen = None if spec.design == "full" or problems else choose(sweep, top, spec.design)
    bound = math.prod(len(g) for g in top) * math.prod(max(1, math.prod(len(g) for g in w)) for w in whens)
    bound = len(chosen.cells) if chosen is not None else bound
    seeds = len(_seeds(spec))
    each = seeds + (spec.tune.budget + seeds if spec.tune else 0)  # a tuned arm: its search, 2 x seeds
    if bound * each > max_trials:
        sizes = " x ".join(str(len(g)) for g in top) or "1"
        per = f"({spec.tune.budget} configurations + 2 x {seeds} seeds)" if spec.tune else f"{seeds} seeds"
        raise SweepError([SweepProblem(("grid",), f"up to {bound * each:,} trials ({sizes} cells"
                                       f"{' and when: blocks' if whens else ''} x {per}) exceed "
                                       f"the limit of {max_trials:,} per sweep; --max-trials raises it")])  # fmt: skip
    cells, dead = with_whens(sweep, chosen.cells if chosen is not None else list(product(top)), whens, kinds,
                            TrialConfig().model_dump(), problems)  # fmt: skip
    problems += [SweepProblem(("exclude", i, path), msg) for i, rule in enumerate(spec.exclude) for path in rule
                 if (msg := path_problem(path, kinds)) is not None]  # fmt: skip
    problems += [p for cell in cells for p in varied_twice(cell)] + tuning_check.path_problems(sweep, kinds)
    if problems:
        raise SweepError(problems + base_problems(sweep))
    return Grid(cells, chosen, kinds, dead)


def _trials(sweep: Sweep, grid: Grid) -> list[Trial]:
    """Each cell validated and keyed into its trials, less those `exclude:` removes; SweepError naming every
    cell's problem, each `exclude:` rule that matches no cell, or a grid with no cell left."""
    spec, chosen, seeds = sweep.spec, grid.chosen, _seeds(sweep.spec)
    defaults = TrialConfig().model_dump()
    problems, trials = list[SweepProblem](), list[Trial]()
    owner: dict[str, Resolved] = {}
    """Trial key -> the cell that makes it."""
    seen: list[dict[str, Any]] = []
    """What `exclude:` rules can match in each cell, excluded or not: its resolved config, or where it does not
    validate, the values its raw config gives the rules' paths."""
    for c, cell in enumerate(grid.cells):
        raw = raw_config(sweep, cell)
        try:
            cfg = TrialConfig.model_validate(raw)
        except ValidationError as err:
            seen.append(given(raw, {p: None for rule in spec.exclude for p in rule}, defaults))
            # a cell the sweep excludes (one a knob refuses, say) is no problem of the sweep
            excluded = any(matches(rule, seen[-1]) for rule in spec.exclude)
            problems += _design_cell(chosen, cell) if excluded else refused(cell, raw, err)
            continue
        seen.append(resolved := cfg.model_dump(mode="json"))
        if any(matches(rule, resolved) for rule in spec.exclude):
            problems += _design_cell(chosen, cell)
            continue
        runs = seeds + chosen.plan.replicated if chosen is not None and not any(chosen.levels[c]) else seeds
        keys = seed_keys(identity(cfg), runs)
        if (twin := next((owner[k] for k in keys if k in owner), None)) is not None:
            problems += _same_trials(sweep, twin, (cell, resolved))
            continue
        owner.update(dict.fromkeys(keys, (cell, resolved)))
        if unmet := _unmet(cell, cfg, resolved):
            problems += unmet
            continue
        trials += _cell_trials(sweep, grid, c, cfg, resolved, runs, keys)
    problems += grid.dead + _dead_exclusions(sweep, seen)
    if not problems and not trials:
        problems = [SweepProblem(("exclude",) if spec.exclude else ("grid",), "empty grid: no cell remains")]
    if problems:
        raise SweepError(problems)
    return trials


def _unmet(cell: Cell, cfg: TrialConfig, resolved: dict[str, Any]) -> list[SweepProblem]:
    """What a valid cell's config asks that cannot be met here: a `match_params` no width reaches, or a data
    path this machine lacks."""
    if (msg := match_problem(cfg)) is not None:
        return where(cell, "model.match_params", msg)
    if (msg := data_path_problem(resolved["data"])) is not None:
        return where(cell, "data.path", msg)
    return []


def _cell_trials(
    sweep: Sweep, grid: Grid, c: int, cfg: TrialConfig, resolved: dict[str, Any], runs: list[int], keys: list[str]
) -> list[Trial]:
    """The trials of the grid's cell `c` (its config, validated and `resolved`), one per seed of `runs` with its
    key, the cell recorded in the design if there is one."""
    variant = variant_key(cfg)
    if grid.chosen is not None:
        grid.chosen.plan.add(variant, grid.chosen.levels[c], grid.chosen.strata[c], resolved)
    cell_axes = {a: get_path(resolved, a) for a in grid.axes}
    secret = {p: text for p, (value, text) in sweep.placeholders.items() if get_path(resolved, p) == value}
    recording = Recording(cfg, secret, cell_axes)
    return [
        Trial(key, variant, cfg, {**cell_axes, "seed": seed}, secret, seed, recording)
        for seed, key in zip(runs, keys, strict=True)
    ]


def _baseline(sweep: Sweep, grid: Grid, trials: list[Trial]) -> str | None:
    """The baseline variant: the one `baseline:` matches, or a one-at-a-time design's reference; SweepError where
    it matches none, names no config path, or is not that reference, or adaptive seeds have none."""
    spec, baseline = sweep.spec, _reference(grid.chosen, trials)
    if spec.baseline is not None:
        bad = [
            SweepProblem(("baseline", p), m) for p in spec.baseline if (m := path_problem(p, grid.kinds)) is not None
        ]
        if bad:
            raise SweepError(bad)
        hit = next((t for t in trials if matches(spec.baseline, t.resolved())), None)
        if baseline not in (None, hit and hit.variant):
            raise SweepError([SweepProblem(("baseline",), "a one-at-a-time design compares each cell with its "
                                           "reference (`from:`), and this baseline is another cell: drop `baseline:`, "
                                           "or write `from: baseline`")])  # fmt: skip
        if hit is None:
            raise SweepError([SweepProblem(("baseline",), _no_baseline(spec.baseline, trials))])
        baseline = hit.variant
    if isinstance(spec.seeds, AdaptiveSeeds) and baseline is None:
        raise SweepError([SweepProblem(("seeds",), "adaptive seeds compare every cell with the baseline: give the "
                                       "sweep a `baseline:`")])  # fmt: skip
    return baseline


def _plan(sweep: Sweep, grid: Grid, trials: list[Trial], baseline: str | None) -> Plan:
    """The plan of a sweep's trials: an adaptive sweep's first seeds planned and the rest in reserve, a tuned
    sweep's trials its arms (SweepError where the search cannot run in one)."""
    spec = sweep.spec
    adaptive = spec.seeds if isinstance(spec.seeds, AdaptiveSeeds) else None
    metric = spec.metric or TASKS.get(trials[0].config.task).default_metric()
    plan = Plan(sweep.name, trials, grid.axes, baseline, metric, "", spec.description, sweep.plugins, spec.stale,
                adaptive, design=grid.chosen.plan if grid.chosen is not None else None)  # fmt: skip
    if spec.tune is not None:
        arms: dict[str, Trial] = {}  # each arm's first trial (its tuning seed), by variant
        for t in trials:
            arms.setdefault(t.variant, t)
        words = {", ".join(f"{a}={t.axes[a]}" for a in grid.axes) or "the only one": t.config for t in arms.values()}
        if bad := tuning_check.cell_problems(sweep, words):
            raise SweepError(bad)
        tuning = Searches(spec=spec.tune, baseline=list(arms).index(baseline) if baseline else None)
        return replace(plan, trials=[], tuning=tuning, arms=trials)
    if adaptive is None:
        return plan
    reserve = sorted((t for t in trials if t.config.seed >= adaptive.min), key=lambda t: t.config.seed)
    return replace(plan, trials=[t for t in trials if t.config.seed < adaptive.min], reserve=reserve)


def _design_cell(chosen: Chosen | None, cell: Cell) -> list[SweepProblem]:
    """An `exclude:` rule that removes a cell a design chose: the design's analysis needs each of its cells."""
    if chosen is None:
        return []
    desc = ", ".join(f"{p}={v!r}" for p, v, _ in cell)
    return [SweepProblem(("exclude",), f"removes the design's cell {desc}: a {chosen.plan.kind} design needs each "
                          "of its cells (exclude cells from `design: full` only)")]  # fmt: skip


def _reference(chosen: Chosen | None, trials: list[Trial]) -> str | None:
    """A one-at-a-time design's reference variant (its first cell), which is the sweep's baseline; else None."""
    if chosen is None or chosen.plan.two_level or not trials:
        return None
    return next(v for v, levels in chosen.plan.runs.items() if not any(levels))


def _same_trials(sweep: Sweep, first: Resolved, cell: Resolved) -> list[SweepProblem]:
    """A cell that makes the trials an earlier cell made: the axis values where the two differ collapse once
    validated (2.0 and 2 for an integer, a repeated value, a field the key leaves out), so the sweep would run
    fewer variants than its grid says. Named at each of this cell's values that differ from the earlier one's."""
    (was, was_resolved), (now, resolved) = first, cell
    before = {path: (value, loc) for path, value, loc in was}
    problems = []
    for path, value, loc in now:
        other, at = before.get(path, (get_path(sweep.base, path), None))
        if at == loc:
            continue
        validated = get_path(resolved, path)
        if validated == get_path(was_resolved, path):
            why = f"both are {path} = {validated!r} once validated"
        elif path == "seed":
            why = "the sweep's `seeds:` set every trial's seed"
        else:
            why = f"{path} is not part of a trial's key (it changes how a trial runs, not its result)"
        source = format_path(at) if at else "the base"
        problems.append(SweepProblem(loc, f"{value!r} makes the same trials as {other!r} ({source}): {why}; each "
                                      "value of an axis must make trials of its own"))  # fmt: skip
    return problems


def _no_baseline(baseline: dict[str, Any], trials: list[Trial]) -> str:
    """What to say of a baseline that matches no trial: each value no trial takes (a mechanism's name mistyped,
    say), with the values its path takes (a whole section's, too long to read, left out)."""
    configs = [t.resolved() for t in {t.variant: t for t in trials}.values()]
    haves = {p: taken(get_path(c, p) for c in configs) for p in baseline}
    values = {p: want for p, want in baseline.items() if not any(isinstance(h, dict) for h in haves[p])}
    return "; ".join([f"matches no cell of the grid: {baseline}", *(m for _, m in dead_values(values, haves))])


def _dead_exclusions(sweep: Sweep, seen: list[dict[str, Any]]) -> list[SweepProblem]:
    """`exclude:` rules that match no cell of the grid (`seen`, valid or not): a value no cell takes, or values
    that no one cell takes together."""
    problems = []
    for i, rule in enumerate(sweep.spec.exclude):
        haves = {p: taken(get_path(r, p) for r in seen) for p in rule}
        dead = [SweepProblem(("exclude", i, p), m) for p, m in dead_values(rule, haves)]
        if not dead and seen and not any(matches(rule, r) for r in seen):
            dead = [SweepProblem(("exclude", i), f"matches no cell: no cell has all of {rule}")]
        problems += dead
    return problems


def load_plans(
    path: str | Path, max_trials: int = MAX_TRIALS, overrides: Sequence[str] = (), sweeps: Iterable[str] | None = None
) -> dict[str, Plan]:
    """Read, check and expand every sweep of `path`; raise one SpecError with every problem of the file.
    `overrides` (`PATH=VALUE`, as `-s` on the command line) are set on the base of `sweeps` (default: all)."""
    return _expand_all(with_overrides(read_sweeps(path), overrides, sweeps), max_trials)


def _expand_all(file: SweepFile, max_trials: int = MAX_TRIALS) -> dict[str, Plan]:
    """Expand each sweep of `file`, placing each's problems in the file: the one place planning's problems meet
    their lines."""
    problems = list(file.problems)
    plans: dict[str, Plan] = {}
    for name, source in file.sweeps.items():
        expanded = expand(source.sweep, max_trials)
        problems += source.place(expanded.problems)
        if expanded.plan is not None:
            plans[name] = replace(expanded.plan, file=source.source)
    if problems:
        raise SpecError(problems)
    return plans


def plan(
    path: str | Path, sweep: str | None = None, max_trials: int = MAX_TRIALS, overrides: Sequence[str] = ()
) -> Plan:
    """Plan one sweep of an experiments file (default: the file's `default:`, else its first sweep), with
    `overrides` (`PATH=VALUE`) set on its base. The whole file is checked: SpecError if it has any problem,
    KeyError if it has no such sweep."""
    file = read_sweeps(path)
    name = sweep if sweep is not None else file.default
    plans = _expand_all(with_overrides(file, overrides, [name] if name else []), max_trials)
    if name not in plans:
        raise KeyError(f"{path}: no sweep named {name!r}; the file has {sorted(plans)}")
    return plans[name]


def plan_all(path: str | Path, max_trials: int = MAX_TRIALS, overrides: Sequence[str] = ()) -> list[Plan]:
    """Plan every sweep of an experiments file, in file order, with `overrides` (`PATH=VALUE`) on each."""
    return list(load_plans(path, max_trials, overrides).values())


__all__ = ["Plan", "expand", "load_plans", "plan", "plan_all"]
