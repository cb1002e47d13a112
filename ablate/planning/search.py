"""The configurations each arm of a tuned sweep tries: its `tune:` block's search, run by one of Optuna's
samplers through its ask-and-tell interface (Optuna only proposes; the launcher runs them as ordinary trials).

Nothing about a search is stored but its results: `proposals` replays the sampler from the spec and the
results the store holds. An arm's configurations are proposed in rounds of `batch`; round r is asked after
every earlier round was told. The same spec and results give the same configurations in any process, so a
relaunch proposes exactly what was proposed before (and trains nothing again), an interrupted round is proposed
again identically, and raising the budget from 12 to 20 keeps the first 12 and adds 8.

Every arm of a sweep replays the same seed: with the random and grid samplers every arm tries the very same
configurations, and with TPE the same first round, so arms are compared on equal draws rather than on the
luck of their own (the paired design the sweep's seeds already use, applied to the search).

Optuna is imported only when configurations are proposed, not when a spec is read: it costs the CLI's start-up
(`ablate --help`, `ablate plan`) a fifth of a second that a file without `tune:` should not pay."""

from __future__ import annotations

import contextlib
import copy
import hashlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ablate.spec.tuning import IntDim, LogDim, RangeDim, TuneSpec

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution
    from optuna.samplers import BaseSampler

STARTUP = 4
"""TPE proposes at random until this many configurations (and at least the first round) are known: its
densities need a few points, but Optuna's default of 10 would leave a budget of 12 a random search."""


@dataclass(frozen=True)
class Failed:
    """A configuration whose trial failed or reported no finite metric: the sampler learns it failed."""


Result = float | Failed | None
"""What is known of one configuration: its metric, Failed, or None while it has not run."""


def proposals(spec: TuneSpec, results: Sequence[Result]) -> list[dict[str, Any]]:
    """The configurations (dotted path -> value) the arm tries, as far as `results` (of the configurations
    proposed so far, in order; missing ones are None) lets the search go: every round up to and including the
    first with an unknown result, or up to the budget. Replayed from scratch: deterministic for a spec and
    results, in any process. Results beyond the budget are ignored."""
    return Search(spec).advance(results)


class Search:
    """An arm's search held in memory, for a process that asks again as results come in: `advance` tells and
    asks only the rounds that are new since its last call, where `proposals` replays every round each time (a
    cost that grows with the square of the budget). Both make the same calls in the same order, so they propose
    the same configurations; a result that changed since it was told (a trial run again) replays from scratch."""

    def __init__(self, spec: TuneSpec) -> None:
        self.spec = spec
        self._study: optuna.Study | None = None
        self._told: list[Result] = []
        """Results told, round by round: the configurations before the current round."""
        self._round: list[optuna.Trial] = []
        """The current round's trials: asked, not told."""
        self._proposed: list[dict[str, Any]] = []

    def advance(self, results: Sequence[Result]) -> list[dict[str, Any]]:
        """What `proposals(self.spec, results)` returns."""
        known = [_outcome(r) for r in results[: self.spec.budget]]
        with _quiet():
            study = self._study
            if study is None or known[: len(self._told)] != self._told:
                study = self._start()
            while True:
                start, end = len(self._told), len(self._told) + len(self._round)
                if end == self.spec.budget or any(i >= len(known) or known[i] is None for i in range(start, end)):
                    return list(self._proposed)
                for trial, result in zip(self._round, known[start:end]):
                    _tell(study, trial, result)
                self._told += known[start:end]
                self._ask(study, end)

    def _start(self) -> optuna.Study:
        import optuna

        direction: Literal["maximize", "minimize"] = "maximize" if self.spec.direction == "max" else "minimize"
        self._study = optuna.create_study(sampler=_sampler(self.spec), direction=direction)
        self._told, self._round, self._proposed = [], [], []
        self._ask(self._study, 0)
        return self._study

    def _ask(self, study: optuna.Study, start: int) -> None:
        """Ask the round of configurations from `start`."""
        dists = _distributions(self.spec)
        self._round = [study.ask(dists) for _ in range(start, min(start + self.spec.batch, self.spec.budget))]
        self._proposed += [_decode(self.spec, t.params) for t in self._round]


def best(spec: TuneSpec, results: Sequence[Result]) -> int | None:
    """Index of the best configuration whose metric is known and finite (the earliest on ties); None when no
    configuration within the budget has one."""
    done = [(i, r) for i, r in enumerate(map(_outcome, results[: spec.budget])) if isinstance(r, float)]
    if not done:
        return None
    sign = 1 if spec.direction == "max" else -1
    return max(done, key=lambda ir: (sign * ir[1], -ir[0]))[0]


def _outcome(result: Result) -> Result:
    """A result as the sampler learns it: a finite metric, Failed (a failure, or a metric that is not finite),
    or None (not known yet)."""
    if result is None or isinstance(result, Failed):
        return result
    return float(result) if math.isfinite(result) else Failed()


def _tell(study: optuna.Study, trial: optuna.Trial, result: Result) -> None:
    from optuna.trial import TrialState

    if isinstance(result, float):
        study.tell(trial, result)
    else:
        study.tell(trial, state=TrialState.FAIL)


def _sampler(spec: TuneSpec) -> BaseSampler:
    """The spec's sampler, seeded through a stable hash (Python's hash() of a string changes per process)."""
    from optuna.samplers import GridSampler, RandomSampler, TPESampler

    seed = int.from_bytes(hashlib.sha256(f"ablate.tune:{spec.seed}".encode()).digest()[:4], "big")
    if spec.sampler == "grid":
        grid = {path: list(range(len(dim))) for path, dim in sorted(spec.space.items()) if isinstance(dim, list)}
        return GridSampler(grid, seed=seed)
    if spec.sampler == "random":
        return RandomSampler(seed=seed)
    return TPESampler(seed=seed, n_startup_trials=max(STARTUP, spec.batch))


def _distributions(spec: TuneSpec) -> dict[str, BaseDistribution]:
    """Optuna's distribution per path, in sorted order (the order samplers draw in, so not the file's order).
    A categorical dimension is drawn as the index of its value: Optuna's choices must be scalars, YAML's need
    not be ([2, 2])."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    out: dict[str, BaseDistribution] = {}
    for path, dim in sorted(spec.space.items()):
        if isinstance(dim, LogDim):
            out[path] = FloatDistribution(*dim.log, log=True)
        elif isinstance(dim, RangeDim):
            out[path] = FloatDistribution(*dim.range)
        elif isinstance(dim, IntDim):
            out[path] = IntDistribution(*dim.int)
        else:
            out[path] = CategoricalDistribution(list(range(len(dim))))
    return out


def _decode(spec: TuneSpec, params: dict[str, Any]) -> dict[str, Any]:
    """A trial's parameters as config values, in the space's order."""
    out: dict[str, Any] = {}
    for path, dim in spec.space.items():
        out[path] = copy.deepcopy(dim[params[path]]) if isinstance(dim, list) else params[path]
    return out


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Optuna's log (a line per study and trial) kept out of ablate's output while a search replays."""
    import optuna

    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(before)
