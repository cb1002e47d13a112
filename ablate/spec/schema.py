"""The sweep file's schema: the pydantic models of experiments.yaml (`SpecFile`, `SweepSpec`, `When`,
`AdaptiveSeeds`) and its JSON schema for editors.

The models check each part of the file alone; what needs the registries or the other parts of a sweep is
checked by `ablate.spec.registry_check`, `ablate.spec.sweeps` and the plan.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, StrictInt, Tag, ValidationInfo, field_validator, model_validator

from ablate.components import Strict
from ablate.config import TrialConfig
from ablate.evidence import EXACT_N
from ablate.spec.design import Design
from ablate.spec.imports import ImportSpec
from ablate.spec.tuning import TuneSpec

Assignment = dict[str, Any]
"""A partial assignment of dotted config paths to values, e.g. {"model.stack": "pure"}."""
Linked = dict[str, list[Any]] | list[Assignment]
"""A linked axis group: columns of equal length, or a list of rows."""


class When(Strict):
    """Axes that apply only to cells matching a condition (e.g. CSaN knobs only where kind is csan)."""

    when: Assignment = Field(min_length=1)
    """Condition: path -> value (a list of scalars matches any of them)."""
    grid: dict[str, list[Any]] = {}
    """Cartesian axes added to matching cells."""
    linked: list[Linked] = []
    """Linked axis groups added to matching cells."""


Seed = Annotated[StrictInt, Field(ge=0, lt=2**63)]
"""A seed, as `TrialConfig.seed` takes it (a YAML `true` is not the seed 1)."""
MAX_SEEDS = 10_000
"""Seeds a sweep may count (`seeds: n`); the trial cap (`--max-trials`) bounds the grid as a whole."""


class AdaptiveSeeds(Strict):
    """`seeds: {min: 6, max: 10, threshold: 0.5}`: min seeds everywhere, more only where undecided (see
    `ablate.planning.adaptive` for the procedure and its error control)."""

    min: int = EXACT_N
    """Seeds every cell gets: at least EXACT_N (6), the fewest pairs the small-sample policy tests."""
    max: int = Field(10, le=MAX_SEEDS)
    """Seeds an undecided cell may reach."""
    threshold: float = Field(gt=0, allow_inf_nan=False)
    """Practical threshold, in the metric's units (points for top1, which is in percent): differences to
    the baseline smaller than this do not matter."""
    target: Literal["decided"] = "decided"
    """What the added seeds aim at: every cell's comparison with the baseline decided."""
    looks: int = Field(3, ge=2, le=20)
    """Analyses from min to max seeds, evenly spaced (the group-sequential design's looks)."""
    alpha: float = Field(0.05, gt=0, lt=0.5)
    """Error rate of each cell's decision, spent over the looks."""
    spending: Literal["pocock", "obrien-fleming"] = "pocock"
    """Alpha spending function (Lan-DeMets): pocock spends early, so clear differences stop at `min`;
    obrien-fleming keeps most for the last look."""

    @model_validator(mode="after")
    def _range(self) -> AdaptiveSeeds:
        if self.min < EXACT_N:
            raise ValueError(f"min ({self.min}) must be at least {EXACT_N}: below {EXACT_N} pairs no test of the "
                             f"small-sample policy can decide (the sign-flip test's smallest p, 2 / 2^n, is "
                             f"{2 / 2**max(self.min, 1):.3g} at {self.min})")  # fmt: skip
        if self.max <= self.min:
            raise ValueError(f"max ({self.max}) must exceed min ({self.min}); a fixed count is `seeds: {self.min}`")
        return self

    @property
    def seeds(self) -> list[int]:
        """Every seed a cell may get, in the order they are added."""
        return list(range(self.max))


