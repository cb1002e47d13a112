"""Store transactions and drains of the launching thread in one launch of no-op trials: counts that do not
depend on the machine's load (bench/README.md, issue 58).

    .venv/bin/python bench/launch_counts.py [--trials 64]
    PYTHONPATH=<a tree of an earlier commit> .venv/bin/python bench/launch_counts.py   # the same counts before

Counts the store's write and read transactions begun by the launching thread (the heartbeat and the MLflow mirror
have threads of their own), the loop's drains (`Fanout.drain`: before streams, an inbox actor's drain waited on; since,
the messages taken, recorded at most once a poll), and the waves (`Fanout.wave`, where there is one).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import launch_overhead as lo
import ray
import ray.cloudpickle
from sqlalchemy import event

import ablate.execution.fanout as fanout
from ablate.store import Store


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=64)
    n = ap.parse_args().trials
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.cloudpickle.register_pickle_by_value(lo)  # the no-op runner, for workers that cannot import bench/
    counts: Counter[str] = Counter()
    opened = Store.__init__

    def counted(self: Store, *args: Any, **kwargs: Any) -> None:
        opened(self, *args, **kwargs)

        def begin(conn: Any) -> None:
            if threading.current_thread() is threading.main_thread():
                counts["write" if conn.get_execution_options().get("ablate_write") else "read"] += 1

        event.listen(self.engine, "begin", begin)

    Store.__init__ = counted  # type: ignore[method-assign]
    drain = fanout.Fanout.drain

    def drained(self: fanout.Fanout, *args: Any) -> None:
        counts["drains"] += 1
        drain(self, *args)

    fanout.Fanout.drain = drained  # type: ignore[method-assign]
    if hasattr(fanout.Fanout, "wave"):
        wave = fanout.Fanout.wave

        def waved(self: fanout.Fanout, ready: list[Any], resubmit: bool = True) -> None:
            counts["waves"] += 1
            wave(self, ready, resubmit)

        fanout.Fanout.wave = waved  # type: ignore[method-assign]
    lo.fresh_ray(2)
    try:
        with tempfile.TemporaryDirectory() as d:
            lo.run_ablate(Path(d), n)
    finally:
        ray.shutdown()
    print(f"{n} no-op trials: {dict(counts)}")


if __name__ == "__main__":
    main()
