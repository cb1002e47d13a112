"""Backbone surgery on real timm models at tiny sizes: every registered mixer x backbone x stack trains,
softmax surgery equals timm's own forward, CSaN-V2's conv sits where the paper puts it, match_params."""

from __future__ import annotations

import copy
import re

import pytest
import torch
from conftest import KINDS
from pydantic import ValidationError
from timm.layers import Mlp
from timm.models.swin_transformer import SwinTransformerBlock

from ablate.config import TrialConfig
from ablate.nn.backbones.swin.layers import DWConv, MixedSwinBlock
from ablate.nn.factory import create_model
from ablate.nn.mixer import TokenMixer
from ablate.nn.surgery import Mixed
from ablate.nn.widths import match_width, meta_params

TINY = {
    "swin": dict(backbone="swin", embed_dim=24, depths=(2, 2), num_heads=(2, 4), img_size=32, window_size=4),
    "vit": dict(backbone="vit", embed_dim=24, depths=(2,), num_heads=(2,), img_size=32, patch_size=8),
    "hiera": dict(
        backbone="hiera", embed_dim=8, depths=(1, 1, 1, 1), num_heads=(1,), img_size=32, patch_size=2, window_size=8
    ),
}
#: Knobs that make a variant do something at all (syn: 0 steps is softmax).
KNOBS = {"syn": {"steps": 2}}
#: (kind, backbone) -> the parameters (by last name) that the mixer genuinely leaves unused, so they get no
#: gradient: ISTA reads Swin's relative-position bias only as a key mask (bias <= MASK_LEVEL), which has
#: no gradient. Every other parameter of every model must get a finite, nonzero gradient.
UNUSED = {("ista", "swin"): {"relative_position_bias_table"}}
#: (kind, backbone) -> model fields the pair needs: nlm takes the tokens themselves as q, k and v, and Hiera's
#: later stages widen their tokens inside an attention (refused at validation); one stage has no transition.
FITS = {("nlm", "hiera"): {"depths": (1,)}}


def trial(attention: str = "softmax", **model: object) -> TrialConfig:
    return TrialConfig.model_validate(dict(model=model, attention={"kind": attention, **KNOBS.get(attention, {})}))


def timm_twin(model: torch.nn.Module) -> torch.nn.Module:
    """A copy with every re-classed module turned back into its timm class (so timm's forward runs)."""
    plain = copy.deepcopy(model)
    for module in plain.modules():
        if isinstance(module, Mixed):
            del module.mixer
            module.__class__ = type(module).__bases__[1]
        elif isinstance(module, MixedSwinBlock):
            module.__class__ = SwinTransformerBlock
    return plain


@pytest.mark.parametrize("stack", ["alternating", "pure"])
@pytest.mark.parametrize("backbone", sorted(TINY))
@pytest.mark.parametrize("kind", KINDS)
def test_every_variant_trains_in_every_backbone(kind: str, backbone: str, stack: str) -> None:
    torch.manual_seed(0)
    fields = {**TINY[backbone], **FITS.get((kind, backbone), {})}
    model = create_model(trial(kind, **fields, stack=stack), num_classes=5, in_chans=3)
    mixers = [m for m in model.modules() if isinstance(m, TokenMixer)]
    blocks = sum(fields["depths"])
    assert len(mixers) == blocks * (2 if stack == "pure" else 1)
    assert all(m.cfg.kind == kind for m in mixers) and len({type(m) for m in mixers}) == 1
    assert any(isinstance(m, Mlp) for m in model.modules()) == (stack != "pure")  # a pure stack replaces every MLP

    torch.nn.init.normal_(model.get_classifier().weight)  # Hiera zero-inits its head: no gradient behind it
    out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 5) and torch.isfinite(out).all()
    (out * torch.randn_like(out)).sum().backward()
    unused = UNUSED.get((kind, backbone), set())
    for name, p in model.named_parameters():
        if name.split(".")[-1] in unused:
            assert p.grad is None, f"{kind} was expected to leave {name} unused"
        else:
            assert p.grad is not None, f"no gradient reaches {name}"
            assert torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name
    assert any(n.split(".")[-1] in unused for n, _ in model.named_parameters()) == bool(unused)  # names exist


