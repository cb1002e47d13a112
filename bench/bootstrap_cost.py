"""What the paired bootstrap costs a report: seconds of `ablate report --interval bca` against the same report
without it (`--interval policy`, the default), on bench/report_scale.py's sweep.

    .venv/bin/python bench/bootstrap_cost.py [--seeds 25] [--epochs 10] [--db scale.sqlite] [--repeats 3]

Generates the sweep once (bench/report_scale.py's 400 variants x 25 seeds, 10,000 trials; an existing --db is
reused, generation is not the measured part), then times both reports into fresh folders (html, md, csv): one
untimed warm-up of each, the order alternated between repeats (ABAB, BABA), medians of --repeats compared (ratio =
with / without). The BCa intervals alone are timed too (`stats.paired` over the variant table's differences with
and without them): the part of the difference the bootstrap itself takes. Process CPU seconds are what is compared
(the wall clock is printed beside): on a shared machine the wall clock also counts other processes' turns.
"""

from __future__ import annotations

import itertools
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from report_scale import prepared
from timing import alternate

from ablate.reporting import frames, report, stats
from ablate.store import Store


def cpu(sides: dict[str, Callable[[], Any]], spent: dict[str, list[float]]) -> dict[str, Callable[[], Any]]:
    """`sides`, each call's process CPU seconds appended to `spent[name]`: on a shared machine the wall clock also
    counts the time other processes held the cores, the CPU time only this one's work."""

    def timed(name: str, side: Callable[[], Any]) -> Callable[[], Any]:
        def call() -> Any:
            start = time.process_time()
            found = side()
            spent.setdefault(name, []).append(time.process_time() - start)
            return found

        return call

    return {name: timed(name, side) for name, side in sides.items()}


def sides(store: Store, out: Path) -> dict[str, Callable[[], Any]]:
    """The two timed reports, each into a fresh folder under `out` per call."""
    runs = itertools.count()

    def write(interval: str) -> Callable[[], Any]:
        return lambda: report("big", store=store, out=out / str(next(runs)), interval=interval)

    return {"without": write("policy"), "bca": write("bca")}


def main() -> None:
    args = prepared("ablate-bootstrap-cost.sqlite", epochs=10)
    with Store(f"sqlite:///{args.db}") as store, tempfile.TemporaryDirectory() as out:
        for side in sides(store, Path(out)).values():  # the same untimed warm-up for both
            side()
        spent: dict[str, list[float]] = {}
        wall = alternate(cpu(sides(store, Path(out)), spent), args.repeats)
        data = frames.load(store, "big")
        values = frames.replicates(data)
        diffs = values.to_numpy() - values.reindex(index=data.variants["ref"].fillna("")).to_numpy()
        alone: dict[str, list[float]] = {}
        tests = {"without": lambda: stats.paired(diffs), "bca": lambda: stats.paired(diffs, resampled=True)}
        alternate(cpu(tests, alone), args.repeats)
        bootstrapped = int(stats.paired(diffs, resampled=True)["b_lo"].notna().sum())
    (without, bca), (plain, boot) = ([statistics.median(t[k]) for k in ("without", "bca")] for t in (spent, alone))
    print(f"{len(data.trials)} trials, {len(values)} variants, {bootstrapped} BCa intervals ({values.shape[1]} seeds)")
    walls = [statistics.median(wall[k]) for k in ("without", "bca")]
    print(f"report CPU without the bootstrap {without:.2f} s, with it (--interval bca) {bca:.2f} s: ratio "
          f"{bca / without:.2f} (wall {walls[0]:.2f} s and {walls[1]:.2f} s); the variant table's tests alone "
          f"{plain:.3f} s CPU, with BCa {boot:.3f} s "
          f"({(boot - plain) / max(bootstrapped, 1) * 1e3:.1f} ms per interval); medians of {args.repeats}, warm, "
          f"order alternated; load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")  # fmt: skip


if __name__ == "__main__":
    main()
