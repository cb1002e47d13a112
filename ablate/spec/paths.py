"""Dotted config paths (`model.stack`, `attention.tau`): read, write and match them in nested configs.

Shared by the planner (grid axes, `when` and `exclude` rules, the baseline) and by reports (a baseline
matched against recorded axis values), so both read a rule the same way.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

_YAML11_BOOLS = {False: ("off", "no", "false"), True: ("on", "yes", "true")}
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def typed_value(text: str) -> Any:
    """A value typed on a command line (`-s PATH=VALUE`, `--where PATH=VALUE`), read as YAML: 3, true, [2, 2],
    csan; 1e-3 is a number too (YAML 1.1 reads it as text). Raises yaml.YAMLError."""
    value = yaml.safe_load(text)
    return float(value) if isinstance(value, str) and _NUMBER.fullmatch(value) else value


def get_path(data: Any, path: str, default: Any = None) -> Any:
    node = data
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def set_path(data: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    node = data
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[leaf] = copy.deepcopy(value)


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings to one level with dotted names: {"test": {"top1": 1}} -> {"test.top1": 1}."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, name))
        else:
            out[name] = value
    return out


def beyond(inside: Iterable[Mapping[str, Any]], outside: Iterable[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """The dotted paths at which the configs `outside` take a value no config `inside` takes (None: the path is
    not in the config), with those values in first-seen order, paths in order: what trials launched before under
    other settings (`-s train.epochs=4`, a knob since renamed) differ in from a sweep's plan. A path that varies
    inside as well (an axis, a knob of one attention kind) is named only for values the plan never takes."""
    taken: dict[str, set[str]] = {}
    flat_inside = [flatten(c) for c in inside]
    flat_outside = [flatten(c) for c in outside]
    paths = dict.fromkeys(p for c in (*flat_inside, *flat_outside) for p in c)
    for c in flat_inside:
        for p in paths:
            taken.setdefault(p, set()).add(json.dumps(c.get(p), sort_keys=True))
    out: dict[str, list[Any]] = {}
    for c in flat_outside:
        for p in paths:
            value = c.get(p)
            if json.dumps(value, sort_keys=True) not in taken.get(p, set()) and value not in out.get(p, []):
                out.setdefault(p, []).append(value)
    return {p: out[p] for p in paths if p in out}


def overlaps(a: str, b: str) -> bool:
    """Whether dotted path `a` is `b`, inside it, or holds it (`model` and `model.stack` overlap)."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def same(want: Any, have: Any) -> bool:
    """Equality, except that a YAML 1.1 boolean matches the word it was written as (`off` -> false)."""
    if isinstance(want, bool) and isinstance(have, str):
        return have.lower() in _YAML11_BOOLS[want]
    return bool(want == have)


def matches(rule: dict[str, Any], resolved: dict[str, Any], flat: bool = False) -> bool:
    """A partial assignment matches when each value equals the resolved one (a list of scalars: any of).
    `resolved` is a nested config, or with `flat` a mapping of dotted paths to values."""
    for path, want in rule.items():
        have = resolved.get(path) if flat else get_path(resolved, path)
        if same(want, have) or (
            isinstance(want, list) and not isinstance(have, (list, tuple)) and any(same(w, have) for w in want)
        ):
            continue
        if isinstance(have, tuple) and list(have) == want:
            continue
        return False
    return True
