"""The GPU-packing scenario, run in its own process by tests/execution/test_gpu_shares.py (the session's Ray has
no GPUs).

A real Ray with 2 logical GPUs (no CUDA here: the fake-GPU opt-in `ABLATE_FAKE_GPU=1` trains their trials on the
CPU), real launches through `ablate.launch`, a probe faked only where a GPU is required: it returns a footprint of
30% or 60% of an 80 GiB device by the model's width. Trials are held at a gate until this controller opens it, so
what runs at once is decided by Ray's admission alone. Prints one JSON object of observations:
`python tests/packed.py FOLDER`.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from ablate.execution.gpu_shares import Footprint
from ablate.execution.launcher import RunConfig, launch
from ablate.execution.progress import Display
from ablate.planning.plan import plan
from ablate.store import Store
from ablate.training.devices import FAKE_GPU

DEVICE = 80 * 2**30
FRACTION = {32: 0.30, 64: 0.60, 48: 0.30, 56: 0.30}
"""Probed memory by model.embed_dim: 32 small, 64 large, 48 small but out of memory on any share of a GPU (torch's
OutOfMemoryError), 56 likewise as the CUDA runtime says it (`CUDA error: out of memory`, torch's AcceleratorError).
A width of 40 (given `gpus: 1`, no probe) is out of memory even on a whole GPU."""


def fake_probe(cfg: Any) -> Footprint:
    return Footprint(int(FRACTION[cfg.model.embed_dim] * DEVICE), DEVICE, "logical")


def held(cfg: Any, report: Any, checkpoint_dir: Path) -> Any:
    """Record where Ray put the trial and with what share, then wait for the gate (or run out of memory)."""
    import ray
    import torch

    from ablate.training.messages import TrialResult

    key, gate = Path(checkpoint_dir).name, Path(checkpoint_dir).parent.parent / "gate"
    share = ray.get_runtime_context().get_assigned_resources().get("GPU", 0.0)
    oom = cfg.model.embed_dim == 40 or (cfg.model.embed_dim in (48, 56) and share < 1)
    start = {
        "gpu": [str(g) for g in ray.get_gpu_ids()],
        "share": share,
        "at": time.time(),
        "oom": oom,
        "pid": os.getpid(),
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    put(gate / f"{key}.start.{share}", start)
    if oom and cfg.model.embed_dim == 56:
        raise torch.AcceleratorError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported")
    if oom:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    while not (gate / "open").exists():
        time.sleep(0.02)
    put(gate / f"{key}.end.{share}", {"at": time.time()})
    report(1, {"share": share})
    return TrialResult("done", 1, {"test.top1": 1.0})


def put(path: Path, value: dict[str, Any]) -> None:
    """Write `value` as JSON whole: under a name `starts` never globs, then renamed (the test process read a start
    file a trial had created but not yet filled, and failed on empty JSON)."""
    tmp = path.with_name(f"{path.name.replace('.', '-')}-{os.getpid()}.tmp")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)


def starts(gate: Path) -> list[dict[str, Any]]:
    out = []
    for f in gate.glob("*.start.*"):
        key, _, share = f.name.split(".", 2)
        end = gate / f"{key}.end.{share}"
        row = {"key": key, **json.loads(f.read_text())}
        row["end"] = json.loads(end.read_text())["at"] if end.exists() else None
        out.append(row)
    return out


def wait(what: Any, limit: float = 60) -> Any:
    end = time.monotonic() + limit
    while not (value := what()):
        if time.monotonic() > end:
            raise TimeoutError("condition never held")
        time.sleep(0.05)
    return value


def phase(root: Path, name: str, model: dict[str, Any], seeds: int, running: int, gpus: Any = "auto") -> dict:
    """Launch `seeds` trials of `model`; once `running` of them hold the gate, note Ray's free GPU, then open."""
    import ray

    base = {"data": {"name": "digits"}, "model": {"backbone": "vit", "patch_size": 2, "img_size": 8, **model},
            "train": {"epochs": 1, "batch_size": 64}, "resources": {"cpus": 1, "gpus": gpus}}  # fmt: skip
    folder = root / name
    (folder / "gate").mkdir(parents=True)
    f = folder / "e.yaml"
    f.write_text(yaml.safe_dump({"sweeps": {name: {"base": base, "seeds": seeds}}}))
    messages: list[str] = []
    progress = Display(live=False)
    progress.message = messages.append  # type: ignore[method-assign]
    box: dict[str, Any] = {}
    with Store(f"sqlite:///{folder}/r.sqlite") as store:
        run = RunConfig(storage=folder / "ck", runner=held, probe=fake_probe)
        th = threading.Thread(target=lambda: box.update(res=launch([plan(f, name)], store, run=run, progress=progress)))
        th.start()
        try:
            wait(lambda: len([s for s in starts(folder / "gate") if s["end"] is None and not s["oom"]]) >= running)
            free = ray.available_resources().get("GPU", 0.0)
            held_at_gate = len(starts(folder / "gate"))
        finally:  # a failed wait still lets the trials finish, so the process ends
            (folder / "gate" / "open").touch()
        th.join(timeout=180)
        trials = store.trials_frame(name)
    return {"free_gpu": free, "held": held_at_gate, "counts": dict(box["res"].counts), "messages": messages,
            "starts": starts(folder / "gate"), "attempts": trials["attempts"].tolist(),
            "errors": trials["error"].dropna().tolist()}  # fmt: skip


def main(root: Path) -> None:
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ[FAKE_GPU] = "1"  # logical GPUs: the workers (which inherit it) train their trials on the CPU
    ray.init(address="local", num_cpus=8, num_gpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False, object_store_memory=128 * 2**20)  # fmt: skip

    def width(w: int) -> dict[str, Any]:
        return {"embed_dim": w, "depths": [1], "num_heads": [2]}

    out = {
        "small": phase(root, "small", width(32), seeds=6, running=6),
        "large": phase(root, "large", width(64), seeds=3, running=2),
        "oom": phase(root, "oom", width(48), seeds=1, running=1),
        "cuda_error": phase(root, "cuda_error", width(56), seeds=1, running=1),
        "whole": phase(root, "whole", width(40), seeds=1, running=0, gpus=1),
    }
    ray.shutdown()
    print(json.dumps(out))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
