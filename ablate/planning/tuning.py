"""A tuned sweep's rounds (`tune:`): every arm searched alike on its validation split, then its seeds at its best.

An arm is a variant of the grid (a cell without its seeds). Each configuration it tries is an ordinary trial,
stored under its own key: the arm's first trial (the sweep's first seed) with the proposal's values set. They
belong to the sweep's companion `<sweep>/tuning` (`ablate.spec.tuning.companion`), so they stay out of the sweep's
comparison while `status`, `runs` and MLflow show them. Nothing of a search is stored but its trials: every
round replays each arm's search from the spec and the store's results (`ablate.planning.search.Search`), so a relaunch
proposes what was proposed before and trains nothing again, a killed launch resumes in the round it was in, and
a larger budget adds only the new configurations.

Once every configuration of an arm's budget has a result, its best (`ablate.planning.search.best`, on the validation
metric only) runs at the sweep's seeds: these are the sweep's own trials, compared as any sweep's (the best's
first seed is its tuning trial, not trained again). Once the baseline's arm has its best, every other arm also
runs at the baseline's configuration, the same seeds (in the companion): the report shows whether a conclusion
holds without the arms' own tuning. A sweep with adaptive seeds (`ablate.planning.adaptive`) then adds seeds to the arms
at their best, as it would to any cell.

`Tuned` is a tuned sweep's chooser (`ablate.planning.chooser.Chooser`) and holds its searches in memory for one
launch; `ablate.planning.rounds.Rounds` asks it after every round until nothing new is chosen. `Plan.tuning` carries
each arm's search as far as it went (trial keys, best, final trials): the launcher keeps it in the sweep's record,
where the report reads it.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ablate.config import TrialConfig
from ablate.planning.chooser import Chosen
from ablate.planning.keys import Trial, trial_key, variant_key
from ablate.planning.plan import Plan
from ablate.planning.search import Failed, Result, Search, best
from ablate.spec.paths import set_path
from ablate.spec.tuning import (
    ArmSearch,
    IntDim,
    LogDim,
    RangeDim,
    Searches,
    TuneSpec,
    companion,
)

if TYPE_CHECKING:
    from ablate.store import Store

AXIS = "tuning"
"""The companion's axis that numbers an arm's configurations (1 = its first); empty for an arm's trials at the
baseline's configuration."""
ENDED = ("done", "failed", "diverged")
"""States whose trial a search has a result of (the others run, or will)."""


