"""A sweep checked against the registries: each name of a mechanism, backbone, dataset or task is registered
(`unregistered_names`), each dotted path names a config field of its attention kinds (`path_problem`), its
`metric:` is a result its task records (`metric_problems`), and a knob belongs to the mechanisms that have it
(`knob_owners`).

Apart from the schema because these answers change with the plugins a file loads, not with the file.
"""

from __future__ import annotations

import difflib
import typing
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from ablate.config import NAMED, TrialConfig, unregistered
from ablate.plugins import load_builtins
from ablate.registry import MECHANISMS, TASKS
from ablate.spec.problems import SweepProblem, expected_keys, models_in

if TYPE_CHECKING:
    from ablate.spec.sweeps import Sweep


def _takes_dict(annotation: Any) -> bool:
    return (
        annotation is dict
        or typing.get_origin(annotation) is dict
        or any(_takes_dict(a) for a in typing.get_args(annotation))
    )


def path_problem(path: str, kinds: Collection[str] = ()) -> str | None:
    """None if `path` names a config field (of any attention kind), else what was expected: for a knob, among
    the knobs of `kinds` (the attention kinds it may apply to) when given."""
    load_builtins()
    models: list[type[BaseModel]] = [TrialConfig]
    parts = path.split(".")
    for i, part in enumerate(parts):
        fields = {n: f for m in models for n, f in m.model_fields.items()}
        if part not in fields:
            if i == 1 and parts[0] == "attention" and any(k not in MECHANISMS for k in kinds):
                return None  # a knob of a kind no mechanism is registered as: the kind is the problem
            where = ".".join(parts[:i]) or "the top level"
            own = [MECHANISMS.get(k) for k in kinds if k in MECHANISMS and MECHANISMS.get(k) in models]
            hint = expected_keys(part, own or models)
            return f"unknown config path {path!r}: {part!r} is not a key of {where}; {hint}"
        ann = fields[part].annotation
        models = models_in(ann, fields[part].metadata)
        if not models:
            return None if i == len(parts) - 1 or _takes_dict(ann) else f"{'.'.join(parts[: i + 1])} has no sub-keys"
    return None


def knob_owners(path: str) -> list[str]:
    """The registered mechanisms that have the knob `path` sets (attention.<knob>...), if it sets one that not
    every mechanism has (`kind` and the knobs of `Mechanism` are every mechanism's)."""
    parts = path.split(".")
    if parts[0] != "attention" or len(parts) < 2:
        return []
    owners = [kind for kind, cls in MECHANISMS.items() if parts[1] in cls.model_fields]
    return [] if len(owners) == len(MECHANISMS) else owners


def unregistered_names(sweep: Sweep) -> list[SweepProblem]:
    """Each value that names a component (`config.NAMED`: a mechanism, backbone, dataset or task) no registered
    one answers to, where it is written: a sweep's first problem, as its knobs cannot be checked without it."""
    return [
        SweepProblem(at, unregistered(registry, value))
        for path, registry in NAMED.items()
        for value, at in sweep.written(path)
        if is_unregistered(value, registry)
    ]


def is_unregistered(value: Any, registry: Collection[str]) -> bool:
    return isinstance(value, str) and value not in registry


def metric_problems(sweep: Sweep) -> list[SweepProblem]:
    """A `metric:` that the sweep's task records no final result of (`Task.results`): found by `plan`, not by
    the report that compares trials on it after they ran."""
    metric = sweep.spec.metric
    tasks = [TASKS.get(t) for t in sweep.taken("task", "classify") if isinstance(t, str) and t in TASKS]
    if metric is None or not tasks or not all(t.results() for t in tasks):
        return []
    results = [r for r in tasks[0].results() if all(r in t.results() for t in tasks)]
    if metric in results:
        return []
    leaf = metric.rpartition(".")[2]
    close = [r for r in results if r.rpartition(".")[2] == leaf] or difflib.get_close_matches(metric, results, 1, 0.8)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    names = " and ".join(dict.fromkeys(t.name for t in tasks))
    expected = f"expected one of {', '.join(results) or 'none'} (the test scores reports compare trials on)"
    return [SweepProblem(("metric",), f"{names} records no final result {metric!r}: {expected}{hint}")]
