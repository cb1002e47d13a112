"""Where trials drop their messages for the launcher to drain: one `Inbox` actor per launch.

A module of its own, importing nothing but the messages' types (for type checks only): the actor's process imports
the module that defines its class before it takes its first call, and the launch's first messages wait on that.
Defined beside the recorder, it imported the store and SQLAlchemy first (0.37 s on an idle core, more while the
trials' workers start beside it), while each trial waited for its `Started` to arrive.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ablate.training.messages import Message


class Inbox:
    """Where trials drop messages; the launcher drains it. Calls from one trial arrive in order."""

    def __init__(self) -> None:
        self.items: list[Message] = []

    def put(self, item: Message) -> None:
        self.items.append(item)

    def drain(self) -> list[Message]:
        items, self.items = self.items, []
        return items


def start() -> Any:
    """An Inbox actor for one launch, on the launcher's own node (a worker node that dies, say a reclaimed spot
    instance, must not take undrained messages with it); restarted by Ray if its worker dies, calls retried. The
    affinity is hard: a soft one lets Ray put the actor on another node when the launcher's has no worker process
    ready for it (seen on a 3-node cluster, whose killed worker node took two launchers' inboxes with it)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    actor: Any = ray.remote(Inbox)
    return actor.options(num_cpus=0, max_restarts=-1, max_task_retries=-1, scheduling_strategy=here).remote()