@pytest.mark.parametrize("backbone", sorted(TINY))
def test_softmax_surgery_equals_timm(backbone: str) -> None:
    """Same parameters, timm's forward vs the mixer path: the surgery changes nothing but the route."""
    model = create_model(trial(**TINY[backbone]), num_classes=5, in_chans=3).eval()
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(model(x), timm_twin(model)(x), rtol=1e-5, atol=1e-5)


def test_swin_tiny_config_has_shifted_windows_and_hiera_pooled_mask_units() -> None:
    """The equivalence above covers the hard cases: Swin's shift mask and Hiera's pooled mask units."""
    swin = create_model(trial(**TINY["swin"]), 5, 3)
    assert any(any(b.shift_size) for b in swin.modules() if isinstance(b, SwinTransformerBlock))
    hiera = create_model(trial(**TINY["hiera"]), 5, 3)
    pooled = [b.attn for b in hiera.blocks if b.attn.q_stride > 1]
    assert pooled and any(a.use_mask_unit_attn for a in pooled)


@pytest.mark.parametrize("stack", ["alternating", "pure"])
def test_dwconv_on_every_swin_attention_branch(stack: str) -> None:
    plain = create_model(trial(**TINY["swin"], stack=stack), 5, 3)
    v2 = create_model(trial(**TINY["swin"], stack=stack, dwconv=True), 5, 3)
    convs = [m for m in v2.modules() if isinstance(m, DWConv)]
    branches = sum(TINY["swin"]["depths"]) * (2 if stack == "pure" else 1)
    assert len(convs) == branches
    per_conv = sum(c.conv.weight.numel() + c.conv.bias.numel() for c in convs)
    assert sum(p.numel() for p in v2.parameters()) - sum(p.numel() for p in plain.parameters()) == per_conv
    assert all(c.conv.kernel_size == (7, 7) and c.conv.groups == c.conv.in_channels for c in convs)


def test_dwconv_sits_after_window_reverse_and_before_the_reverse_shift() -> None:
    model = create_model(trial(**TINY["swin"], dwconv=True), 5, 3)
    block = next(b for b in model.modules() if isinstance(b, MixedSwinBlock) and any(b.shift_size))
    x = torch.randn(2, 8, 8, block.dim)
    branch = block._windowed(x, block.attn, torch.nn.Identity())  # window-reversed and unshifted
    s = block.shift_size
    expected = torch.roll(block.dwconv1(torch.roll(branch, (-s[0], -s[1]), (1, 2))), s, (1, 2))
    torch.testing.assert_close(block._attn(x), expected)
    assert not torch.allclose(block._attn(x), block.dwconv1(branch), atol=1e-4)  # the placement matters


def test_pure_stack_second_attention_reuses_the_block_geometry() -> None:
    model = create_model(trial(**TINY["swin"], stack="pure"), 5, 3)
    for block in (b for b in model.modules() if isinstance(b, MixedSwinBlock)):
        assert block.mlp.window_size == block.attn.window_size and block.mlp.num_heads == block.attn.num_heads
    hiera = create_model(trial(**TINY["hiera"], stack="pure"), 5, 3)
    for block in hiera.blocks:
        assert block.mlp.q_stride == 1 and block.mlp.dim == block.mlp.dim_out == block.dim_out
        assert block.mlp.window_size == block.attn.window_size
        assert block.mlp.use_mask_unit_attn == block.attn.use_mask_unit_attn


