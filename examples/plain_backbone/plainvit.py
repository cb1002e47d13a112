"""A backbone as an ablate plugin, in one file: a small ViT in plain torch whose every attention runs the
trial's mechanism.

A backbone declares its sizes, refuses at validation the model configs it cannot build (`check`: an error
before anything runs, never a silently different model), and builds the network around the trial's mechanism:
each attention projects the tokens to q, k, v of shape (B, H, N, d), hands them to the mechanism's token
mixer and projects the mixer's (B, H, N, d) output back to (B, N, C). The experiments file lists this file
under `plugins:`; ablate imports it before validating the file and on every Ray worker, and from then on
`model.backbone: plainvit` is a backbone like the built-in ones. Installed (`pip install .`, see
pyproject.toml) it is found through its entry point instead, with no `plugins:` key.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ablate.components import Backbone, Mechanism
from ablate.config import ModelConfig
from ablate.nn.mixer import create_mixer
from ablate.nn.shapes import heads_divide, no_dwconv, one_stage, patch_grid
from ablate.registry import register_backbone


class PlainViT(Backbone):
    """Patch embedding, `depths[0]` pre-norm attention / MLP blocks, mean pooling, a linear head."""

    name = "plainvit"
    family = "Plain ViT"
    patch_size = 4
    normalization = "inception"
    sizes = {"plainvit-micro": dict(embed_dim=32, depths=(2,), num_heads=(2,), patch_size=4, mlp_ratio=2.0)}

    def check(self, m: ModelConfig) -> None:
        """The shape rules of one-stage backbones (`ablate.nn.shapes`), and no option this network lacks."""
        patch_grid(m)
        one_stage(m)
        heads_divide(m)
        no_dwconv(m)
        if m.stack != "alternating" or m.drop_path:
            raise ValueError("plainvit builds alternating attention / MLP stacks without drop path")

    def build(self, m: ModelConfig, attention: Mechanism, num_classes: int, in_chans: int) -> nn.Module:
        return PlainViTNet(m, attention, num_classes, in_chans)


class Attention(nn.Module):
    """Multi-head attention whose q, k, v go through the mechanism's token mixer."""

    def __init__(self, dim: int, num_heads: int, attention: Mechanism) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.mixer = create_mixer(attention, dim, num_heads)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4).unbind(0)
        out = self.mixer(q, k, v, bias=None, x=x)  # (B, H, N, d): no mask, and the tokens the keys came from
        y: Tensor = self.proj(out.transpose(1, 2).reshape(B, N, C))
        return y


class Block(nn.Module):
    def __init__(self, dim: int, num_heads: int, mlp_ratio: float, attention: Mechanism) -> None:
        super().__init__()
        hidden = round(dim * mlp_ratio)
        self.norm1, self.attn = nn.LayerNorm(dim), Attention(dim, num_heads, attention)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.norm1(x))
        y: Tensor = x + self.mlp(self.norm2(x))
        return y


class PlainViTNet(nn.Module):
    """Images (B, in_chans, img_size, img_size) -> logits (B, num_classes)."""

    def __init__(self, m: ModelConfig, attention: Mechanism, num_classes: int, in_chans: int) -> None:
        super().__init__()
        assert m.embed_dim and m.depths and m.num_heads and m.patch_size  # set by validation
        dim, tokens = m.embed_dim, (m.img_size // m.patch_size) ** 2
        self.patches = nn.Conv2d(in_chans, dim, m.patch_size, stride=m.patch_size)
        self.pos = nn.Parameter(torch.randn(1, tokens, dim) * 0.02)
        self.blocks = nn.Sequential(*(Block(dim, m.num_heads[0], m.mlp_ratio, attention) for _ in range(m.depths[0])))
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, num_classes)

    def forward(self, images: Tensor) -> Tensor:
        x = self.patches(images).flatten(2).transpose(1, 2) + self.pos
        y: Tensor = self.head(self.norm(self.blocks(x)).mean(1))
        return y


register_backbone(PlainViT())
