"""A trial's task as the launcher sees it: a Ray streaming generator whose items are its messages, then its outcome.

A trial's task (`ablate.execution.trial_task.trial_stream`) yields its `Started`, an `EpochEnd` per epoch, and last
its `TrialResult` (or raises). The items go straight to the launching process, which owns the task: no actor, so no
process of its own to start beside the trials (an inbox actor's new worker was the launch's largest cost beside its
trials: 0.5 CPU seconds of 8 trials x 2 CPU seconds on 2 CPUs, parallel efficiency 0.92; bench/README.md). Ray keeps
the items a task yielded only until they are taken: when the task's worker dies, those not yet taken are dropped.
So each task yields one item at a time (`BACKPRESSURE`): a yield returns only once the launcher took the item, and
a trial goes on training only once its message is in the launcher's hands, as a message put into an inbox was.
"""

from __future__ import annotations

from typing import Any

import ray

from ablate.training.messages import Message, TrialResult

BACKPRESSURE = 1
"""Items a trial's task may have yielded that the launcher has not taken: at 1, every yield waits for the take."""


class Stream:
    """One submission of a trial's task: the messages it sent are taken as they come, then its outcome."""

    def __init__(self, generator: Any) -> None:
        self.generator = generator
        """The task's `ray.ObjectRefGenerator` (what `ray.wait` takes: ready when an item is)."""
        self.outcome: Any = None
        """The reference to its last item once taken: the `TrialResult`, or the error its task raised or died with
        (`ray.get` raises it). None while it runs."""

    def pull(self, into: list[Message]) -> bool:
        """Take every item the task has sent and not yet been taken, without waiting: messages onto `into` (in the
        order sent), the last item into `outcome`. True once the outcome came."""
        while self.outcome is None and self.generator.next_ready():
            ref = next(self.generator)
            try:
                item = ray.get(ref)
            except ray.exceptions.RayError:  # the task raised, was stopped, or its worker died
                self.outcome = ref
                break
            if isinstance(item, TrialResult):
                self.outcome = ref
            else:
                into.append(item)
        return self.outcome is not None

    def ended(self) -> bool:
        """Whether the task has ended (its worker no longer runs it); a task whose outcome is not taken yet has not:
        its last yield waits for the take."""
        return bool(ray.wait([self.generator.completed()], timeout=0)[0])
