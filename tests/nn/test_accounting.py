"""Accounting: the CSaN paper's parameter counts (meta-device builds), FLOPs, peak memory, cached costs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import BUILTIN_KINDS, KINDS
from torch import nn

import ablate.nn  # noqa: F401  (registers every variant)
from ablate.config import TrialConfig
from ablate.nn.accounting import count_flops, count_params, example_input, flops, peak_memory
from ablate.nn.costs import data_dims, model_cost
from ablate.nn.factory import create_model
from ablate.nn.widths import meta_params

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
    # a mixer missing from the registry is a failure here (create_model raises), never a skip
    params = meta_params(trial(model, attention), num_classes=1000, in_chans=3)
    assert abs(params / 1e6 - millions) <= 0.005 * millions, params


def test_count_params_counts_shared_parameters_once() -> None:
    lin = nn.Linear(7, 5)
    assert count_params(nn.Sequential(lin, nn.ReLU(), lin)) == 7 * 5 + 5


def test_flops_count_matmuls_per_example() -> None:
    lin = nn.Linear(7, 5)
    assert count_flops(lin, torch.randn(4, 7)) == 2 * 7 * 5  # per example, 2 per multiply-accumulate


def test_flops_count_cpu_fused_attention_like_its_meta_decomposition() -> None:
    """Both devices against the count by hand from the shapes (2 FLOPs per multiply-accumulate)."""
    cfg = trial({"backbone": "vit", "embed_dim": 32, "depths": [2], "num_heads": [2], "img_size": 32, "patch_size": 8})
    model = create_model(cfg, 10, 3).eval()
    cpu = count_flops(model, example_input(cfg, 3, batch=2))
    with torch.device("meta"):
        meta = count_flops(create_model(cfg, 10, 3).eval(), example_input(cfg, 3, device="meta"))
    patches, tokens, width, hidden = 16, 17, 32, 4 * 32  # 4 x 4 patches of 8 x 8 px, plus the class token
    embed = patches * (3 * 8 * 8) * width
    attention = 2 * tokens * tokens * width  # q k^T and a v, over 2 heads of width 16
    block = tokens * width * 3 * width + attention + tokens * width * width + 2 * tokens * width * hidden
    head = width * 10  # the class token only
    assert cpu == meta == 2 * (embed + 2 * block + head)


def test_flops_count_the_backward_pass_of_cpu_fused_attention() -> None:
    """SDPA's CPU kernels: forward 2 matmuls, backward 5 (the logits recomputed), 2 FLOPs per MAC."""
    q, k, v = (torch.randn(2, 3, 11, 4, requires_grad=True) for _ in range(3))
    matmul = 2 * 2 * 3 * 11 * 11 * 4
    assert flops(lambda: F.scaled_dot_product_attention(q, k, v)) == 2 * matmul
    assert flops(lambda: F.scaled_dot_product_attention(q, k, v).sum().backward()) == 7 * matmul


def test_swin_tiny_flops_match_timm_published_macs() -> None:
    gflops = model_cost(trial({"size": "swin-tiny"}), in_chans=3, num_classes=1000).gflops
    assert gflops / 2 == pytest.approx(4.5, rel=0.01)  # timm's swin_tiny: 4.5 GMACs


def test_attention_matmul_flops_by_hand_and_the_papers_convention() -> None:
    """ViT at 32 px, patch 8, one class token: N = 17 tokens, 2 blocks, 2 heads of 8 dims: each block's two
    attention matmuls are 2 x 2 x 17 x 17 x (8 + 8) FLOPs per example. Without them the published CSaN
    table's GMACs come out within 2.5% (they leave the attention matmuls out)."""
    tiny = {"backbone": "vit", "embed_dim": 16, "depths": [2], "num_heads": [2], "patch_size": 8, "img_size": 32}
    cost = model_cost(trial(tiny), in_chans=3, num_classes=10)
    assert cost.attention_gflops * 1e9 == 2 * (2 * 2 * 17 * 17 * (8 + 8))
    for model, attention, published in [
        ({"size": "vit-base"}, None, 16.9),
        ({"size": "swin-tiny"}, None, 4.4),
        ({"size": "hiera-base"}, None, 8.8),
        ({"size": "swin-small"}, CSAN, 8.9),
    ]:
        c = model_cost(trial(model, attention), in_chans=3, num_classes=1000)
        assert (c.gflops - c.attention_gflops) / 2 == pytest.approx(published, rel=0.025), model
        assert c.gflops / 2 > published * 1.015  # the counted convention runs above the published one


