"""Fan planned trials out over Ray and record everything: `launch(plans, ...)`.

Plan, skip every key already `done` in the store (whatever sweep ran it), submit the rest as Ray tasks
with the sweep's cpus/gpus, and record what they report through the one writer (`ablate.recorder`).
Worker or node death: Ray re-runs the task (`system_retries`) and the trial resumes from its checkpoint
under `storage/<key>` (a shared folder or a bucket, `ablate.storage`). Application errors are recorded
as `failed`, retried only `resources.retries` times. Ctrl-C (or SIGTERM) asks the loop to stop: at its
next poll it cancels running tasks and marks them `interrupted`, and the next launch resumes them; a
second Ctrl-C stops at once. No address: an embedded local Ray for the launch; an address or RAY_ADDRESS: that cluster.

A launch with nothing to run starts no Ray and opens no MLflow client: ray, the worker and the trial loop are
imported where trials are submitted, and MLflow is opened only when it lags behind the store (`Tracker.end_sweep`
reads a SQLite MLflow store directly to tell). With trials to run, MLflow is opened in another thread while Ray
starts.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ablate import journal, packing
from ablate.checkpoints import Resume
from ablate.config import TrialConfig
from ablate.leases import Heartbeat
from ablate.messages import EpochEnd, Finished, PeerLost, Runner, Started, TrialResult
from ablate.mirror import Mirror
from ablate.planner import Plan, Trial
from ablate.plugins import Plugins
from ablate.progress import Progress
from ablate.recorder import Recorder
from ablate.selection import Select, Selection, select
from ablate.storage import Storage
from ablate.store import Owner, Store
from ablate.store.faults import StoreUnavailable
from ablate.tracking import Tracker

if TYPE_CHECKING:
    from ablate import gangs
    from ablate.worker import TaskArgs

T = TypeVar("T")
DEFAULT_STORAGE = "db/checkpoints"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
LOST_RETRIES = 10
"""Times a trial is started again after its worker process or node was lost (each attempt resumes from the
checkpoint, and the trial is `preempted` in between): a long trial on spot instances may be reclaimed often."""


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
    """Done trials whose code changed since they ran, with what changed (`ablate.selection`)."""
    rounds: int = 1
    """Rounds the launch ran: more than one when adaptive seeding added seeds (`ablate.sequential`)."""

    def then(self, later: LaunchResult) -> LaunchResult:
        """This result followed by a later round's: counts and time add up, the later round's faults win."""
        return replace(later, counts=self.counts + later.counts, skipped=self.skipped, stale=self.stale,
                       seconds=self.seconds + later.seconds, rounds=self.rounds + later.rounds)  # fmt: skip


@dataclass(frozen=True)
class Cluster:
    """Where trials run."""

    address: str | None = None
    """A Ray cluster (`host:port`, `ray://...`, `auto`); None: RAY_ADDRESS if set, else an embedded local Ray."""
    num_cpus: int | None = None
    """CPUs of an embedded local Ray (default: every core of this machine)."""


@dataclass(frozen=True)
class RunConfig:
    """How each trial runs (Ray Tune's `RunConfig` plays the same part)."""

    storage: str | Path = DEFAULT_STORAGE
    """Checkpoint root, `<storage>/<trial key>`: a folder (on a cluster, one every node mounts) or an fsspec URL
    such as `s3://bucket/prefix` (see `ablate.storage`)."""
    cpus: float | None = None
    """CPUs per trial, overriding each sweep's `resources.cpus`."""
    gpus: float | None = None
    """GPUs per trial (fractions share a GPU), overriding `resources.gpus`."""
    runner: Runner | None = None
    """What trains a trial (default `ablate.trial.run_trial`); tests and benchmarks pass lighter ones."""
    probe: packing.Probe = packing.measure
    """What measures the GPU memory of a `gpus: auto` trial (see `ablate.packing`); tests fake it on CPU."""
    poll: float = 0.2
    """Seconds between looks at finished tasks and new messages."""
    grace: float = 25.0
    """Seconds SIGTERM waits for running trials to checkpoint at their next step before stopping them (within
    Kubernetes' default 30 s termination grace)."""
    lease: float = 60.0
    """Seconds a launcher's claim on a trial lasts unless its heartbeat (every quarter of it) renews it: how
    long a crashed launcher's trials wait before another launcher takes them over."""


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


def _connect(address: str | None, num_cpus: int | None) -> bool:
    """Join `address` (or RAY_ADDRESS), reuse a running Ray, or start an embedded one. True if we started it."""
    import ray

    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        reachable(address)
        try:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
        except (SystemExit, ConnectionError) as e:  # Ray exits the process when no GCS answers
            ray.shutdown()  # drop the half-made connection, or interpreter exit waits on it
            raise ConnectionError(
                f"cannot connect to the Ray cluster at {address} (no answer; exit code {e})"
            ) from None
        return True
    start_embedded(num_cpus)
    return True


def start_embedded(num_cpus: int | None = None, object_store_mb: int = 256) -> None:
    """Start a Ray for this machine only: no dashboard, and every server on 127.0.0.1.

    Ray binds its gRPC servers to all interfaces unless the node's address is exactly 127.0.0.1, and turns an
    explicit `_node_ip_address="127.0.0.1"` into the machine's external address. The switch Ray uses on macOS
    and Windows (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`: single-node, loopback) is the one way to get loopback
    on Linux; it is set only while the node starts (its processes inherit it), so a later `ray.init(address=)`
    in this process is unaffected. tests/test_launcher.py checks the listening addresses."""
    import ray
    from ray._private import ray_constants

    env, flag = os.environ.get(ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR], ray_constants.ENABLE_RAY_CLUSTER = "0", False
    try:
        ray.init(address="local", num_cpus=num_cpus or os.cpu_count(), include_dashboard=False,
                 log_to_driver=False, configure_logging=False, object_store_memory=object_store_mb * 2**20)  # fmt: skip
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = flag
        if env is None:
            del os.environ[ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR]
        else:
            os.environ[ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR] = env


def launch(
    plans: Plan | Sequence[Plan],
    store: Store | None = None,
    tracker: Tracker | None = None,
    *,
    cluster: Cluster = Cluster(),
    run: RunConfig = RunConfig(),
    progress: Progress | None = None,
    choice: Select = Select(),
) -> LaunchResult:
    """Run every unfinished trial of `plans` (one Plan or several; `choice` changes which, see
    `ablate.selection`), recording to `store` (default: the results database under db/, as the CLI) and to
    MLflow through `tracker`; return counts per outcome. Sweeps with adaptive seeds run in rounds: after each,
    the next look's seeds of their undecided cells (`ablate.sequential.grow`). See the module docstring."""
    if isinstance(plans, Plan):
        plans = [plans]
    if store is None:
        with Store() as default_store:
            return launch(plans, default_store, tracker, cluster=cluster, run=run, progress=progress, choice=choice)
    plans = list(plans)
    result = _round(plans, store, tracker, cluster, run, progress, choice)
    if not any(plan.adaptive for plan in plans):
        return result
    from ablate import sequential  # scipy: only for adaptive seeds

    while not result.interrupted and result.store_error is None:
        grown = [sequential.grow(plan, store) for plan in plans]
        new = [t.key for before, after in zip(plans, grown) for t in after.trials[len(before.trials) :]]
        if not new:
            return result
        (progress or Progress()).message(f"adaptive seeds: {len(new)} more trials for cells still undecided")
        plans = grown
        result = result.then(_round(plans, store, tracker, cluster, run, progress, replace(choice, only=tuple(new))))
    return result


def _round(
    plans: list[Plan],
    store: Store,
    tracker: Tracker | None,
    cluster: Cluster,
    run: RunConfig,
    progress: Progress | None,
    choice: Select,
) -> LaunchResult:
    """One pass of `launch`: run the selected trials of `plans` until each has finished or the launch stops."""
    started = time.perf_counter()
    result = LaunchResult()
    plugins = Plugins()
    for plan in plans:
        plugins = plugins.merged(plan.plugins)
    storage = Storage(run.storage)
    replayed = Recorder(store).replay(storage.root)  # what an earlier launch journaled while the store was down
    chosen = select(plans, store, choice)
    todo, done = chosen.run, chosen.done
    result.skipped, result.stale = len(done), chosen.stale
    if todo:  # a storage that cannot serve these trials is an error before Ray starts
        storage.refuse_gangs(list(todo.values()))
        storage.check()
    # Ray first: an unreachable cluster (or an MLflow that cannot be opened) is an error before anything is written
    # to the store.
    ours = _start(cluster, tracker) if todo else False
    owner = Owner.new(run.lease)
    heartbeat = Heartbeat(store, owner)
    try:
        auto = [t for t in todo.values() if isinstance(t.config.resources.gpus, str)] if run.gpus is None else []
        admission = packing.admit(auto, run.probe, plugins) if auto else packing.Admission({}, [])
        for plan in plans:
            store.upsert_sweep(plan.sweep, spec_path=plan.file, metric=plan.metric, baseline=plan.baseline,
                               description=plan.description,
                               spec={"axes": plan.axes, "plugins": plan.plugins.to_json(),
                                     "adaptive": plan.adaptive.model_dump() if plan.adaptive else None})  # fmt: skip
            store.add_trials(plan.sweep, plan.trials)
        for reason in set(chosen.again.values()):
            keys = [k for k, why in chosen.again.items() if why == reason]
            store.archive(keys, reason)
            for key in keys:
                storage.discard(key)  # a new training starts from scratch
        progress = progress or Progress()
        progress.begin([plan.sweep for plan in plans], len(todo) + len(done), len(done))
        for line in chosen.lines({t.key: t for plan in plans for t in plan.trials}):
            progress.message(line)
        for line in admission.lines:
            progress.message(line)
        if replayed:
            progress.message(f"wrote {replayed} records an earlier launch journaled while the store was unavailable")
        sweeps = [plan.sweep for plan in plans]
        mirror = None
        if tracker is not None:
            backlog = store.unmirrored(sweeps)
            if todo or backlog:  # opened while Ray started; MLflow's errors stop the launch here, as ever
                tracker.open()
            mirror = Mirror(store, tracker, progress.message).start(backlog)
        if not todo:
            progress.message(f"nothing to run: all {len(done)} trials are done; {progress.report_hint()}")
            _close(mirror, sweeps, "FINISHED", progress)
            result.seconds = time.perf_counter() - started
            return result
        if holders := store.holders(todo):
            who = ", ".join(sorted(set(holders.values())))
            progress.message(f"{len(holders)} trials are leased to other launchers ({who}): they run there; "
                             "this launch takes over any whose lease lapses")  # fmt: skip
        from ablate.worker import TaskArgs, run_trial

        template = TaskArgs({}, "", storage.url, None, run.runner or run_trial, plugins)
        gpus = {k: _gpus(t.config, run.gpus) for k, t in todo.items()} | admission.shares
        recorder = Recorder(store, mirror, storage.root / journal.FOLDER / f"{owner.id}.jsonl")
        fanout = _Fanout(todo, store, owner, heartbeat, recorder, progress, result, run, template, gpus, chosen)
        stop = Stop()
        try:
            with stop.installed(), progress:
                heartbeat.start()
                fanout.loop(stop)
        except KeyboardInterrupt:  # a second Ctrl-C, or one outside the main thread's handler
            fanout.interrupt()
        finally:
            _close(mirror, sweeps, "KILLED" if result.interrupted else "FINISHED", progress)
    finally:
        heartbeat.stop()
        with suppress(StoreUnavailable):  # a store that is down lets the leases lapse instead
            store.release(owner)  # interrupted trials are free for the next launcher at once
        if ours:  # also when recording fails before the first task is submitted
            import ray

            ray.shutdown()
    result.seconds = time.perf_counter() - started
    return result


def _start(cluster: Cluster, tracker: Tracker | None) -> bool:
    """Connect to Ray or start the embedded one (`_connect`) while a thread opens MLflow; True if this launch
    started Ray. What opening MLflow raised is raised here, before what Ray raised, with an embedded Ray shut
    down."""
    import ray  # imported here first, not by both threads at once

    failure: list[BaseException] = []

    def beside() -> None:
        try:
            if tracker is not None:
                tracker.open()
        except BaseException as e:  # raised again in the launching thread
            failure.append(e)

    thread = threading.Thread(target=beside, name="ablate-mlflow", daemon=True)
    thread.start()
    ours = False
    try:
        ours = _connect(cluster.address, cluster.num_cpus)
        thread.join()
        if failure:
            raise failure[0]
    except BaseException as e:
        if thread.is_alive() and not isinstance(e, KeyboardInterrupt):
            thread.join()
        if ours:
            ray.shutdown()
        if failure and failure[0] is not e:
            raise failure[0] from None
        raise
    return ours


MIRROR_WAIT = 30.0
"""Seconds a launch waits at its end for the MLflow mirror to catch up (not at all while MLflow is down)."""


def _close(mirror: Mirror | None, sweeps: list[str], status: str, progress: Progress) -> None:
    """Let the mirror catch up, then end the sweeps' MLflow parent runs; or say what MLflow still lacks."""
    if mirror is None:
        return
    if left := mirror.close(MIRROR_WAIT):
        progress.message(f"MLflow lacks {left} trials' latest records: `ablate sync` brings them over")
        return
    try:
        for sweep in sweeps:
            mirror.tracker.end_sweep(mirror.store, sweep, status)
    except Exception as e:  # MLflow went away at the last moment: the parent runs stay open, nothing is lost
        progress.message(f"MLflow: could not end the sweeps' parent runs ({type(e).__name__})")


class _Fanout:
    """One launch's trials on Ray. Trials are claimed (leased in the store) a few at a time, as many as the
    cluster has room for, so launchers sharing a store split the work and each trial trains once; a claimed
    trial is submitted, its messages recorded, its outcome settled (retry, requeue, or final)."""

    def __init__(
        self,
        todo: dict[str, Trial],
        store: Store,
        owner: Owner,
        heartbeat: Heartbeat,
        recorder: Recorder,
        progress: Progress,
        result: LaunchResult,
        run: RunConfig,
        template: TaskArgs,
        gpus: dict[str, float],
        chosen: Selection,
    ) -> None:
        self.todo, self.store, self.owner, self.heartbeat, self.chosen = todo, store, owner, heartbeat, chosen
        self.recorder, self.progress, self.result, self.run, self.template, self.gpus = (
            recorder, progress, result, run, template, gpus)  # fmt: skip
        self.storage = Storage(template.storage)
        self.queue = list(todo)
        """Trials not claimed yet, in plan order."""
        self.claimed: dict[str, float] = {}
        """Trials this launch holds, and when it claimed them (time.monotonic)."""
        self.pending: dict[Any, str] = {}
        self.gangs: dict[str, gangs.Gang] = {}
        self.attempts = Attempts()
        import ray

        from ablate.recorder import start_inbox
        from ablate.worker import trial_task

        self.inbox = start_inbox()
        self.task = ray.remote(trial_task)

    def loop(self, stop: Stop) -> None:
        """Claim, submit and settle until every trial is finished here or elsewhere, or `stop` is set."""
        import ray

        self.fill()
        looked = time.monotonic()
        while (self.pending or self.queue) and not stop:
            ready: list[Any] = []
            if self.pending:
                ready, _ = ray.wait(list(self.pending), num_returns=len(self.pending), timeout=self.run.poll)
            else:
                time.sleep(self.run.poll)
            self.drain()
            ready = self.drop_lost(ready)
            for ref in ready:
                self.settle(ref)
            if ready or time.monotonic() - looked > self.owner.seconds / 4:
                self.finished_elsewhere()
                self.fill()
                looked = time.monotonic()
            self.progress.refresh()
        if stop.signal == signal.SIGTERM:
            self.preempt()
        elif stop:
            self.interrupt()
        else:
            self.drain()
        self.result.signal = stop.signal
        if self.recorder.failure is not None:
            self.result.store_error, self.result.journal = str(self.recorder.failure), self.recorder.journal

    def tolerant(self, call: Callable[[], T], default: T) -> T:
        """A store call of the loop; while the store is unavailable the loop goes on without it (running trials
        finish, their records are journaled) and claims nothing new."""
        try:
            return call()
        except StoreUnavailable as e:
            if self.recorder.failure is None:
                self.progress.message(f"{e} Running trials go on; their records are kept in a journal.")
            self.recorder.failure = e
            return default

    def resume(self, key: str) -> Resume | None:
        """What the trial's checkpoint must match (the store's record of it; None while the store is down)."""
        recorded = self.tolerant(lambda: self.store.checkpoints([key]), None)
        if recorded is None:
            return None
        last = recorded.get(key, {})
        current = self.chosen.codes[key]["digest"] if key in self.chosen.codes else None
        return Resume(key, last.get("sha"), last.get("code"), current, self.chosen.policy.get(key, "warn"))

    def worker_cpus(self, key: str) -> float:
        return self.run.cpus if self.run.cpus is not None else self.todo[key].config.resources.cpus

    def ask(self, key: str) -> tuple[float, float]:
        """CPUs and GPUs the whole trial holds (every worker of it)."""
        workers = self.todo[key].config.resources.workers
        return self.worker_cpus(key) * workers, self.gpus[key] * workers

    def fill(self) -> None:
        """Claim and submit the queued trials the cluster has CPUs and GPUs for (at least one when idle)."""
        if not self.queue:
            return
        import ray

        total = ray.cluster_resources()
        running = [self.ask(k) for k in self.pending.values()]
        free_cpu = total.get("CPU", 0.0) - sum(cpu for cpu, _ in running)
        free_gpu = total.get("GPU", 0.0) - sum(gpu for _, gpu in running)
        room = 0
        for key in self.queue:
            cpu, gpu = self.ask(key)
            if (cpu > free_cpu + 1e-9 or gpu > free_gpu + 1e-9) and (running or room):
                break
            free_cpu, free_gpu, room = free_cpu - cpu, free_gpu - gpu, room + 1
        won = self.tolerant(lambda: self.store.claim(self.queue, self.owner, limit=room), set[str]())
        if not won:
            return
        self.tolerant(lambda: self.store.interrupt(won), 0)  # left `running` by a launcher that died: resume
        ordered = [k for k in self.queue if k in won]  # the queue is in plan order
        self.queue = [k for k in self.queue if k not in won]
        for key in ordered:
            self.claimed[key] = time.monotonic()
            self.submit(key)

    def finished_elsewhere(self) -> None:
        """Count the queued trials another launcher finished, and forget them."""
        if not self.queue:
            return
        states: dict[str, str] = self.tolerant(lambda: self.store.states(self.queue), {})
        ended = [k for k in self.queue if states.get(k) in ("done", "failed", "diverged")]
        gone = set(ended)
        self.queue = [k for k in self.queue if k not in gone]
        for key in ended:
            self.result.counts[states[key]] += 1
            self.progress.finished(key, states[key])

    def submit(self, key: str) -> None:
        cfg = self.todo[key].config
        opts = {"num_cpus": self.worker_cpus(key), "num_gpus": self.gpus[key], "max_retries": 0,
                "name": f"trial-{key[:10]}"}  # fmt: skip
        args = replace(self.template, config=cfg.model_dump(mode="json"), key=key, inbox=self.inbox,
                       resume=self.resume(key))  # fmt: skip
        self.storage.clear_stop(key)  # a request a preempted attempt already answered
        if cfg.resources.workers > 1:
            from ablate import gangs

            gang = self.gangs[key] = gangs.start(self.task, opts, cfg.resources.workers, args)
            ref = gang.leader
        else:
            ref = self.task.options(**opts).remote(args)
        self.pending[ref] = key
        self.progress.submitted(self.todo[key])

    def drain(self) -> None:
        import ray

        messages = ray.get(self.inbox.drain.remote())
        self.recorder.handle(messages)
        for m in messages:
            if isinstance(m, Started):
                self.progress.started(m.key)
            elif isinstance(m, EpochEnd):
                self.progress.epoch(m.key, m.epoch, m.metrics)

    def drop_lost(self, ready: list[Any]) -> list[Any]:
        """Stop the trials whose lease another launcher took over (this one was paused past it); they go
        back to the queue, to be counted when the other launcher finishes them. Returns `ready` without them."""
        lost = self.heartbeat.lost({k: self.claimed[k] for k in self.pending.values()})
        for ref in [r for r, k in self.pending.items() if k in lost]:
            key = self.pending.pop(ref)
            self.stop_task(ref, key)
            self.queue.append(key)
            self.progress.message(f"{key[:10]}: another launcher took over its lapsed lease; stopped here")
        return [r for r in ready if r in self.pending]

    def stop_task(self, ref: Any, key: str) -> None:
        import ray

        ray.cancel(ref, force=True)
        if key in self.gangs:
            self.gangs.pop(key).stop()

    def settle(self, ref: Any, resubmit: bool = True) -> None:
        """Record a finished task; submit it again for a retry, an OOM requeue or a lost worker (when
        `resubmit`: not while stopping, when the trial is left `preempted` for the next launch)."""
        key = self.pending.pop(ref)
        if key in self.gangs:
            self.gangs.pop(key).stop()
        state = _settle(ref, key, self.todo[key].config, self.gpus[key], self.recorder, self.attempts, self.progress,
                        self.chosen.codes.get(key))  # fmt: skip
        if state in ("retry", "oom", "lost") and not resubmit:
            self.recorder.finish(Finished(key, "preempted"))
            state = "preempted"
        elif state == "lost":
            self.recorder.finish(Finished(key, "preempted"))
            self.progress.message(f"{key[:10]}: its worker or node was lost; resuming from its checkpoint")
            self.submit(key)
            return
        elif state == "retry":
            self.submit(key)
            return
        elif state == "oom":
            self.progress.message(f"{key[:10]}: CUDA out of memory on {self.gpus[key]:.2f} of a GPU; "
                                  "requeued once on a whole GPU")  # fmt: skip
            self.gpus[key] = 1.0
            self.submit(key)
            return
        self.tolerant(lambda: self.store.release(self.owner, [key]), None)
        self.result.counts[state] += 1
        self.progress.finished(key, state)

    def interrupt(self, state: str = "interrupted") -> None:
        """Stop every running trial now; they resume from their last checkpoint on the next launch."""
        for ref, key in self.pending.items():
            self.stop_task(ref, key)
        self.drain()
        self.recorder.interrupt(list(self.pending.values()), state)
        self.result.interrupted = True
        self.result.counts[state] += len(self.pending)
        self.pending.clear()

    def preempt(self) -> None:
        """SIGTERM: ask every running trial to checkpoint at its next step and stop (`ablate.messages.PREEMPT`),
        record them as they return, and after `run.grace` seconds stop the rest; all end `preempted`."""
        for key in self.pending.values():
            self.storage.request_stop(key)
        self.progress.message(f"SIGTERM: {len(self.pending)} running trials checkpoint at their next step")
        end = time.monotonic() + self.run.grace
        import ray

        while self.pending and time.monotonic() < end:
            ready, _ = ray.wait(list(self.pending), num_returns=len(self.pending), timeout=self.run.poll)
            self.drain()
            for ref in ready:
                self.settle(ref, resubmit=False)
        self.interrupt("preempted")


@dataclass
class Attempts:
    """Failed attempts per trial key, against the two retry budgets."""

    errors: Counter[str] = field(default_factory=Counter)
    """Application errors (the trial raised): retried `resources.retries` times."""
    lost: Counter[str] = field(default_factory=Counter)
    """Trials whose worker process or node was lost (a rank of a multi-worker trial too): LOST_RETRIES."""
    oom: Counter[str] = field(default_factory=Counter)
    """Trials that ran out of CUDA memory on a GPU share: requeued once on a whole GPU."""


def _gpus(cfg: TrialConfig, override: float | None) -> float:
    """GPUs per worker as configured (`auto` is replaced by the admission's share)."""
    if override is not None:
        return override
    return 1.0 if isinstance(cfg.resources.gpus, str) else cfg.resources.gpus


def _settle(
    ref: Any,
    key: str,
    cfg: TrialConfig,
    gpus: float,
    recorder: Recorder,
    attempts: Attempts,
    progress: Progress,
    code: dict[str, Any] | None = None,
) -> str:
    """Record a finished task; return its state, "retry" for an application error with retries left, "oom"
    for a first CUDA out-of-memory error on part of a GPU (requeued on a whole one), "lost" for a worker or
    node that died (Ray does not retry tasks itself: a lost trial is recorded `preempted`, then resumed)."""
    import ray

    try:
        out: TrialResult = ray.get(ref)
    except ray.exceptions.RayError as e:  # the trial raised, or its worker/node died
        if _lost_worker(e) and attempts.lost[key] < LOST_RETRIES:
            attempts.lost[key] += 1
            return "lost"
        # A RayTaskError's text is the worker's formatted traceback; its cause is the original exception.
        cause = getattr(e, "cause", None) if isinstance(e, ray.exceptions.RayTaskError) else None
        oom = type(cause).__name__ == "OutOfMemoryError"
        if oom and gpus < 1 and not attempts.oom[key]:
            attempts.oom[key] += 1
            return "oom"
        attempts.errors[key] += 1
        if isinstance(e, ray.exceptions.RayTaskError) and not oom and attempts.errors[key] <= cfg.resources.retries:
            return "retry"
        error = f"{type(cause or e).__name__}: {cause or e}"
        if oom:
            error = f"CUDA out of memory on {gpus:g} GPU: lower train.device_batch (raise train.accum_steps). {error}"
        recorder.finish(Finished(key, "failed", error=error, traceback=_ANSI.sub("", str(e)), code=code))
        return "failed"
    for warning in out.warnings:
        progress.message(f"{key[:10]}: {warning}")
    recorder.finish(replace(Finished.of(key, out), code=code))
    return out.outcome


def _lost_worker(e: Exception) -> bool:
    """A rank's process or node died (rank 0's own, or another's, seen by rank 0 as a failed collective)."""
    import ray

    if isinstance(e, ray.exceptions.RayTaskError):
        return isinstance(getattr(e, "cause", None), PeerLost)
    return isinstance(e, (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError))
