"""Fan planned trials out over Ray and record everything: `launch(plans, ...)`.

Plan, skip every key already `done` in the store (whatever sweep ran it), submit the rest as Ray tasks
with the sweep's cpus/gpus, and record what they report through the one writer (`ablate.execution.recorder`).
Worker or node death: the trial is submitted again (`ablate.execution.outcomes.LOST_RETRIES` times) and resumes from its
checkpoint under `storage/<key>` (a shared folder or a bucket, `ablate.training.checkpoint_storage`).
Application errors are recorded as `failed`, retried only `resources.retries` times. Ctrl-C (or SIGTERM) asks
the loop to stop: at its next poll it cancels running tasks and marks them `interrupted`, and the next launch resumes
them; a second Ctrl-C stops at once. No address: an embedded local Ray for the launch; an address or
RAY_ADDRESS: that cluster.

What touches Ray is in `ablate.execution.fanout`, imported in one place here, where a launch has trials to run: a launch
with nothing to run starts no Ray and opens no MLflow client (ray, the worker and the trial loop are not imported;
MLflow is opened only when it lags behind the store, which `Tracker.end_sweep` tells by reading a SQLite MLflow
store directly). With trials to run, MLflow is opened in another thread while Ray starts.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from ablate.config import TrialConfig
from ablate.execution import gpu_shares, journal, outside
from ablate.execution.heartbeat import Heartbeat
from ablate.execution.progress import Display
from ablate.execution.recorder import Recorder
from ablate.execution.selection import Select, Selection, select
from ablate.planning.keys import Trial
from ablate.planning.plan import Plan
from ablate.planning.rounds import Rounds
from ablate.plugins import Plugins
from ablate.store import Owner, Store
from ablate.store.faults import StoreUnavailable
from ablate.tracking.closing import Closing, waited
from ablate.tracking.mirror import Mirror
from ablate.tracking.tracker import Tracker
from ablate.training.checkpoint_storage import Storage
from ablate.training.messages import Runner

DEFAULT_STORAGE = "db/checkpoints"


@dataclass
class LaunchResult:
    """What a launch did: trials per final state, and how many were already done."""

    counts: Counter[str] = field(default_factory=Counter)
    skipped: int = 0
    seconds: float = 0.0
    interrupted: bool = False
    store_error: str | None = None
    """Why the store refused writes at the end of the launch (what it missed waits in `journal`)."""
    journal: Path | None = None
    signal: int | None = None
    """The signal that stopped the launch (SIGINT: trials interrupted; SIGTERM: preempted)."""
    stale: dict[str, list[str]] = field(default_factory=dict)
    """Done trials whose code changed since they ran, with what changed (`ablate.execution.selection`)."""
    rounds: int = 1
    """Rounds the launch ran: more than one when adaptive seeds or tuned arms chose more trials after a round
    (`ablate.planning.rounds`)."""
    closings: list[subprocess.Popen[bytes]] = field(default_factory=list)
    """The processes finishing MLflow's view of the rounds (`RunConfig.detach`), which the launch did not wait for."""

    def then(self, later: LaunchResult) -> LaunchResult:
        """This result followed by a later round's: counts and time add up, the later round's faults win."""
        return replace(later, counts=self.counts + later.counts, skipped=self.skipped, stale=self.stale,
                       seconds=self.seconds + later.seconds, rounds=self.rounds + later.rounds,
                       closings=self.closings + later.closings)  # fmt: skip


@dataclass(frozen=True)
class Cluster:
    """Where trials run."""

    address: str | None = None
    """A Ray cluster (`host:port`, `ray://...`, `auto`); None: RAY_ADDRESS if set, else an embedded local Ray."""
    num_cpus: int | None = None
    """CPUs of an embedded local Ray (default: every core of this machine)."""

    def join_address(self) -> str | None:
        """The cluster to join, `address` or else RAY_ADDRESS, once it answers (`reachable`); None: an embedded
        Ray."""
        address = self.address or os.environ.get("RAY_ADDRESS")
        if address:
            reachable(address)
        return address


