"""Swin's network: timm's SwinTransformer with every window attention re-classed to run the trial's mixer,
and CSaN-V2's depthwise conv on the attention branches."""

from __future__ import annotations

import timm
import torch
import torch.nn.functional as F
from timm.models.swin_transformer import SwinTransformerBlock, WindowAttention, window_partition, window_reverse
from torch import Tensor, nn

from ablate.components import Mechanism
from ablate.config import ModelConfig
from ablate.nn.mixer import TokenGrid
from ablate.nn.surgery import Mixed, has_qkv_bias, set_grid, timm_args


class MixedWindowAttention(Mixed, WindowAttention):
    """Swin window attention; bias = relative-position bias + shift mask (-100 across sub-windows)."""

    @staticmethod
    def blank(attn: nn.Module, head_dim: int) -> WindowAttention:
        assert isinstance(attn, WindowAttention)
        qkv_bias = has_qkv_bias(attn)
        return WindowAttention(attn.dim, attn.num_heads, head_dim, window_size=attn.window_size, qkv_bias=qkv_bias)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        B_, N, _ = x.shape
        q, k, v = self.qkv(x).reshape(B_, N, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
        bias = self._get_rel_pos_bias()  # (1, H, N, N)
        if mask is not None:  # (num_windows, N, N), windows vary fastest along the batch
            bias = (bias + mask.unsqueeze(1)).expand(B_ // mask.shape[0], -1, -1, -1, -1).reshape(B_, -1, N, N)
        out = self.mixer(q, k, v, bias=bias, x=x)
        y: Tensor = self.proj_drop(self.proj(out.transpose(1, 2).reshape(B_, N, -1)))
        return y


class DWConv(nn.Module):
    """CSaN-V2's 7x7 depthwise conv (with bias) on a channels-last (B, H, W, C) map."""

    def __init__(self, dim: int, kernel_size: int = 7) -> None:
        super().__init__()
        self.conv = nn.Conv2d(dim, dim, kernel_size, padding=kernel_size // 2, groups=dim)

    def forward(self, x: Tensor) -> Tensor:
        y: Tensor = self.conv(x.permute(0, 3, 1, 2))
        return y.permute(0, 2, 3, 1)


class MixedSwinBlock(SwinTransformerBlock):
    """Swin block whose attention branches (one, or two in a pure stack) share timm's windowing."""

    dwconv1: nn.Module
    dwconv2: nn.Module

    @classmethod
    def adopt(cls, block: SwinTransformerBlock, m: ModelConfig, att: Mechanism) -> SwinTransformerBlock:
        """Re-class a timm block in place: mixed attention, pure stack's twin in `mlp`, dwconv per branch; its
        mixers told their window's grid."""
        block.__class__ = cls
        MixedWindowAttention.adopt(block.attn, att)
        pure = m.stack == "pure"
        if pure:
            twin = MixedWindowAttention.twin(block.attn, att, m.twin_width)
            block.mlp = twin  # type: ignore[assignment]  # timm types mlp as Mlp
        set_grid(block, TokenGrid(0, *block.window_size))
        block.dwconv1 = DWConv(block.dim) if m.dwconv else nn.Identity()
        block.dwconv2 = DWConv(block.dim) if m.dwconv and pure else nn.Identity()
        return block

    def _windowed(self, x: Tensor, attn: nn.Module, post: nn.Module) -> Tensor:
        """timm's branch (shift, pad, partition, attention, reverse, crop, unshift) with `post` before unshift."""
        _, H, W, C = x.shape
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
            branch: Tensor = self.drop_path2(self._windowed(self.norm2(x), self.mlp, self.dwconv2))
        else:
            branch = self.drop_path2(self.mlp(self.norm2(x)))
        return x + branch


def create(m: ModelConfig, attention: Mechanism, num_classes: int, in_chans: int) -> nn.Module:
    """timm SwinTransformer (stage widths embed_dim * 2^i) with every window attention mixed."""
    model = timm.create_model("swin_tiny_patch4_window7_224", **timm_args(m, num_classes, in_chans),
                              patch_size=m.patch_size, depths=m.depths, num_heads=m.num_heads,
                              window_size=m.window_size)  # fmt: skip
    for block in [b for b in model.modules() if isinstance(b, SwinTransformerBlock)]:
        MixedSwinBlock.adopt(block, m, attention)
    return model
