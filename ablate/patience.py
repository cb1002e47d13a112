"""Waiting out a service that does not answer for a moment (a database or a bucket restarting), where failing at
once would cost more than a few seconds: a trial that cannot start, a launch that cannot begin."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

FIRST_PAUSE = 0.5
LONGEST_PAUSE = 8.0


def patiently(
    call: Callable[[], T],
    mends: Callable[[Exception], bool],
    waiting: Callable[[Exception, float], None],
    patience: float,
) -> T:
    """`call()`, tried again after a growing pause (told to `waiting`) while it fails with an error that waiting
    `mends`, for up to `patience` seconds; then its error."""
    deadline, pause = time.monotonic() + patience, FIRST_PAUSE
    while True:
        try:
            return call()
        except Exception as e:
            left = deadline - time.monotonic()
            if left <= 0 or not mends(e):
                raise
            waiting(e, min(pause, left))
            time.sleep(min(pause, left))
            pause = min(2 * pause, LONGEST_PAUSE)