@dataclass(frozen=True)
class RunConfig:
    """How each trial runs (Ray Tune's `RunConfig` plays the same part)."""

    storage: str | Path = DEFAULT_STORAGE
    """Checkpoint root, `<storage>/<trial key>`: a folder (on a cluster, one every node mounts) or an fsspec URL
    such as `s3://bucket/prefix` (see `ablate.training.checkpoint_storage`)."""
    cpus: float | None = None
    """CPUs per trial, overriding each sweep's `resources.cpus`."""
    gpus: float | None = None
    """GPUs per trial (fractions share a GPU), overriding `resources.gpus`: a trial trains on the GPU its task holds,
    on the CPU with none (`ablate.training.devices`)."""
    runner: Runner | None = None
    """What trains a trial (default `ablate.training.loop.run_trial`); tests and benchmarks pass lighter ones."""
    probe: gpu_shares.Probe = gpu_shares.measure
    """What measures the GPU memory of a `gpus: auto` trial (see `ablate.execution.gpu_shares`); tests fake it on
    CPU."""
    poll: float = 0.2
    """Seconds between looks at finished tasks and new messages."""
    grace: float = 25.0
    """Seconds SIGTERM waits for running trials to checkpoint at their next step before stopping them (within
    Kubernetes' default 30 s termination grace)."""
    lease: float = 60.0
    """Seconds a launcher's claim on a trial lasts unless its heartbeat (every quarter of it) renews it: how
    long a crashed launcher's trials wait before another launcher takes them over."""
    detach: bool = False
    """Leave what MLflow lacks when a round ends (the mirror's catch-up, the sweeps' summaries with their reports) to a
    process of its own that the launch does not wait for (`ablate.tracking.closing`; `ablate launch` does): the launch
    returns once the store holds every result, and `ablate sync` mends a closing cut short."""


class Stop:
    """Set by the first SIGINT/SIGTERM; the launch loop checks it at every poll.

    Raising KeyboardInterrupt wherever the signal lands could cut a store write or a Ray call in half;
    a flag lets the loop stop between them. A second signal raises KeyboardInterrupt at once.
    """

    def __init__(self) -> None:
        self.requested = False
        self.signal: int | None = None

    def __bool__(self) -> bool:
        return self.requested

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested, self.signal = True, signum

    @contextmanager
    def installed(self) -> Iterator[Stop]:
        """Catch SIGINT and SIGTERM while the loop runs (main thread only: elsewhere Ctrl-C stays Python's)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def reachable(address: str, timeout: float = 10.0) -> None:
    """Fail fast on a `host:port` nobody listens on (Ray itself retries for minutes, then exits)."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto" and other forms: left to Ray
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as e:
        raise ConnectionError(f"cannot connect to the Ray cluster at {address}: {e.strerror or e}") from None


def launch(
    plans: Plan | Sequence[Plan] | Rounds,
    store: Store | None = None,
    tracker: Tracker | None = None,
    *,
    cluster: Cluster = Cluster(),
    run: RunConfig = RunConfig(),
    progress: Display | None = None,
    choice: Select = Select(),
) -> LaunchResult:
    """Run every unfinished trial of `plans` (one Plan, several, or the `Rounds` a caller already chose them with,
    whose searches go on where they went; `choice` changes which, see `ablate.execution.selection`), recording to
    `store` (default: the results database under db/, as the CLI) and to MLflow through `tracker`; return counts per
    outcome. The trials are chosen in rounds (`ablate.planning.rounds.Rounds`): after each, sweeps with adaptive seeds
    add the next look's seeds of their undecided cells, and tuned sweeps their searches' next configurations, then
    their seeds at each arm's best. See the module docstring."""
    if store is None:
        with Store() as default_store:
            return launch(plans, default_store, tracker, cluster=cluster, run=run, progress=progress, choice=choice)
    rounds = plans if isinstance(plans, Rounds) else Rounds([plans] if isinstance(plans, Plan) else plans)
    first = rounds.first(store)  # a tuned sweep's searches as far as the store's results go
    ray = _Ray()
    try:
        result = _round(first.plans, store, tracker, cluster, run, progress, choice, ray)
        while not result.interrupted and result.store_error is None:
            grown = rounds.grow(store)
            if not grown.new:
                return result
            for line in grown.lines:
                (progress or Display()).message(line)
            only = replace(choice, only=tuple(grown.new))
            result = result.then(_round(grown.plans, store, tracker, cluster, run, progress, only, ray))
        return result
    finally:
        if ray.ours:
            from ablate.execution import fanout

            fanout.shutdown()


@dataclass
class _Ray:
    """Whether a launch started Ray: it stays up from round to round (started again, it would cost each round its
    start and its workers' imports) until the launch ends."""

    ours: bool = False


