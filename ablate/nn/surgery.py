"""Backbone surgery on timm models: every attention of a timm Swin, ViT or Hiera runs the trial's mixer.

Shared by the timm backbone components (`ablate.nn.backbones.vit`, `ablate.nn.backbones.swin`,
`ablate.nn.backbones.hiera`).

The models come from `timm.create_model` (never copied). Surgery re-classes timm's attention modules in
place to `Mixed` subclasses (one per backbone, in its module): timm's parameters, names, buffers and helper
methods (window resizing, init) all stay, only `forward` changes, and it keeps timm's qkv projection and output
projection and hands q, k, v, the additive bias and the tokens to the module's `mixer`. So with the `softmax` mixer a
patched model computes what timm's model computes (tested).

Stacks: `alternating` is timm's attention/FFN blocks. `pure` replaces every FFN by a second attention (the
twin) of the same kind, heads and resolution; it lives in the block's `mlp` slot, so timm's LayerNorm (`norm2`),
drop path and residual wrap it unchanged (Swin: the same windows and the same shift as the block's first
attention). Its inner width (q, k, v and the output projection's input) is `model.twin_width` times the
block's, head dims scaled; its output projection maps back to the block width. `dwconv` (CSaN-V2, Swin only):
a 7x7 depthwise conv on every attention branch output, after window reverse and before the reverse shift; its
output replaces the branch output before the residual add.

Projections (`attention.projections`): surgery swaps timm's fused `qkv` Linear for a module that returns what it
returns, [q | k | v] along the channels, so every attention's forward stays as it is. `tied` keeps timm's query
rows as one matrix that makes both q and k, and its value rows (timm's initialisation, no new random draw);
`identity` has no weights, q = k = v = the token (its attention must be as wide as its tokens). The output
projection stays. Parameter and FLOP counts follow from the modules.

A backbone with a token grid tells every mixer the layout (`set_grid`: ViT's patches after the class token,
each Swin window).
"""

from __future__ import annotations

from typing import Any

import torch
from timm.models import named_apply
from timm.models.vision_transformer import init_weights_vit_timm
from torch import Tensor, nn
from torch.nn.utils import skip_init

from ablate.components import Mechanism
from ablate.config import ModelConfig
from ablate.nn.mixer import TokenGrid, TokenMixer, create_mixer
from ablate.nn.shapes import twin_head_dim


