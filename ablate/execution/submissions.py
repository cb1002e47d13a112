"""Which trial starts a launch records: one for each submission of a trial's task.

A trial's task sends its `Started` once the sweep's plugins are imported and its config validated: a worker that
dies before (killed, out of memory, a plugin that takes its process down) sends none, though the attempt was made.
So the launcher, not the message's arrival, decides what counts as an attempt. Each submission of a trial gets a number,
carried by the task (`TaskArgs.submission`) and by its `Started`; a `Started` is recorded only for the trial's
current submission, and once. A submission that settles with no `Started` recorded (its worker killed before the
message left it, or the task failing before it sent one) is recorded as started all the same, ahead of its
outcome, so that every attempt counts once. A `Started` that arrives after its submission settled (in flight from a
killed worker) is dropped: recorded, it would reopen the trial its outcome closed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from ablate.training.messages import Message, Started


@dataclass
class Submissions:
    """The launch's submissions per trial, and those whose start is not recorded yet."""

    numbers: Counter[str] = field(default_factory=Counter)
    """Submissions of each trial in this launch: the current one's number."""
    waiting: set[str] = field(default_factory=set)
    """Trials whose current submission has no start recorded."""

    def submit(self, key: str) -> int:
        """A new submission of `key`: its number, for its task to send back in its `Started`."""
        self.numbers[key] += 1
        self.waiting.add(key)
        return self.numbers[key]

    def admitted(self, messages: Iterable[Message]) -> list[Message]:
        """`messages` without the starts that do not count: another submission's, or a second of the same one."""
        kept: list[Message] = []
        for m in messages:
            if isinstance(m, Started):
                if m.key not in self.waiting or m.submission != self.numbers[m.key]:
                    continue
                self.waiting.discard(m.key)
            kept.append(m)
        return kept

    def settled(self, keys: Iterable[str]) -> list[Started]:
        """The starts to record for the submissions of `keys` that settled with none recorded (after the drain made
        once they returned): where the trial ran is not known."""
        missing = [k for k in keys if k in self.waiting]
        self.waiting.difference_update(missing)
        return [Started(k, "", "", "", self.numbers[k]) for k in missing]

    def forget(self, keys: Iterable[str]) -> None:
        """Submissions stopped with no outcome of theirs to record (another launcher took the trial over): a start
        of theirs no longer counts."""
        self.waiting.difference_update(keys)
