"""Command-line overrides (`-s train.epochs=3`, `ablate.plan(..., overrides=...)`): each `PATH=VALUE` read,
checked against the sweeps it is set on, and set on their base, so it changes trial keys as an edit of the
file would.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from ablate.config import NAMED, unregistered
from ablate.errors import Problem, SpecError
from ablate.registry import MECHANISMS
from ablate.spec.paths import overlaps, set_path, typed_value
from ablate.spec.registry_check import is_unregistered, knob_owners, path_problem
from ablate.spec.schema import axis_paths
from ablate.spec.sweeps import SweepFile
from ablate.spec.yaml_doc import absolute_data_path


@dataclass(frozen=True)
class Override:
    """`PATH=VALUE` given on the command line (`-s train.epochs=3`) or to `ablate.plan`: VALUE is YAML, set on
    the base of every sweep planned, so it changes trial keys as an edit of the file would."""

    text: str
    path: str
    value: Any

    def overlaps(self, path: str) -> bool:
        """Whether `path` is this override's path, inside it, or holds it."""
        return overlaps(path, self.path)

    def problem(self, message: str) -> Problem:
        """A problem named by the override as it was typed, with the value it found."""
        found = "" if any(said in message for said in ("(got ", ", got ", "(value ")) else f" (found {self.value!r})"
        return Problem(f"override {self.text!r}", tuple(self.path.split(".")), message + found)


def parse_override(text: str) -> Override:
    """`PATH=VALUE` with VALUE read as YAML (`3`, `1e-3`, `true`, `[2, 2]`, `csan`); SpecError if it is not."""
    path, sep, raw = text.partition("=")
    path = path.strip()
    if not sep or not path or any(not part for part in path.split(".")):
        raise SpecError([Problem(f"override {text!r}", (), "expected PATH=VALUE, e.g. train.epochs=3")])
    try:
        value = typed_value(raw)
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None) or e
        raise SpecError(
            [Problem(f"override {text!r}", tuple(path.split(".")), f"VALUE is not YAML: {problem}")]
        ) from None
    return Override(text, path, value)


def with_overrides(file: SweepFile, texts: Sequence[str], names: Iterable[str] | None = None) -> SweepFile:
    """`file` with each override `PATH=VALUE` set on the base of the sweeps `names` (default: every sweep); a knob
    that only some of a sweep's mechanisms have is set on their cells only (`Sweep.knobs`). An override
    that is not PATH=VALUE, names no config field or registered component, sets a path the sweep's grid varies
    or a knob none of its mechanisms has is a problem of the file; a value the config refuses is found when the
    sweep is planned, and named as the override's (`SweepSource.place`)."""
    if not texts:
        return file
    problems: list[Problem] = []
    overrides: list[Override] = []
    sweeps = dict(file.sweeps)
    chosen = list(sweeps) if names is None else [n for n in names if n in sweeps]
    kinds = {k for name in chosen for k in sweeps[name].sweep.kinds()}
    for text in texts:
        try:
            o = parse_override(text)
        except SpecError as e:
            problems += e.problems
            continue
        if o.path in NAMED and is_unregistered(o.value, NAMED[o.path]):
            problems.append(o.problem(unregistered(NAMED[o.path], o.value)))
            kinds.add(o.value)
        else:
            overrides.append(o)
    for o in list(overrides):
        if (msg := path_problem(o.path, kinds)) is not None:
            problems.append(o.problem(msg))
            overrides.remove(o)
    for name in chosen:
        source = sweeps[name]
        sweep = source.sweep
        base = copy.deepcopy(sweep.base)
        # an override refused here is not set: its value reached the grid's cells, whose problems were then
        # charged to the file's lines (a wrong type on a `when:` axis: two more errors at the axis's line)
        applied = []
        for o in overrides:
            varied = [p for p in axis_paths(sweep.spec) if o.overlaps(p)]
            if varied:
                problems.append(o.problem(f"sweep {name} varies {', '.join(varied)} in its grid; an override sets "
                                          "one value for every trial, so set it in the file instead"))  # fmt: skip
            if searched := [p for p in (sweep.spec.tune.space if sweep.spec.tune else {}) if o.overlaps(p)]:
                problems.append(o.problem(f"sweep {name} searches {', '.join(searched)} in its tune: space; an "
                                          "override sets one value for every trial"))  # fmt: skip
            if varied or searched:
                continue
            applied.append(o)
            if not knob_owners(o.path):
                set_path(base, o.path, o.value)
        if any(o.overlaps("data.path") for o in applied):  # a relative path typed here is relative to here
            base = absolute_data_path(base, Path.cwd())[0]
        knobs = []
        mechanisms = [k for k in replace(sweep, base=base).kinds() if k in MECHANISMS]
        for o in (o for o in applied if knob_owners(o.path)):
            having = [k for k in mechanisms if k in knob_owners(o.path)]
            if len(having) == len(mechanisms):
                set_path(base, o.path, o.value)
            elif having:
                knobs.append(o)
            else:
                problems.append(o.problem(f"no cell of sweep {name} has a mechanism with this knob (its attention "
                                          f"kinds: {', '.join(mechanisms)}); {o.path} is a knob of "
                                          f"{', '.join(knob_owners(o.path))}"))  # fmt: skip
        sweeps[name] = replace(source, sweep=replace(sweep, base=base, knobs=tuple(knobs)), overrides=tuple(applied))
    return replace(file, sweeps=sweeps, problems=[*file.problems, *problems])
