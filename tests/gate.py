"""A gate for signal and kill tests: real trials that stop at a chosen epoch until the test lets them go.

A gated trial runs the real `run_trial`; the first time one of the gated keys reports `epoch` (its
checkpoint for that epoch is already on disk: the trial saves before it reports), it writes its worker's
pid to `<folder>/<key>.pid` and blocks until `<folder>/open` exists. Tests wait for those pid files, a
condition they control, so a signal or a kill always lands while the trial is provably mid-run. A resumed
attempt replays its history past the gate without stopping (the pid file is already there). The other
ranks of a multi-worker trial write their pids to `<folder>/<key>.rank<r>` as they start.

`python tests/gate.py FOLDER EPOCH [KEY...] -- ablate-cli-args...` runs the `ablate` CLI with the gate
in place, for tests that need a real launcher process.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

WAIT_LIMIT = 300.0
"""A gate nobody opens fails the trial after this long rather than hang a test run."""


def wait_for(what: Callable[[], Any], timeout: float = 180) -> Any:
    """Poll `what()` until truthy (the condition is the test's own, e.g. pid files of gated trials)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = what()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError(f"timed out after {timeout}s waiting for {getattr(what, '__name__', what)}")


class Gate:
    """Marker files under `folder`; gated keys (all when None) stop at `epoch`."""

    def __init__(self, folder: Path, epoch: int, keys: list[str] | None = None) -> None:
        self.folder, self.epoch, self.keys = Path(folder), epoch, keys
        self.folder.mkdir(parents=True, exist_ok=True)

    def runner(self) -> Callable:
        """The real trial body with the gate in its report callback (picklable by value for Ray)."""
        folder, epoch, keys = str(self.folder), self.epoch, self.keys

        def gated(cfg: Any, report: Callable, checkpoint_dir: Path) -> Any:
            from ablate.training.loop import run_trial as real

            key = Path(checkpoint_dir).name
            if os.environ.get("RANK", "0") != "0":  # another rank of a multi-worker trial: its pid, for kills
                Path(folder, f"{key}.rank{os.environ['RANK']}").write_text(str(os.getpid()))

            def report_and_wait(e: int, metrics: dict[str, float]) -> None:
                report(e, metrics)
                marker = Path(folder, f"{key}.pid")
                if e != epoch or (keys is not None and key not in keys) or marker.exists():
                    return
                marker.write_text(str(os.getpid()))
                end = time.monotonic() + WAIT_LIMIT
                while not Path(folder, "open").exists():
                    if time.monotonic() > end:
                        raise TimeoutError("gate never opened")
                    time.sleep(0.05)

            return real(cfg, report_and_wait, checkpoint_dir)

        return gated

    def reached(self) -> dict[str, int]:
        """Worker pid of every trial waiting at (or past) the gate, by key."""
        return {p.stem: int(p.read_text()) for p in self.folder.glob("*.pid") if p.read_text()}

    def wait(self, n: int, timeout: float = 180) -> dict[str, int]:
        """Block until `n` trials wait at the gate; return their pids."""
        return wait_for(lambda: len(self.reached()) >= n and self.reached(), timeout)

    def open(self) -> None:
        (self.folder / "open").touch()


def main(argv: list[str]) -> None:
    """Run the ablate CLI with every launch's trials gated (see the module docstring)."""
    import ray.cloudpickle

    import ablate.execution.trial_task
    from ablate.cli import app

    split = argv.index("--")
    folder, epoch, *keys = argv[:split]
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    # the launcher's default runner
    ablate.execution.trial_task.run_trial = Gate(Path(folder), int(epoch), keys or None).runner()
    app(argv[split + 1 :], prog_name="ablate")


if __name__ == "__main__":
    main(sys.argv[1:])
