"""Sparse attention: sparsemax and 1.5-entmax in place of softmax, and sparse coding by unrolled ISTA.

sparsemax / entmax15 come from the `entmax` package and run in float32 (their thresholds sort and
cumsum the row). ISTA codes each query as a sparse, by default non-negative, combination of the keys
(min_A ||Q - A K||^2 / 2 + lambda |A|_1) and mixes the values with those coefficients.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from entmax import entmax15, sparsemax
from torch import Tensor

from ablate.nn.mixer import RowsMixer, key_keep, logits, normalize_rows

if TYPE_CHECKING:
    from ablate.nn.mechanisms.sparse import ISTAAttention

#: A given ISTA step is clipped to this fraction of 2 / L, strictly inside the convergent range.
STEP_MARGIN = 0.99


class _Normalizer(RowsMixer):
    """Rows = normalize(q k^T / sqrt(d) + bias) for a softmax replacement ``normalize``."""

    normalize: Callable[[Tensor], Tensor]

    def rows(self, q: Tensor, k: Tensor, bias: Tensor | None) -> Tensor:
        return normalize_rows(logits(q, k, bias).float(), bias, type(self).normalize)


class Sparsemax(_Normalizer):
    """Euclidean projection of the logits onto the simplex: exact zeros below a row threshold."""

    normalize = staticmethod(partial(sparsemax, dim=-1))


class Entmax15(_Normalizer):
    """1.5-entmax: between softmax (alpha = 1) and sparsemax (alpha = 2)."""

    normalize = staticmethod(partial(entmax15, dim=-1))


def ista_step_size(k: Tensor, step_size: float | None) -> Tensor:
    """Per (batch, head) step eps, shaped (..., 1, 1), always below 2 / L with L = sigma_max(K)^2.

    None: 1 / ||K||_F^2 (||K||_2 <= ||K||_F, so eps <= 1 / L: every step descends). A given step is
    clipped to STEP_MARGIN * 2 / L, with L from the d x d Gram matrix K^T K (cheap, no N x N).
    """
    if step_size is None:
        return 1 / (k * k).sum((-2, -1), keepdim=True).clamp_min(torch.finfo(k.dtype).tiny)
    with torch.no_grad():  # a guard on the step, not a learnt quantity
        lipschitz = torch.linalg.eigvalsh(k.transpose(-2, -1) @ k)[..., -1:].unsqueeze(-1)
        bound: Tensor = STEP_MARGIN * 2 / lipschitz.clamp_min(torch.finfo(k.dtype).tiny)
        return bound.clamp(max=step_size)


class ISTA(RowsMixer):
    """Rows = T unrolled ISTA steps A <- shrink(A + eps (Q - A K) K^T), from A = 0; out = A V.

    shrink is ReLU(x - eps lambda) (non-negative codes) or sign(x) ReLU(|x| - eps lambda) (``signed``),
    with lambda = ``threshold``, the l1 weight of the objective: the per-step threshold is eps * lambda,
    so the fixed point is the lasso solution whatever the step. (A fixed absolute per-step threshold
    would instead mean lambda = threshold / eps, which with eps = 1 / ||K||_F^2 grows with N d |k|^2 and
    zeroes every code of a ViT-sized layer.) Queries and keys are taken as they come (no 1/sqrt(d)):
    the step size is scale-aware. Masked keys (bias <= MASK_LEVEL) get zero coefficients after every step; a finite
    bias (Swin's relative positions) has no logit to join here and is otherwise unused. ``zero_diag``
    forbids a token from coding itself (self-attention, Nq == Nk). Runs in float32.
    """

    cfg: ISTAAttention

    def rows(self, q: Tensor, k: Tensor, bias: Tensor | None) -> Tensor:
        cfg = self.cfg
        nq, nk = q.shape[-2], k.shape[-2]
        if cfg.zero_diag and nq != nk:
            raise ValueError(f"ista zero_diag needs self-attention, got {nq} queries and {nk} keys")
        keep = key_keep(bias)
        if cfg.zero_diag:
            off_diag = ~torch.eye(nq, dtype=torch.bool, device=q.device)
            keep = off_diag if keep is None else keep & off_diag
        with torch.autocast(q.device.type, enabled=False):  # iterates accumulate, eigvalsh: float32 throughout
            q, k = q.float(), k.float()
            eps = ista_step_size(k, cfg.step_size)
            thr = eps * cfg.threshold
            kt = k.transpose(-2, -1)
            a = q.new_zeros(*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), nq, nk)
            for _ in range(cfg.steps):
                a = a + eps * ((q - a @ k) @ kt)
                a = a.sign() * F.relu(a.abs() - thr) if cfg.signed else F.relu(a - thr)
                if keep is not None:
                    a = a * keep
        return a
