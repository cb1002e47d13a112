"""The five-switch example (issue 53): the full grid, its best half and a Plackett-Burman screen of one tiny ViT on
the 8 x 8 digits (1 epoch, one seed), side by side with what each decided.

    .venv/bin/python bench/five_switch.py [--file experiments.yaml] [--store sqlite:///PATH] [--cpus N]

Launches the sweeps five-switch (32 cells), five-switch-half and five-switch-screen of `--file` into a store of its
own (default: a new SQLite database in a temporary folder; the designs' cells are the full grid's, so about 35
trials train), then prints per switch each analysis's main effect and adjusted p, `*` where decided (p adj. <
0.05, Holm over the analysis's terms):

- the full grid at one seed (Lenth's test: effect sparsity, no seed variation measured);
- each design at one seed, its reference cell's runs at seeds 1-3 left out: what a one-seed design decided before
  `reference_seeds` (Lenth's test);
- each design with them: its effects tested against their spread (pure error).

A design's main effect is named with what it is confounded with (`kind = -stack x lr`). The last lines say which
switches each analysis decided, whether they are the full grid's, and the seed noise the reference's runs show
beside the pseudo standard error Lenth's test took for it.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from ablate import api
from ablate.evidence import lenth, pure_error
from ablate.execution.launcher import Cluster
from ablate.planning.plan import plan
from ablate.reporting import designed, effects, frames, stats
from ablate.reporting.frames import SweepData
from ablate.store import Store

SWEEPS = ("five-switch", "five-switch-half", "five-switch-screen")


@dataclasses.dataclass(frozen=True)
class Analysis:
    """One column of the side-by-side: its name and its main effects (factor -> effect, p adj., test)."""

    name: str
    mains: pd.DataFrame
    pse: float
    """The pseudo standard error of its terms (Lenth), on the effects' scale."""


def analysed(name: str, data: SweepData) -> Analysis:
    """The main effects of `data`: a design's (`designed`) or the full grid's (`effects`)."""
    if data.design is not None:
        eff = designed.effects(data, data.design)
    else:
        fac = effects.factorial(data)
        assert fac is not None
        eff = effects.effects(fac)
    mains = eff[eff["term"] == "main"].copy()
    mains["switch"] = [str(f).split(" = ")[0].split(" (")[0].rsplit(".", 1)[-1] for f in mains["factor"]]
    return Analysis(name, mains.set_index("switch"), lenth.pse(eff["effect"].to_numpy()))


def one_seed(data: SweepData) -> SweepData:
    """The sweep as if its reference cell had run at its first seed only."""
    first = data.trials["seed"].min()
    return dataclasses.replace(data, trials=data.trials[data.trials["seed"] == first])


def cell(row: pd.Series | None) -> str:
    if row is None:
        return "-"
    star = "*" if row["p_adj"] < stats.ALPHA else " "
    p = "n/a" if np.isnan(row["p_adj"]) else f"{row['p_adj']:.3f}"
    return f"{row['effect']:+7.2f} ({p}){star}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--file", default="experiments.yaml")
    parser.add_argument("--store", default=None, help="database URL (default: a new SQLite in a temporary folder)")
    parser.add_argument("--cpus", type=int, default=None, help="CPUs of the embedded Ray (default: every core)")
    args = parser.parse_args()
    where = Path(tempfile.mkdtemp(prefix="five-switch-"))
    url = args.store or f"sqlite:///{where / 'five.sqlite'}"
    plans = [plan(args.file, name) for name in SWEEPS]
    api.launch(plans, url, tracker=False, cluster=Cluster(num_cpus=args.cpus))
    with Store(url) as store:
        data = {name: frames.load(store, name) for name in SWEEPS}
    full, half, screen = (data[n] for n in SWEEPS)
    columns = [analysed("full grid, 1 seed (Lenth)", full),
               analysed("half, 1 seed (Lenth)", one_seed(half)),
               analysed("half + reference x4 (pure error)", half),
               analysed("screen, 1 seed (Lenth)", one_seed(screen)),
               analysed("screen + reference x4 (pure error)", screen)]  # fmt: skip
    switches = list(columns[0].mains.index)
    print(f"store: {url}; metric {full.metric}; main effect (p adj.), * decided at {stats.ALPHA:.2f}")
    print(f"{'switch':<14}" + "".join(f"{c.name[:34]:>36}" for c in columns))
    for s in switches:
        print(f"{s:<14}" + "".join(f"{cell(c.mains.loc[s] if s in c.mains.index else None):>36}" for c in columns))
    for c in columns:
        named = {n: str(r["factor"]) for n, r in c.mains.iterrows()}
        said = sorted(n for n, r in c.mains.iterrows() if r["p_adj"] < stats.ALPHA)
        tests = ", ".join(sorted(set(c.mains["test"]) - {""})) or "none"
        print(f"{c.name}: decided {', '.join(named[n] for n in said) or 'nothing'} (test: {tests}; Lenth's PSE "
              f"{c.pse:.2f}); the same switches as the full grid: {said == sorted(_decided(columns[0]))}")  # fmt: skip
    reference = frames.replicates(half).dropna(how="all")
    error = pure_error.pooled(reference.to_numpy())
    print(f"seed noise at the reference cell: SD {error.sd:.2f} over {error.df + 1} seeds")


def _decided(c: Analysis) -> list[str]:
    return [str(n) for n, r in c.mains.iterrows() if r["p_adj"] < stats.ALPHA]


if __name__ == "__main__":
    main()