class SweepSpec(Strict):
    """One named sweep: a base config and the grid over it."""

    description: str = ""
    base: dict[str, Any] = {}
    """A partial trial config (task, data, model, attention, train, resources); merged over `defaults`."""
    grid: dict[str, list[Any]] = {}
    """Cartesian axes: dotted config path -> values."""
    linked: list[Linked] = []
    """Axes that move together: {path: [values...]} columns of equal length, or a list of rows
    (partial assignments; a path a row leaves out keeps the base value)."""
    when: list[When] = []
    """Conditional axes."""
    exclude: list[Assignment] = []
    """Cells matching any of these partial assignments are dropped."""
    seeds: Annotated[
        Annotated[list[Seed], Tag("list")] | Annotated[AdaptiveSeeds, Tag("adaptive")],
        Discriminator(lambda v: "adaptive" if isinstance(v, (dict, AdaptiveSeeds)) else "list"),
    ] = [0]
    """Seeds per cell: a list, a count n meaning 0..n-1, or adaptive ({min, max, threshold}: `AdaptiveSeeds`)."""
    baseline: Assignment | None = None
    """The cell reports compare against (a partial assignment matching at least one cell)."""
    metric: str | None = None
    """Headline metric of reports (default: test.top1 for classify, test.auc for mil)."""
    stale: Literal["warn", "rerun", "reuse"] = "warn"
    """A done trial whose code changed since it ran (`ablate.provenance.fingerprint`): warn (reuse it and list it),
    rerun (train it again, keeping the old result as a previous one) or reuse (silently); `launch --stale` overrides."""
    design: Annotated[
        Annotated[Literal["full"], Tag("full")] | Annotated[Design, Tag("design")],
        Discriminator(lambda v: "full" if isinstance(v, str) else "design"),
    ] = "full"
    """Which cells of the grid run: `full`, or a fractional, one-at-a-time or screening design (`ablate.spec.design`,
    chosen by `ablate.planning.designs`)."""
    tune: TuneSpec | None = None
    """Tune every arm (variant) alike before its seeds run: `budget` configurations of `space` each, chosen on
    the validation `metric` (`ablate.spec.tuning`, `ablate.planning.tuning`; checked against the grid by
    `ablate.spec.tuning_check`)."""

    @field_validator("design", mode="before")
    @classmethod
    def _design(cls, v: Any) -> Any:
        """`full`, or a mapping with one design (and its `follow-up`): said here, where the key path is the user's
        (the union's own errors end in its tags)."""
        kinds = ("fractional", "one-at-a-time", "screening")
        if isinstance(v, str) and v != "full":
            raise ValueError(f"expected `full` or a mapping with one of {', '.join(kinds)} (got {v!r})")
        given = [k for k in v if k != "follow-up"] if isinstance(v, dict) else []
        if isinstance(v, dict) and (len(given) != 1 or given[0] not in kinds):
            raise ValueError(f"expected one of {', '.join(kinds)} (got {', '.join(map(str, given)) or 'none'})")
        return v

    @field_validator("seeds", mode="before", json_schema_input_type=list[int] | int | AdaptiveSeeds)
    @classmethod
    def _count(cls, v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool):
            if v > MAX_SEEDS:
                raise ValueError(f"a count of seeds may be at most {MAX_SEEDS:,}, got {v:,}")
            return list(range(v))
        return v

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, seeds: list[int] | AdaptiveSeeds) -> list[int] | AdaptiveSeeds:
        if isinstance(seeds, AdaptiveSeeds):
            return seeds
        if not seeds:
            raise ValueError("at least one seed is required")
        if len(set(seeds)) != len(seeds):
            raise ValueError("seeds repeat")
        return seeds


class SpecFile(Strict):
    """The whole experiments file."""

    plugins: list[str] = []
    """Modules (`my_pkg.attention`) or files (`./plugins/myattn.py`, relative to this file) that register
    mechanisms, backbones or datasets; imported before the sweeps are validated, and on every Ray worker."""
    defaults: dict[str, Any] = {}
    """A partial trial config shared by every sweep of the file."""
    sweeps: dict[str, SweepSpec] = Field(min_length=1)
    """Named sweeps."""
    default: str | None = None
    """The sweep that runs when none is named (default: the first one)."""
    imports: dict[str, ImportSpec] = Field(default_factory=dict, alias="import")
    """Runs ablate did not train, each entry a sweep's (`ablate import --file`): from an MLflow experiment or a
    table, which parameters are axes, the seed, the headline metric."""

    @field_validator("sweeps", mode="before")
    @classmethod
    def _safe_names(cls, v: Any) -> Any:
        """Sweep names become folders (reports/<sweep>/) and MLflow experiments: letters, digits, - and _."""
        if isinstance(v, dict):
            bad = [name for name in v if not isinstance(name, str) or not SAFE_NAME.fullmatch(name)]
            if bad:
                raise ValueError(f"sweep names must match {SAFE_NAME.pattern} (letters, digits, - and _, at most 64, "
                                 f"starting with a letter or digit): {', '.join(map(repr, bad))}")  # fmt: skip
        return v

    @field_validator("default")
    @classmethod
    def _default(cls, v: str | None, info: ValidationInfo) -> str | None:
        sweeps = info.data.get("sweeps")
        if v is not None and sweeps is not None and v not in sweeps:
            raise ValueError(f"{v!r} names no sweep of the file; it has {list(sweeps)}")
        return v


SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
"""What a sweep name may be: it names a folder of reports and an MLflow experiment, so never `..` or `a/b`."""


def axis_paths(spec: SweepSpec) -> list[str]:
    """Every dotted path a sweep's grid, linked groups and when blocks vary."""
    paths: list[str] = []
    for grid, linked in [(spec.grid, spec.linked), *((w.grid, w.linked) for w in spec.when)]:
        paths += grid
        for group in linked:
            paths += group if isinstance(group, dict) else [p for row in group for p in row]
    return list(dict.fromkeys(paths))


def json_schema() -> dict[str, Any]:
    """JSON schema of experiments.yaml, with base/defaults typed as (partial) TrialConfig for editors
    (every registered mechanism's knobs included: load a file's plugins first to see theirs); both keep their
    default, empty, so neither reads as required."""
    schema = SpecFile.model_json_schema()
    trial = TrialConfig.model_json_schema(ref_template="#/$defs/{model}")
    defs = schema.setdefault("$defs", {})
    defs.update(trial.pop("$defs", {}))
    defs["TrialConfig"] = trial
    for props in (schema["properties"], defs["SweepSpec"]["properties"]):
        key = "defaults" if "defaults" in props else "base"
        props[key] = {"$ref": "#/$defs/TrialConfig", "description": props[key].get("description", ""), "default": {}}
    schema["title"] = "ablate experiments file"
    return schema