class Tuned:
    """A tuned sweep as a chooser (`ablate.planning.chooser.Chooser`): its arms' searches as far as the store's
    results go, then their seeds at their best; with adaptive seeds, after each round also the next look's seeds
    of the arms still undecided (`ablate.planning.adaptive.Adaptive`). One per launch
    (`ablate.planning.rounds.Rounds`): its searches are replayed from the spec once, then told only what is new,
    however often the launch asks."""

    def __init__(self, plan: Plan) -> None:
        self.planned = plan
        self.plan = plan
        """The sweep as far as it grew (its companion is remade from its searches each time)."""
        self._searches: dict[str, Search] = {}
        """Each arm's search (by arm variant), told and asked only what is new each round."""
        self._made: dict[tuple[str, str], Trial | None] = {}
        """A trial with a configuration's values set (by its key and the values), made once; None where the
        config refuses them."""
        self._members: set[tuple[str, str]] = set()
        """Every trial chosen so far, by sweep and key (a tuned sweep's final trial may be a tuning trial)."""

    def first(self, store: Store | None) -> Chosen:
        plan, searches = self._searched(self.planned, store)
        return self._chosen(plan, searches, self._news(plan, searches))

    def grow(self, store: Store) -> Chosen:
        plan, searches = self._searched(self.plan, store)
        lines = self._news(plan, searches)
        if plan.adaptive is not None:
            from ablate.planning.adaptive import Adaptive  # scipy: only for adaptive seeds

            seeds = Adaptive(plan).grow(store)
            plan, lines = seeds.plans[0], lines + seeds.lines
        return self._chosen(plan, searches, lines)

    def _chosen(self, plan: Plan, searches: Plan, lines: list[str]) -> Chosen:
        """The sweep and its companion as chosen now: what the next round grows from, and what is new to them."""
        self.plan = plan
        self._members.update((p.sweep, t.key) for p in (plan, searches) for t in p.trials)
        return Chosen([plan, searches], lines)

    def _searched(self, plan: Plan, store: Store | None) -> tuple[Plan, Plan]:
        """`plan` with the final trials of every arm whose search has ended, and the record of every search
        (`Plan.tuning`); and its companion, with every configuration the searches proposed as far as the store's
        results go, and the arms at the baseline's best configuration."""
        assert plan.tuning is not None
        spec, lead = plan.tuning.spec, plan.tuning.baseline
        known = results(store, plan.sweep, spec.metric) if store is not None else {}
        arms = _arms(plan.arms)
        records: list[ArmSearch] = []
        chosen: list[dict[str, Any] | None] = []
        tried: dict[str, Trial] = {}
        for trials in arms:
            first = trials[0]
            search = self._searches.setdefault(first.variant, Search(spec))
            got: list[Result] = []
            while len(configs := search.advance(got)) > len(got):
                made = [self._at(first, c) for c in configs[len(got) :]]
                got += [Failed() if t is None else known.get(t.key) for t in made]
            made = [self._at(first, c, {**_cell(first), **c, AXIS: n, "seed": first.axes["seed"]})
                    for n, c in enumerate(configs, 1)]  # fmt: skip
            tried.update((t.key, t) for t in made if t is not None and t.key not in tried)
            pick = best(spec, got) if len(configs) == spec.budget and None not in got else None
            records.append(ArmSearch(axes=_cell(first), search=[t.key if t else None for t in made], best=pick))
            chosen.append(None if pick is None else configs[pick])
        finals: list[Trial] = []
        theirs = None if lead is None else chosen[lead]
        for i, (trials, record, own) in enumerate(zip(arms, records, chosen)):
            if own is not None:
                mine = [self._made_at(t, own, t.axes) for t in trials]
                record.finals, finals = [t.key for t in mine], finals + mine
            if theirs is not None and i != lead:
                paired = [self._made_at(t, theirs, {**_cell(t), **theirs, AXIS: None, "seed": t.axes["seed"]})
                          for t in _first_seeds(trials, plan)]  # fmt: skip
                record.at_baseline = [t.key for t in paired]
                tried.update((t.key, t) for t in paired if t.key not in tried)
        grown = _with_finals(plan, Searches(spec=spec, arms=records, baseline=lead), finals)
        searches = Plan(companion(plan.sweep), list(tried.values()), [*plan.axes, *spec.space, AXIS], None,
                        spec.metric, plan.file, f"tuning of {plan.sweep}", plan.plugins, plan.stale)  # fmt: skip
        return grown, searches

    def _at(self, trial: Trial, values: dict[str, Any], axes: dict[str, Any] | None = None) -> Trial | None:
        """`trial` with `values` (dotted path -> value) set on its config, a trial of its own key, with `axes`;
        None where its config refuses them (a value inside a range that is not the config's, or two searched
        values that do not go together: the search learns it failed)."""
        ident = (trial.key, json.dumps(values, sort_keys=True))
        if ident not in self._made:
            raw = trial.config.model_dump(mode="json")
            for path, value in values.items():
                set_path(raw, path, value)
            try:
                cfg = TrialConfig.model_validate(raw)
            except ValidationError:
                self._made[ident] = None
            else:
                self._made[ident] = Trial(trial_key(cfg), variant_key(cfg), cfg, {}, trial.placeholders)
        made = self._made[ident]
        return None if made is None else replace(made, axes=axes or {})

    def _made_at(self, trial: Trial, values: dict[str, Any], axes: dict[str, Any]) -> Trial:
        """`_at` for a configuration the search gave a result, which its config therefore takes."""
        made = self._at(trial, values, axes)
        assert made is not None
        return made

    def _news(self, plan: Plan, searches: Plan) -> list[str]:
        """What a round adds to a tuned sweep, in words (nothing before its first round)."""
        if not self._members:
            return []
        finals = {t.key for t in plan.trials if (plan.sweep, t.key) not in self._members}
        tried = [t for t in searches.trials if (searches.sweep, t.key) not in self._members and t.key not in finals]
        proposed = sum(t.axes[AXIS] is not None for t in tried)
        fresh = len(finals)
        said = [f"{proposed} more configurations proposed from the results so far"] if proposed else []
        said += [f"{fresh} trials at the arms' best configurations"] if fresh else []
        said += [f"{len(tried) - proposed} at the baseline's"] if len(tried) > proposed else []
        return [f"tuning {plan.sweep}: {', '.join(said)}"] if said else []


def _with_finals(plan: Plan, record: Searches, finals: list[Trial]) -> Plan:
    """`plan` holding the arms' final trials: those at the first seeds (every seed, without adaptive seeds), and
    any an earlier round of adaptive seeding planned, as its trials; the rest as its reserve. The baseline is
    its arm at its best once that is known."""
    planned = {t.key for t in plan.trials} | {t.key for t in _first_seeds(finals, plan)}
    lead = record.arms[record.baseline] if record.baseline is not None else None
    base = next((t.variant for t in finals if lead is not None and t.key in lead.finals), plan.baseline)
    reserve = sorted((t for t in finals if t.key not in planned), key=lambda t: t.config.seed)
    return replace(plan, trials=[t for t in finals if t.key in planned], reserve=reserve, baseline=base,
                   tuning=record)  # fmt: skip


