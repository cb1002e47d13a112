"""Backbone surgery on timm models: every attention of a timm Swin, ViT or Hiera runs a registered mixer.

The models come from `timm.create_model` (never copied). Surgery re-classes timm's attention modules in
place to the `Mixed*` subclasses below: timm's parameters, names, buffers and helper methods (window
resizing, init) all stay, only `forward` changes, and it keeps timm's qkv projection and output projection
and hands q, k, v, the additive bias and the tokens to the module's `mixer`. So with the `softmax` mixer a
patched model computes what timm's model computes (tested).

Stacks: `alternating` is timm's attention/FFN blocks. `pure` replaces every FFN by a second attention of the
same kind, width, heads and resolution; it lives in the block's `mlp` slot, so timm's LayerNorm (`norm2`),
drop path and residual wrap it unchanged (Swin: the same windows and the same shift as the block's first
attention). `dwconv` (CSaN-V2, Swin only): a 7x7 depthwise conv on every attention branch output, after
window reverse and before the reverse shift; its output replaces the branch output before the residual add.
"""

from __future__ import annotations

from ablate import _tv_compat  # noqa: F401  (must precede every timm import)

import timm
import torch
import torch.nn.functional as F
from timm.layers import Attention
from timm.layers.attention import resolve_self_attn_mask
from timm.models import named_apply
from timm.models.hiera import HieraBlock, MaskUnitAttention
from timm.models.swin_transformer import SwinTransformerBlock, WindowAttention, window_partition, window_reverse
from timm.models.vision_transformer import Block, init_weights_vit_timm
from torch import Tensor, nn

from ablate.config import AttentionConfig, ModelConfig
from ablate.nn.mixer import TokenMixer, create_mixer


