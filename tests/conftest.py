"""Shared fixtures: a real local Ray for the session, tiny sweeps on real data, stores in tmp folders."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from ablate.plugins import load_builtins
from ablate.registry import MECHANISMS

ROOT = Path(__file__).resolve().parents[1]
#: A real MIDatasets file (MIT, licence beside it), for the .jld reader.
MUSK1_JLD = ROOT / "tests" / "data" / "mil" / "Musk1.jld"

load_builtins()
#: The built-in mechanisms: every one must be registered (a missing registration fails the tests over KINDS).
BUILTIN_KINDS = ("softmax", "csan", "syn", "gaussian", "laplace", "sparsemax", "entmax15", "ista")
#: Every registered mechanism kind, for tests parametrised over the registry.
KINDS = sorted(MECHANISMS.names())

#: A tiny real trial: scikit-learn's 8x8 digits, a 2-block ViT; about a second per epoch here.
TINY = {
    "data": {"name": "digits"},
    "model": {
        "backbone": "vit",
        "embed_dim": 32,
        "depths": [2],
        "num_heads": [2],
        "patch_size": 2,
        "img_size": 8,
        "mlp_ratio": 2,
    },
    "train": {"epochs": 2, "batch_size": 128, "lr": 2e-3},
}


def write_sweeps(path: Path, sweeps: dict) -> Path:
    path.write_text(yaml.safe_dump({"sweeps": sweeps}, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def ray_local():
    """One embedded Ray (2 CPUs) for every launch test of the session; launches reuse it."""
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
             object_store_memory=128 * 2**20)  # fmt: skip
    yield ray
    ray.shutdown()
