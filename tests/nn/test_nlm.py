"""Non-local means (`nlm`) and `attention.projections` (learned | tied | identity): against float64
references written from the formulas, in the mixer and in real timm attentions; what validation refuses;
what `ablate plan` counts."""

from __future__ import annotations

import math

import pytest
import torch
from pydantic import TypeAdapter, ValidationError

from ablate.config import AttentionConfig, TrialConfig
from ablate.nn.costs import model_cost
from ablate.nn.factory import create_model
from ablate.nn.mixer import TokenGrid, create_mixer
from ablate.nn.surgery import IdentityQKV, TiedQKV
from ablate.planning.keys import trial_key
from ablate.registry import MECHANISMS
from ablate.reporting import describe

B, H, D = 2, 3, 4
NEG = float("-inf")
#: A class token, then a 3 x 4 grid (not square: rows and columns must not be swapped).
GRID = TokenGrid(1, 3, 4)
N = GRID.prefix + GRID.height * GRID.width


def nlm(**knobs: object) -> AttentionConfig:
    return TypeAdapter(AttentionConfig).validate_python({"kind": "nlm", **knobs})


def trial(model: dict, attention: dict) -> TrialConfig:
    return TrialConfig.model_validate({"data": {"name": "digits"}, "model": model, "attention": attention})


def neighbourhood_reference(t: torch.Tensor, grid: TokenGrid, patch: int) -> torch.Tensor:
    """Token by token: a grid token's patch x patch neighbours in row-major order (zeros off the grid), a
    prefix token alone in the centre slot."""
    n, r, out = t.shape[-2], patch // 2, []
    for i in range(n):
        slots = []
        for di in range(-r, r + 1):
            for dj in range(-r, r + 1):
                if i < grid.prefix:
                    slots.append(t[..., i, :] if di == dj == 0 else torch.zeros_like(t[..., i, :]))
                    continue
                row, col = divmod(i - grid.prefix, grid.width)
                inside = 0 <= row + di < grid.height and 0 <= col + dj < grid.width
                j = grid.prefix + (row + di) * grid.width + col + dj
                slots.append(t[..., j, :] if inside else torch.zeros_like(t[..., i, :]))
        out.append(torch.cat(slots, -1))
    return torch.stack(out, -2)


