"""The GPU path of a whole trial: `run_trial` on CUDA in fp32, bf16 autocast, and autocast + torch.compile.

    python bench/gpu_trial.py [--epochs 4] [--kinds softmax csan] [--repeats 1]

What: a ViT (192 wide, 6 blocks, 3 heads, patch 4) on mnist5k at 28 px, batch 256, for each mechanism and
each precision setting: the same `run_trial` a launched trial runs (data, model, timm optimizer and cosine
schedule, validation every epoch, test at the end). How: the median `epoch_s` of the epochs after the first
(the first pays cuDNN autotuning and compilation), and the wall time of the whole call from outside; ratios
against softmax fp32 measured in the same run, settings in turn per repeat. Needs a CUDA device (without one it
stops at once, saying what torch says: `ablate.training.devices`).
"""

from __future__ import annotations

import argparse
import statistics
import time

from ablate.config import TrialConfig
from ablate.training import devices
from ablate.training.loop import run_trial

SETTINGS = {"fp32": {"amp": False, "compile": False}, "bf16": {"amp": True, "compile": False},
            "bf16+compile": {"amp": True, "compile": True}}  # fmt: skip


def config(kind: str, epochs: int, setting: dict[str, bool]) -> TrialConfig:
    return TrialConfig.model_validate({
        "data": {"name": "mnist5k"},
        "model": {"backbone": "vit", "embed_dim": 192, "depths": [6], "num_heads": [3], "patch_size": 4,
                  "img_size": 28},
        "attention": {"kind": kind},
        "train": {"epochs": epochs, "batch_size": 256, "lr": 1e-3, **setting},
        "resources": {"cpus": 4, "gpus": 1},
    })  # fmt: skip


def measure(cfg: TrialConfig) -> tuple[float, float, float]:
    """(median epoch seconds after the first, whole-call seconds, final test top-1)."""
    epochs: list[float] = []
    t0 = time.perf_counter()
    result = run_trial(cfg, lambda e, m: epochs.append(m["epoch_s"]))
    wall = time.perf_counter() - t0
    return statistics.median(epochs[1:] or epochs), wall, result.metrics["test.top1"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--kinds", nargs="*", default=["softmax", "csan"])
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    print(f"device: {devices.describe(devices.resolve('bench/gpu_trial.py trains on a GPU'))}")
    cells = [(k, s) for k in args.kinds for s in SETTINGS]
    runs: dict[tuple[str, str], list[tuple[float, float, float]]] = {c: [] for c in cells}
    for r in range(args.repeats):
        for cell in cells if r % 2 == 0 else cells[::-1]:
            runs[cell].append(measure(config(cell[0], args.epochs, SETTINGS[cell[1]])))
    base = statistics.median(e for e, _, _ in runs[(args.kinds[0], "fp32")])
    print(f"{'variant':24s} {'epoch s':>8s} {'x fp32 ' + args.kinds[0]:>14s} {'wall s':>7s} {'test top-1':>10s}")
    for kind, setting in cells:
        epoch = statistics.median(e for e, _, _ in runs[(kind, setting)])
        wall = statistics.median(w for _, w, _ in runs[(kind, setting)])
        top1 = runs[(kind, setting)][-1][2]
        print(f"{kind + ' ' + setting:24s} {epoch:8.3f} {epoch / base:14.2f} {wall:7.1f} {top1:10.2f}")


if __name__ == "__main__":
    main()
