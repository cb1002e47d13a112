"""Trials a sweep holds that its plan no longer makes: launched before under other settings (`-s
train.epochs=4`, then 5) or before a knob was renamed. The store keeps them (results are never dropped by
themselves); a launch marks them outside the plan (`Store.add_trials(plan=...)`), says so and what they differ
in, and reports leave them out unless asked (`ablate report --all-trials`).
"""

from __future__ import annotations

import json
from typing import Any

from ablate.planning.plan import Plan
from ablate.spec.paths import beyond, get_path
from ablate.spec.tuning import tuned_of
from ablate.store import Store

SAMPLE = 200
"""Outside trials whose configs are read to say what they differ in (their variants repeat past a few)."""
SHOWN = 3
"""Paths, and values per path, a line names before `...`."""


def plan_keys(plan: Plan) -> list[str] | None:
    """Every trial the plan makes now or its later rounds may add (an adaptive sweep's reserve of seeds); None for
    a tuned sweep and its searches, whose later trials follow from results no plan knows yet."""
    if plan.tuning is not None or tuned_of(plan.sweep) is not None:
        return None
    return [t.key for t in (*plan.trials, *plan.reserve, *plan.arms)]


def lines(plan: Plan, store: Store) -> list[str]:
    """What a launch of `plan` says of the sweep's trials outside it (empty when there are none)."""
    keys = plan_keys(plan)
    if keys is None:
        return []
    made = set(keys)
    outside = [k for k in store.member_keys([plan.sweep]) if k not in made]
    if not outside:
        return []
    inside = [t.recorded() for t in {t.variant: t for t in plan.trials}.values()]
    differ = beyond(inside, store.configs(outside[:SAMPLE]).values())
    differ.pop("seed", None)  # seeds the plan no longer makes: said as the count alone
    words = "; ".join(_path_words(p, v, inside) for p, v in list(differ.items())[:SHOWN])
    more = f"; ... ({len(differ) - SHOWN} more paths)" if len(differ) > SHOWN else ""
    what = f": they differ in {words}{more}" if differ else " (other seeds of its variants)"
    hint = "--where PATH=VALUE"
    if len(differ) == 1 and len(values := next(iter(differ.values()))) == 1 and _scalar(values[0]):
        hint = f"--where '{next(iter(differ))}={_text(values[0])}'"
    return [
        f"sweep {plan.sweep} holds {len(outside)} trials its plan no longer makes{what}. Its report leaves them out "
        f"(`ablate report {plan.sweep} --all-trials` shows them, labelled by what differs); `ablate forget "
        f"{plan.sweep} {hint}` deletes them"
    ]


def _path_words(path: str, values: list[Any], inside: list[dict[str, Any]]) -> str:
    shown = ", ".join(_text(v) for v in values[:SHOWN]) + (", ..." if len(values) > SHOWN else "")
    planned = list(dict.fromkeys(_text(v) for c in inside if (v := get_path(c, path)) is not None))
    if not planned:  # the plan's configs have no such path: the knob was renamed, or removed
        return (f"{path} ({shown}; no config of the plan has {path}: renamed or removed? trials under an old "
                "name do not carry over to a new one, which trains again)")  # fmt: skip
    return f"{path} ({shown}; the plan: {', '.join(planned[:SHOWN])}{', ...' if len(planned) > SHOWN else ''})"


def _scalar(value: Any) -> bool:
    return value is not None and not isinstance(value, (list, dict))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)
