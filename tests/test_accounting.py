"""Accounting: the CSaN paper's parameter counts (meta-device builds), FLOPs, peak memory, cached costs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ablate.nn  # noqa: F401  (registers every variant)
from ablate.config import TrialConfig
from ablate.nn.accounting import count_flops, count_params, data_dims, example_input, flops, model_cost, peak_memory
from ablate.nn.factory import create_model, meta_params
from ablate.nn.mixer import REGISTRY

CSAN = {"kind": "csan"}
#: (model fields, attention, published params in millions) at ImageNet defaults (224 px, 1000 classes).
PAPER = [
    ({"size": "swin-min"}, None, 11.8),
    ({"size": "swin-min", "stack": "pure"}, None, 8.63),
    ({"size": "swin-tiny"}, None, 28.3),
    ({"size": "swin-base"}, None, 87.8),
    ({"size": "vit-base"}, None, 86.6),
    ({"size": "hiera-base"}, None, 51.5),
    ({"size": "swin-min", "stack": "pure"}, CSAN, 9.5),
    ({"size": "swin-tiny"}, CSAN, 29.5),
    ({"size": "swin-tiny"}, {"kind": "csan", "kappa_pub": "head"}, 29.0),
    ({"size": "vit-base-slim"}, CSAN, 40.6),
    ({"size": "swin-min"}, CSAN, 12.2),
    ({"size": "swin-min", "dwconv": True}, CSAN, 12.3),
    ({"size": "swin-small"}, CSAN, 51.8),
    ({"size": "swin-small", "dwconv": True}, CSAN, 52.3),
    ({"size": "hiera-tiny-plus"}, CSAN, 29.1),
]


def trial(model: dict, attention: dict | None = None, **rest: object) -> TrialConfig:
    return TrialConfig.model_validate(dict(model=model, attention=attention or {"kind": "softmax"}, **rest))


@pytest.mark.parametrize("model, attention, millions", PAPER, ids=lambda v: str(v))
def test_parameter_counts_reproduce_the_paper(model: dict, attention: dict | None, millions: float) -> None:
    if attention and attention["kind"] not in REGISTRY:
        pytest.skip(f"{attention['kind']} mixer not registered")
    params = meta_params(trial(model, attention), num_classes=1000, in_chans=3)
    assert abs(params / 1e6 - millions) <= 0.005 * millions, params


def test_count_params_counts_shared_parameters_once() -> None:
    lin = nn.Linear(7, 5)
    assert count_params(nn.Sequential(lin, nn.ReLU(), lin)) == 7 * 5 + 5


def test_flops_count_matmuls_per_example() -> None:
    lin = nn.Linear(7, 5)
    assert count_flops(lin, torch.randn(4, 7)) == 2 * 7 * 5  # per example, 2 per multiply-accumulate


def test_flops_count_cpu_fused_attention_like_its_meta_decomposition() -> None:
    cfg = trial({"backbone": "vit", "embed_dim": 32, "depths": [2], "num_heads": [2], "img_size": 32, "patch_size": 8})
    model = create_model(cfg, 10, 3).eval()
    cpu = count_flops(model, example_input(cfg, 3, batch=2))
    with torch.device("meta"):
        meta = count_flops(create_model(cfg, 10, 3).eval(), example_input(cfg, 3, device="meta"))
    tokens, width = 17, 32
    attention = 2 * 2 * (2 * tokens * tokens * width)  # 2 blocks x (q k^T and a v), 2 FLOPs per MAC
    assert cpu == meta and cpu > attention


def test_flops_count_the_backward_pass_of_cpu_fused_attention() -> None:
    """SDPA's CPU kernels: forward 2 matmuls, backward 5 (the logits recomputed), 2 FLOPs per MAC."""
    q, k, v = (torch.randn(2, 3, 11, 4, requires_grad=True) for _ in range(3))
    matmul = 2 * 2 * 3 * 11 * 11 * 4
    assert flops(lambda: F.scaled_dot_product_attention(q, k, v)) == 2 * matmul
    assert flops(lambda: F.scaled_dot_product_attention(q, k, v).sum().backward()) == 7 * matmul


