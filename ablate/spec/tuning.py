"""Tuning every arm of a sweep alike: the `tune:` block's model, and the companion sweep its tuning trials are
kept in.

An ablation whose variants were not tuned alike measures tuning, not the mechanism (Lucic et al., "Are GANs
Created Equal?", 2018). So every arm gets the same budget of configurations, proposed by one of Optuna's
samplers through its ask-and-tell interface: Optuna only proposes, the launcher stays the one that runs
trials, and each configuration is an ordinary trial, stored under its key.

The configurations each arm tries are proposed by `ablate.planning.search`, from this block and the results.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

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

MAX_BUDGET = 512
"""Configurations an arm may try. Each is a whole trial, and a launch replays the arm's search: at 512, TPE's
replay takes seconds per arm (bench/tuning.py measures it per configuration)."""


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
    record keeps it for reports, `ablate.reporting.tuning`)."""

    spec: TuneSpec
    arms: list[ArmSearch] = []
    """Every arm, in plan order."""
    baseline: int | None = None
    """Index in `arms` of the baseline's arm (None: a sweep without a baseline)."""


def _repeated(values: list[Any]) -> list[Any]:
    """Values a categorical dimension lists more than once (they would be drawn more often, or tried twice)."""
    return [x for i, x in enumerate(values) if x in values[:i]]
