"""Fan planned trials out over Ray and record everything: `launch(plans, ...)`.

Plan, skip every key already `done` in the store (whatever sweep ran it), submit the rest as Ray tasks
with the sweep's cpus/gpus, and record what they report through the one writer (`ablate.recorder`).
Worker or node death: Ray re-runs the task (`system_retries`) and the trial resumes from its checkpoint
under `storage/<key>` (shared storage on a cluster). Application errors are recorded as `failed`, retried
only `resources.retries` times. Ctrl-C (or SIGTERM) asks the loop to stop: at its next poll it cancels
running tasks and marks them `interrupted`, and the next launch resumes them; a second Ctrl-C stops at
once. No address: an embedded local Ray for the launch; an address or RAY_ADDRESS: that cluster.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import ray

from ablate.config import TrialConfig
from ablate.planner import Plan, Trial
from ablate.plugins import Plugins
from ablate.progress import Progress
from ablate.recorder import Inbox, Recorder
from ablate.store import Store

DEFAULT_STORAGE = "db/checkpoints"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
SYSTEM_RETRIES = 3
"""Re-runs of a task whose worker or node died (each resumes from the trial's checkpoint)."""


@dataclass
class LaunchResult:
    """What a launch did: trials per final state, and how many were already done."""

    counts: Counter = field(default_factory=Counter)
    skipped: int = 0
    seconds: float = 0.0
    interrupted: bool = False


def _trial_task(config: dict[str, Any], key: str, storage: str, inbox: Any, runner: Callable,
                plugins: Plugins) -> dict[str, Any]:  # fmt: skip
    """Body of one Ray task: import the sweep's plugins, run the trial, streaming its messages to the inbox.

    A trial's calls to the inbox run in the order they were made; waiting for the first and the last
    of them means that when the task's result is ready, every message it sent is in the inbox, so the
    launcher records them before the outcome (a late `start` would otherwise reopen a finished trial).
    """
    plugins.load()
    cfg = TrialConfig.model_validate(config)
    ctx = ray.get_runtime_context()
    ray.get(inbox.put.remote(("start", key, {"host": socket.gethostname(), "node_id": ctx.get_node_id(),
                                             "device": "cuda" if cfg.resources.gpus > 0 else "cpu"})))  # fmt: skip
    last: list[Any] = []

    def report(epoch: int, metrics: dict[str, float]) -> None:
        last[:] = [inbox.put.remote(("epoch", key, epoch, metrics, time.time()))]

    try:
        result = runner(cfg, report, Path(storage) / key)
    finally:
        ray.get(last)
    return asdict(result)


class Stop:
    """Set by the first SIGINT/SIGTERM; the launch loop checks it at every poll.

    Raising KeyboardInterrupt wherever the signal lands could cut a store write or a Ray call in half;
    a flag lets the loop stop between them. A second signal raises KeyboardInterrupt at once.
    """

    def __init__(self) -> None:
        self.requested = False

    def __bool__(self) -> bool:
        return self.requested

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

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
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        reachable(address)
        try:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
        except (SystemExit, ConnectionError) as e:  # Ray exits the process when no GCS answers
            ray.shutdown()  # drop the half-made connection, or interpreter exit waits on it
            raise ConnectionError(f"cannot connect to the Ray cluster at {address} (no answer; exit code {e})") from None
        return True
    ray.init(address="local", num_cpus=num_cpus or os.cpu_count(), include_dashboard=False, log_to_driver=False,
             configure_logging=False, object_store_memory=256 * 2**20)  # fmt: skip
    return True


def launch(
    plans: list[Plan],
    *,
    store: Store,
    tracker: Any = None,
    address: str | None = None,
    storage: str | Path = DEFAULT_STORAGE,
    cpus: float | None = None,
    gpus: float | None = None,
    num_cpus: int | None = None,
    runner: Callable | None = None,
    progress: Progress | None = None,
    poll: float = 0.2,
) -> LaunchResult:
    """Run every unfinished trial of `plans`; return counts per outcome. See the module docstring."""
    from ablate.trial import run_trial

    runner = runner or run_trial
    started = time.perf_counter()
    result = LaunchResult()
    sweep_of: dict[str, str] = {}
    todo: dict[str, Trial] = {}
    plugins = Plugins()
    for plan in plans:
        plugins = plugins.merged(plan.plugins)
        for t in plan.trials:
            sweep_of.setdefault(t.key, plan.sweep)
            todo.setdefault(t.key, t)
    done = store.done_keys(todo)
    result.skipped = len(done)
    todo = {k: t for k, t in todo.items() if k not in done}
    # Ray first: an unreachable cluster is an error before anything is written to the store.
    ours = _connect(address, num_cpus) if todo else False
    try:
        for plan in plans:
            store.upsert_sweep(plan.sweep, spec_path=plan.file, metric=plan.metric, baseline=plan.baseline,
                               description=plan.description,
                               spec={"axes": plan.axes, "plugins": plan.plugins.to_json()})  # fmt: skip
            store.add_trials(plan.sweep, plan.trials)
        store.interrupt(todo)  # left `running` by a launcher that was killed: they resume now
        progress = progress or Progress()
        progress.begin([plan.sweep for plan in plans], len(todo) + len(done), len(done))
        if not todo:
            progress.message(f"nothing to run: all {len(done)} trials are done")
            result.seconds = time.perf_counter() - started
            return result
        if tracker is not None:
            for plan in plans:
                tracker.start_sweep(store, plan.sweep)
        storage = str(Path(storage).resolve())
        recorder = Recorder(store, tracker, sweep_of)
        inbox = Inbox.remote()
        task = ray.remote(_trial_task)
        pending: dict[Any, str] = {}
        failures: Counter = Counter()

        def submit(key: str) -> None:
            cfg = todo[key].config
            opts = {"num_cpus": cpus if cpus is not None else cfg.resources.cpus,
                    "num_gpus": gpus if gpus is not None else cfg.resources.gpus,
                    "max_retries": SYSTEM_RETRIES, "retry_exceptions": False, "name": f"trial-{key[:10]}"}  # fmt: skip
            ref = task.options(**opts).remote(cfg.model_dump(mode="json"), key, storage, inbox, runner, plugins)
            pending[ref] = key
            progress.submitted(todo[key])

        def drain() -> None:
            messages = ray.get(inbox.drain.remote())
            recorder.handle(messages)
            for kind, key, *body in messages:
                if kind == "start":
                    progress.started(key)
                elif kind == "epoch":
                    progress.epoch(key, body[0], body[1])

        def interrupt() -> None:
            for ref in pending:
                ray.cancel(ref, force=True)
            drain()
            recorder.interrupt(list(pending.values()))
            result.interrupted = True
            result.counts["interrupted"] = len(pending)

        stop = Stop()
        try:
            with stop.installed(), progress:
                for key in todo:
                    submit(key)
                while pending and not stop:
                    ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=poll)
                    drain()
                    for ref in ready:
                        key = pending.pop(ref)
                        state = _settle(ref, key, todo[key].config, recorder, failures)
                        if state == "retry":
                            submit(key)
                            continue
                        result.counts[state] += 1
                        progress.finished(key, state)
                    progress.refresh()
                if stop:
                    interrupt()
                else:
                    drain()
        except KeyboardInterrupt:  # a second Ctrl-C, or one outside the main thread's handler
            interrupt()
        finally:
            if tracker is not None:
                for plan in plans:
                    tracker.end_sweep(store, plan.sweep, "KILLED" if result.interrupted else "FINISHED")
    finally:
        if ours:  # also when recording fails before the first task is submitted
            ray.shutdown()
    result.seconds = time.perf_counter() - started
    return result


