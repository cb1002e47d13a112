"""A two-worker trial with `resources.gpus: auto` on a real Ray with 2 logical GPUs (no CUDA here), run in its own
process by tests/execution/test_gangs.py (the session's Ray has no GPUs): each rank records the GPU share Ray gave
it and the devices it sees. Prints one JSON object: `python tests/gpu_gangs.py FOLDER`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from ablate.execution.gpu_shares import Footprint
from ablate.execution.launcher import RunConfig, launch
from ablate.execution.progress import Display
from ablate.planning.plan import plan
from ablate.store import Store

DEVICE = 80 * 2**30
SAFETY = 240.0
"""Seconds rank 0 waits for its peer's record: a safety net, never reached when placement works."""


def small_probe(cfg: Any) -> Footprint:
    """What a probe of a one-worker trial of this model would find: 30% of a device (three would share a GPU)."""
    return Footprint(int(0.3 * DEVICE), DEVICE, "logical")


def placed(cfg: Any, report: Any, checkpoint_dir: Path) -> Any:
    """Record this rank's GPU share and visible devices; no training (there is no CUDA to train on). Rank 0 returns
    once every rank recorded: its result ends the gang, stopping a rank that had not written yet (seen on main)."""
    import ray

    from ablate.training.messages import TrialResult

    rank = os.environ["RANK"]
    seen = {"rank": rank, "share": ray.get_runtime_context().get_assigned_resources().get("GPU", 0.0),
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}  # fmt: skip
    tmp = Path(checkpoint_dir, f"rank{rank}.tmp")
    tmp.write_text(json.dumps(seen))
    tmp.replace(Path(checkpoint_dir, f"rank{rank}.json"))  # whole, as rank 0 counts it
    if rank == "0":
        end = time.monotonic() + SAFETY
        while len(list(Path(checkpoint_dir).glob("rank*.json"))) < int(os.environ["WORLD_SIZE"]):
            if time.monotonic() > end:
                raise TimeoutError("a rank never recorded what it was given")
            time.sleep(0.02)
    return TrialResult("done", 1, {"test.top1": 1.0})


def main(root: Path) -> None:
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ["ABLATE_FAKE_GPU"] = "1"  # before Ray starts: its workers inherit it
    ray.init(address="local", num_cpus=4, num_gpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False, object_store_memory=128 * 2**20)  # fmt: skip
    base = {"data": {"name": "digits"}, "model": {"backbone": "vit", "embed_dim": 32, "depths": [1], "num_heads": [2],
            "patch_size": 2, "img_size": 8}, "resources": {"cpus": 1, "gpus": "auto", "workers": 2}}  # fmt: skip
    f = root / "e.yaml"
    f.write_text(yaml.safe_dump({"sweeps": {"g": {"base": base}}}))
    messages: list[str] = []
    progress = Display(live=False)
    progress.message = messages.append  # type: ignore[method-assign]
    p = plan(f, "g")
    with Store(f"sqlite:///{root}/r.sqlite") as store:
        res = launch(
            [p], store, run=RunConfig(storage=root / "ck", runner=placed, probe=small_probe), progress=progress
        )
    ray.shutdown()
    ranks = [json.loads(r.read_text()) for r in sorted((root / "ck" / p.trials[0].key).glob("rank*.json"))]
    print(json.dumps({"counts": dict(res.counts), "messages": messages, "ranks": ranks}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
