"""What a trial's result depends on beyond its key: the same trials trained again under other CPU kernels and
thread counts, beside the spread their seeds give.

torch picks its CPU kernels once, at import, from the CPU's instruction set (`ATEN_CPU_CAPABILITY` lowers it: the
kernels another CPU would run), and splits a reduction over its intra-op threads: either can change the float
sums a trial adds up, and twenty epochs carry a last-bit difference into other weights. Each setting therefore
trains in a fresh process, without Ray, by the launch's own loop (`ablate.training.loop.run_trial`), with the
trial's `resources.cpus` set to the setting's threads (the loop pins torch's threads to it).

    .venv/bin/python bench/reproduce.py FILE SWEEP [--settings avx512:1,avx512:1,avx512:2,avx2:1,default:1]
        [--trials 4] [--skip 0] [--metric test.top1]

Prints a line per trial and setting as it ends, then per trial its spread (largest less smallest) over the
settings, and the seed spread of each cell over the first setting.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from itertools import groupby


@dataclass(frozen=True)
class Setting:
    capability: str
    """Passed to torch as `ATEN_CPU_CAPABILITY` (default, avx2, avx512): a ceiling, never above the CPU's own."""
    threads: int

    @classmethod
    def parse(cls, text: str) -> Setting:
        capability, threads = text.split(":")
        return cls(capability, int(threads))


@dataclass(frozen=True)
class Trained:
    key: str
    cell: str
    """The trial's axis values but its seed."""
    seed: int
    setting: Setting
    capability: str
    """What torch ran with (`torch.backends.cpu.get_cpu_capability()`)."""
    value: float


def child(path: str, sweep: str, key: str, threads: int, metric: str) -> None:
    """Train one trial here and print its metric and the capability torch ran with, as JSON."""
    import torch

    from ablate.planning.plan import plan
    from ablate.training.loop import run_trial

    trial = next(t for t in plan(path, sweep).trials if t.key == key)
    cfg = trial.config
    cfg = cfg.model_copy(update={"resources": cfg.resources.model_copy(update={"cpus": float(threads)})})
    result = run_trial(cfg)
    print(json.dumps({"value": result.metrics[metric], "capability": torch.backends.cpu.get_cpu_capability()}))


def train(path: str, sweep: str, key: str, setting: Setting, metric: str) -> tuple[float, str]:
    env = {**os.environ, "ATEN_CPU_CAPABILITY": setting.capability}
    args = [sys.executable, __file__, path, sweep, "--child", key, "--threads", str(setting.threads),
            "--metric", metric]  # fmt: skip
    out = subprocess.run(args, env=env, check=True, capture_output=True, text=True).stdout
    line = json.loads(out.strip().splitlines()[-1])
    return float(line["value"]), str(line["capability"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file")
    parser.add_argument("sweep")
    parser.add_argument("--settings", default="avx512:1,avx512:1,avx512:2,avx2:1,default:1")
    parser.add_argument("--trials", type=int, default=4, help="N of the sweep's trials")
    parser.add_argument("--skip", type=int, default=0, help="after its first K")
    parser.add_argument("--metric", default="test.top1")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    a = parser.parse_args()
    if a.child:
        child(a.file, a.sweep, a.child, a.threads, a.metric)
        return
    from ablate.planning.plan import plan

    settings = [Setting.parse(s) for s in a.settings.split(",")]
    runs: list[Trained] = []
    for trial in plan(a.file, a.sweep).trials[a.skip : a.skip + a.trials]:
        for s in settings:
            value, capability = train(a.file, a.sweep, trial.key, s, a.metric)
            cell = ", ".join(f"{k}={v}" for k, v in trial.axes.items() if k != "seed")
            runs.append(Trained(trial.key, cell, int(trial.config.seed), s, capability, value))
            print(f"{trial.key[:10]}  {cell:<24} seed {trial.config.seed}  asked {s.capability}:{s.threads}"
                  f"  ran {capability}  {a.metric} {value:.4f}", flush=True)  # fmt: skip
    print("\nper trial, over the settings (max - min):")
    for key, group in groupby(runs, key=lambda r: r.key):
        values = [r.value for r in group]
        print(f"  {key[:10]}  {max(values) - min(values):.4f}")
    print(f"per cell, over its seeds at {settings[0].capability}:{settings[0].threads} (max - min):")
    first = sorted((r for r in runs if r.setting == settings[0]), key=lambda r: r.cell)
    for cell, group in groupby(first, key=lambda r: r.cell):
        values = sorted({r.seed: r.value for r in group}.values())
        print(f"  {cell:<24} {max(values) - min(values):.4f} over {len(values)} seeds")


if __name__ == "__main__":
    main()