def _settle(ref: Any, key: str, cfg: TrialConfig, recorder: Recorder, failures: Counter) -> str:
    """Record a finished task; return its state, or "retry" for an application error with retries left."""
    try:
        out = ray.get(ref)
    except ray.exceptions.RayError as e:  # the trial raised, or its worker/node died past the retries
        failures[key] += 1
        if isinstance(e, ray.exceptions.RayTaskError) and failures[key] <= cfg.resources.retries:
            return "retry"
        # A RayTaskError's text is the worker's formatted traceback; its cause is the original exception.
        cause = getattr(e, "cause", None) if isinstance(e, ray.exceptions.RayTaskError) else None
        text = _ANSI.sub("", str(e))
        recorder.finish(key, "failed", error=f"{type(cause or e).__name__}: {cause or e}", traceback=text)
        return "failed"
    info = out.get("info", {})
    fields = {"params": info.get("params"), "flops": info.get("flops"), "peak_memory": info.get("peak_memory"),
              "environment": info.get("env"), "resumed_from": info.get("resumed_from", 0)}  # fmt: skip
    fields = {k: v for k, v in fields.items() if v is not None}
    if out["outcome"] == "diverged":
        at = out.get("diverged_at") or {}
        recorder.finish(key, "diverged", diverged_epoch=at.get("epoch"), diverged_step=at.get("step"), **fields)
        return "diverged"
    recorder.finish(key, "done", result=out["metrics"], **fields)
    return "done"
