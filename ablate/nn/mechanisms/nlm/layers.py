"""Non-local means as a token mixer: the Gaussian kernel of `ablate.nn.mechanisms.kernel` on the tokens themselves.

Its config forces identity projections, so the attention around it hands over q = k = v = each head's share
of the token's channels. The weights are the Gaussian kernel's (`gaussian_mix`, the same SDPA rows as
`gaussian` attention) at 1 / s^2 = 1 / (n sigma^2), n the channels compared: sigma is a bandwidth per channel
(tokens leave LayerNorm with unit variance per channel), one per head, learnt as log sigma or fixed. The patch
form compares each token's patch x patch neighbourhood on the backbone's token grid (`TokenMixer.grid`) and
averages the tokens themselves, as non-local means compares patches and averages their centre pixels.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ablate.nn.mechanisms.kernel.layers import gaussian_mix, log_sigma
from ablate.nn.mixer import TokenGrid, TokenMixer

if TYPE_CHECKING:
    from ablate.nn.mechanisms.nlm import NonLocalMeansAttention


def neighbourhoods(t: Tensor, grid: TokenGrid, patch: int) -> Tensor:
    """(..., N, d) -> (..., N, d * patch^2): each grid token's patch x patch neighbourhood (F.unfold's layout:
    channel by channel, the patch's tokens row by row within each), zeros outside the grid; a prefix token (off
    the grid) in the centre slot, zeros around it. Only distances are taken, so the layout is the same to them
    as any other fixed one."""
    *lead, n, d = t.shape
    h, w = grid.height, grid.width
    if n != grid.prefix + h * w:
        raise ValueError(f"{n} tokens do not lie on the grid of {grid.prefix} prefix tokens and {h} x {w}")
    cells, centre = patch * patch, patch * patch // 2
    body = t[..., grid.prefix :, :].reshape(-1, h, w, d).permute(0, 3, 1, 2)  # (L, d, h, w)
    body = F.unfold(body, patch, padding=patch // 2).transpose(1, 2).reshape(*lead, h * w, d * cells)
    prefix = F.pad(t[..., : grid.prefix, :].unsqueeze(-1), (centre, cells - 1 - centre))
    return torch.cat([prefix.flatten(-2), body], -2)


class NonLocalMeans(TokenMixer):
    """softmax_j(-||P_i - P_j||^2 / (2 n sigma^2) + bias_ij) v_j, P = q and k or their neighbourhoods."""

    cfg: NonLocalMeansAttention
    log_sigma: Tensor

    def __init__(self, cfg: NonLocalMeansAttention, dim: int, num_heads: int, in_dim: int | None = None) -> None:
        super().__init__(cfg, dim, num_heads, in_dim)
        start = log_sigma(cfg.sigma, num_heads)
        if cfg.learn_sigma:
            self.log_sigma = nn.Parameter(start)
        else:
            self.register_buffer("log_sigma", start)

    def key_width(self, head_dim: int) -> int:
        return head_dim * self.cfg.patch**2

    def forward(self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None = None, x: Tensor | None = None) -> Tensor:
        if self.cfg.patch > 1:
            if self.grid is None:
                raise ValueError(f"nlm patch {self.cfg.patch} compares neighbourhoods on a token grid: its backbone "
                                 "gave this attention none")  # fmt: skip
            q, k = neighbourhoods(q, self.grid, self.cfg.patch), neighbourhoods(k, self.grid, self.cfg.patch)
        inv = torch.exp(-2 * self.log_sigma).view(-1, 1, 1) / q.shape[-1]
        return gaussian_mix(self, q, k, v, inv, bias)
