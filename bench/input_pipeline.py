"""Will a trial be input-bound? Images/s of the training loader alone vs the training step alone.

    .venv/bin/python bench/input_pipeline.py [--images 256] [--workers 2] [--size swin-min] [--device cpu]

What: an image folder of --images generated JPEGs (ImageNet-like 256x320 photos of noise) loaded through
ablate's own path (`data.name: imagefolder`, the csan-paper augmentation: RandAugment, random erase,
colour jitter, bicubic resize to 224), and the --size model's training step (forward, loss, backward,
AdamW step) on batches already in memory. Each side runs one epoch's batches (the same global batch and
device batch), timed from outside, warmed up once, order alternated, medians of --repeats.

Prints both rates and loader / step: below 1 the GPU (or CPU) waits for data, and a trial should get more
`data.workers` (per worker of a multi-worker trial) or faster storage; the input path pins memory on CUDA
and copies batches with non_blocking. On a cluster keep `data.path` on node-local or fast shared storage.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from timing import alternate, medians

from ablate.config import TrialConfig
from ablate.data import build_data
from ablate.nn.factory import create_model
from ablate.registry import TASKS


def image_folder(root: Path, images: int) -> None:
    rng = np.random.default_rng(0)
    for i in range(images):
        folder = root / "train" / f"class{i % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (256, 320, 3), dtype=np.uint8)).save(folder / f"{i}.jpg", quality=90)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--size", default="swin-min")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        image_folder(Path(tmp), args.images)
        cfg = TrialConfig.model_validate({
            "data": {"name": "imagefolder", "path": tmp, "workers": args.workers, "val_fraction": 0},
            "model": {"size": args.size, "img_size": 224},
            "train": {"batch_size": args.batch, "randaugment": "rand-m9-mstd0.5-inc1", "random_erase": 0.25,
                      "amp": args.device == "cuda"},
            "resources": {"gpus": 1 if args.device == "cuda" else 0},
        })  # fmt: skip
        device = torch.device(args.device)
        data = build_data(cfg)
        task = TASKS.get("classify")(cfg, data, device)
        model = create_model(cfg, data.num_classes, data.in_chans).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        plan = task.train_steps(0)
        batches = [task.inputs(b) for b in task.micro_batches(plan, 0)]

        def load() -> None:
            for batch in task.micro_batches(plan, 0):
                task.inputs(batch)
            if device.type == "cuda":
                torch.cuda.synchronize()

        def step() -> None:
            for x, y in batches:
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.train.amp):
                    loss = task.loss(model(*x), y)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
            if device.type == "cuda":
                torch.cuda.synchronize()

        load(), step()  # warm-up: worker start-up, kernels, allocator
        seconds = medians(alternate({"loader": load, "step": step}, args.repeats))
    n = sum(len(m) for s in plan for m in s.micro)
    rates = {name: n / s for name, s in seconds.items()}
    print(f"{n} images, batch {args.batch}, {args.workers} loader workers, {args.size} on {args.device}")
    print(f"loader alone: {rates['loader']:.1f} images/s; training step alone: {rates['step']:.1f} images/s")
    ratio = rates["loader"] / rates["step"]
    verdict = "input-bound: add data.workers or faster storage" if ratio < 1 else "the step is the bottleneck"
    print(f"loader / step: {ratio:.2f} ({verdict})")


if __name__ == "__main__":
    main()