class Projected(nn.Module):
    """timm's fused qkv Linear as `attention.projections` replaces it: the same widths in and out, and whether
    timm's had a bias (a pure stack's twin is built like it: `has_qkv_bias`)."""

    def __init__(self, qkv: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = qkv.in_features, qkv.out_features
        self.had_bias = qkv.bias is not None


class TiedQKV(Projected):
    """Tied projections: q = k = x W_qk^T + b_qk, v = x W_v^T + b_v, returned as timm's fused [q | k | v]."""

    def __init__(self, qkv: nn.Linear) -> None:
        super().__init__(qkv)
        width = qkv.out_features // 3
        self.qk = _rows(qkv, 0, width)
        self.v = _rows(qkv, 2 * width, 3 * width)

    def forward(self, x: Tensor) -> Tensor:
        qk = self.qk(x)
        return torch.cat([qk, qk, self.v(x)], -1)


class IdentityQKV(Projected):
    """No projections: q = k = v = the token, returned as timm's fused [q | k | v] (no weights)."""

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([x, x, x], -1)


def _rows(qkv: nn.Linear, start: int, stop: int) -> nn.Linear:
    """A Linear of rows start:stop of `qkv`'s weight and bias, on its device (timm's values, no random draw)."""
    w = qkv.weight
    lin: nn.Linear = skip_init(
        nn.Linear, qkv.in_features, stop - start, bias=qkv.bias is not None, device=w.device, dtype=w.dtype
    )
    with torch.no_grad():
        lin.weight.copy_(w[start:stop])
        if qkv.bias is not None:
            lin.bias.copy_(qkv.bias[start:stop])
    return lin


def project(qkv: nn.Linear, projections: str) -> nn.Module:
    """timm's fused qkv Linear as `projections` asks (`Mechanism.projections`): itself, tied, or none."""
    if projections == "learned":
        return qkv
    if projections == "tied":
        return TiedQKV(qkv)
    if qkv.out_features != 3 * qkv.in_features:
        raise ValueError(f"identity projections use the token itself: an attention {qkv.out_features // 3} wide "
                         f"cannot take tokens {qkv.in_features} wide")  # fmt: skip
    return IdentityQKV(qkv)


def has_qkv_bias(attn: nn.Module) -> bool:
    """Whether timm's fused qkv projection of `attn` has (had, before `project`) a bias."""
    qkv = attn.qkv
    return qkv.bias is not None if isinstance(qkv, nn.Linear) else isinstance(qkv, Projected) and qkv.had_bias


class Mixed:
    """Mixin of the re-classed timm attentions: `adopt` turns a timm attention into its mixer-aware kin."""

    mixer: TokenMixer

    @classmethod
    def adopt(cls, attn: nn.Module, att: Mechanism) -> nn.Module:
        """Re-class `attn` in place, project as `att.projections` asks and give it a mixer sized from its own
        qkv projection."""
        heads, in_dim, width = _heads_widths(attn)
        assert isinstance(attn.qkv, nn.Linear)  # timm's, not yet projected
        attn.__class__ = cls  # type: ignore[assignment]  # re-classed to its Mixed twin (subclasses attn's class)
        attn.qkv = project(attn.qkv, att.projections)
        attn.mixer = create_mixer(att, width, heads, in_dim)
        return attn

    @classmethod
    def twin(cls, attn: nn.Module, att: Mechanism, width: float) -> nn.Module:
        """A freshly initialised attention shaped like `attn` (the pure stack's FFN replacement), its head
        dim `width` times `attn`'s."""
        heads, _, inner = _heads_widths(attn)
        head_dim = twin_head_dim(inner // heads, width)
        fresh = named_apply(init_weights_vit_timm, cls.blank(attn, head_dim), include_root=True)
        return cls.adopt(fresh, att)

    @staticmethod
    def blank(attn: nn.Module, head_dim: int) -> nn.Module:
        """A new timm attention (timm's class, not yet mixed) with `attn`'s output width, heads and geometry
        and heads `head_dim` wide."""
        raise NotImplementedError


def _heads_widths(attn: nn.Module) -> tuple[int, int, int]:
    """(heads, token width, attention width) of a timm attention from its qkv projection (timm's Linear, or
    `project`'s), Hiera's naming its heads `heads`."""
    heads, qkv = attn.num_heads if hasattr(attn, "num_heads") else attn.heads, attn.qkv
    assert isinstance(heads, int) and isinstance(qkv, (nn.Linear, Projected))  # as in every timm attention
    return heads, qkv.in_features, qkv.out_features // 3


def set_grid(model: nn.Module, grid: TokenGrid) -> None:
    """Tell every mixer in `model` how its tokens lie (`TokenMixer.grid`)."""
    for mixer in model.modules():
        if isinstance(mixer, TokenMixer):
            mixer.grid = grid


def mix_blocks(model: nn.Module, block_type: type[nn.Module], mixed: type[Mixed], m: ModelConfig,
               att: Mechanism) -> nn.Module:  # fmt: skip
    """ViT / Hiera: mixer in every block's attention; pure stacks get a twin attention in the FFN slot."""
    for block in [b for b in model.modules() if isinstance(b, block_type)]:
        attn = mixed.adopt(block.get_submodule("attn"), att)
        if m.stack == "pure":
            block.mlp = mixed.twin(attn, att, m.twin_width)
    return model


def timm_args(m: ModelConfig, num_classes: int, in_chans: int) -> dict[str, Any]:
    return dict(
        pretrained=False,
        img_size=m.img_size,
        in_chans=in_chans,
        num_classes=num_classes,
        embed_dim=m.embed_dim,
        mlp_ratio=m.mlp_ratio,
        drop_path_rate=m.drop_path,
    )
