"""Tuning every arm of a sweep alike: the `tune:` block's model and the configurations each arm tries.

An ablation whose variants were not tuned alike measures tuning, not the mechanism (Lucic et al., "Are GANs
Created Equal?", 2018). So every arm gets the same budget of configurations, proposed by one of Optuna's
samplers through its ask-and-tell interface: Optuna only proposes, the launcher stays the one that runs
trials, and each configuration is an ordinary trial, stored under its key.

Nothing about a search is stored but its results: `proposals` replays the sampler from the spec and the
results the store holds. An arm's configurations are proposed in rounds of `batch`; round r is asked after
every earlier round was told. The same spec and results give the same configurations in any process, so a
relaunch proposes exactly what was proposed before (and trains nothing again), an interrupted round is proposed
again identically, and raising the budget from 12 to 20 keeps the first 12 and adds 8.

Every arm of a sweep replays the same seed: with the random and grid samplers every arm tries the very same
configurations, and with TPE the same first round, so arms are compared on equal draws rather than on the
luck of their own (the paired design the sweep's seeds already use, applied to the search).

Optuna is imported only when configurations are proposed, not when a spec is read: it costs the CLI's start-up
(`ablate --help`, `ablate plan`) a fifth of a second that a file without `tune:` should not pay.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Discriminator,
    Field,
    StrictInt,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ablate.components import Strict
from ablate.spec.metrics import higher_is_better
from ablate.spec.paths import overlaps

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution
    from optuna.samplers import BaseSampler

MAX_BUDGET = 512
"""Configurations an arm may try. Each is a whole trial, and a launch replays the arm's search: at 512, TPE's
replay takes seconds per arm (bench/tuning.py measures it per configuration)."""
STARTUP = 4
"""TPE proposes at random until this many configurations (and at least the first round) are known: its
densities need a few points, but Optuna's default of 10 would leave a budget of 12 a random search."""


def _ordered(v: tuple[Any, Any]) -> tuple[Any, Any]:
    if v[0] >= v[1]:
        raise ValueError(f"expected [lo, hi] with lo < hi, got [{v[0]}, {v[1]}] (a single value belongs in the base)")
    return v


Bounds = Annotated[tuple[float, float], AfterValidator(_ordered)]
"""A float dimension's [lo, hi]."""


class LogDim(Strict):
    """`{log: [lo, hi]}`: a float drawn log-uniformly (learning rates, weight decays)."""

    log: Bounds

    @field_validator("log")
    @classmethod
    def _positive(cls, v: tuple[float, float]) -> tuple[float, float]:
        if v[0] <= 0:
            raise ValueError(f"a log-uniform range needs lo > 0, got lo = {v[0]}")
        return v


class RangeDim(Strict):
    """`{range: [lo, hi]}`: a float drawn uniformly."""

    range: Bounds


class IntDim(Strict):
    """`{int: [lo, hi]}`: an integer drawn uniformly from lo..hi, both included."""

    int: Annotated[tuple[StrictInt, StrictInt], AfterValidator(_ordered)]


KINDS = {"log": "log-uniform", "range": "uniform", "int": "integer"}
"""A dimension's key -> the tag pydantic puts in an error's location; tags that are not keys of the input
(unlike `log`) are dropped from the key path a user is shown (`ablate.spec.sweeps.clean_loc`)."""


def _dim_kind(v: Any) -> str | None:
    """Which dimension a YAML value writes: a non-empty list is categorical, a mapping is named by its key."""
    if isinstance(v, (LogDim, RangeDim, IntDim)):
        return KINDS[next(iter(type(v).model_fields))]
    if isinstance(v, list) and v:
        return "values"
    if isinstance(v, dict):
        return next((tag for key, tag in KINDS.items() if key in v), None)
    return None


Dim = Annotated[
    Annotated[LogDim, Tag(KINDS["log"])]
    | Annotated[RangeDim, Tag(KINDS["range"])]
    | Annotated[IntDim, Tag(KINDS["int"])]
    | Annotated[list[Any], Tag("values")],
    Discriminator(
        _dim_kind,
        custom_error_type="dimension",
        custom_error_message="expected {log: [lo, hi]}, {range: [lo, hi]}, {int: [lo, hi]} or a non-empty list "
        "of values",
    ),
]
"""One dimension of a search space."""


