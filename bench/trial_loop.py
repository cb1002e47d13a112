"""Training-loop throughput of `run_trial` vs a plain hand-written timm loop, same model and batches.

    .venv/bin/python bench/trial_loop.py [--epochs 3] [--threads 1] [--repeats 3]

Both loops train the default CPU sweep's model (experiments.yaml `cpu`, alternating softmax) on mnist5k
for the same epochs. run_trial's figure is its own `samples_per_s` metric (training steps only, as the
plain loop's); the plain loop is what one would write by hand: a DataLoader over the same split, timm's
AdamW, cross-entropy, backward, step. The best of `--repeats` runs of each is compared (target >= 0.97).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from ablate.config import TrialConfig
from ablate.data import build_data
from ablate.nn.factory import create_model
from ablate.planner import plan
from ablate.trial import run_trial, seed_everything

ROOT = Path(__file__).resolve().parents[1]


def cpu_config(epochs: int) -> TrialConfig:
    p = plan(ROOT / "experiments.yaml", "cpu")
    base = next(t.config for t in p.trials if t.variant == p.baseline)
    return base.model_copy(update={"train": base.train.model_copy(update={"epochs": epochs, "shift": 0, "warmup_epochs": 0})})


def ablate_loop(cfg: TrialConfig) -> float:
    rates: list[float] = []
    run_trial(cfg, lambda epoch, m: rates.append(m["samples_per_s"]))
    return max(rates)


def plain_loop(cfg: TrialConfig) -> float:
    from timm.optim import create_optimizer_v2

    seed_everything(cfg.seed)
    data = build_data(cfg)
    model = create_model(cfg, data.num_classes, data.in_chans)
    opt = create_optimizer_v2(model, opt="adamw", lr=cfg.train.lr, weight_decay=cfg.train.weight_decay)
    loader = DataLoader(data.train, batch_size=cfg.train.batch_size, shuffle=True)
    best = 0.0
    for _ in range(cfg.train.epochs):
        model.train()
        seen, t0 = 0, time.perf_counter()
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            seen += len(y)
        best = max(best, seen / (time.perf_counter() - t0))
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    cfg = cpu_config(args.epochs)
    cfg = cfg.model_copy(update={"resources": cfg.resources.model_copy(update={"cpus": float(args.threads)})})
    torch.set_num_threads(args.threads)
    ours, plain = 0.0, 0.0
    for _ in range(args.repeats):  # interleaved, so drifting machine load hits both alike
        ours = max(ours, ablate_loop(cfg))
        plain = max(plain, plain_loop(cfg))
    print(f"model: {cfg.model.backbone} embed {cfg.model.embed_dim} depth {cfg.model.depths[0]}, batch {cfg.train.batch_size}, "
          f"{args.threads} thread(s), best of {args.repeats} x {args.epochs} epochs")  # fmt: skip
    print(f"run_trial loop {ours:8.1f} samples/s")
    print(f"plain timm loop {plain:7.1f} samples/s")
    print(f"ratio {ours / plain:.3f} (target >= 0.97)")


if __name__ == "__main__":
    main()
