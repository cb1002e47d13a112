"""GPU packing on a real device: does the probe's share hold, and what does packing buy?

    python bench/packing_gpu.py [--steps 40] [--cells vit-s-224 vit-t-28 hiera-t-csan]

What: for each cell, the packing probe (`ablate.execution.gpu_shares.measure`, in its own process as the Ray task runs
it)
gives the footprint and the share `resources.gpus: auto` would ask for; then k = min(floor(1 / share), 8)
copies of the same training steps run at once as separate processes on the one GPU, as Ray would place them.
Each copy reports the device memory its process held (torch's reserved bytes plus the CUDA context measured
by the probe) and its images per second. How: throughput of k packed copies summed, as a ratio against one
copy alone in the same run, and whether any copy ran out of memory. Needs a CUDA device.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

CELLS: dict[str, dict[str, Any]] = {
    "vit-t-28": {
        "data": {"name": "mnist5k"},
        "model": {"backbone": "vit", "embed_dim": 192, "depths": [6], "num_heads": [3], "patch_size": 4,
                  "img_size": 28},
        "attention": {"kind": "softmax"},
        "train": {"batch_size": 256, "amp": True},
    },
    "vit-s-224": {
        "data": {"name": "cifar100", "path": "/unused"},
        "model": {"backbone": "vit", "size": "vit-small", "img_size": 224},
        "attention": {"kind": "softmax"},
        "train": {"batch_size": 64, "amp": True},
    },
    "hiera-t-csan": {
        "data": {"name": "cifar100", "path": "/unused"},
        "model": {"backbone": "hiera", "size": "hiera-tiny", "img_size": 224},
        "attention": {"kind": "csan"},
        "train": {"batch_size": 64, "amp": True},
    },
}  # fmt: skip


def child(cell: str, steps: int, mode: str) -> None:
    """One process: the probe (`mode == "probe"`) or `steps` timed training steps after the probe's warm-up."""
    import torch

    from ablate.config import TrialConfig
    from ablate.execution.gpu_shares import measure, train_steps

    cfg = TrialConfig.model_validate(CELLS[cell])
    if mode == "probe":
        fp = measure(cfg)
        print(json.dumps({"used": fp.used, "total": fp.total, "device": fp.device}))
        return
    device = torch.device("cuda")
    train_steps(cfg, device)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    try:
        train_steps(cfg, device, steps)
        torch.cuda.synchronize()
    except torch.OutOfMemoryError:
        print(json.dumps({"oom": True}))
        return
    seconds = time.perf_counter() - t0
    print(json.dumps({"oom": False, "ips": steps * cfg.batch_split().device_batch / seconds,
                      "reserved": torch.cuda.max_memory_reserved()}))  # fmt: skip


def spawn(cell: str, steps: int, mode: str, copies: int) -> list[dict[str, Any]]:
    procs = [subprocess.Popen([sys.executable, __file__, "--child", cell, mode, "--steps", str(steps)],
                              stdout=subprocess.PIPE, text=True) for _ in range(copies)]  # fmt: skip
    return [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--cells", nargs="*", default=list(CELLS))
    ap.add_argument("--headroom", type=float, default=0.1)
    ap.add_argument("--child", nargs=2, metavar=("CELL", "MODE"))
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.steps, args.child[1])
        return
    from ablate.execution.gpu_shares import Footprint

    print(f"{'cell':14s} {'probe GiB':>9s} {'share':>6s} {'k':>2s} {'alone img/s':>11s} {'packed img/s':>12s} "
          f"{'x alone':>7s} {'max reserved GiB':>16s} {'OOM':>4s}")  # fmt: skip
    for cell in args.cells:
        probe = spawn(cell, args.steps, "probe", 1)[0]
        fp = Footprint(probe["used"], probe["total"], probe["device"])
        share = fp.share(args.headroom)
        k = min(int(1 / share), 8)
        alone = spawn(cell, args.steps, "train", 1)[0]
        packed = spawn(cell, args.steps, "train", k)
        ooms = sum(r["oom"] for r in packed)
        ips = sum(r.get("ips", 0.0) for r in packed)
        reserved = max(r.get("reserved", 0) for r in packed) / 2**30
        print(f"{cell:14s} {fp.used / 2**30:9.2f} {share:6.2f} {k:2d} {alone['ips']:11.0f} {ips:12.0f} "
              f"{ips / alone['ips']:7.2f} {reserved:16.2f} {ooms:4d}")  # fmt: skip


if __name__ == "__main__":
    main()
