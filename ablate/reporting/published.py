"""Published numbers matched to measured variants: the tables mechanisms declare (`ablate.registry.TABLES`).

A variant corresponds to a published row when backbone size, stack, mechanism (its `published_key`),
diamond (param-matched) and DWConv agree, and it was trained on the table's dataset (its `data.id`) with the
table's recipe (every path the table lists): then the numbers are comparable. A variant that agrees on the
rest gets the nearest row (same size, else same family, else the first) for orientation only, with what
differs from the paper. A sweep none of whose variants is comparable gets one line saying why
(`none_comparable`), not its variants' differences from a paper it cannot be set beside, and only when one of
its variants' mechanisms is what a table publishes (`publishes`): a paper's softmax baselines make no section
for a softmax-and-ReLU sweep.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ablate.components import PublishedRow, PublishedTable
from ablate.registry import MECHANISMS, TABLES
from ablate.spec.paths import get_path


def mechanism_key(cfg: dict[str, Any]) -> tuple[Any, ...] | None:
    """The stored config's mechanism asked for its published key; None for an unknown or stale config."""
    a = cfg.get("attention", {})
    kind = a.get("kind")
    if kind not in MECHANISMS:
        return None
    try:
        return MECHANISMS.get(kind).model_validate(a).published_key()
    except ValueError:
        return None


def signature(cfg: dict[str, Any]) -> tuple[Any, ...] | None:
    """What a published row is keyed on, minus the size; None for mechanisms no table publishes."""
    mechanism = mechanism_key(cfg)
    if mechanism is None:
        return None
    m = cfg.get("model", {})
    return (m.get("stack", "alternating"), mechanism, m.get("match_params") is not None, bool(m.get("dwconv")))


def _normalised(ident: Any) -> str:
    return re.sub(r"[^a-z0-9]", "", str(ident or "").lower())


@dataclass(frozen=True)
class Match:
    """The published row nearest a variant, its table, and what keeps the two from being comparable."""

    row: PublishedRow
    table: PublishedTable
    differs: tuple[str, ...]
    """Model size, dataset and recipe items where the run is not the paper's (empty: comparable)."""
    data: str | None = None
    """The variant's dataset where it is not the table's; None where it is."""

    @property
    def comparable(self) -> bool:
        return not self.differs


def match(cfg: dict[str, Any]) -> Match | None:
    """The published row for this variant; None when no table publishes its mechanism and stack."""
    sig = signature(cfg)
    if sig is None:
        return None
    size = cfg.get("model", {}).get("size")
    family = cfg.get("model", {}).get("backbone", "")
    same = [(r, t) for t in TABLES.entries() for r in t.component.rows if r.key() == sig]
    if not same:
        return None
    row, entry = min(same, key=lambda rt: (rt[0].size != size, not rt[0].size.startswith(family)))
    table = entry.component
    differs = [] if row.size == size else [f"size {size or 'unnamed'} (published {row.size})"]
    data_id = cfg.get("data", {}).get("id")
    data = None if _normalised(data_id) in table.data_ids else str(data_id or cfg.get("data", {}).get("name"))
    if data is not None:
        differs.append(f"data {data} (published {table.dataset})")
    differs += [f"{path} {get_path(cfg, path)!r} (published {want!r})" for path, want in table.recipe.items()
                if get_path(cfg, path) != want]  # fmt: skip
    return Match(row, table, tuple(differs), data)


def publishes(kind: str) -> list[PublishedTable]:
    """The tables that publish mechanism `kind`: those its own module registered (a paper's table sits beside the
    mechanism it introduces, `register_table`), not the tables where it is only a paper's baseline row."""
    module = MECHANISMS.entry(kind).source.split(":")[0] if kind in MECHANISMS else None
    return [e.component for e in TABLES.entries() if e.source.split(":")[0] == module]


#: Differences `none_comparable` names before it counts the rest.
NAMED = 3


def none_comparable(found: Sequence[Match], tables: Sequence[PublishedTable] = ()) -> str:
    """The published section of a sweep whose variants all miss their nearest row (`found`), in one line: the
    datasets where they differ (every variant trained on other data), else the differences all of them share;
    with no nearest row at all, that no published row has their configuration (of `tables`, which publish their
    mechanisms). Each variant's full list would bury a first report (an MNIST variant differs from the ImageNet
    rows in twenty items) and compare nothing."""
    papers = "; ".join(dict.fromkeys([*(m.table.source for m in found), *(t.source for t in tables)]))
    if not found:
        return f"None comparable (no published row has these variants' mechanism settings and stack): {papers}."
    if all(m.data is not None for m in found):
        theirs = "/".join(dict.fromkeys(m.table.dataset for m in found))
        why = f"the published rows are {theirs}; this sweep is {', '.join(dict.fromkeys(str(m.data) for m in found))}"
    else:
        shared = [d for d in found[0].differs if all(d in m.differs for m in found)]
        named = ", ".join(shared[:NAMED]) + (f" and {len(shared) - NAMED} more" if len(shared) > NAMED else "")
        why = f"every variant differs from its nearest published row in {named or 'model size or recipe'}"
    return f"None comparable ({why}): {papers}."
