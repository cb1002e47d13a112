"""What is stale in a store: the done trials whose recorded code (`ablate.fingerprint`) differs from the code
now, as `ablate status`, `ablate runs` and reports mark them. Worked out per recorded code digest, not per
trial, and without the planner: a status of 100,000 trials reads a handful of code records.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from ablate.fingerprint import Fingerprint, current
from ablate.store import Store

LISTED = 20
"""Rows a listing shows (a launch's stale trials, each listing of `ablate status`); the rest are counted."""


@dataclass(frozen=True)
class StaleCode:
    """The code digests that done trials were recorded with and that differ from the code now."""

    changed: dict[str, list[str]]
    """Recorded digest -> what changed since: component names, `torch 2.4 -> 2.5`."""
    trials: int
    """Done trials recorded with one of them."""


def stale_code(store: Store, sweeps: list[str] | None = None) -> StaleCode:
    """What is stale among the done trials of `sweeps` (or all), worked out once per recorded code digest (the
    trial's components are named in its record): a store of 100,000 done trials holds a handful of digests.
    Today's fingerprints come from the disk cache where it answers (`ablate.fingerprint.current`, nothing
    imported); only for the others are the sweeps' plugins loaded (their code is part of the answer). A record
    naming a component that is no longer registered is not stale: its code cannot be compared."""
    digests = store.code_digests(sweeps or None)
    codes = store.codes([d.sample for d in digests.values()])
    olds = {digest: Fingerprint.from_json(codes[done.sample]) for digest, done in digests.items()}
    nows = {digest: now for digest, old in olds.items() if (now := _current(old)) is not None}
    if len(nows) < len(olds):
        _load_plugins(store, sweeps)
        nows.update({d: now for d, old in olds.items() if d not in nows and (now := _current(old)) is not None})
    changed = {d: now.changed(olds[d]) for d, now in nows.items() if now.digest != olds[d].digest}
    return StaleCode(changed, sum(digests[d].trials for d in changed))


def _current(old: Fingerprint) -> Fingerprint | None:
    try:
        return current(old)
    except ValueError:  # a component not registered (yet: plugins not loaded; or no longer)
        return None


def _load_plugins(store: Store, sweeps: list[str] | None) -> None:
    """Load the plugins each sweep recorded. Imported here: ablate.plugins brings the registries and their
    pydantic models, which a status answered by the fingerprint cache does without."""
    from ablate.plugins import Plugins

    for name in sweeps or list(store.sweep_metrics()):
        record = store.sweep(name)
        if record is not None:
            Plugins.from_json((record.spec or {}).get("plugins")).load()


def stale_in_store(
    store: Store, sweeps: list[str] | None = None, keys: Collection[str] | None = None
) -> dict[str, list[str]]:
    """Done trials (of `sweeps`, or all) whose recorded code differs from the current code, with what changed,
    in plan order: what `status`, `runs` and reports mark (`stale_code`). `keys`: only these trials, read one by
    one (a page of `runs`); else the stale trials' rows are read, and only theirs."""
    code = stale_code(store, sweeps)
    if not code.changed:
        return {}
    if keys is not None:
        recorded = store.codes(store.done_keys(keys))
        return {k: code.changed[d] for k in keys if k in recorded and (d := recorded[k].get("digest")) in code.changed}
    rows = store.with_code(code.changed, sweeps or None)
    return {key: code.changed[digest] for key, digest in zip(rows["key"], rows["digest"])}
