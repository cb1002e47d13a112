"""Syn layer (synergetic attention, for multiple-instance learning): a cubic map iterated on attention rows.

Each step L2-normalises a row, then maps it: forward steps ``f(a) = gamma a^3 + (1 - gamma) a`` widen the gap
between the largest weight and the rest (concentrate, towards one-hot), backward steps ``f^-1`` narrow it
(distract, towards uniform on the support). The last step's output is not normalised again (the paper's
eqs. 9-12 and its reference code; `renormalize` offers it, off by default). Zeros are fixed points of
both maps, so the support never changes. Gradients bypass the iterations (straight-through), as in the
paper: the polynomial's repeated chain rule explodes or vanishes.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor

from ablate.nn.mixer import TokenMixer, key_keep, logits, normalize_rows

if TYPE_CHECKING:
    from ablate.nn.mechanisms.syn import SynAttention

#: Floor of a row's L2 norm: an all-zero (fully masked) row stays zero instead of becoming NaN.
NORM_EPS = 1e-12


def concentrate(a: Tensor, gamma: float) -> Tensor:
    """Forward map f(a) = gamma a^3 + (1 - gamma) a (elementwise)."""
    return gamma * a**3 + (1 - gamma) * a


def distract(y: Tensor, gamma: float) -> Tensor:
    """Backward map f^-1(y): the real root of gamma a^3 + (1 - gamma) a = y (elementwise).

    With p = (1 - gamma) / gamma the root is 2 sqrt(p/3) sinh(asinh(3 sqrt(3) y / (2 gamma p^1.5)) / 3): the
    same root as the paper's Cardano form but without its cancellation (which drifts zeros to -0.40 over 100
    steps and loses 2 digits in float32 at y = 1e-6). gamma = 1 (p = 0) is the signed cube root; its floor
    keeps the derivative at 0 finite (sign(0) = 0 zeroes it) when gradients do not bypass the steps.
    """
    if gamma == 1:
        return y.sign() * y.abs().clamp_min(torch.finfo(y.dtype).tiny).pow(1 / 3)
    p = (1 - gamma) / gamma
    c = 3 * math.sqrt(3) / (2 * gamma * p**1.5)
    return 2 * math.sqrt(p / 3) * torch.sinh(torch.asinh(c * y) / 3)


def syn_steps(a: Tensor, steps: int, gamma: float, keep: Tensor | None = None, renormalize: bool = False) -> Tensor:
    """Iterate the Syn map |steps| times on the rows (last dim) of ``a``: > 0 concentrate, < 0 distract.

    Each step normalises its input to unit L2 norm, then maps it; the last step's output is left as the map
    gives it unless ``renormalize``. ``keep`` (True = key not masked) is applied before the first step and
    re-applied after every step, so masked keys are exactly zero whatever the map does.
    """
    if steps == 0:
        return a
    step = concentrate if steps > 0 else distract
    a = a if keep is None else a * keep
    for _ in range(abs(steps)):
        a = step(F.normalize(a, dim=-1, eps=NORM_EPS), gamma)
        if keep is not None:
            a = a * keep
    return F.normalize(a, dim=-1, eps=NORM_EPS) if renormalize else a


class Syn(TokenMixer):
    """Softmax attention whose rows go through ``steps`` Syn iterations before they weight the values.

    The softmax rows and the iterations run in float32 (a cubic map in bf16 loses the small weights).
    With ``steps = 0`` this is plain attention through SDPA; N x N rows exist only when recording.
    """

    cfg: SynAttention

    def forward(self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None = None, x: Tensor | None = None) -> Tensor:
        steps, gamma = self.cfg.steps, self.cfg.gamma
        if steps == 0 and not self.record:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=None if bias is None else bias.to(q.dtype))
        a0 = normalize_rows(logits(q, k, bias).float(), bias)
        if self.cfg.bypass:
            with torch.no_grad():
                a_steps = syn_steps(a0, steps, gamma, key_keep(bias), self.cfg.renormalize)
            a = a0 + (a_steps - a0).detach()  # the steps' values, a0's gradient
        else:
            a = syn_steps(a0, steps, gamma, key_keep(bias), self.cfg.renormalize)
        self.keep_attention(a)
        return a.to(v.dtype) @ v