@pytest.mark.parametrize("kind", ["softmax", "csan"])
@pytest.mark.parametrize("backbone", sorted(TINY))
def test_twin_width_widens_the_pure_stack_twin_inside_the_block_width(backbone: str, kind: str) -> None:
    """model.twin_width 2: each twin's q, k, v are twice the block width (heads kept, head dims doubled) and its
    output projection maps back to the block width, so its weights are those of the FFN it replaces (8 C^2);
    the model trains."""
    torch.manual_seed(0)
    model = create_model(trial(kind, **TINY[backbone], stack="pure", twin_width=2.0), 5, 3)
    ffns = [m for m in create_model(trial(kind, **TINY[backbone]), 5, 3).modules() if isinstance(m, Mlp)]
    blocks = [b for b in model.modules() if isinstance(getattr(b, "mlp", None), Mixed)]
    assert blocks and len(blocks) == len(ffns)
    for block, ffn in zip(blocks, ffns):
        twin, width = block.mlp, ffn.fc2.out_features
        assert (twin.qkv.in_features, twin.qkv.out_features) == (width, 3 * 2 * width)
        assert (twin.proj.in_features, twin.proj.out_features) == (2 * width, width)
        assert (twin.mixer.dim, twin.mixer.num_heads) == (2 * width, block.attn.mixer.num_heads)
        assert twin.qkv.weight.numel() + twin.proj.weight.numel() == ffn.fc1.weight.numel() + ffn.fc2.weight.numel()
    torch.nn.init.normal_(model.get_classifier().weight)  # Hiera zero-inits its head: no gradient behind it
    out = model(torch.randn(2, 3, 32, 32))
    out.square().sum().backward()
    assert out.shape == (2, 5) and all(p.grad is not None and p.grad.isfinite().all() for p in model.parameters())


def test_twin_width_and_match_by_are_validated() -> None:
    """twin_width sizes a pure stack's twin (whole head dims at every stage); match_by: twin_width solves it."""
    vit, pure = TINY["vit"], {**TINY["vit"], "stack": "pure"}  # one stage of 2 heads of 12
    assert trial(**pure, twin_width=1.5).model.twin_width == 1.5
    with pytest.raises(ValidationError, match="needs stack: pure"):
        trial(**vit, twin_width=2.0)
    with pytest.raises(ValidationError, match="greater than 0"):
        trial(**pure, twin_width=0.0)
    with pytest.raises(ValidationError, match="heads must divide"):
        trial(**pure, twin_width=1.1)  # 13.2-wide heads
    swin = {**TINY["swin"], "num_heads": (2, 3), "stack": "pure"}  # heads of 12, then 16
    assert trial(**swin, twin_width=0.25).model.twin_width == 0.25
    with pytest.raises(ValidationError, match="heads must divide"):
        trial(**swin, twin_width=1 / 3)  # 4 wide in the first stage, 5.33 in the second
    with pytest.raises(ValidationError, match="needs match_params and stack: pure"):
        trial(**pure, match_by="twin_width")
    with pytest.raises(ValidationError, match="needs match_params and stack: pure"):
        trial(**vit, match_params=1e5, match_by="twin_width")
    with pytest.raises(ValidationError, match="leave it unset"):
        trial(**pure, match_params=1e5, match_by="twin_width", twin_width=2.0)
    with pytest.raises(ValidationError, match="stack applies to image backbones only"):
        TrialConfig.model_validate({"task": "mil", "data": {"name": "musk1"},
                                    "model": {"size": "synpool", "stack": "pure", "twin_width": 2.0}})  # fmt: skip


@pytest.mark.parametrize("backbone", sorted(TINY))
def test_match_by_twin_width_keeps_embed_dim_and_solves_the_twin(backbone: str) -> None:
    """A pure stack matched to the alternating model by its twin's width: near 2x (the FFN's weights; biases and
    Swin's position tables differ), within 2%, embed_dim untouched; a reference stack drops twin_width."""
    cfg = trial(**TINY[backbone], stack="pure", match_params={"model.stack": "alternating"}, match_by="twin_width")
    solved = match_width(cfg, 5, 3)
    target = meta_params(trial(**TINY[backbone]), 5, 3)
    assert solved.model.embed_dim == TINY[backbone]["embed_dim"] and 1.5 <= solved.model.twin_width <= 2.5
    assert abs(meta_params(solved, 5, 3) - target) <= 0.02 * target
    wide = trial(**TINY[backbone], stack="pure", twin_width=2.0, match_params={"model.stack": "alternating"})
    assert abs(meta_params(wide, 5, 3) - target) <= 0.02 * target  # embed_dim solved beside a set twin width