class Mixed:
    """Mixin of the re-classed timm attentions: `adopt` turns a timm attention into its mixer-aware twin."""

    mixer: TokenMixer

    @classmethod
    def adopt(cls, attn: nn.Module, att: AttentionConfig) -> nn.Module:
        """Re-class `attn` in place and give it a mixer sized from its own qkv projection."""
        heads = attn.num_heads if hasattr(attn, "num_heads") else attn.heads
        attn.__class__ = cls
        attn.mixer = create_mixer(att, attn.qkv.out_features // 3, heads, attn.qkv.in_features)
        return attn

    @classmethod
    def twin(cls, attn: nn.Module, att: AttentionConfig) -> nn.Module:
        """A freshly initialised attention shaped like `attn` (the pure stack's FFN replacement)."""
        fresh = named_apply(init_weights_vit_timm, cls.blank(attn), include_root=True)
        return cls.adopt(fresh, att)

    @staticmethod
    def blank(attn: nn.Module) -> nn.Module:
        """A new timm attention (timm's class, not yet mixed) with `attn`'s widths, heads and geometry."""
        raise NotImplementedError


class MixedWindowAttention(Mixed, WindowAttention):
    """Swin window attention; bias = relative-position bias + shift mask (-100 across sub-windows)."""

    @staticmethod
    def blank(attn: WindowAttention) -> WindowAttention:
        qkv_bias = attn.qkv.bias is not None
        return WindowAttention(attn.dim, attn.num_heads, window_size=attn.window_size, qkv_bias=qkv_bias)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        B_, N, _ = x.shape
        q, k, v = self.qkv(x).reshape(B_, N, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
        bias = self._get_rel_pos_bias()  # (1, H, N, N)
        if mask is not None:  # (num_windows, N, N), windows vary fastest along the batch
            bias = (bias + mask.unsqueeze(1)).expand(B_ // mask.shape[0], -1, -1, -1, -1).reshape(B_, -1, N, N)
        out = self.mixer(q, k, v, bias=bias, x=x)
        return self.proj_drop(self.proj(out.transpose(1, 2).reshape(B_, N, -1)))


class MixedAttention(Mixed, Attention):
    """ViT attention; bias = timm's optional attention mask, resolved to an additive bias."""

    @staticmethod
    def blank(attn: Attention) -> Attention:
        qkv_bias, proj_bias = attn.qkv.bias is not None, attn.proj.bias is not None
        return Attention(attn.qkv.in_features, attn.num_heads, qkv_bias=qkv_bias, proj_bias=proj_bias)

    def forward(self, x: Tensor, attn_mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        B, N, _ = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        q, k = self.q_norm(q), self.k_norm(k)
        out = self.mixer(q, k, v, bias=resolve_self_attn_mask(N, q, attn_mask, is_causal), x=x)
        out = self.norm(out.transpose(1, 2).reshape(B, N, self.attn_dim))
        if self.gate is not None:
            out = out * self.gate(x).sigmoid()
        return self.proj_drop(self.proj(out))


class MixedMaskUnitAttention(Mixed, MaskUnitAttention):
    """Hiera attention, mask-unit (windows folded into the batch) or global, with optional query pooling.

    Pooled-query blocks: timm max-pools q over the q_stride positions of each output token; the tokens the
    mixer sees (`x`, for variants whose gates read the token, e.g. CSaN's descriptor gates) are the block's
    normalised input tokens max-pooled the same way, so there is one token per pooled query, of width
    in_dim = the block's input width (the mixer's dim is the output width).
    """

    @staticmethod
    def blank(attn: MaskUnitAttention) -> MaskUnitAttention:
        return MaskUnitAttention(attn.dim_out, attn.dim_out, attn.heads, 1, attn.window_size, attn.use_mask_unit_attn)

    def forward(self, x: Tensor) -> Tensor:
        B, N, C = x.shape
        nw = N // (self.q_stride * self.window_size) if self.use_mask_unit_attn else 1
        # token n = t * nw + w (Hiera's unrolled order); fold windows into the batch: (B * nw, H, t, d)
        qkv = self.qkv(x).reshape(B, -1, nw, 3, self.heads, self.head_dim).permute(3, 0, 2, 4, 1, 5)
        q, k, v = qkv.reshape(3, B * nw, self.heads, -1, self.head_dim).unbind(0)
        tokens = x.view(B, -1, nw, C).transpose(1, 2).reshape(B * nw, -1, C)
        if self.q_stride > 1:
            q = q.view(B * nw, self.heads, self.q_stride, -1, self.head_dim).amax(dim=2)
            tokens = tokens.view(B * nw, self.q_stride, -1, C).amax(dim=1)
        out = self.mixer(q, k, v, x=tokens)
        out = out.view(B, nw, self.heads, -1, self.head_dim).permute(0, 3, 1, 2, 4).reshape(B, -1, self.dim_out)
        return self.proj(out)


class DWConv(nn.Module):
    """CSaN-V2's 7x7 depthwise conv (with bias) on a channels-last (B, H, W, C) map."""

    def __init__(self, dim: int, kernel_size: int = 7) -> None:
        super().__init__()
        self.conv = nn.Conv2d(dim, dim, kernel_size, padding=kernel_size // 2, groups=dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)


class MixedSwinBlock(SwinTransformerBlock):
    """Swin block whose attention branches (one, or two in a pure stack) share timm's windowing."""

    @classmethod
    def adopt(cls, block: SwinTransformerBlock, m: ModelConfig, att: AttentionConfig) -> SwinTransformerBlock:
        """Re-class a timm block in place: mixed attention, pure stack's twin in `mlp`, dwconv per branch."""
        block.__class__ = cls
        MixedWindowAttention.adopt(block.attn, att)
        pure = m.stack == "pure"
        if pure:
            block.mlp = MixedWindowAttention.twin(block.attn, att)
        block.dwconv1 = DWConv(block.dim) if m.dwconv else nn.Identity()
        block.dwconv2 = DWConv(block.dim) if m.dwconv and pure else nn.Identity()
        return block

    def _windowed(self, x: Tensor, attn: nn.Module, post: nn.Module) -> Tensor:
        """timm's branch (shift, pad, partition, attention, reverse, crop, unshift) with `post` before unshift."""
        B, H, W, C = x.shape
        shifted = any(self.shift_size)
        if shifted:
            x = torch.roll(x, shifts=(-self.shift_size[0], -self.shift_size[1]), dims=(1, 2))
        pad_h = (self.window_size[0] - H % self.window_size[0]) % self.window_size[0]
        pad_w = (self.window_size[1] - W % self.window_size[1]) % self.window_size[1]
        x = F.pad(x, (0, 0, 0, pad_w, 0, pad_h))
        Hp, Wp = x.shape[1:3]
        mask = self.get_attn_mask(x) if self.dynamic_mask else self.attn_mask
        windows = attn(window_partition(x, self.window_size).view(-1, self.window_area, C), mask=mask)
        x = post(window_reverse(windows.view(-1, *self.window_size, C), self.window_size, Hp, Wp)[:, :H, :W])
        if shifted:
            x = torch.roll(x, shifts=self.shift_size, dims=(1, 2))
        return x

    def _attn(self, x: Tensor) -> Tensor:
        return self._windowed(x, self.attn, self.dwconv1)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.drop_path1(self._attn(self.norm1(x)))
        if isinstance(self.mlp, WindowAttention):
            return x + self.drop_path2(self._windowed(self.norm2(x), self.mlp, self.dwconv2))
        return x + self.drop_path2(self.mlp(self.norm2(x)))


def _mix_blocks(model: nn.Module, block_type: type[nn.Module], m: ModelConfig, att: AttentionConfig) -> nn.Module:
    """ViT / Hiera: mixer in every block's attention; pure stacks get a twin attention in the FFN slot."""
    for block in [b for b in model.modules() if isinstance(b, block_type)]:
        mixed = {Attention: MixedAttention, MaskUnitAttention: MixedMaskUnitAttention}[type(block.attn)]
        mixed.adopt(block.attn, att)
        if m.stack == "pure":
            block.mlp = mixed.twin(block.attn, att)
    return model


def _common(m: ModelConfig, num_classes: int, in_chans: int) -> dict:
    return dict(
        pretrained=False,
        img_size=m.img_size,
        in_chans=in_chans,
        num_classes=num_classes,
        embed_dim=m.embed_dim,
        mlp_ratio=m.mlp_ratio,
        drop_path_rate=m.drop_path,
    )


def build_swin(m: ModelConfig, att: AttentionConfig, num_classes: int, in_chans: int) -> nn.Module:
    """timm SwinTransformer (stage widths embed_dim * 2^i) with every window attention mixed."""
    model = timm.create_model(
        "swin_tiny_patch4_window7_224",
        **_common(m, num_classes, in_chans),
        patch_size=m.patch_size,
        depths=m.depths,
        num_heads=m.num_heads,
        window_size=m.window_size,
    )
    for block in [b for b in model.modules() if isinstance(b, SwinTransformerBlock)]:
        MixedSwinBlock.adopt(block, m, att)
    return model


def build_vit(m: ModelConfig, att: AttentionConfig, num_classes: int, in_chans: int) -> nn.Module:
    """timm VisionTransformer (class token, depth = depths[0]) with every attention mixed."""
    model = timm.create_model(
        "vit_base_patch16_224",
        **_common(m, num_classes, in_chans),
        patch_size=m.patch_size,
        depth=m.depths[0],
        num_heads=m.num_heads[0],
    )
    return _mix_blocks(model, Block, m, att)


def check_hiera(m: ModelConfig) -> None:
    """Raise a ValueError when timm's Hiera cannot take this geometry.

    Hiera pools queries 2x2 at every stage transition (q_pool = stages - 1) inside mask units of
    window_size^2 tokens, so the window must be a multiple of 2^(stages-1) and divide the token grid.
    """
    stages, grid = len(m.depths), m.img_size // m.patch_size
    if len(m.num_heads) != 1:
        raise ValueError(f"hiera takes one num_heads entry (the first stage's, doubled per stage), got {m.num_heads}")
    if m.img_size % m.patch_size or grid % m.window_size or m.window_size % 2 ** (stages - 1):
        raise ValueError(
            f"hiera needs window_size (the mask unit) to be a multiple of 2^(stages-1) = {2 ** (stages - 1)} and to "
            f"divide the token grid img_size / patch_size = {m.img_size}/{m.patch_size}; "
            f"got window_size {m.window_size}"
        )


def build_hiera(m: ModelConfig, att: AttentionConfig, num_classes: int, in_chans: int) -> nn.Module:
    """timm Hiera (widths and heads doubling per stage; mask-unit attention in the first half of the stages,
    global after; patch embed kernel 2p-1, stride p, padding p-1, i.e. timm's 7/4/3 at p = 4) mixed."""
    check_hiera(m)
    stages, p = len(m.depths), m.patch_size
    model = timm.create_model(
        "hiera_base_224",
        **_common(m, num_classes, in_chans),
        num_heads=m.num_heads[0],
        stages=m.depths,
        q_pool=stages - 1,
        mask_unit_size=(m.window_size, m.window_size),
        mask_unit_attn=tuple(i < stages // 2 for i in range(stages)),
        patch_kernel=(2 * p - 1,) * 2,
        patch_stride=(p, p),
        patch_padding=(p - 1,) * 2,
    )
    return _mix_blocks(model, HieraBlock, m, att)