def _round(
    plans: list[Plan],
    store: Store,
    tracker: Tracker | None,
    cluster: Cluster,
    run: RunConfig,
    progress: Display | None,
    choice: Select,
    ray: _Ray,
) -> LaunchResult:
    """One round of `launch`: run the selected trials of `plans` until each has finished or the launch stops (Ray,
    once started, stays up for the launch's next round)."""
    started = time.perf_counter()
    result = LaunchResult()
    storage = Storage(run.storage)
    replayed = Recorder(store).replay(storage.root)  # what an earlier launch journaled while the store was down
    chosen = select(plans, store, choice)
    result.skipped, result.stale = len(chosen.done), chosen.stale
    if chosen.run:  # a storage that cannot serve these trials is an error before Ray starts
        _start_ray(list(chosen.run.values()), storage, cluster, tracker, ray)
    owner = Owner.new(run.lease)
    heartbeat = Heartbeat(store, owner)
    stop, handled = Stop(), ExitStack()
    if chosen.run:  # from Ray's start on: a signal during the set-up below stops the loop before it claims anything
        handled.enter_context(stop.installed())
    try:
        plugins = _plugins(plans)
        admission = _admission(list(chosen.run.values()), run, plugins)
        earlier = _record(plans, store, chosen, storage)
        progress = progress or Display()
        _begin(progress, plans, chosen, [*admission.lines, *earlier], replayed)
        sweeps = [plan.sweep for plan in plans]
        mirror = _mirror(store, tracker, sweeps, bool(chosen.run), progress)
        if not chosen.run:
            progress.message(f"nothing to run: all {len(chosen.done)} trials are done; {progress.report_hint()}")
            _close(mirror, sweeps, "FINISHED", progress, run.detach, result)
        else:
            fanned = _Fanned(store, owner, heartbeat, mirror, progress, result, run, plugins, storage, chosen)
            fanned.run(admission.shares, stop, handled, sweeps)
    finally:
        handled.close()
        heartbeat.stop()
        with suppress(StoreUnavailable):  # a store that is down lets the leases lapse instead
            store.release(owner)  # interrupted trials are free for the next launcher at once
    result.seconds = time.perf_counter() - started
    return result


def _start_ray(todo: list[Trial], storage: Storage, cluster: Cluster, tracker: Tracker | None, ray: _Ray) -> None:
    """Check that `storage` can serve `todo`, then start (or join) Ray: an unreachable cluster (or an MLflow that
    cannot be opened) is an error before anything is written to the store. A Ray this started is `ray`'s to stop
    when the launch ends."""
    storage.refuse_gangs(todo)
    storage.check()
    from ablate.execution import (
        fanout,
    )  # Ray's side: imported here alone, so a launch with nothing to run imports no Ray

    if fanout.start(cluster, tracker):
        ray.ours = True


def _plugins(plans: list[Plan]) -> Plugins:
    """What every process that runs the plans' trials must import first."""
    plugins = Plugins()
    for plan in plans:
        plugins = plugins.merged(plan.plugins)
    return plugins


def _admission(todo: list[Trial], run: RunConfig, plugins: Plugins) -> gpu_shares.Admission:
    """The GPU shares of the `gpus: auto` trials among `todo` (none where the run sets the GPUs per trial)."""
    auto = [t for t in todo if isinstance(t.config.resources.gpus, str)] if run.gpus is None else []
    return gpu_shares.admit(auto, run.probe, plugins) if auto else gpu_shares.Admission({}, [])


def _record(plans: list[Plan], store: Store, chosen: Selection, storage: Storage) -> list[str]:
    """Record the sweeps and their trials, and archive what the selection runs again (its checkpoints discarded: a
    new training starts from scratch); what each sweep holds that its plan no longer makes, in words (read before
    the flags change). Each write waits out a database server that restarts meanwhile, as the launch's first look."""
    earlier = []
    for plan in plans:
        earlier += store.patiently(partial(outside.lines, plan, store))
        store.patiently(partial(store.upsert_sweep, plan.sweep, spec_path=plan.file, metric=plan.metric,
                                baseline=plan.baseline, description=plan.description,
                                spec=plan.recorded_spec()))  # fmt: skip
        store.patiently(partial(store.add_trials, plan.sweep, plan.trials, outside.plan_keys(plan)))
    for reason in set(chosen.again.values()):
        keys = [k for k, why in chosen.again.items() if why == reason]
        store.patiently(partial(store.archive, keys, reason))
        for key in keys:
            storage.discard(key)
    return earlier


def _begin(progress: Display, plans: list[Plan], chosen: Selection, lines: list[str], replayed: int) -> None:
    """Start the display with the round's trials, and say what the selection and the set-up found."""
    done = len(chosen.done)
    metrics = {t.key: plan.metric for plan in reversed(plans) for t in plan.trials}  # a shared trial: the first's
    progress.begin([plan.sweep for plan in plans], len(chosen.run) + done, done, metrics)
    for line in [*chosen.lines({t.key: t for plan in plans for t in plan.trials}), *lines]:
        progress.message(line)
    if replayed:
        progress.message(f"wrote {replayed} records an earlier launch journaled while the store was unavailable")


