"""Dotted config paths (`model.stack`, `attention.tau`): read, write and match them in nested configs.

Shared by the planner (grid axes, `when` and `exclude` rules, the baseline) and by reports (a baseline
matched against recorded axis values), so both read a rule the same way.
"""

from __future__ import annotations

import copy
import re
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
