"""The Ray side of a launch: join a Ray cluster or start an embedded one, and run a launch's claimed trials on it
as Ray tasks, recording what they report (`Fanout`). Only `ablate.execution.launcher` imports this module, where a
launch has trials to run: a launch with nothing to run imports no Ray.
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import ray

from ablate.execution import gangs
from ablate.execution.embedded import start_embedded
from ablate.execution.gcs import Unanswered, answered
from ablate.execution.gpu_shares import GPU_TASK_CALLS
from ablate.execution.heartbeat import Heartbeat
from ablate.execution.outcomes import Attempts, settle
from ablate.execution.progress import Display
from ablate.execution.recorder import Recorder
from ablate.execution.selection import Selection
from ablate.execution.stopped import Stopped
from ablate.execution.streams import BACKPRESSURE, Stream
from ablate.execution.submissions import Submissions
from ablate.execution.trial_task import TaskArgs, run_trial, trial_stream, trial_task
from ablate.planning.keys import Trial
from ablate.plugins import Plugins
from ablate.store import Owner, Store, divergence
from ablate.store.database import now
from ablate.store.faults import StoreUnavailable
from ablate.store.schema import ENDED
from ablate.training.checkpoint_storage import Storage
from ablate.training.checkpoints import Resume
from ablate.training.messages import EpochEnd, Finished, Message, Started

if TYPE_CHECKING:
    from ablate.execution.launcher import Cluster, LaunchResult, RunConfig, Stop
    from ablate.tracking.tracker import Tracker

T = TypeVar("T")


LOOK = 1.0
"""Seconds between two looks at the trials finished elsewhere while this launch's trials run (`Fanout.wave`): a look
reads every trial that ended within a lease length, this launch's own among them (800 rows at 13 trials a second),
and looking at every wave grew with the sweep (`bench/launch_scale.py`: 1.22 ms a trial at 10,000). A trial another
launcher finished meanwhile stays queued a little longer; `Store.claim` refuses it. A wave whose claim refused every
queued trial, with nothing left running, looks at once."""


def connect(cluster: Cluster) -> bool:
    """Reuse a running Ray, join the cluster's address (`Cluster.join_address`) once its GCS answers (`answered`),
    or start an embedded one. True if we started it. A SIGINT or SIGTERM meanwhile is `Stopped`."""
    if ray.is_initialized():
        return False
    if threading.current_thread() is threading.main_thread():  # ray.init puts its own, which does the same
        signal.signal(signal.SIGTERM, _terminated)
    wanted = cluster.address or os.environ.get("RAY_ADDRESS")  # what `join_address` returns once it listens
    address = None
    try:
        address = cluster.join_address()
        if address:
            answered(address)
            ray.init(address=address, log_to_driver=False, configure_logging=False)
        else:
            start_embedded(cluster.num_cpus)
    except BaseException as e:
        ray.shutdown()  # drop the half-made connection or node, or interpreter exit waits on it
        signum = stopped_by(e)
        if signum is not None:
            raise Stopped(signum, f"connecting to the Ray cluster at {wanted}" if wanted else
                          "starting the embedded Ray") from None  # fmt: skip
        if wanted and (address is None or isinstance(e, Unanswered)):
            raise  # worded where it was found: nobody listens (`reachable`) or nobody answers (`answered`)
        if wanted and isinstance(e, (SystemExit, ConnectionError)):  # Ray exits the process when no GCS answers
            raise ConnectionError(
                f"cannot connect to the Ray cluster at {address} (no answer; exit code {e})"
            ) from None
        if not wanted and isinstance(e, Exception):  # Ray's own start-up errors are bare Exceptions
            raise RayStartError(
                f"could not start the embedded Ray on this machine: {type(e).__name__}: {e}. Ray's logs are under "
                f"{os.environ.get('RAY_TMPDIR') or tempfile.gettempdir()}/ray/session_latest/logs; `ray stop` ends "
                "a Ray left from an earlier run; --address joins a running cluster instead"
            ) from None
        raise
    return True


def _terminated(signum: int, _frame: Any) -> None:
    raise SystemExit(signum)


def stopped_by(e: BaseException) -> int | None:
    """The signal that cut Ray's start short, if one did: `ray.init` replaces the SIGTERM handler with one that
    raises SystemExit(SIGTERM) (a chaos soak's launcher reported it as a cluster that did not answer), and SIGINT
    is Python's KeyboardInterrupt."""
    if isinstance(e, KeyboardInterrupt):
        return signal.SIGINT
    if isinstance(e, SystemExit) and e.code == signal.SIGTERM:
        return signal.SIGTERM
    return None


class RayStartError(ConnectionError):
    """The embedded Ray did not start: one paragraph, before the launch writes anything (`ablate.api.launch`)."""


def start(cluster: Cluster, tracker: Tracker | None) -> bool:
    """Connect to Ray or start the embedded one (`connect`) while a thread opens MLflow; True if this launch
    started Ray. What opening MLflow raised is raised here, before what Ray raised, with an embedded Ray shut
    down; a stop (Ctrl-C, `Stopped`) waits for nothing and wins."""
    failure: list[BaseException] = []

    def beside() -> None:
        try:
            if tracker is not None:
                tracker.open()
        except BaseException as e:  # raised again in the launching thread
            failure.append(e)

    thread = threading.Thread(target=beside, name="ablate-mlflow", daemon=True)
    ours = False
    try:
        thread.start()  # waits for the thread to run: a signal may come here too
        ours = connect(cluster)
        thread.join()
        if failure:
            raise failure[0]
    except BaseException as e:
        signum = stopped_by(e)  # a signal while MLflow still opened, after Ray's start
        stopping = signum is not None or isinstance(e, Stopped)
        if thread.is_alive() and not stopping:
            thread.join()
        if ours:
            ray.shutdown()
        if failure and failure[0] is not e and not stopping:
            raise failure[0] from None
        if signum is not None:
            raise Stopped(signum, "opening MLflow") from None
        raise
    return ours


def shutdown() -> None:
    """Stop the Ray this launch started (`start` returned True)."""
    ray.shutdown()


class Fanout:
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
        progress: Display,
        result: LaunchResult,
        run: RunConfig,
        plugins: Plugins,
        storage: str,
        gpus: dict[str, float],
        chosen: Selection,
    ) -> None:
        self.todo, self.store, self.owner, self.heartbeat, self.chosen = todo, store, owner, heartbeat, chosen
        self.recorder, self.progress, self.result, self.run, self.gpus = recorder, progress, result, run, gpus
        self.template = TaskArgs({}, "", storage, run.runner or run_trial, plugins)
        self.storage = Storage(storage)
        self.queue = list(todo)
        """Trials not claimed yet, in plan order."""
        self.claimed: dict[str, float] = {}
        """Trials this launch holds, and when it claimed them (time.monotonic)."""
        self.seen = self.chosen_at = now()
        """When the last look at the trials finished elsewhere began (`finished_elsewhere`): this machine's clock,
        as the finish times other launchers write are theirs. `chosen_at`: from when a `retry` trial's end is
        another launcher's work (taken after `selection.select` read the states: one that ended again in between
        is trained once more)."""
        self.retry = {k for k in todo if chosen.states.get(k) in ENDED and k not in chosen.again}
        """Trials chosen while failed or diverged, to train again: their end before `chosen_at` is no reason to
        forget them (those in `chosen.again` were reset to pending, `Store.archive`)."""
        self.pending: dict[Stream, str] = {}
        """The running trials' tasks (a gang's: its rank 0's)."""
        self.taken: list[Message] = []
        """Messages taken from the trials' tasks and not recorded yet (`drain`, `wave`)."""
        self.recorded = time.monotonic()
        """When `drain` last recorded messages."""
        self.gangs: dict[str, gangs.Gang] = {}
        self.attempts = Attempts()
        self.submissions = Submissions()
        streaming: dict[str, Any] = {"num_returns": "streaming", "_generator_backpressure_num_objects": BACKPRESSURE}
        self.stream = ray.remote(**streaming)(trial_stream)
        self.task = ray.remote(trial_task)  # a multi-worker trial's ranks but 0
        # a trial holding a GPU: a worker of its own
        self.gpu_stream = ray.remote(max_calls=GPU_TASK_CALLS, **streaming)(trial_stream)
        self.gpu_task = ray.remote(max_calls=GPU_TASK_CALLS)(trial_task)

    def loop(self, stop: Stop) -> None:
        """Claim, submit and settle until every trial is finished here or elsewhere, or `stop` is set (before the
        loop began: nothing is claimed)."""
        if not stop:
            self.fill()
        looked = time.monotonic()
        while (self.pending or self.queue) and not stop:
            ready: list[Stream] = []
            if self.pending:
                ready = self.drop_lost(self.finished())
            else:
                time.sleep(self.run.poll)
            if ready:
                self.wave(ready)
                looked = time.monotonic()
            else:
                self.drain(whole=False)
                if time.monotonic() - looked > self.owner.seconds / 4:
                    self.finished_elsewhere(whole=True)
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

    def finished(self) -> list[Stream]:
        """The running trials that have returned, waiting up to one poll for the first item any of them sends: a
        slot that frees is refilled at once, not at the end of the poll (waiting for all of them slept the whole
        poll, 0.2 s by default, whenever one still ran: bench/cluster_overhead.py's idle time per trial), and a
        trial's message is taken as it comes (its task waits for the take, `ablate.execution.streams`). A gang's
        rank 0 counts as returned when any rank of it failed (`ablate.execution.gangs`)."""
        followers = gangs.watched(self.gangs, self.pending)
        streams = {s.generator: s for s in self.pending}
        ready, rest = ray.wait([*streams, *followers], num_returns=1, timeout=self.run.poll)
        if ready and rest:  # the others that sent meanwhile, without waiting
            ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
        returned = [streams[r] for r in ready if r in streams and streams[r].pull(self.taken)]
        failed = [followers[r] for r in ready if r in followers and self.gangs[self.pending[followers[r]]].returned(r)]
        return list(dict.fromkeys(returned + failed))

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

    def resume(self, key: str, recorded: dict[str, dict[str, Any]] | None = None) -> Resume | None:
        """What the trial's checkpoint must match: the store's record of it (`recorded`, the wave's checkpoints, or
        else read here); None while the store is down."""
        if recorded is None:
            recorded = self.tolerant(lambda: self.store.checkpoints([key]), None)
        if recorded is None:
            return None
        current = self.chosen.codes[key]["digest"] if key in self.chosen.codes else None
        return Resume.of(key, recorded.get(key), current, self.chosen.policy.get(key, "warn"))

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
        won = self.tolerant(lambda: self.take(room), set[str]())
        if not won:
            return
        self.retry -= won  # an end from now on is this launch's or another's, not the one it was chosen after
        ordered = [k for k in self.queue if k in won]  # the queue is in plan order
        self.queue = [k for k in self.queue if k not in won]
        recorded = self.tolerant(lambda: self.store.checkpoints(ordered), None)  # one read for the wave
        for key in ordered:
            self.claimed[key] = time.monotonic()
            self.submit(key, recorded)

    def take(self, room: int) -> set[str]:
        """Claim up to `room` queued trials, and mark those a launcher that died left `running` interrupted (to
        resume): one transaction."""
        with self.store.batch():
            won = self.store.claim(self.queue, self.owner, room, self.chosen_at, self.retry)
            if won:
                self.store.interrupt(won)
        return won

    def finished_elsewhere(self, whole: bool) -> None:
        """Count the queued trials another launcher finished, and forget them.

        After a trial settles (at most once a `LOOK` while others run), the store is asked only for the trials that
        finished since the last look (`Store.finished_since`, an index range), so a look costs what finished
        meanwhile, not the queue's length
        (asking the state of every queued trial was 0.46 s per settled trial on PostgreSQL with 10,000 queued).
        A finish time is the recording launcher's clock when it wrote, so the look reaches a lease length
        (`Owner.seconds`) further back: leases already assume that launchers' clocks agree to well within one.
        When nothing finished for a quarter of a lease the look is `whole`: the state of every queued trial,
        which also finds what the window misses, a finish committed more than a lease after its time was taken
        (a launcher paused mid-write, a lock waited on that long) or stamped by a clock further off. A trial
        chosen while failed or diverged (`retry`) counts only if it ended again since it was chosen, as
        `Store.claim` refuses it then and only then: a queue left with a trial neither claimable nor forgotten
        would never empty."""
        if not self.queue:
            return
        began = now()
        since = self.seen - timedelta(seconds=self.owner.seconds)
        read = (lambda: self.store.states(self.queue)) if whole else (lambda: self.store.finished_since(since))
        states = self.tolerant(read, None)
        if states is not None and self.retry.intersection(states):
            again = self.tolerant(lambda: self.store.finished_since(self.chosen_at), None)
            states = None if again is None else {k: s for k, s in states.items() if k not in self.retry or k in again}
        if states is None:  # the store is down: look again from the same moment
            return
        self.seen = began
        ended = [k for k in self.queue if states.get(k) in ENDED]
        if not ended:
            return
        gone = set(ended)
        self.queue = [k for k in self.queue if k not in gone]
        for key in ended:
            self.result.counts[states[key]] += 1
            self.ended(key, states[key])

    def submit(self, key: str, recorded: dict[str, dict[str, Any]] | None = None) -> None:
        """Submit the trial's task: a single-worker trial with SPREAD placement (the nodes with room in turn);
        Ray's default packs tasks onto the launcher's node until half of it is busy, and queued a trial behind
        a busy node while another sat idle (bench/cluster_overhead.py: p99 idle 5 s). The strategy picks a
        node, not a device: a node still packs GPU shares onto its GPUs (tests/execution/test_gpu_shares.py).
        A gang places its ranks in a placement group of its own (`ablate.execution.gangs`)."""
        cfg = self.todo[key].config
        opts = {"num_cpus": self.worker_cpus(key), "num_gpus": self.gpus[key], "max_retries": 0,
                "name": f"trial-{key[:10]}"}  # fmt: skip
        args = replace(self.template, config=cfg.model_dump(mode="json"), key=key,
                       resume=self.resume(key, recorded), submission=self.submissions.submit(key))  # fmt: skip
        self.storage.clear_stop(key)  # a request a preempted attempt already answered
        leader, follower = (self.gpu_stream, self.gpu_task) if self.gpus[key] else (self.stream, self.task)
        if cfg.resources.workers > 1:
            gang = self.gangs[key] = gangs.start(leader, follower, opts, cfg.resources.workers, args)
            stream = gang.leader
        else:
            stream = Stream(leader.options(**opts, scheduling_strategy="SPREAD").remote(args))
        self.pending[stream] = key
        self.progress.submitted(self.todo[key])

    def drain(self, whole: bool = True) -> None:
        """Record what the trials sent since the last record: every message they sent so far (`whole`), else those
        taken, once a poll (a record for each message taken, as each wakes the loop, was a transaction apiece)."""
        if whole:
            for stream in self.pending:
                stream.pull(self.taken)
        if self.taken and (whole or time.monotonic() - self.recorded >= self.run.poll):
            self.recorded = time.monotonic()
            taken, self.taken = self.taken, []
            self.told(taken)

    def told(
        self, messages: list[Message], outcomes: list[Finished] | None = None, settled: Sequence[str] = ()
    ) -> None:
        """Record `messages` (the starts that count, `Submissions.admitted`; then those of the `settled` trials that
        returned with none), then `outcomes`, in one transaction (`Recorder.record`), and show them."""
        messages = [*self.submissions.admitted(messages), *self.submissions.settled(settled)]
        self.recorder.record(messages, outcomes)
        for m in messages:
            if isinstance(m, Started):
                self.progress.started(m.key)
            elif isinstance(m, EpochEnd):
                self.progress.epoch(m.key, m.epoch, m.metrics)

    def drop_lost(self, ready: list[Stream]) -> list[Stream]:
        """Stop the trials whose lease another launcher took over (this one was paused past it); they go
        back to the queue, to be counted when the other launcher finishes them. Returns `ready` without them."""
        lost = self.heartbeat.lost({k: self.claimed[k] for k in self.pending.values()})
        for stream in [s for s, k in self.pending.items() if k in lost]:
            key = self.pending.pop(stream)
            self.stop_task(stream, key)
            self.queue.append(key)
            self.submissions.forget([key])
            self.progress.message(f"{key[:10]}: another launcher took over its lapsed lease; stopped here")
        return [r for r in ready if r in self.pending]

    def stop_task(self, stream: Stream, key: str) -> None:
        """Stop a trial's task now, taking what it sent first: a gang by removing its placement group (`Gang.stop`),
        a lone task by a forced cancel unless it has ended (a cancel that meets a reply in flight aborts Ray 2.60's
        driver: `Gang.stop`)."""
        stream.pull(self.taken)
        if key in self.gangs:
            self.gangs.pop(key).stop()
        elif not stream.ended():
            ray.cancel(stream.generator, force=True)

    def wave(self, ready: list[Stream], resubmit: bool = True) -> None:
        """Settle the tasks that returned, as one wave: their outcomes and the messages taken so far (a task's
        outcome is its last item, so they hold every message it sent) are one transaction, not several per trial,
        which frees a done trial's lease too (`Store.finish`; the others' leases are released in one more); the
        freed slots' next trials are claimed and submitted (`fill`) first. Nothing is released or counted before
        its outcome is in the store. A retry, an OOM requeue or a lost worker is submitted again after its records
        (when `resubmit`; else, while stopping, it is left `preempted` for the next launch)."""
        keys = [self.pending.pop(stream) for stream in ready]
        # a gang: the rank whose outcome is the trial's, every rank stopped
        refs = [self.gangs.pop(k).end(self.taken) if k in self.gangs else s.outcome for s, k in zip(ready, keys)]
        taken, self.taken = self.taken, []
        states = [settle(ref, key, self.todo[key].config, self.gpus[key], self.attempts, self.progress,
                         self.chosen.codes.get(key)) for ref, key in zip(refs, keys)]  # fmt: skip
        if resubmit:
            if (now() - self.seen).total_seconds() >= LOOK:
                self.finished_elsewhere(whole=False)
            self.fill()
            if self.queue and not self.pending:  # the claim refused every queued trial: some may have ended elsewhere
                self.finished_elsewhere(whole=False)
                self.fill()
        again = ("retry", "oom", "lost")
        outcomes = [s.record or Finished(k, "preempted") for k, s in zip(keys, states)
                    if s.record or s.state == "lost" or (s.state in again and not resubmit)]  # fmt: skip
        self.told(taken, outcomes, keys)
        ended: list[tuple[str, str]] = []
        for key, settled in zip(keys, states):
            state = settled.state
            if state in again and not resubmit:
                state = "preempted"
            elif state == "lost":
                self.progress.message(f"{key[:10]}: its worker or node was lost; resuming from its checkpoint")
            elif state == "oom":
                self.progress.message(f"{key[:10]}: CUDA out of memory on {self.gpus[key]:.2f} of a GPU; "
                                      "requeued once on a whole GPU")  # fmt: skip
                self.gpus[key] = 1.0
            if state in again:
                self.submit(key)
            else:
                ended.append((key, state))
        if held := [k for k, state in ended if state != "done"]:  # a done trial's record freed its lease
            self.tolerant(lambda: self.store.release(self.owner, held), None)
        for key, state in ended:
            self.result.counts[state] += 1
            self.ended(key, state)

    def ended(self, key: str, state: str) -> None:
        """Tell the progress a trial ended; a diverged one with the epoch and step where it diverged (read back
        from the store: the recorder wrote them)."""
        where = None
        if state == "diverged" and (record := self.tolerant(lambda: self.store.trial(key), None)) is not None:
            where = divergence(record.diverged_epoch, record.diverged_step)
        self.progress.finished(key, state, where or "")

    def interrupt(self, state: str = "interrupted") -> None:
        """Stop every running trial now; they resume from their last checkpoint on the next launch."""
        for stream, key in self.pending.items():
            self.stop_task(stream, key)
        self.drain()
        self.recorder.interrupt(list(self.pending.values()), state)
        self.result.interrupted = True
        self.result.counts[state] += len(self.pending)
        self.pending.clear()

    def preempt(self) -> None:
        """SIGTERM: ask every running trial to checkpoint at its next step and stop
        (`ablate.training.messages.PREEMPT`),
        record them as they return, and after `run.grace` seconds stop the rest; all end `preempted`."""
        for key in self.pending.values():
            self.storage.request_stop(key)
        self.progress.message(f"SIGTERM: {len(self.pending)} running trials checkpoint at their next step")
        end = time.monotonic() + self.run.grace
        while self.pending and time.monotonic() < end:
            if ready := self.finished():
                self.wave(ready, resubmit=False)
            else:
                self.drain()
        self.interrupt("preempted")
