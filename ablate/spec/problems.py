"""Problems as values: a problem inside a sweep is its key path and a message (`SweepProblem`), found by pure
functions of the sweep's data and placed on its line of the file once, by the sweep's `SweepSource`. A pydantic
error becomes a problem a person can act on: the key path as they wrote it (`clean_loc`), a sentence about what
was expected (`error_message`), and for an unknown key the keys that section has (`expected_keys`).

Shared by the file's structure (`ablate.spec.sweeps`), the cells a plan expands (`ablate.planning.plan`) and the
`tune:` block's check (`ablate.spec.tuning_check`), so every problem reads alike wherever it is found.
"""

from __future__ import annotations

import difflib
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from ablate.config import AnyMechanism
from ablate.errors import Problem, format_path
from ablate.registry import MECHANISMS
from ablate.spec.yaml_doc import Loc


@dataclass(frozen=True)
class SweepProblem:
    """Something wrong at a key path inside one sweep (`("grid", "model.stack", 1)`), as planning finds it from the
    sweep's data alone: its `SweepSource` names the file and line (or the override that set the path)."""

    path: Loc
    message: str

    def __str__(self) -> str:
        return f"{format_path(self.path)}: {self.message}"


class SweepError(Exception):
    """Problems that stop a sweep's planning where they are found (a design that cannot be laid out, say): raised
    inside planning's steps, and returned as values by `ablate.planning.plan.expand`."""

    def __init__(self, problems: Sequence[SweepProblem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def clean_loc(loc: Loc, data: Any) -> Loc:
    """The user's key path of a pydantic error: walk the input and drop union tags and type labels
    (parts that name no key of the input), except a last part, which is a missing key."""
    out: list[str | int] = []
    node = data
    for i, part in enumerate(loc):
        keys = node if isinstance(node, dict) else range(len(node)) if isinstance(node, list) else ()
        if part in keys:
            node = node[part]
        elif i < len(loc) - 1:
            continue
        out.append(part)
    return tuple(out)


def error_message(e: Any, root: type[BaseModel] | None = None) -> str:
    """A pydantic error as a sentence about what was expected; with the model validated (`root`), an unknown
    key is compared with the keys of its section (a mechanism's: its own knobs)."""
    msg = e["msg"].removeprefix("Value error, ")
    if e["type"] == "extra_forbidden":
        loc = tuple(e["loc"])
        if root is None or not loc:
            return "unknown key"
        return f"unknown key; {expected_keys(str(loc[-1]), _section(root, loc))}"
    if e["type"] == "missing":
        return "missing required key"
    if e["type"] in ("literal_error", "union_tag_invalid"):
        return f"{msg} (got {e.get('input')!r})"
    return str(msg)


def validation_problems(err: ValidationError, data: Any, where: Any, root: type[BaseModel]) -> list[Problem]:
    """Turn `root`'s validation error into problems; `where(path, message) -> Problem` places each in the file."""
    return [where(clean_loc(tuple(e["loc"]), data), error_message(e, root)) for e in err.errors()]


def _section(root: type[BaseModel], loc: Loc) -> list[type[BaseModel]]:
    """The models whose keys sit where a pydantic error's `loc` ends: its path walked from `root`, a field at a
    time (a dict key or list index keeps the models; the attention union's tag picks that mechanism)."""
    models = [root]
    for part in loc[:-1]:
        fields = {f.alias or n: f for m in models for n, f in m.model_fields.items()}  # as written: `import`
        if isinstance(part, str) and part in fields:
            models = models_in(fields[part].annotation, fields[part].metadata)
        elif isinstance(part, str) and part in MECHANISMS and MECHANISMS.get(part) in models:
            models = [MECHANISMS.get(part)]
    return models


def expected_keys(name: str, models: Sequence[type[BaseModel]]) -> str:
    """What to say of an unknown key `name` among the keys of `models`: the nearest one, then every one (a
    mechanism's keys are its knobs, named by its kind)."""
    keys = sorted({f.alias or n for m in models for n, f in m.model_fields.items()})
    close = difflib.get_close_matches(name, keys, n=1)
    text = f"did you mean {close[0]!r}? " if close else ""
    kinds = [kind for kind, cls in MECHANISMS.items() if cls in models]
    if kinds and len(kinds) == len(models):
        which = f"attention kind {', '.join(kinds)}" if len(kinds) < len(MECHANISMS.names()) else "every attention kind"
        return f"{text}expected one of {keys} (the knobs of {which})"
    return f"{text}expected one of {keys}"


def models_in(annotation: Any, metadata: list[Any] | tuple[Any, ...] = ()) -> list[type[BaseModel]]:
    """The config models a field holds; for the attention field, every registered mechanism's config."""
    if any(isinstance(meta, AnyMechanism) for meta in metadata):
        return [cls for _, cls in MECHANISMS.items()]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in models_in(arg)]