def nlm_reference(
    y: torch.Tensor, sigma: torch.Tensor, patch: int, grid: TokenGrid = GRID, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """sum_j exp(-||P_i - P_j||^2 / (2 n sigma^2) + b_ij) y_j / sum_j exp(...) in float64, P the neighbourhoods
    on `grid` (n channels), sigma per head; a row masked everywhere is zero."""
    y = y.double()
    p = neighbourhood_reference(y, grid, patch) if patch > 1 else y
    d2 = ((p.unsqueeze(-2) - p.unsqueeze(-3)) ** 2).sum(-1)
    s = -d2 / (2 * p.shape[-1] * sigma.double().view(-1, 1, 1) ** 2)
    if bias is not None:
        s = s + bias.double()
    dead = (s == NEG).all(-1, keepdim=True)
    w = torch.exp(s - s.masked_fill(dead, 0).amax(-1, keepdim=True)).masked_fill(dead, 0)
    return (w / w.sum(-1, keepdim=True).clamp_min(1e-300)) @ y


def tokens(n: int = N, width: int = H * D, seed: int = 0) -> torch.Tensor:
    return torch.randn(B, n, width, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, N, C) -> (B, H, N, C / H): the token split into heads, as identity projections hand it over."""
    return x.view(x.shape[0], x.shape[1], num_heads, -1).transpose(1, 2)


# ------------------------------------------------------------------------------------------------- the mixer
@pytest.mark.parametrize("record", [False, True])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("patch", [1, 3, 5])
def test_nlm_mixer_equals_the_float64_formula(patch: int, masked: bool, record: bool) -> None:
    """q = k = v = the tokens; the bandwidth per head from the config (sigma) and the learnt steps applied
    here; the patch form against neighbourhoods gathered token by token."""
    mixer = create_mixer(nlm(sigma=0.7, patch=patch), H * D, H).double()
    mixer.grid, mixer.record = GRID, record
    step = torch.tensor([0.0, 0.4, -0.3], dtype=torch.float64)
    with torch.no_grad():
        mixer.log_sigma.add_(step)
    y = heads(tokens(), H).requires_grad_()
    bias = None
    if masked:
        bias = torch.zeros(1, H, N, N, dtype=torch.float64)
        bias[..., 2, :] = NEG  # a row masked everywhere
        bias[..., 5] = -100.0  # a key masked like Swin's shift mask
    out = mixer(y, y, y, bias=bias)
    start = torch.tensor(math.log(0.7)).double()  # the config's sigma as the float32 parameter holds it
    torch.testing.assert_close(out, nlm_reference(y, (start + step).exp(), patch, bias=bias), rtol=1e-10, atol=1e-12)
    out.square().sum().backward()
    assert mixer.log_sigma.grad.abs().min() > 0 and y.grad.isfinite().all()


def test_nlm_fixed_bandwidth_has_no_parameter_and_stays_put() -> None:
    learnt, fixed = create_mixer(nlm(), H * D, H), create_mixer(nlm(sigma=2.0, learn_sigma=False), H * D, H)
    assert [n for n, _ in learnt.named_parameters()] == ["log_sigma"]
    assert list(fixed.parameters()) == [] and torch.equal(fixed.log_sigma, torch.full((H,), math.log(2.0)))
    y = heads(tokens(), H).float()
    ref = nlm_reference(y, torch.full((H,), 2.0), 1)
    torch.testing.assert_close(fixed(y, y, y).double(), ref, rtol=1e-5, atol=1e-6)


def test_nlm_patch_form_needs_the_grid_and_counts_its_width() -> None:
    mixer = create_mixer(nlm(patch=3), H * D, H)
    y = heads(tokens(), H).float()
    with pytest.raises(ValueError, match="compares neighbourhoods on a token grid"):
        mixer(y, y, y)
    mixer.grid = TokenGrid(0, 3, 4)  # 12 tokens, not 13
    with pytest.raises(ValueError, match="13 tokens do not lie on the grid of 0 prefix tokens and 3 x 4"):
        mixer(y, y, y)
    assert mixer.key_width(D) == 9 * D and create_mixer(nlm(), H * D, H).key_width(D) == D


# ---------------------------------------------------------------------------------------------- in the models
VIT = {"backbone": "vit", "embed_dim": 12, "depths": [2], "num_heads": [3], "patch_size": 2, "img_size": 8}
SWIN = {"backbone": "swin", "embed_dim": 12, "depths": [2], "num_heads": [3], "img_size": 32, "window_size": 4}
HIERA1 = {"backbone": "hiera", "embed_dim": 12, "depths": [2], "num_heads": [3], "img_size": 16, "window_size": 4}


def attention_module(model: dict, attention: dict, twin: bool = False) -> torch.nn.Module:
    torch.manual_seed(0)
    net = create_model(trial(model, attention), 10, 1).double()
    attns = [m for m in net.modules() if hasattr(m, "mixer")]
    return attns[1 if twin else 0]


@pytest.mark.parametrize("patch", [1, 3])
def test_nlm_in_vit_is_non_local_means_of_the_tokens_themselves(patch: int) -> None:
    """A ViT attention with nlm: no q/k/v weights, the patch grid after the class token (the 8 px image in
    2 px patches: 4 x 4), then timm's output projection."""
    attn = attention_module(VIT, {"kind": "nlm", "patch": patch})
    assert isinstance(attn.qkv, IdentityQKV) and attn.mixer.grid == TokenGrid(1, 4, 4)
    x = tokens(17, 12)
    y = heads(x, 3)
    ref = nlm_reference(y, attn.mixer.log_sigma.detach().exp(), patch, TokenGrid(1, 4, 4))
    ref = ref.transpose(1, 2).reshape(B, 17, 12)
    torch.testing.assert_close(attn(x), attn.proj(ref), rtol=1e-10, atol=1e-12)


def test_swin_tells_each_window_its_grid_and_nlm_adds_the_position_bias() -> None:
    attn = attention_module(SWIN, {"kind": "nlm"})
    assert attn.mixer.grid == TokenGrid(0, 4, 4)
    x = tokens(16, 12)
    bias = attn._get_rel_pos_bias()
    ref = nlm_reference(heads(x, 3), attn.mixer.log_sigma.detach().exp(), 1, bias=bias)
    torch.testing.assert_close(attn(x), attn.proj(ref.transpose(1, 2).reshape(B, 16, 12)), rtol=1e-10, atol=1e-12)


def softmax_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + (0 if bias is None else bias)
    return s.softmax(-1) @ v


@pytest.mark.parametrize("projections", ["tied", "identity"])
@pytest.mark.parametrize("model", [VIT, SWIN, HIERA1], ids=["vit", "swin", "hiera"])
def test_projections_are_what_they_say_in_every_surgery_backbone(model: dict, projections: str) -> None:
    """Softmax attention with tied projections (q = k = x W_qk + b, v = x W_v + b) or none (q = k = v = x),
    against the formula in float64 (Swin: with its relative-position bias)."""
    attn = attention_module(model, {"kind": "softmax", "projections": projections})
    n = 16 if model is not VIT else 17
    x = tokens(n, 12)
    if projections == "tied":
        assert isinstance(attn.qkv, TiedQKV)
        q = qk = heads(attn.qkv.qk(x), 3)
        v = heads(attn.qkv.v(x), 3)
    else:
        assert isinstance(attn.qkv, IdentityQKV) and not list(attn.qkv.parameters())
        q = qk = v = heads(x, 3)
    bias = attn._get_rel_pos_bias() if model is SWIN else None
    ref = softmax_reference(q, qk, v, bias).transpose(1, 2).reshape(B, n, 12)
    torch.testing.assert_close(attn(x), attn.proj(ref), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("model", [VIT, SWIN], ids=["vit", "swin"])
def test_tied_projections_keep_timms_initialisation_and_the_pure_twin(model: dict) -> None:
    """Tied takes timm's query and value rows (no random draw), so the rest of the model, the pure stack's
    twin included, starts where the learned model does."""
    pure = {**model, "stack": "pure"}
    learned = attention_module(pure, {"kind": "softmax"})
    tied = attention_module(pure, {"kind": "softmax", "projections": "tied"})
    width = learned.qkv.out_features // 3
    assert torch.equal(tied.qkv.qk.weight, learned.qkv.weight[:width])
    assert torch.equal(tied.qkv.v.bias, learned.qkv.bias[2 * width :])
    twin_learned = attention_module(pure, {"kind": "softmax"}, twin=True)
    twin_tied = attention_module(pure, {"kind": "softmax", "projections": "tied"}, twin=True)
    assert torch.equal(twin_tied.qkv.qk.weight, twin_learned.qkv.weight[:width])
    assert torch.equal(twin_tied.proj.weight, twin_learned.proj.weight)


# ------------------------------------------------------------------------------------------------ accounting
@pytest.mark.parametrize("model", [VIT, SWIN], ids=["vit", "swin"])
def test_plan_counts_tied_and_identity_projections_by_hand(model: dict) -> None:
    """What `ablate plan` shows: tied drops each attention's query matrix (C x C + C), identity all three;
    FLOPs drop 2 C^2 per token for each matrix gone; the attention matmuls stay."""
    costs = {
        p: model_cost(trial(model, {"kind": "softmax", "projections": p})) for p in ("learned", "tied", "identity")
    }
    c, blocks, tokens_per_image = 12, 2, 17 if model is VIT else 64
    matrix = c * c + c
    assert costs["learned"].params - costs["tied"].params == blocks * matrix
    assert costs["learned"].params - costs["identity"].params == blocks * 3 * matrix
    per_matrix = blocks * tokens_per_image * 2 * c * c
    assert round((costs["learned"].gflops - costs["tied"].gflops) * 1e9) == per_matrix
    assert round((costs["learned"].gflops - costs["identity"].gflops) * 1e9) == 3 * per_matrix
    assert len({cost.attention_gflops for cost in costs.values()}) == 1


def test_plan_counts_nlm_patches_at_their_width() -> None:
    """nlm has no projections (identity's parameters, plus one bandwidth per head and block); its patch form
    compares 9 tokens' channels: the logits' matmul is 9 x wider, the weighted sum of the tokens is not."""
    identity = model_cost(trial(VIT, {"kind": "softmax", "projections": "identity"}))
    one, three = (model_cost(trial(VIT, {"kind": "nlm", "patch": p})) for p in (1, 3))
    assert one.params == three.params == identity.params + 2 * 3
    blocks, per_channel = 2, 2 * 3 * 17 * 17  # 2 B H Nq Nk per channel of a key and of a value (dense products)
    assert round(one.attention_gflops * 1e9) == blocks * per_channel * (4 + 4)
    assert round(three.attention_gflops * 1e9) == blocks * per_channel * (9 * 4 + 4)


# ------------------------------------------------------------------------------------------------ validation
@pytest.mark.parametrize(
    ("model", "attention", "where", "message"),
    [
        (VIT, {"kind": "nlm", "projections": "learned"}, ("attention", "projections"), "Input should be 'identity'"),
        ({**HIERA1, "depths": [1, 1]}, {"kind": "nlm"}, ("attention", "kind"), "widens its tokens (12 -> 24"),
        (HIERA1, {"kind": "nlm", "patch": 3}, ("attention", "patch"), "hiera tells its attentions none"),
        (VIT, {"kind": "nlm", "patch": 2}, ("attention", "patch"), "patch must be odd"),
        ({**VIT, "stack": "pure", "twin_width": 2}, {"kind": "gaussian", "projections": "identity"},
         ("attention", "projections"), "a twin attention 2 x as wide as its tokens cannot"),
    ],
)  # fmt: skip
def test_refusals_name_the_knob(model: dict, attention: dict, where: tuple, message: str) -> None:
    with pytest.raises(ValidationError) as info:
        trial(model, attention)
    (error,) = info.value.errors()
    assert error["loc"][0] == where[0] and error["loc"][-1] == where[1] and message in error["msg"], error


def test_every_mechanism_takes_every_projection_in_the_surgery_backbones() -> None:
    """Projections are the attention layer's, so every kind takes them (nlm fixes its own: identity); the
    key changes only away from learned, so stored trials keep theirs."""
    for kind in MECHANISMS.names():
        choices = ["identity"] if kind == "nlm" else ["learned", "tied", "identity"]
        keys = {p: trial_key(trial(VIT, {"kind": kind, "projections": p})) for p in choices}
        assert len(set(keys.values())) == len(choices)
        assert keys[choices[0]] == trial_key(trial(VIT, {"kind": kind}))


def test_nlm_is_described_in_words() -> None:
    assert describe.attention({"attention": {"kind": "nlm"}}) == "Non-local means (sigma0=1.0 learnt)"
    assert describe.attention({"attention": {"kind": "nlm", "sigma": 0.5, "learn_sigma": False, "patch": 3}}) == (
        "Non-local means (sigma=0.5 fixed; 3x3 patches)"
    )
    assert all(describe.said(f"attention.{k}") for k in ("sigma", "learn_sigma", "patch"))
    assert not describe.said("attention.projections")  # appended as projections=... where a sweep varies it
