"""Backbone surgery on timm models: every attention of a timm Swin, ViT or Hiera runs the trial's mixer.

Shared by the timm backbone components (`ablate.nn.vit`, `ablate.nn.swin`, `ablate.nn.hiera`).

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
"""

from __future__ import annotations

from typing import Any

from timm.models import named_apply
from timm.models.vision_transformer import init_weights_vit_timm
from torch import nn

from ablate.components import Mechanism
from ablate.config import ModelConfig
from ablate.nn.mixer import TokenMixer, create_mixer
from ablate.nn.shapes import twin_head_dim


class Mixed:
    """Mixin of the re-classed timm attentions: `adopt` turns a timm attention into its mixer-aware kin."""

    mixer: TokenMixer

    @classmethod
    def adopt(cls, attn: nn.Module, att: Mechanism) -> nn.Module:
        """Re-class `attn` in place and give it a mixer sized from its own qkv projection."""
        heads, qkv = _heads_qkv(attn)
        attn.__class__ = cls  # type: ignore[assignment]  # re-classed to its Mixed twin (subclasses attn's class)
        attn.mixer = create_mixer(att, qkv.out_features // 3, heads, qkv.in_features)
        return attn

    @classmethod
    def twin(cls, attn: nn.Module, att: Mechanism, width: float) -> nn.Module:
        """A freshly initialised attention shaped like `attn` (the pure stack's FFN replacement), its head
        dim `width` times `attn`'s."""
        heads, qkv = _heads_qkv(attn)
        head_dim = twin_head_dim(qkv.out_features // 3 // heads, width)
        fresh = named_apply(init_weights_vit_timm, cls.blank(attn, head_dim), include_root=True)
        return cls.adopt(fresh, att)

    @staticmethod
    def blank(attn: nn.Module, head_dim: int) -> nn.Module:
        """A new timm attention (timm's class, not yet mixed) with `attn`'s output width, heads and geometry
        and heads `head_dim` wide."""
        raise NotImplementedError


def _heads_qkv(attn: nn.Module) -> tuple[int, nn.Linear]:
    """(heads, qkv projection) of a timm attention (Hiera's names its heads `heads`)."""
    heads, qkv = attn.num_heads if hasattr(attn, "num_heads") else attn.heads, attn.qkv
    assert isinstance(heads, int) and isinstance(qkv, nn.Linear)  # as in every timm attention
    return heads, qkv


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
