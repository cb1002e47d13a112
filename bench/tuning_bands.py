"""What the tuning section's bands cost a report: the median best of n with its bands (what the Findings compare)
beside the expected best's, and each curve's plot.

    .venv/bin/python bench/tuning_bands.py [--repeats 5]

For m arms of N configurations each (2 x 20, a small sweep; 4 x 128, a large one; scores seeded, the arms 1.5
points apart on a spread of 3, so some pairs overlap and the projection's bisection runs), times on one process
(`alternate`: order alternated, medians of --repeats), per curve: the arms' bands, every pair's comparison with
the baseline and the Findings' lines (`ablate.reporting.bands`, `findings.tuned`: what `tuning.report` does for
it), and its plot. Prints milliseconds and the median curve's cost over the expected curve's, from the same run.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from timing import alternate, medians

from ablate.reporting import bands, findings, plots
from ablate.reporting.expected_best import expected_best

SHAPES = ((2, 20), (4, 128))
ENDS = (0.0, 100.0)


def scores(arms: int, size: int) -> dict[str, list[float]]:
    rng = np.random.default_rng(55)
    return {f"arm{i}": list(80 + 1.5 * i + 3 * rng.standard_normal(size)) for i in range(arms)}


def judged(values: dict[str, list[float]], curve: bands.Curve) -> list[findings.Finding]:
    """The bands on `curve`, each arm against the first, and their Findings' lines."""
    found = bands.bands(values, "max", ENDS, curve)
    compared = [bands.compare(a, "arm0", values, found, "max", ENDS) for a in values if a != "arm0"]
    return findings.tuned(compared, "val.top1", 2)


def drawn(values: dict[str, list[float]], curve: bands.Curve) -> bytes | None:
    if curve == bands.MEDIAN:
        points = {a: bands.median_best(v, "max") for a, v in values.items()}
    else:
        points = {a: expected_best(v, "max").mean for a, v in values.items()}
    return plots.tuning_plot(points, bands.bands(values, "max", ENDS, curve), "val.top1", "arm0")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}; medians of {args.repeats}")
    for arms, size in SHAPES:
        values = scores(arms, size)
        sides = {f"{part} {curve}": (lambda p=part, c=curve, v=values: (judged if p == "findings" else drawn)(v, c))
                 for part in ("findings", "plot") for curve in (bands.EXPECTED, bands.MEDIAN)}  # fmt: skip
        for side in sides.values():  # the same warm-up for every side (the KS quantiles are cached)
            side()
        times = medians(alternate(sides, args.repeats))
        print(f"{arms} arms x {size} configurations")
        for name, seconds in times.items():
            print(f"  {name:20s} {seconds * 1e3:9.2f} ms")
        for part in ("findings", "plot"):
            ratio = times[f"{part} median"] / times[f"{part} expected"]
            print(f"  {part}: median / expected {ratio:.2f}")


if __name__ == "__main__":
    main()