class TuneSpec(Strict):
    """A sweep's `tune:` block: every arm tries `budget` configurations of `space` on its validation split,
    then the sweep's seeds run each arm at its own best."""

    space: dict[str, Dim] = Field(min_length=1)
    """Dotted config path -> dimension: {log: [lo, hi]}, {range: [lo, hi]}, {int: [lo, hi]} or a list of values."""
    sampler: Literal["tpe", "random", "grid"] = "tpe"
    """Optuna's sampler: tpe (random for the first round, and at least STARTUP configurations, then guided by
    the results), random, or grid (every dimension a list; a budget below the grid's size tries a seeded random
    part of it)."""
    budget: int = Field(ge=1, le=MAX_BUDGET)
    """Configurations per arm, the same for every arm."""
    metric: str
    """What chooses the best configuration: a validation metric (val.top1); the test split never chooses."""
    direction: Literal["max", "min"] = "max"
    """Whether the metric is better higher (top1, auc) or lower (loss); default: what its name says
    (`ablate.spec.metrics.higher_is_better`), and a direction that contradicts the name is refused."""
    batch: int = Field(4, ge=1, le=MAX_BUDGET)
    """Configurations proposed at once per arm: a round runs in parallel, the next is proposed from its results.
    Changing it changes every configuration after the first round."""
    seed: int = Field(0, ge=0, lt=2**63)
    """Seed of the sampler, shared by every arm."""

    @model_validator(mode="before")
    @classmethod
    def _direction_of_the_metric(cls, data: Any) -> Any:
        """The direction the metric's name says, unless the block gives one (checked in `_direction`)."""
        if isinstance(data, dict) and "direction" not in data and isinstance(data.get("metric"), str):
            return {**data, "direction": "max" if higher_is_better(data["metric"]) else "min"}
        return data

    @field_validator("space")
    @classmethod
    def _paths(cls, space: dict[str, Any]) -> dict[str, Any]:
        bad = [p for p in space if not p or any(not part for part in p.split("."))]
        if bad:
            raise ValueError(f"expected dotted config paths such as train.lr, got {bad}")
        single = [p for p, d in space.items() if isinstance(d, list) and len(d) == 1]
        if single:
            raise ValueError(f"{', '.join(single)}: a single value belongs in the base, not in a search")
        repeated = {p: r for p, d in space.items() if isinstance(d, list) and (r := _repeated(d))}
        if repeated:
            raise ValueError("values repeat: " + "; ".join(f"{p}: {r}" for p, r in repeated.items()))
        nested = [(a, b) for i, a in enumerate(space) for b in list(space)[i + 1 :] if overlaps(a, b)]
        if nested:
            raise ValueError(f"paths overlap (one holds the other): {', '.join(f'{a} and {b}' for a, b in nested)}")
        return space

    @field_validator("sampler")
    @classmethod
    def _grid_of_lists(cls, sampler: str, info: ValidationInfo) -> str:
        continuous = [p for p, d in info.data.get("space", {}).items() if not isinstance(d, list)]
        if sampler == "grid" and continuous:
            raise ValueError(f"the grid sampler needs every dimension a list of values; {continuous} are not")
        return sampler

    @field_validator("budget")
    @classmethod
    def _within_grid(cls, budget: int, info: ValidationInfo) -> int:
        if info.data.get("sampler") == "grid" and "space" in info.data:
            size = math.prod(len(d) for d in info.data["space"].values())
            if budget > size:
                raise ValueError(f"the grid has {size} configurations; a budget of {budget} would repeat some")
        return budget

    @field_validator("metric")
    @classmethod
    def _validation(cls, metric: str) -> str:
        if not metric.startswith("val.") or metric == "val.":
            raise ValueError(f"expected a validation metric such as val.top1 (the test split never chooses), "
                             f"got {metric!r}")  # fmt: skip
        return metric

    @field_validator("direction")
    @classmethod
    def _direction(cls, direction: str, info: ValidationInfo) -> str:
        metric = info.data.get("metric")
        said = None if metric is None else "max" if higher_is_better(metric) else "min"
        if said is not None and direction != said:
            raise ValueError(f"{metric} is better {'higher' if said == 'max' else 'lower'}: direction {said} (or "
                             "leave direction out)")  # fmt: skip
        return direction


