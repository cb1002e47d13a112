"""The one loop that chooses a launch's trials: each sweep's chooser (`ablate.planning.chooser.Chooser`: the grid and
designs, adaptive seeds, tuned arms) asked for its first trials, then after every round for those its results lead
to, until none chooses anything new.

A `Rounds` lives as long as one launch, from `ablate plan`'s view of the file to what the launch left
(`ablate.api.rounds`): a tuned sweep's searches are replayed from the spec once, then told only the results that are
new, however often the launch asks (its size question, its dry run, its rounds, what it left).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ablate.planning.chooser import Chooser, Chosen, Planned
from ablate.planning.plan import Plan
from ablate.spec.tuning import tuned_of

if TYPE_CHECKING:
    from ablate.store import Store


@dataclass
class Round:
    """A round's plans: every sweep's (a tuned one's followed by its companion's), the keys new to them (a trial
    new to a sweep: a tuned sweep's final trial may be a tuning trial already done, which the round records there),
    and what is new in words."""

    plans: list[Plan]
    new: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


def chooser(plan: Plan) -> Chooser:
    """How `plan` chooses its trials: the searches of a tuned sweep, the looks of adaptive seeds, else all at once."""
    if plan.tuning is not None:
        from ablate.planning.tuning import Tuned  # optuna: only for tuned sweeps

        return Tuned(plan)
    if plan.adaptive is not None:
        from ablate.planning.adaptive import Adaptive  # scipy: only for adaptive seeds

        return Adaptive(plan)
    return Planned(plan)


class Rounds:
    """The plans of one launch, chosen round by round."""

    def __init__(self, plans: Sequence[Plan]) -> None:
        tuned = {p.sweep for p in plans if p.tuning is not None}
        self.choosers = [chooser(p) for p in plans if tuned_of(p.sweep) not in tuned]  # a companion: from its sweep
        self.plans = list(plans)
        """The last round's plans (before the first round: the plans given)."""
        self._members: set[tuple[str, str]] = set()
        """Every trial chosen so far, by sweep and key."""

    def first(self, store: Store | None) -> Round:
        """The first round's plans as far as the store's results go (no store: the searches' first configurations):
        what a launch runs first, and what `ablate plan` shows."""
        return self._round([c.first(store) for c in self.choosers])

    def grow(self, store: Store) -> Round:
        """The next round's plans, from the results the store has now."""
        return self._round([c.grow(store) for c in self.choosers])

    def _round(self, chosen: list[Chosen]) -> Round:
        self.plans = [p for c in chosen for p in c.plans]
        planned = [(p.sweep, t.key) for p in self.plans for t in p.trials]
        new = list(dict.fromkeys(key for sweep, key in planned if (sweep, key) not in self._members))
        self._members.update(planned)
        return Round(self.plans, new, [line for c in chosen for line in c.lines])


__all__ = ["Round", "Rounds", "chooser"]