def test_param_matching_lands_within_two_percent() -> None:
    """The CSaN paper's diamond row: Swin-Min pure softmax widened to the alternating model's count."""
    cfg = trial(size="swin-min", stack="pure", match_params={"model.stack": "alternating"})
    solved = match_width(cfg, 1000, 3)
    target = meta_params(trial(size="swin-min"), 1000, 3)
    got = meta_params(solved, 1000, 3)
    assert solved.model.embed_dim % 3 == 0 and solved.model.embed_dim > 96
    assert abs(got - target) <= 0.02 * target
    with torch.device("meta"):
        assert sum(p.numel() for p in create_model(cfg, 1000, 3).parameters()) == got
    numeric = match_width(trial(**TINY["vit"], match_params=float(got)), 1000, 3)
    assert abs(meta_params(numeric, 1000, 3) - got) <= 0.02 * got


def test_match_params_reference_switches_the_attention_section() -> None:
    reference = {"model.stack": "alternating", "attention.kind": "softmax"}
    cfg = trial("csan", size="swin-min", stack="pure", match_params=reference)
    solved = match_width(cfg, 1000, 3)
    assert solved.attention.kind == "csan" and solved.model.stack == "pure"
    target = meta_params(trial(size="swin-min"), 1000, 3)
    assert abs(meta_params(solved, 1000, 3) - target) <= 0.02 * target


def test_match_search_skips_widths_the_mechanism_rejects() -> None:
    """CSaN refuses embed_dim // reduction < heads; the search passes those widths and lands on one it takes."""
    narrow = dict(backbone="vit", embed_dim=16, depths=(2,), num_heads=(2,), img_size=8, patch_size=2)
    with pytest.raises(ValueError, match="fewer gates"):
        create_model(trial("csan", **{**narrow, "embed_dim": 6}), 10, 1)
    goal = meta_params(trial("csan", **{**narrow, "embed_dim": 10}), 10, 1)
    solved = match_width(trial("csan", **narrow, match_params=float(goal)), 10, 1)
    assert solved.model.embed_dim == 10
    with pytest.raises(ValueError, match=r"target 3,000 parameters; closest: embed_dim 8 -> "):
        match_width(trial("csan", **narrow, match_params=3000.0), 10, 1)


def test_factory_errors_are_clear() -> None:
    with pytest.raises(ValidationError, match="dwconv"):
        trial(**TINY["vit"], dwconv=True)
    with pytest.raises(ValueError, match=r"window_size .*multiple of 2\^\(stages-1\) = 8"):
        create_model(trial(**{**TINY["hiera"], "window_size": 7}), 5, 3)
    with pytest.raises(ValueError, match="one num_heads entry"):
        create_model(trial(**{**TINY["hiera"], "num_heads": (1, 2, 4, 8)}), 5, 3)
    with pytest.raises(
        ValueError, match=r"within 2% of the target 10 parameters; closest: embed_dim 2 -> [\d,]+ \(\+[\d.,]+%\)"
    ):
        match_width(trial(**TINY["swin"], match_params=10.0), 5, 3)  # below the narrowest model
    with pytest.raises(ValueError, match=re.escape("'model.nope.x' is not a dotted config path")):
        match_width(trial(**TINY["swin"], match_params={"model.nope.x": 1}), 5, 3)
    with pytest.raises(ValueError, match="does not describe a valid reference model"):
        match_width(trial(**TINY["swin"], match_params={"model.stack": "sideways"}), 5, 3)