def _mirror(store: Store, tracker: Tracker | None, sweeps: list[str], todo: bool, progress: Display) -> Mirror | None:
    """The MLflow mirror of the round (none without a tracker), started with what MLflow lacks of the sweeps; MLflow
    is opened only where there is something to run or to bring over (it was opened while Ray started), and its
    errors stop the launch here, as ever."""
    if tracker is None:
        return None
    waited(tracker)  # an earlier launch's closing, still writing
    backlog = store.unmirrored(sweeps)
    if todo or backlog:
        tracker.open()
    return Mirror(store, tracker, progress.message).start(backlog, trials=todo)


@dataclass
class _Fanned:
    """What a round with trials to run hands Ray's side (`ablate.execution.fanout.Fanout`)."""

    store: Store
    owner: Owner
    heartbeat: Heartbeat
    mirror: Mirror | None
    progress: Display
    result: LaunchResult
    settings: RunConfig
    plugins: Plugins
    storage: Storage
    chosen: Selection

    def run(self, shares: dict[str, float], stop: Stop, handled: ExitStack, sweeps: list[str]) -> None:
        """Run the selected trials on Ray until each has finished or `stop` is set, then end the sweeps' MLflow
        runs."""
        from ablate.execution import fanout

        todo, progress = self.chosen.run, self.progress
        if holders := self.store.holders(todo):
            who = ", ".join(sorted(set(holders.values())))
            progress.message(f"{len(holders)} trials are leased to other launchers ({who}): they run there; "
                             "this launch takes over any whose lease lapses")  # fmt: skip
        gpus = {k: _gpus(t.config, self.settings.gpus) for k, t in todo.items()} | shares
        recorder = Recorder(self.store, self.mirror, self.storage.root / journal.FOLDER / f"{self.owner.id}.jsonl")
        on_ray = fanout.Fanout(todo, self.store, self.owner, self.heartbeat, recorder, progress, self.result,
                               self.settings, self.plugins, self.storage.url, gpus, self.chosen)  # fmt: skip
        try:
            with progress:
                self.heartbeat.start()
                on_ray.loop(stop)
        except KeyboardInterrupt:  # a second Ctrl-C, or one outside the main thread's handler
            on_ray.interrupt()
        finally:
            handled.close()  # MLflow's last wait is Ray's to stop, as before the loop
            status = "KILLED" if self.result.interrupted else "FINISHED"
            _close(self.mirror, sweeps, status, progress, self.settings.detach, self.result)


MIRROR_WAIT = 30.0
"""Seconds a launch waits at its end for the MLflow mirror to catch up (not at all while MLflow is down)."""


def _close(
    mirror: Mirror | None, sweeps: list[str], status: str, progress: Display, detach: bool, result: LaunchResult
) -> None:
    """Let the mirror catch up, then end the sweeps' MLflow parent runs; or say what MLflow still lacks. `detach`:
    stop the mirror and leave the rest to a closing process (`result.closings`), where MLflow answered and lags."""
    if mirror is None:
        return
    if detach:
        store, tracker = mirror.store, mirror.tracker
        if not mirror.stop():
            progress.message("MLflow lacks the sweeps' latest records: `ablate sync` brings them over")
        elif store.unmirrored(sweeps) or not all(tracker.in_step(store, sweep, status) for sweep in sweeps):
            closing = Closing(store.url, tracker.uri, tracker.artifact_root, sweeps, status).start(tracker)
            result.closings.append(closing)
            progress.message(f"MLflow's view of the sweeps is finished by process {closing.pid} in the background; "
                             "`ablate sync` completes it if that is cut short")  # fmt: skip
        return
    if left := mirror.close(MIRROR_WAIT):
        progress.message(f"MLflow lacks {left} trials' latest records: `ablate sync` brings them over")
        return
    try:
        for sweep in sweeps:
            mirror.tracker.end_sweep(mirror.store, sweep, status)
    except Exception as e:  # MLflow went away at the last moment: the parent runs stay open, nothing is lost
        progress.message(f"MLflow: could not end the sweeps' parent runs ({type(e).__name__})")


def _gpus(cfg: TrialConfig, override: float | None) -> float:
    """GPUs per worker as configured (`auto` is replaced by the admission's share): what the task holds decides where
    the trial trains, so the override moves the trial, not only Ray's reservation."""
    if override is not None:
        return override
    return 1.0 if isinstance(cfg.resources.gpus, str) else cfg.resources.gpus