def test_hiera_tiny_plus_csan_flops_match_the_paper() -> None:
    """Published 4.91 GMACs (attention matmuls left out): CSaN's gates and trunk run on every input token of
    Hiera's pooled-query blocks, as the authors' code does; on the pooled tokens only it would be 4.83."""
    c = model_cost(trial({"size": "hiera-tiny-plus"}, CSAN), in_chans=3, num_classes=1000)
    assert (c.gflops - c.attention_gflops) / 2 == pytest.approx(4.91, rel=0.01)
    assert c.params / 1e6 == pytest.approx(29.1, rel=0.01)


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
    # embedding, k/v, the query's projection, logits and weighted sum (4 heads of 8), projection back, head
    macs = 64 * 166 * 256 + 64 * 256 * 64 + 256 * 32 + 2 * 4 * 64 * 8 + 32 * 256 + 256
    assert cost.gflops * 1e9 == 2 * macs


def swin_variant_macs(kind: str) -> int:
    """Multiply-accumulates per image of `test_model_cost_of_every_variant_matches_a_real_cpu_model`'s Swin,
    by hand: 8 x 8 tokens of width 24 in 4 windows of 16, 2 heads of width 12, 2 blocks, 10 classes.

    The attention's N x N matmuls per window and head: q k^T and a v (16 x 16 x 12 each) for the kinds that
    form logits; Gaussian's q and k carry one more column (the key bias) and all three are zero-padded to
    16, as are non-local means' (which has no q, k, v projections); ISTA's 3 default steps take 2 each (a K,
    then (Q - a K) K^T), plus a v. CSaN adds its linears
    (descriptor gates r = 24 // 4 = 6, trunk h = max(24 // 8, 24) = 24) and the tiny spread of m over the
    gates; its logits are formed once (the explicit path, queries within a chunk). A kind not listed here
    is a KeyError: a new mixer must state its cost."""
    tokens, width, windows, heads, d, n = 64, 24, 4, 2, 12, 16
    per_window_head = {
        "softmax": 2 * n * n * d,
        "syn": 2 * n * n * d,
        "sparsemax": 2 * n * n * d,
        "entmax15": 2 * n * n * d,
        "laplace": 2 * n * n * d,
        "csan": 2 * n * n * d,
        "gaussian": 2 * n * n * 16,
        "nlm": 2 * n * n * 16,
        "ista": (2 * 3 + 1) * n * n * d,
    }[kind]
    r, h = 6, 24
    csan = tokens * (heads * r + width * r + r * h + h * h + 2 * h * heads + 2 * h * width)
    qkv = 0 if kind == "nlm" else tokens * width * 3 * width
    block = qkv + windows * heads * per_window_head + tokens * width * width
    block += 2 * tokens * width * 4 * width + (csan if kind == "csan" else 0)
    return tokens * (3 * 4 * 4) * width + 2 * block + width * 10


def test_every_configurable_kind_is_registered() -> None:
    """Every attention.kind the config accepts has a mixer: a kind that validates but cannot be built
    would fail only at trial time."""
    assert set(BUILTIN_KINDS) <= set(KINDS)


@pytest.mark.parametrize("kind", KINDS)  # the config's kinds: an unregistered one fails here
def test_model_cost_of_every_variant_matches_a_real_cpu_model(kind: str) -> None:
    """The meta-device count (or its CPU fallback), and counting a real model on CPU, equal the count by
    hand from the shapes."""
    model = {"backbone": "swin", "embed_dim": 24, "depths": [2], "num_heads": [2], "img_size": 32, "window_size": 4}
    cfg = trial(model, {"kind": kind})
    cost = model_cost(cfg, in_chans=3, num_classes=10)
    real = create_model(cfg, 10, 3).eval()
    assert cost.params == count_params(real)
    assert cost.gflops * 1e9 == pytest.approx(2 * swin_variant_macs(kind), rel=1e-12)
    assert count_flops(real, example_input(cfg, 3, batch=2)) == 2 * swin_variant_macs(kind)