def test_swin_tiny_flops_match_timm_published_macs() -> None:
    gflops = model_cost(trial({"size": "swin-tiny"}), in_chans=3, num_classes=1000).gflops
    assert gflops / 2 == pytest.approx(4.5, rel=0.01)  # timm's swin_tiny: 4.5 GMACs


def test_peak_memory_cpu_counts_saved_activations() -> None:
    cfg = trial({"backbone": "vit", "embed_dim": 32, "depths": [2], "num_heads": [2], "img_size": 32, "patch_size": 4})
    model = create_model(cfg, 10, 3)
    small, big = example_input(cfg, 3, batch=4), example_input(cfg, 3, batch=16)
    train, infer = peak_memory(model, small), peak_memory(model, small, grad=False)
    assert train > infer > 0
    activations = 4 * 65 * 32 * 4  # batch x tokens x width x float32 bytes: one block input
    assert train > 2 * 4 * activations  # many tensors of that size are saved for backward
    assert peak_memory(model, big) == pytest.approx(4 * train, rel=0.25)


def test_model_cost_is_cached_by_architecture_only() -> None:
    base = trial({"size": "swin-min"}, data={"name": "mnist5k"})
    cost = model_cost(base)
    other_recipe = trial({"size": "swin-min"}, data={"name": "mnist5k", "split_seed": 3}, seed=7, train={"lr": 0.1})
    assert model_cost(other_recipe) is cost
    assert model_cost(trial({"size": "swin-min", "stack": "pure"}, data={"name": "mnist5k"})).params < cost.params
    assert cost.params == meta_params(base, num_classes=10, in_chans=1)


def test_data_dims_without_loading(tmp_path) -> None:
    assert data_dims(trial({"size": "swin-min"}, data={"name": "cifar100", "path": "x"})) == (3, 100)
    csv = tmp_path / "bags.csv"
    csv.write_text("label,bag_id,f1,f2,f3\n1,0,0.1,0.2,0.3\n")
    mil = trial({"size": "synpool"}, {"kind": "syn"}, task="mil", data={"name": "mil_csv", "path": str(csv)})
    assert data_dims(mil) == (3, 2)
    for name in ("cat", "dog"):
        (tmp_path / "train" / name).mkdir(parents=True)
    folder = trial({"size": "swin-min"}, data={"name": "imagefolder", "path": str(tmp_path)})
    assert data_dims(folder) == (3, 2)


def test_mil_cost_is_per_bag() -> None:
    cfg = trial({"size": "synpool"}, {"kind": "syn", "steps": 3}, task="mil", data={"name": "musk1"})
    cost = model_cost(cfg)
    assert cost.params == 166 * 256 + 256 + 256 + 2 * 256 + (256 * 32 + 32) + (256 * 64 + 64) + (32 * 256 + 256) + 257
    assert cost.gflops > 2 * 64 * 166 * 256 / 1e9  # the embedding of a 64-instance bag dominates


@pytest.mark.parametrize("kind", sorted(REGISTRY))
def test_model_cost_of_every_variant_matches_a_real_cpu_model(kind: str) -> None:
    """The meta-device count (or its CPU fallback) equals counting a real model on CPU."""
    model = {"backbone": "swin", "embed_dim": 24, "depths": [2], "num_heads": [2], "img_size": 32, "window_size": 4}
    cfg = trial(model, {"kind": kind})
    cost = model_cost(cfg, in_chans=3, num_classes=10)
    real = create_model(cfg, 10, 3).eval()
    assert cost.params == count_params(real)
    assert cost.gflops * 1e9 == pytest.approx(count_flops(real, example_input(cfg, 3, batch=2)))