def results(store: Store, sweep: str, metric: str) -> dict[str, Result]:
    """The result each ended tuning trial of the tuned `sweep` gives its search, by key: its validation `metric`
    at the epoch its result comes from (the last; under `train.select: best` the chosen one, `test.epoch`), or
    Failed where it failed, diverged or has no finite value. Trials still to run are left out."""
    import pandas as pd  # only with a store, which needs it anyway: `ablate plan` imports no pandas

    frame = store.trials_frame(companion(sweep), states=ENDED).drop_duplicates("key").set_index("key")
    if frame.empty:
        return {}
    chosen = frame["test.epoch"] if "test.epoch" in frame else pd.Series(math.nan, index=frame.index)
    values: dict[str, float] = {}
    for key, rows in store.metrics_frame(companion(sweep), names=[metric]).groupby("key", observed=True):
        epoch = chosen.get(key, math.nan)
        at = rows[rows["step"] == (int(epoch) if pd.notna(epoch) else rows["step"].max())]["value"]
        values[str(key)] = float(at.iloc[0]) if len(at) else math.nan
    return {str(key): values.get(str(key), math.nan) if state == "done" else Failed()
            for key, state in frame["state"].items()}  # fmt: skip


def most(plan: Plan) -> int:
    """The trials a tuned sweep runs at most, its search's and its final seeds' (`launch --ask-above` counts them
    before the later rounds are planned): each arm's budget of configurations at its first seed, its other seeds
    at its best, and the other arms' seeds at the baseline's best."""
    assert plan.tuning is not None
    arms = _arms(plan.arms)
    seeds = len(_first_seeds(arms[0], plan))
    others = len(arms) - 1 if plan.tuning.baseline is not None else 0
    return len(arms) * (plan.tuning.spec.budget + seeds - 1) + others * seeds


def describe(plan: Plan) -> str:
    """What a tuned sweep runs, in words (`ablate plan`)."""
    assert plan.tuning is not None
    spec, arms = plan.tuning.spec, _arms(plan.arms)
    seeds = len(_first_seeds(arms[0], plan))
    space = space_words(spec)
    others = len(arms) - 1 if plan.tuning.baseline is not None else 0
    better = "higher" if spec.direction == "max" else "lower"
    return (f"tuned: {len(arms)} arms x {spec.budget} configurations of {space} ({spec.sampler}, seed {spec.seed}, "
            f"rounds of {spec.batch}), chosen on {spec.metric} ({better} is better) at each arm's first seed; then "
            f"each arm's {seeds} seeds at its best configuration"
            + (f", and {'the other arm' if others == 1 else f'the {others} other arms'}'s at the baseline's"
               if others else "")
            + f": up to {most(plan)} trials. The first round is planned in {companion(plan.sweep)}; the next ones "
            "follow from its results")  # fmt: skip


def space_words(spec: TuneSpec) -> str:
    """A search space in words: `train.lr log-uniform in [0.0001, 0.003]; train.weight_decay one of [...]`."""
    return "; ".join(f"{path} {_words(dim)}" for path, dim in spec.space.items())


def _words(dim: Any) -> str:
    if isinstance(dim, LogDim):
        return f"log-uniform in [{dim.log[0]:g}, {dim.log[1]:g}]"
    if isinstance(dim, RangeDim):
        return f"uniform in [{dim.range[0]:g}, {dim.range[1]:g}]"
    if isinstance(dim, IntDim):
        return f"an integer in {dim.int[0]}..{dim.int[1]}"
    return f"one of {json.dumps(dim)}"


def _arms(trials: list[Trial]) -> list[list[Trial]]:
    """A tuned sweep's grid trials by arm (variant), in plan order; each arm's first trial is its tuning seed."""
    out: dict[str, list[Trial]] = {}
    for t in trials:
        out.setdefault(t.variant, []).append(t)
    return list(out.values())


def _first_seeds(trials: list[Trial], plan: Plan) -> list[Trial]:
    """The trials at the seeds every cell runs (under adaptive seeds: those below `min`)."""
    return [t for t in trials if plan.adaptive is None or t.config.seed < plan.adaptive.min]


def _cell(trial: Trial) -> dict[str, Any]:
    """A trial's grid axis values, without its seed: what names its arm."""
    return {a: v for a, v in trial.axes.items() if a != "seed"}


__all__ = ["AXIS", "Tuned", "describe", "most", "results", "space_words"]
