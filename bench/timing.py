"""The one way benchmarks time two (or more) sides: wall clock from outside, order alternated, medians."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def alternate(sides: dict[str, Callable[[], Any]], repeats: int) -> dict[str, list[float]]:
    """Seconds of each side per repeat, the order reversed every other repeat (ABAB, BABA, ...), so drifting
    load and warm caches hit every side alike. Warm-ups are the caller's (the same for every side)."""
    times: dict[str, list[float]] = {name: [] for name in sides}
    for r in range(repeats):
        for name in list(sides) if r % 2 == 0 else list(sides)[::-1]:
            t0 = time.perf_counter()
            sides[name]()
            times[name].append(time.perf_counter() - t0)
    return times


def medians(times: dict[str, list[float]]) -> dict[str, float]:
    return {name: statistics.median(t) for name, t in times.items()}
