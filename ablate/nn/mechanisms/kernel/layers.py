"""Kernel-regression attention (the self-expression view): Gaussian and Laplace kernels, bandwidth per head.

Attention is Nadaraya-Watson regression with weights softmax_j(-dist(q_i, k_j)); a kernel on distances
instead of dot products. Distances are taken between q / d^(1/4) and k / d^(1/4), the scaling under which
q.k / sqrt(d) is the usual logit, and sigma is learnt per head as log sigma (positive, scale-free steps),
starting at ``cfg.sigma``. At sigma = 1 the Gaussian's dot-product term is exactly softmax attention's.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ablate.nn.mixer import RowsMixer, TokenMixer, logits, normalize_rows

if TYPE_CHECKING:
    from ablate.nn.mechanisms.kernel import GaussianAttention, LaplaceAttention

#: Floor of a squared distance before its square root (Laplace): a finite gradient when q_i == k_j.
DIST_EPS = 1e-6


def log_sigma(sigma: float, num_heads: int) -> Tensor:
    """log sigma per head, every head starting at `sigma` (a parameter where learnt, a buffer where fixed)."""
    return torch.full((num_heads,), math.log(sigma))


def gaussian_mix(mixer: TokenMixer, q: Tensor, k: Tensor, v: Tensor, inv: Tensor, bias: Tensor | None) -> Tensor:
    """softmax_j(-||q_i - k_j||^2 inv / 2 + bias_ij) v_j through SDPA, inv = 1 / s^2 per head, (H, 1, 1).

    -||q - k||^2 / (2 s^2) = q.k / s^2 - ||k||^2 / (2 s^2) - ||q||^2 / (2 s^2); the last term is constant
    along a row and cancels in the softmax, so it is SDPA of (q / s^2, k) plus a per-key bias. The per-key
    bias rides along as one more head dimension, q' = [q / s^2, 1], k' = [k, -||k||^2 / (2 s^2)]: as an
    attention mask it would need a gradient, which sends SDPA to its N x N math path. The fused kernels
    want one head size for q, k and v (CUDA: a multiple of 8), so all three are zero-padded to one. q and k
    may be wider than v (non-local means compares neighbourhoods and averages the tokens).
    """
    inv = inv.to(q.dtype)
    d, dv = q.shape[-1], v.shape[-1]
    width = 8 * (max(d, dv - 1) // 8 + 1)  # room for the key-bias column, up to a multiple of 8
    q = F.pad(torch.cat([q * inv, torch.ones_like(q[..., :1])], -1), (0, width - d - 1))
    k = F.pad(torch.cat([k, -0.5 * inv * (k * k).sum(-1, keepdim=True)], -1), (0, width - d - 1))
    if mixer.record:
        a = normalize_rows(logits(q, k, bias, scale=1.0), bias)
        mixer.keep_attention(a)
        return a.to(v.dtype) @ v
    mask = None if bias is None else bias.to(q.dtype)
    return F.scaled_dot_product_attention(q, k, F.pad(v, (0, width - dv)), attn_mask=mask, scale=1.0)[..., :dv]


class Gaussian(TokenMixer):
    """softmax_j(-||q_i - k_j||^2 / (2 sigma^2)) through SDPA (`gaussian_mix`)."""

    cfg: GaussianAttention

    def __init__(self, cfg: GaussianAttention, dim: int, num_heads: int, in_dim: int | None = None) -> None:
        super().__init__(cfg, dim, num_heads, in_dim)
        self.log_sigma = nn.Parameter(log_sigma(cfg.sigma, num_heads))

    def forward(self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None = None, x: Tensor | None = None) -> Tensor:
        # 1 / s^2 in unscaled units: s^2 = sigma^2 sqrt(d)
        inv = (torch.exp(-2 * self.log_sigma) * q.shape[-1] ** -0.5).view(-1, 1, 1)
        return gaussian_mix(self, q, k, v, inv, bias)


class Laplace(RowsMixer):
    """softmax_j(-||q_i - k_j|| / sigma); the distance needs every pair, so the rows are explicit."""

    cfg: LaplaceAttention

    def __init__(self, cfg: LaplaceAttention, dim: int, num_heads: int, in_dim: int | None = None) -> None:
        super().__init__(cfg, dim, num_heads, in_dim)
        self.log_sigma = nn.Parameter(log_sigma(cfg.sigma, num_heads))

    def rows(self, q: Tensor, k: Tensor, bias: Tensor | None) -> Tensor:
        scale = q.shape[-1] ** -0.25
        q, k = (q * scale).float(), (k * scale).float()
        with torch.autocast(q.device.type, enabled=False):  # ||q||^2 + ||k||^2 - 2 q.k cancels: float32
            d2 = (q * q).sum(-1, keepdim=True) + (k * k).sum(-1).unsqueeze(-2) - 2 * q @ k.transpose(-2, -1)
        s = d2.clamp_min(DIST_EPS).sqrt() * -torch.exp(-self.log_sigma).view(-1, 1, 1)
        if bias is not None:
            s = s + bias
        return normalize_rows(s, bias)
