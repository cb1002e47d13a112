"""Where launched trials train, run in its own process by tests/execution/test_placement.py (the session's Ray has no
GPUs): `python tests/placed.py FOLDER` prints one JSON object of observations.

Two real Rays with 2 logical GPUs (no CUDA here) in turn, real launches through `ablate.launch`: the first without the
fake-GPU opt-in (a trial holding a GPU must fail), the second with it (such a trial trains on the CPU and says so).
A tiny runner records, per task, what Ray gave it, CUDA_VISIBLE_DEVICES, and the device the trial resolved.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from ablate.execution.launcher import RunConfig, launch
from ablate.execution.progress import Display
from ablate.planning.plan import plan
from ablate.store import Store
from ablate.training.devices import FAKE_GPU, describe, for_trial

TINY = {"data": {"name": "digits"}, "model": {"backbone": "vit", "patch_size": 2, "img_size": 8, "embed_dim": 32,
        "depths": [1], "num_heads": [2]}, "train": {"epochs": 1, "batch_size": 64}}  # fmt: skip


def where(cfg: Any, report: Any, checkpoint_dir: Path) -> Any:
    """Record what this task holds and sees, and where the trial trains."""
    import ray

    from ablate.training.messages import TrialResult

    seen = {"gpu_ids": [str(g) for g in ray.get_gpu_ids()], "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "device": describe(for_trial(cfg)), "pid": os.getpid()}  # fmt: skip
    Path(checkpoint_dir).mkdir(parents=True, exist_ok=True)
    (Path(checkpoint_dir) / "seen.json").write_text(json.dumps(seen))
    report(1, {"seen": 1.0})
    return TrialResult("done", 1, {"test.top1": 1.0})


def phase(
    root: Path, name: str, gpus: float, override: float | None = None, real: bool = False, seeds: int = 1
) -> dict[str, Any]:
    """Launch `seeds` seeds of a sweep asking `gpus` (with `--gpus override`); what each task saw and the store's
    rows. One seed where every trial of the phase would show the same; two where they run at once on the two GPUs."""
    folder = root / name
    folder.mkdir(parents=True)
    f = folder / "e.yaml"
    base = {**TINY, "resources": {"cpus": 1, "gpus": gpus}}
    f.write_text(yaml.safe_dump({"sweeps": {name: {"base": base, "seeds": seeds}}}))
    run = RunConfig(storage=folder / "ck", gpus=override, runner=None if real else where)
    with Store(f"sqlite:///{folder}/r.sqlite") as store:
        result = launch([plan(f, name)], store, run=run, progress=Display(live=False))
        rows = store.trials_frame(name)[["state", "device", "error"]]
    seen = [json.loads(p.read_text()) for p in (folder / "ck").glob("*/seen.json")]
    return {"counts": dict(result.counts), "seen": seen, "rows": json.loads(rows.to_json(orient="records"))}


def session(root: Path, fake: bool, phases: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The phases on a Ray with 2 logical GPUs whose workers have the opt-in or not (they inherit the environment)."""
    import ray

    if fake:
        os.environ[FAKE_GPU] = "1"
    else:
        os.environ.pop(FAKE_GPU, None)
    ray.init(address="local", num_cpus=4, num_gpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False, object_store_memory=128 * 2**20)  # fmt: skip
    try:
        return {name: phase(root, name, **how) for name, how in phases.items()}
    finally:
        ray.shutdown()


def main(root: Path) -> None:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    out = session(root, False, {"gpu": {"gpus": 1}, "cpu_sweep_gpus_1": {"gpus": 0, "override": 1}})
    out |= session(root, True, {
        "fake": {"gpus": 0.5}, "fake_trained": {"gpus": 1, "real": True}, "cpu": {"gpus": 0},
        "gpu_sweep_gpus_0": {"gpus": 1, "override": 0}, "fake_cpu_sweep_gpus_1": {"gpus": 0, "override": 1, "seeds": 2},
    })  # fmt: skip
    print(json.dumps(out))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