COMPANION = "/tuning"
"""What a tuned sweep's name gains to name the sweep of its tuning trials (`companion`)."""


def companion(sweep: str) -> str:
    """The sweep that holds `sweep`'s tuning trials: its arms' searches, and its arms at the baseline's
    configuration, kept out of its comparison. `/` is in no name a file can give a sweep (`spec.SAFE_NAME`),
    so the name never meets a sweep of its own."""
    return sweep + COMPANION


def tuned_of(name: str) -> str | None:
    """The tuned sweep whose tuning trials the sweep `name` holds; None for any other sweep."""
    return name.removesuffix(COMPANION) if name.endswith(COMPANION) and len(name) > len(COMPANION) else None


class ArmSearch(Strict):
    """One arm's search as far as a launch took it: what a report reads of it, by trial key."""

    axes: dict[str, Any]
    """The arm's grid axis values (its cell, without replicates): what names it."""
    search: list[str | None] = []
    """Trial keys of its configurations, in the order proposed (one key twice where a sampler proposed one
    configuration twice; None for one its config refuses, told as failed)."""
    best: int | None = None
    """Index in `search` of its best configuration (`best`), once every configuration of the budget has a
    result."""
    finals: list[str] = []
    """Its trials at its own best configuration: the sweep's seeds (its trials in the tuned sweep)."""
    at_baseline: list[str] = []
    """Its trials at the baseline arm's best configuration, the same seeds (none for the baseline arm)."""


class Searches(Strict):
    """A tuned sweep's searches: its `tune:` block, and each arm's search as the last launch left it (the sweep's
    record keeps it for reports, `ablate.reporting.tuned`)."""

    spec: TuneSpec
    arms: list[ArmSearch] = []
    """Every arm, in plan order."""
    baseline: int | None = None
    """Index in `arms` of the baseline's arm (None: a sweep without a baseline)."""


def _repeated(values: list[Any]) -> list[Any]:
    """Values a categorical dimension lists more than once (they would be drawn more often, or tried twice)."""
    return [x for i, x in enumerate(values) if x in values[:i]]


@dataclass(frozen=True)
class Failed:
    """A configuration whose trial failed or reported no finite metric: the sampler learns it failed."""


Result = float | Failed | None
"""What is known of one configuration: its metric, Failed, or None while it has not run."""


def proposals(spec: TuneSpec, results: Sequence[Result]) -> list[dict[str, Any]]:
    """The configurations (dotted path -> value) the arm tries, as far as `results` (of the configurations
    proposed so far, in order; missing ones are None) lets the search go: every round up to and including the
    first with an unknown result, or up to the budget. Replayed from scratch: deterministic for a spec and
    results, in any process. Results beyond the budget are ignored."""
    return Search(spec).advance(results)


