"""Trial identity: a trial's key and its variant's, and the config each trial records.

A trial's key is a hash of the canonical JSON of everything that changes its result (`config.identity`:
model, knobs, data and split, recipe, epochs, seed) and of nothing else, so reordering YAML keys or writing
a default explicitly keeps the key, and the same config in another sweep is the same trial. A variant is a
grid cell without its replicates (seed, CV fold); its key hashes the identity minus those.

Apart from grid expansion (`ablate.planning.plan`) because a key is where a result lives in every store: this is
the code `tests/golden_keys.json` pins, and it changes only with `KEY_VERSION`.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ablate.config import REPLICATES, TrialConfig, identity
from ablate.spec.paths import get_path, set_path

KEY_VERSION = "ablate-trial-v1"
"""Bumped only when the meaning of a config changes, so old keys stop matching new trials."""


@dataclass(frozen=True)
class Trial:
    """One planned run."""

    key: str
    variant: str
    cell: TrialConfig
    """The trial's config, or with `seed` its grid cell's config, which the cell's seeds share."""
    axes: dict[str, Any]
    """Resolved value of every axis path of the sweep (None where it does not apply), and `seed`."""
    placeholders: dict[str, str] = field(default_factory=dict)
    """Dotted path -> the text written in the file, for values that came from environment variables."""
    seed: int | None = None
    """Set by the planner: `config` is `cell` at this seed, copied when first asked for (copying every
    trial's config is most of a 100,000-trial plan's time otherwise)."""

    recording: Recording | None = field(default=None, compare=False, repr=False)
    """Set by the planner, shared by a cell's trials: their recorded config's JSON text made once."""

    @functools.cached_property
    def config(self) -> TrialConfig:
        return self.cell if self.seed is None else self.cell.model_copy(update={"seed": self.seed})

    def recorded(self) -> dict[str, Any]:
        """The config as the store, MLflow and reports keep it: `${VAR}` text in place of secret values."""
        return _recorded(self.config, self.placeholders)

    def recorded_text(self) -> str:
        """`recorded()` as JSON text (what the store writes): the cell's text with this seed where there is one
        (serialising every trial's config is most of a 100,000-trial first launch's store time otherwise)."""
        return self._seeded(None if self.recording is None else self.recording.config, self.recorded)

    def axes_text(self) -> str:
        """`axes` as JSON text, as `recorded_text` makes the config's."""
        return self._seeded(None if self.recording is None else self.recording.axes, lambda: self.axes)

    def resolved(self) -> dict[str, Any]:
        """The config as JSON data with its values (no `${VAR}` text), as `ablate plan` prints it: the cell's
        data made once with this seed set in a shallow copy, so its sections are shared: read, never change."""
        if self.recording is None or self.seed is None:
            return self.config.model_dump(mode="json")
        return {**self.recording.resolved, "seed": self.seed}

    def resolved_text(self) -> str:
        """`resolved()` as JSON text, as `recorded_text` makes the recorded config's."""
        return self._seeded(None if self.recording is None else self.recording.resolved_text, self.resolved)

    def _seeded(self, halves: tuple[str, str] | None, data: Callable[[], Any]) -> str:
        return json.dumps(data()) if halves is None or self.seed is None else f"{halves[0]}{self.seed:d}{halves[1]}"


def _recorded(cfg: TrialConfig, placeholders: dict[str, str]) -> dict[str, Any]:
    data = cfg.model_dump(mode="json")
    for path, text in placeholders.items():
        set_path(data, path, text)
    return data


@dataclass
class Recording:
    """A cell's recorded config (`Trial.recorded`), axes and resolved config (`Trial.resolved`) as JSON text
    split where the seed goes (`seed_halves`), made once for all the cell's trials."""

    cell: TrialConfig
    placeholders: dict[str, str]
    cell_axes: dict[str, Any]

    @functools.cached_property
    def config(self) -> tuple[str, str] | None:
        return seed_halves(_recorded(self.cell, self.placeholders), json.dumps)

    @functools.cached_property
    def axes(self) -> tuple[str, str] | None:
        return seed_halves(self.cell_axes, json.dumps)

    @functools.cached_property
    def resolved(self) -> dict[str, Any]:
        return self.cell.model_dump(mode="json")

    @functools.cached_property
    def resolved_text(self) -> tuple[str, str] | None:
        return seed_halves(self.resolved, json.dumps)


def _canonical(data: Any) -> str:
    return json.dumps([KEY_VERSION, data], sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def digest(data: Any) -> str:
    """sha256 of canonical JSON (sorted keys, no spaces), 20 hex digits."""
    return _hash(_canonical(data))


_SEED_MARK = "\x00seed\x00"


def seed_halves(data: dict[str, Any], dumps: Callable[[Any], str]) -> tuple[str, str] | None:
    """`dumps({**data, "seed": s})` for any seed s is head + s's decimal text (its JSON) + tail: the text made
    once with a mark where the seed goes, split there; None where the data holds the mark's text itself."""
    text = dumps({**data, "seed": _SEED_MARK})
    mark = json.dumps(_SEED_MARK)
    if text.count(mark) != 1:
        return None
    head, tail = text.split(mark)
    return head, tail


def seed_keys(ident: dict[str, Any], seeds: Sequence[int]) -> list[str]:
    """`digest({**ident, "seed": s})` for each seed, the identity serialised once (`seed_halves`: a large
    sweep's keys are most of its planning time otherwise)."""
    if (halves := seed_halves(ident, _canonical)) is None:
        return [digest({**ident, "seed": seed}) for seed in seeds]
    return [_hash(f"{halves[0]}{seed:d}{halves[1]}") for seed in seeds]


def trial_key(cfg: TrialConfig) -> str:
    return digest(identity(cfg))


def variant_identity(cfg: TrialConfig) -> dict[str, Any]:
    """The identity without the replicate fields (`config.REPLICATES`: seed, split seed, CV fold)."""
    ident = identity(cfg)
    for path in REPLICATES:
        parent, _, leaf = path.rpartition(".")
        (get_path(ident, parent) if parent else ident).pop(leaf)
    return ident


def variant_key(cfg: TrialConfig) -> str:
    return digest(variant_identity(cfg))


__all__ = ["KEY_VERSION", "Trial", "digest", "trial_key", "variant_key"]
