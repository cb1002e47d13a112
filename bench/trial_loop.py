"""Wall time of a whole `run_trial` vs a whole plain hand-written timm loop doing the same work.

    .venv/bin/python bench/trial_loop.py [--epochs 3] [--threads 1] [--repeats 3]

What: both sides train the default CPU sweep's baseline model (experiments.yaml `cpu`, alternating
softmax; no shift augmentation, no warm-up epochs) on mnist5k for --epochs epochs, and each does the same
unit of work: build the data splits and the model, create timm's optimizer and cosine schedule, train
every epoch (cross-entropy, backward, step, schedule update, loss logged), evaluate the validation split
after every epoch and the test split once at the end. run_trial adds what it adds (FLOP count,
environment record, metrics dicts; no checkpoint folder is given, so no checkpoints); the plain loop is
what one would write by hand: a DataLoader over the same splits, nothing else.

How: wall clock (`time.perf_counter`) around the whole call of each side, from outside; both get the same
warm-up (one untimed 1-epoch run of each, which pays the per-process imports and caches once for both);
the order alternates between repeats (ABAB: run_trial first, then BABA: plain first, ...), and the median
of --repeats runs of each side is compared. The ratio is plain seconds / run_trial seconds, i.e.
run_trial's throughput relative to the plain loop's (target >= 0.97). Same torch threads on both sides.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from ablate.config import TrialConfig
from ablate.data import build_data
from ablate.nn.factory import create_model
from ablate.planning.plan import plan
from ablate.training.loop import run_trial, seed_everything

ROOT = Path(__file__).resolve().parents[1]


def cpu_config(epochs: int, threads: int) -> TrialConfig:
    p = plan(ROOT / "experiments.yaml", "cpu")
    base = next(t.config for t in p.trials if t.variant == p.baseline)
    train = base.train.model_copy(update={"epochs": epochs, "shift": 0, "warmup_epochs": 0})
    resources = base.resources.model_copy(update={"cpus": float(threads)})
    return base.model_copy(update={"train": train, "resources": resources})


def ablate_loop(cfg: TrialConfig) -> None:
    run_trial(cfg)


@torch.no_grad()
def plain_eval(model: torch.nn.Module, ds, batch_size: int) -> float:
    model.eval()
    hits = n = 0
    for x, y in DataLoader(ds, batch_size=batch_size):
        hits += (model(x).argmax(1) == y).sum().item()
        n += len(y)
    return hits / n


def plain_loop(cfg: TrialConfig) -> None:
    from timm.optim import create_optimizer_v2
    from timm.scheduler import create_scheduler_v2

    t = cfg.train
    seed_everything(cfg.seed)
    data = build_data(cfg)
    model = create_model(cfg, data.num_classes, data.in_chans)
    opt = create_optimizer_v2(model, opt=t.opt, lr=t.lr, weight_decay=t.weight_decay)
    loader = DataLoader(data.train, batch_size=t.batch_size, shuffle=True)
    sched = None
    if t.sched != "none":
        sched, _ = create_scheduler_v2(opt, sched=t.sched, num_epochs=t.epochs, min_lr=t.min_lr,
                                       updates_per_epoch=len(loader), step_on_epochs=False)  # fmt: skip
    for epoch in range(t.epochs):
        model.train()
        loss_sum = 0.0
        for i, (x, y) in enumerate(loader):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if sched is not None:
                sched.step_update(epoch * len(loader) + i + 1)
            loss_sum += loss.item() * len(y)
        if data.val is not None:
            plain_eval(model, data.val, t.eval_batch_size)
    plain_eval(model, data.test, t.eval_batch_size)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)  # run_trial sets the same from resources.cpus
    cfg = cpu_config(args.epochs, args.threads)
    sides = {"run_trial": ablate_loop, "plain": plain_loop}
    warm = cfg.model_copy(update={"train": cfg.train.model_copy(update={"epochs": 1})})
    for run in sides.values():  # the same untimed warm-up for both
        run(warm)
    times: dict[str, list[float]] = {name: [] for name in sides}
    for r in range(args.repeats):
        for name in list(sides) if r % 2 == 0 else list(sides)[::-1]:  # ABAB, BABA, ...
            t0 = time.perf_counter()
            sides[name](cfg)
            times[name].append(time.perf_counter() - t0)
    ours, plain = statistics.median(times["run_trial"]), statistics.median(times["plain"])
    print(f"model: {cfg.model.backbone} embed {cfg.model.embed_dim} depth {cfg.model.depths[0]}, "
          f"batch {cfg.train.batch_size}, {args.threads} thread(s), {args.epochs} epochs + evaluation, "
          f"median of {args.repeats} (order alternated)")  # fmt: skip
    print(f"run_trial  {ours:7.2f} s  (runs: {', '.join(f'{t:.2f}' for t in times['run_trial'])})")
    print(f"plain loop {plain:7.2f} s  (runs: {', '.join(f'{t:.2f}' for t in times['plain'])})")
    print(f"ratio plain/run_trial {plain / ours:.3f} (run_trial's relative throughput; target >= 0.97)")


if __name__ == "__main__":
    main()