class Search:
    """An arm's search held in memory, for a process that asks again as results come in: `advance` tells and
    asks only the rounds that are new since its last call, where `proposals` replays every round each time (a
    cost that grows with the square of the budget). Both make the same calls in the same order, so they propose
    the same configurations; a result that changed since it was told (a trial run again) replays from scratch."""

    def __init__(self, spec: TuneSpec) -> None:
        self.spec = spec
        self._study: optuna.Study | None = None
        self._told: list[Result] = []
        """Results told, round by round: the configurations before the current round."""
        self._round: list[optuna.Trial] = []
        """The current round's trials: asked, not told."""
        self._proposed: list[dict[str, Any]] = []

    def advance(self, results: Sequence[Result]) -> list[dict[str, Any]]:
        """What `proposals(self.spec, results)` returns."""
        known = [_outcome(r) for r in results[: self.spec.budget]]
        with _quiet():
            study = self._study
            if study is None or known[: len(self._told)] != self._told:
                study = self._start()
            while True:
                start, end = len(self._told), len(self._told) + len(self._round)
                if end == self.spec.budget or any(i >= len(known) or known[i] is None for i in range(start, end)):
                    return list(self._proposed)
                for trial, result in zip(self._round, known[start:end]):
                    _tell(study, trial, result)
                self._told += known[start:end]
                self._ask(study, end)

    def _start(self) -> optuna.Study:
        import optuna

        direction: Literal["maximize", "minimize"] = "maximize" if self.spec.direction == "max" else "minimize"
        self._study = optuna.create_study(sampler=_sampler(self.spec), direction=direction)
        self._told, self._round, self._proposed = [], [], []
        self._ask(self._study, 0)
        return self._study

    def _ask(self, study: optuna.Study, start: int) -> None:
        """Ask the round of configurations from `start`."""
        dists = _distributions(self.spec)
        self._round = [study.ask(dists) for _ in range(start, min(start + self.spec.batch, self.spec.budget))]
        self._proposed += [_decode(self.spec, t.params) for t in self._round]


def best(spec: TuneSpec, results: Sequence[Result]) -> int | None:
    """Index of the best configuration whose metric is known and finite (the earliest on ties); None when no
    configuration within the budget has one."""
    done = [(i, r) for i, r in enumerate(map(_outcome, results[: spec.budget])) if isinstance(r, float)]
    if not done:
        return None
    sign = 1 if spec.direction == "max" else -1
    return max(done, key=lambda ir: (sign * ir[1], -ir[0]))[0]


def _outcome(result: Result) -> Result:
    """A result as the sampler learns it: a finite metric, Failed (a failure, or a metric that is not finite),
    or None (not known yet)."""
    if result is None or isinstance(result, Failed):
        return result
    return float(result) if math.isfinite(result) else Failed()


def _tell(study: optuna.Study, trial: optuna.Trial, result: Result) -> None:
    from optuna.trial import TrialState

    if isinstance(result, float):
        study.tell(trial, result)
    else:
        study.tell(trial, state=TrialState.FAIL)


def _sampler(spec: TuneSpec) -> BaseSampler:
    """The spec's sampler, seeded through a stable hash (Python's hash() of a string changes per process)."""
    from optuna.samplers import GridSampler, RandomSampler, TPESampler

    seed = int.from_bytes(hashlib.sha256(f"ablate.tune:{spec.seed}".encode()).digest()[:4], "big")
    if spec.sampler == "grid":
        grid = {path: list(range(len(dim))) for path, dim in sorted(spec.space.items()) if isinstance(dim, list)}
        return GridSampler(grid, seed=seed)
    if spec.sampler == "random":
        return RandomSampler(seed=seed)
    return TPESampler(seed=seed, n_startup_trials=max(STARTUP, spec.batch))


def _distributions(spec: TuneSpec) -> dict[str, BaseDistribution]:
    """Optuna's distribution per path, in sorted order (the order samplers draw in, so not the file's order).
    A categorical dimension is drawn as the index of its value: Optuna's choices must be scalars, YAML's need
    not be ([2, 2])."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    out: dict[str, BaseDistribution] = {}
    for path, dim in sorted(spec.space.items()):
        if isinstance(dim, LogDim):
            out[path] = FloatDistribution(*dim.log, log=True)
        elif isinstance(dim, RangeDim):
            out[path] = FloatDistribution(*dim.range)
        elif isinstance(dim, IntDim):
            out[path] = IntDistribution(*dim.int)
        else:
            out[path] = CategoricalDistribution(list(range(len(dim))))
    return out


def _decode(spec: TuneSpec, params: dict[str, Any]) -> dict[str, Any]:
    """A trial's parameters as config values, in the space's order."""
    out: dict[str, Any] = {}
    for path, dim in spec.space.items():
        out[path] = copy.deepcopy(dim[params[path]]) if isinstance(dim, list) else params[path]
    return out


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Optuna's log (a line per study and trial) kept out of ablate's output while a search replays."""
    import optuna

    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(before)
