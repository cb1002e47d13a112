"""A launch's pre-flight: every check that can refuse it, run before anything is written or Ray starts.

`ablate launch` and `ablate.launch()` from Python run the same one (`preflight`), so a launch from a notebook
refuses what the CLI refuses: an unreachable cluster, `--gpus` a fraction for multi-worker trials, a checkpoint
storage that cannot serve the trials, a model that cannot take a training step (`ablate.probe.check.check`), a
dataset whose labels, classes or widths do not fit its model (`ablate.probe.check.check_data`). The checks run on
the variants this launch would train: an idle relaunch (every trial done) checks nothing and imports no torch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ablate.config import SPLIT_GPU, splits_a_gpu
from ablate.execution.launcher import Cluster, RunConfig
from ablate.execution.selection import Select, select
from ablate.planning.plan import Plan
from ablate.probe.check import Checked, check
from ablate.provenance.cache import folder
from ablate.spec.tuning import companion
from ablate.store import Store
from ablate.training.checkpoint_storage import Storage, StorageError

CHECKED = "checked.json"
"""The file beside the cost cache (`ablate.provenance.cache.folder()`) where passing model checks are remembered."""


class PreflightError(ValueError):
    """What refused the launch, one paragraph: which check, which sweep and variant, and how to skip it."""


def _remembered_checks() -> Path | None:
    return folder() / CHECKED


@dataclass(frozen=True)
class Checks:
    """What the pre-flight runs before a launch (`launch --no-check` turns off `models` and `data`)."""

    models: bool = True
    """One training step of every architecture to run, on CPU, every mixer's output and the configured mechanism's
    use checked (`ablate.probe.check.check`)."""
    data: bool = True
    """A sample of every dataset to run through its model and loss: labels are class indices, classes and widths
    as the dataset declares (`ablate.probe.check.check_data`); skipped for a dataset whose path is the cluster's
    (`data.remote`). Remembered with `remember` only for a dataset whose code fixes its examples
    (`ablate.probe.check.data_fingerprint`): data at a path may change under it."""
    remember: Path | None = field(default_factory=_remembered_checks)
    """The file of passing model and data checks (code fingerprint, checks' source and what was checked), shared by
    every launch on this machine; None: check every architecture and dataset."""


def to_check(plans: Sequence[Plan], done: set[str], choice: Select) -> set[str]:
    """The done trials the checks can skip: all of them, unless this launch trains done trials again."""
    return set() if choice.rerun in ("stale", "all") else done


def preflight(
    plans: Sequence[Plan], done: set[str], cluster: Cluster, run: RunConfig, checks: Checks, choice: Select
) -> list[Checked]:
    """Refuse the launch of `plans` (a PreflightError) before anything is written: `run.gpus` would split a GPU
    between a trial's workers, the cluster does not answer, the storage cannot serve the trials, or a variant to
    run (a trial not in `done`, the store's done keys) fails its model or data check. The checks that ran, for
    whoever wants to show them."""
    refuse_split_gpus(plans, done, run.gpus)
    address = cluster.address
    if address:
        try:
            cluster.join_address()
        except ConnectionError as e:
            raise PreflightError(str(e)) from None
    where = Storage(run.storage)
    try:
        where.refuse_gangs([t for p in plans for t in p.trials if t.key not in done])
        where.check()
    except StorageError as e:
        raise PreflightError(str(e)) from None
    if not (checks.models or checks.data):
        return []
    results = check(list(plans), to_check(plans, done, choice), checks.remember if checks.models else None,
                    data=checks.data, models=checks.models)  # fmt: skip
    failed = [c for c in results if not c.ok]
    if failed:
        raise PreflightError(
            "the pre-launch check failed (`ablate check` shows every variant; --no-check skips it):\n"
            + "\n".join(f"  {c.sweep} {c.variant[:10]}: {c.error}" for c in failed)
        )
    return results


def refuse_split_gpus(plans: Sequence[Plan], done: set[str], gpus: float | None) -> None:
    """`--gpus` (`RunConfig.gpus`) a fraction while trials to run have several workers: the rule the spec applies to
    `resources.gpus` (`ablate.config.splits_a_gpu`), for the override that replaces it."""
    if gpus is None:
        return
    gangs = Counter(p.sweep for p in plans for t in p.trials
                    if t.key not in done and splits_a_gpu(t.config.resources.workers, gpus))  # fmt: skip
    if gangs:
        which = ", ".join(f"{n} of sweep {sweep}" for sweep, n in gangs.items())
        raise PreflightError(f"--gpus {gpus:g} gives each worker of a multi-worker trial (resources.workers > 1: "
                             f"{which}) a fraction of a GPU: {SPLIT_GPU}")  # fmt: skip


@dataclass(frozen=True)
class Workload:
    """What a launch would train, now and at most in its later rounds: what `launch --ask-above` weighs."""

    trials: int
    """Trials the first round runs: unfinished ones, stale ones its policy retrains, those `--rerun` names."""
    epochs: int
    """Their trial-epochs."""
    later: int = 0
    """Trials later rounds may add: adaptive seeds' reserve, tuned sweeps' further configurations and final seeds."""
    later_epochs: int = 0

    @property
    def most(self) -> int:
        """Trial-epochs of the whole launch, at most."""
        return self.epochs + self.later_epochs

    def asks(self, above: int) -> bool:
        """Whether a launch of this much asks first (`launch --ask-above`: trial-epochs, later rounds included)."""
        return self.most > above

    def words(self) -> str:
        now = f"{self.trials:,} trials, {self.epochs:,} trial-epochs"
        return now + (f" (up to {self.trials + self.later:,} trials, {self.most:,} trial-epochs with the later "
                      "rounds of adaptive seeds and tuning)" if self.later else "")  # fmt: skip


def workload(plans: Sequence[Plan], store: Store | None, choice: Select) -> Workload:
    """What launching `plans` (grown as far as `store`'s results go) with `choice` would train: the selection the
    launch makes (`ablate.execution.selection.select`: stale trials under `stale: rerun` and `--rerun` included), plus
    what its later rounds may add. Reads the store, writes nothing."""
    chosen = select(list(plans), store, choice)
    now = list(chosen.run.values())
    settled = chosen.run.keys() | chosen.done
    reserve = [t for p in plans for t in p.reserve if t.key not in settled]
    later, epochs = len(reserve), sum(t.config.train.epochs for t in reserve)
    planned = {p.sweep: len(p.trials) + len(p.reserve) for p in plans}
    for p in plans:
        if p.tuning is not None and p.arms:
            from ablate.planning.tuning import most  # optuna: only for tuned sweeps

            more = max(0, most(p) - planned[p.sweep] - planned.get(companion(p.sweep), 0))
            later, epochs = later + more, epochs + more * p.arms[0].config.train.epochs
    return Workload(len(now), sum(t.config.train.epochs for t in now), later, epochs)
