"""How a sweep chooses its trials, one interface for every way (Ray Tune's `Searcher` plays the same part): its
first trials, and the trials after the results a store holds. A launch asks each sweep's chooser round by round
(`ablate.planning.rounds.Rounds`) until none chooses anything new.

The grid and designs (a follow-up's cells included) choose every trial when the plan is made: `Planned`. Adaptive
seeds add the next look's seeds to the cells still undecided (`ablate.planning.adaptive.Adaptive`); tuned arms
propose configurations from their searches' results, then their seeds at their best
(`ablate.planning.tuning.Tuned`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ablate.planning.plan import Plan
    from ablate.store import Store


@dataclass
class Chosen:
    """What a chooser chose: its sweep's plan (a tuned sweep's followed by its companion's), and what it added in
    words."""

    plans: list[Plan]
    lines: list[str] = field(default_factory=list)


class Chooser(Protocol):
    """One sweep's way of choosing its trials."""

    def first(self, store: Store | None) -> Chosen:
        """The first trials, as far as `store`'s results go (None: no results yet): what a launch's first round
        runs and `ablate plan` shows. The same for the same results, however often asked."""
        ...

    def grow(self, store: Store) -> Chosen:
        """The trials after the results `store` holds now: the last round's and any they lead to."""
        ...


@dataclass
class Planned:
    """The grid and designs: every trial is chosen when the plan is made, and results add none."""

    plan: Plan

    def first(self, store: Store | None) -> Chosen:
        return Chosen([self.plan])

    def grow(self, store: Store) -> Chosen:
        return Chosen([self.plan])


__all__ = ["Chooser", "Chosen", "Planned"]
