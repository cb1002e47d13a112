"""A launch stopped by SIGINT or SIGTERM before its loop's handler (`ablate.execution.launcher.Stop`) is installed:
raised where Ray is joined or started (`ablate.execution.fanout.connect`), caught by `ablate launch` without
importing Ray."""

from __future__ import annotations

import signal


class Stopped(Exception):
    """A SIGINT or SIGTERM that came while the launch was still joining its Ray cluster or starting its embedded
    Ray: nothing ran and nothing was written. `ablate launch` says so in one line and exits as for any stop (128 +
    the signal)."""

    def __init__(self, signum: int, where: str) -> None:
        self.signal = signum
        super().__init__(f"stopped by {signal.Signals(signum).name} while {where}; nothing ran")
