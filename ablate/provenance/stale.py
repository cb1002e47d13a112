"""What is stale in a store: the done trials whose recorded code (`ablate.provenance.fingerprint`) differs from the code
now, as `ablate status`, `ablate runs` and reports mark them. Worked out per recorded code digest, not per
trial, and without the planner: a status of 100,000 trials reads a handful of code records.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from ablate.provenance.fingerprint import Fingerprint, current
from ablate.store import Store

LISTED = 20
"""Rows a listing shows (a launch's stale trials, each listing of `ablate status`); the rest are counted."""


@dataclass(frozen=True)
class StaleCode:
    """The code digests that done trials were recorded with and that differ from the code now, and those whose
    code cannot be compared here (neither stale nor current)."""

    changed: dict[str, list[str]]
    """Recorded digest -> what changed since: component names, `torch 2.4 -> 2.5`."""
    trials: int
    """Done trials recorded with one of them."""
    unknown: dict[str, str] = field(default_factory=dict)
    """Recorded digest -> why its code cannot be compared here: a file it covers is missing (a plugin file moved
    or deleted: the store keeps its text, not whether it changed since), or a component it names is not
    registered."""
    unknown_trials: int = 0
    """Done trials recorded with one of `unknown`."""

    def unchecked(self) -> str:
        """One line for a view that marks stale trials: which done trials it cannot mark, and why ('' if none)."""
        if not self.unknown:
            return ""
        why = "; ".join(sorted(set(self.unknown.values())))
        return f"{self.unknown_trials} done trials: code not checkable here, not marked stale ({why})"


def stale_code(store: Store, sweeps: list[str] | None = None) -> StaleCode:
    """What is stale among the done trials of `sweeps` (or all), worked out once per recorded code digest (the
    trial's components are named in its record): a store of 100,000 done trials holds a handful of digests.
    Today's fingerprints come from the disk cache where it answers (`ablate.provenance.fingerprint.current`, nothing
    imported); only for the others are the sweeps' plugins loaded (their code is part of the answer). A record
    whose code cannot be read here (a file missing, a component no longer registered) is `unknown`, not
    stale."""
    digests = store.code_digests(sweeps or None)
    codes = store.codes([d.sample for d in digests.values()])
    olds = {digest: Fingerprint.from_json(codes[done.sample]) for digest, done in digests.items()}
    answers = {digest: _current(old) for digest, old in olds.items()}
    if not all(isinstance(answer, Fingerprint) for answer in answers.values()):
        _load_plugins(store, sweeps)
        answers.update({d: _current(olds[d]) for d, answer in answers.items() if isinstance(answer, str)})
    nows = {d: answer for d, answer in answers.items() if isinstance(answer, Fingerprint)}
    unknown = {d: answer for d, answer in answers.items() if isinstance(answer, str)}
    changed = {d: now.changed(olds[d]) for d, now in nows.items() if now.digest != olds[d].digest}
    return StaleCode(changed, sum(digests[d].trials for d in changed), unknown,
                     sum(digests[d].trials for d in unknown))  # fmt: skip


def _current(old: Fingerprint) -> Fingerprint | str:
    """Today's fingerprint of a record's components, or why there is none here."""
    try:
        return current(old)
    except ValueError as e:  # CodeMissing, or a component not registered (yet: plugins not loaded; or no longer)
        return str(e)


def _load_plugins(store: Store, sweeps: list[str] | None) -> None:
    """Load the plugins each sweep recorded. Imported here: ablate.plugins brings the registries and their
    pydantic models, which a status answered by the fingerprint cache does without."""
    from ablate.plugins import Plugins

    for name in sweeps or list(store.sweep_metrics()):
        record = store.sweep(name)
        if record is not None:
            Plugins.from_json((record.spec or {}).get("plugins")).load(strict=False)  # status never needs all


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
