"""CSaN (Selection-as-Nonlinearity): softmax attention calibrated by a descriptor of its own logits.

A descriptor of each query's logits, ``m_i = mean_j phi_beta(s_ij)`` per head (bias and masks included),
gated by the token, ``z_i = sigmoid(u(x_i)) * m_i`` (each head's m over its share of the dim/reduction
gates), feeds a small trunk and four switchable heads:
row temperature tau_i, column amplification mu_j, public gain kappa_pub and private gain kappa_priv::

    out_i = (sum_j softmax_j(tau_i s_ij) mu_j v_j) * kappa_pub_i + v_i * kappa_priv_i

Two paths compute it, the same to float tolerance (tested). Fused (`forward_fused`): SDPA(tau_i q_i, k_j,
mu_j v_j, mask tau_i b_ij) (softmax(tau (qk + b)) equals that SDPA's rows, and scaling column j of the
weights is scaling v_j), so the fused kernel stays; only the descriptor needs the logits, and it is computed
and differentiated in row chunks by `_RowMeanPhi`, so memory grows as chunk x N, never N x N.
Explicit (`forward_explicit`): the logits materialised once (`_KneeLogits`), feeding the descriptor and the
softmax, the descriptor's gradient joining the softmax's before the two matmuls back to q and k: 6 N x N
matmuls forward and backward against the fused path's 11. `forward` takes the explicit path on CPU when
the queries fit one descriptor chunk (memory no more than the fused path's chunk) or when CPU SDPA would
materialise N x N anyway, and when recording diagnostics; the fused path otherwise (long sequences, CUDA).
A bias is scaled by tau as in the reference code (which applies tau to the full logits, relative-position
bias and shift mask included); the scaled mask is as large as the bias it comes from.

Layer sizes (parameters, per attention layer of width C = dim with H heads, tokens of width in_dim):
r = C // reduction, h = max(C // hidden_div, hidden_min), w = C (unit readout) or H (head readout);
u: in_dim*r + r, trunk: r*h + h, trunk gate (unbounded only): h*h + h, tau and mu: h*H + H each,
kappa_pub and kappa_priv: h*w + w each; u and the trunk exist only if any of the four heads is on.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ablate.nn.mixer import TokenMixer, logits, normalize_rows

if TYPE_CHECKING:
    from ablate.nn.mechanisms.csan import CSaNAttention


def _knee_chunks(
    q: Tensor, k: Tensor, bias: Tensor | None, beta: float, chunk: int
) -> Iterator[tuple[slice, Tensor, Tensor]]:
    """(rows, q rows, t = s / beta - 1 for those rows), ``chunk`` query rows at a time.

    In knee units phi_beta(s) = beta * (exp(min(t, 0)) + relu(t)) and phi_beta'(s) = min(exp(t), 1): both
    directions need one exp pass over the chunk and no comparisons (t is a fresh tensor: edit in place).
    """
    per_row = bias is not None and bias.dim() >= 2 and bias.shape[-2] != 1
    kt = k.transpose(-2, -1)
    for i in range(0, q.shape[-2], chunk):
        rows = slice(i, i + chunk)
        qc = q[..., rows, :]
        t = (qc * (q.shape[-1] ** -0.5 / beta)) @ kt
        if bias is not None:
            t.add_(bias[..., rows, :] if per_row else bias, alpha=1 / beta)
        yield rows, qc, t.sub_(1)


def _scale(s: Tensor, tau: Tensor) -> Tensor:
    """tau * s for logits or a bias that may hold -inf: masked entries stay -inf and give tau no gradient
    (the product's gradient there, 0 * -inf = NaN, is dropped by the selection)."""
    return s * torch.where(s == float("-inf"), 1.0, tau)


def _wide_zeros(x: Tensor) -> Tensor:
    """Zeros shaped as x, in x's dtype or float32 if narrower: an accumulator of x's gradient."""
    return torch.zeros_like(x, dtype=torch.promote_types(x.dtype, torch.float32))


class _RowMeanPhi(torch.autograd.Function):
    """m = mean_j phi_beta(q k^T / sqrt(d) + bias), (B, H, Nq), in row chunks both ways.

    Autograd would keep every chunk's logits for the backward pass (N x N again), so the backward pass
    recomputes them chunk by chunk instead. Sums accumulate in at least float32, the gradients of k and a
    shared bias too, cast once at the end: they add one term per chunk, and in bf16 (8 significant bits) a term
    under about 1/256 of the running total rounds away, so past a few hundred chunks the later ones would be lost.
    """

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, bias: Tensor | None, beta: float, chunk: int) -> Tensor:
        ctx.save_for_backward(q, k, bias)
        ctx.beta, ctx.chunk = beta, chunk
        acc = torch.promote_types(q.dtype, torch.float32)
        sums = [
            t.exp().clamp_(max=1).sum(-1, dtype=acc) + t.clamp_(min=0).sum(-1, dtype=acc)
            for _, _, t in _knee_chunks(q, k, bias, beta, chunk)
        ]
        return torch.cat(sums, -1) * (beta / k.shape[-2])

    @staticmethod
    def backward(ctx: Any, gm: Tensor) -> tuple[Tensor | None, ...]:
        q, k, bias = ctx.saved_tensors
        need_q, need_k, need_b = ctx.needs_input_grad[:3]
        scale = q.shape[-1] ** -0.5
        dq = torch.empty_like(q) if need_q else None
        dk = _wide_zeros(k) if need_k else None
        db = _wide_zeros(bias) if need_b else None
        per_row = bias is not None and bias.dim() >= 2 and bias.shape[-2] != 1
        gm = (gm / k.shape[-2]).unsqueeze(-1)
        for rows, qc, t in _knee_chunks(q, k, bias, ctx.beta, ctx.chunk):
            g = t.exp_().clamp_(max=1).mul_(gm[..., rows, :].to(t.dtype))  # d m / d s
            if dq is not None:
                dq[..., rows, :] = (g @ k).mul_(scale)
            if dk is not None:
                dk.add_(g.transpose(-2, -1) @ qc, alpha=scale)
            if db is not None:
                if per_row:
                    db[..., rows, :] += g.sum_to_size(db[..., rows, :].shape)
                else:
                    db += g.sum_to_size(db.shape)
        return dq, None if dk is None else dk.to(k.dtype), None if db is None else db.to(bias.dtype), None, None


class _KneeLogits(torch.autograd.Function):
    """(t, m): the logits in knee units, t = s / beta - 1 for s = q k^T / sqrt(d) + bias (`_knee_chunks`,
    one chunk of every row), materialised, and the descriptor m = mean_j phi_beta(s), (B, H, Nq), from the
    same matmul (the explicit path).

    phi_beta'(s) = min(exp(t), 1) is kept from the forward pass: in backward the descriptor's gradient is
    added to the one t receives from the attention, and both leave through the same two matmuls
    (dq = g k, dk = g^T q): the descriptor adds no matmul to the attention's (the row-chunked one adds
    four). exp is taken of max(t, 1 + log tiny): at or below the smallest normal number (tiny) x86's exp
    takes a path ~20x slower (Swin's -100 mask lands there; at exactly log tiny too, measured), and such
    an entry then counts as e * tiny instead of ~0.
    """

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, bias: Tensor | None, beta: float) -> tuple[Tensor, Tensor]:
        acc = torch.promote_types(q.dtype, torch.float32)
        ((_, _, t),) = _knee_chunks(q, k, bias, beta, q.shape[-2])  # one chunk: every row
        e = t.clamp(math.log(torch.finfo(acc).tiny) + 1, 0).exp_()  # phi_beta' = min(exp t, 1)
        n = k.shape[-2]
        m = (e.sum(-1, dtype=acc) + t.clamp(min=0).sum(-1, dtype=acc)) * (beta / n)
        ctx.save_for_backward(q, k, e)
        ctx.beta, ctx.bias_shape = beta, None if bias is None else bias.shape
        return t, m

    @staticmethod
    def backward(ctx: Any, gt: Tensor, gm: Tensor) -> tuple[Tensor | None, ...]:
        q, k, e = ctx.saved_tensors
        beta, n = ctx.beta, k.shape[-2]
        # dm_i / dt_ij = (beta / n) min(exp(t_ij), 1) = (beta / n) e_ij
        g = torch.addcmul(gt, e, (gm * (beta / n)).unsqueeze(-1).to(e.dtype))
        scale = q.shape[-1] ** -0.5 / beta
        dq = (g @ k).mul_(scale) if ctx.needs_input_grad[0] else None
        dk = (g.transpose(-2, -1) @ q).mul_(scale) if ctx.needs_input_grad[1] else None
        db = g.sum_to_size(ctx.bias_shape) / beta if ctx.needs_input_grad[2] else None
        return dq, dk, db, None


def _explicit(q: Tensor, bias: Tensor | None, scaled: bool, chunk: int) -> bool:
    """Whether the explicit path (`_KneeLogits`: logits materialised once, for the descriptor and the
    attention) beats SDPA plus the row-chunked descriptor. On CPU: when the queries fit one descriptor
    chunk (its N x N logits take no more memory than a chunk), since the descriptor then adds no matmul
    instead of four and SDPA's kernel saves little at such sizes (bench/attention.py, ViT-S layer: 1.46x
    -> 1.29x softmax's time); and when a mask needs a gradient (a learnt bias, or one scaled by tau), which
    sends CPU SDPA from its flash kernel to its N x N math path anyway (torch 2.4 to 2.13 at least).
    On CUDA the fused kernels stay (not measured here: no GPU); the meta device (FLOP counts) follows CPU."""
    if q.device.type not in ("cpu", "meta"):
        return False
    grad_mask = bias is not None and torch.is_grad_enabled() and (scaled or bias.requires_grad)
    return grad_mask or q.shape[-2] <= chunk


class Gains(NamedTuple):
    """The calibrations, shaped to broadcast against (B, H, N, d); None where switched off."""

    tau: Tensor | None  # (B, H, Nq, 1), > 0
    mu: Tensor | None  # (B, H, Nk, 1)
    pub: Tensor | None  # (B, H, Nq, d) unit-level, (B, H, Nq, 1) head-wise
    priv: Tensor | None  # (B, H, Nk, .), width as pub's: one per key (pooled queries read their group's)


def _init(m: nn.Module) -> None:
    """Reference init: trunc-normal 0.02, zero biases, so every head starts near f = 0 (plain attention)."""
    if isinstance(m, nn.Linear):
        nn.init.trunc_normal_(m.weight, std=0.02)
        nn.init.zeros_(m.bias)


class CSaN(TokenMixer):
    """CSaN around softmax attention; every calibration switchable, a switched-off one owns no parameters.

    Readout granularity: ``kappa_pub: head`` makes both gains one per head (the paper's head-wise
    readout, 29.0M on Swin-T); ``unit`` (and ``off``) leaves kappa_priv one per head x channel.

    tau stays positive (tau <= 0 would invert preferences and turn a -100 mask into a large positive
    bias): unbounded, tau = 1 + ELU(f), the reference's 1 + f for f >= 0 and exp(f) below, smooth with
    slope 1 at 0 (a clamp at some epsilon would instead stall the gradient of every row it catches).
    Bounded, tau = 1 + tanh(f) is computed as the identical 2 sigmoid(2 f), which does not round to 0 in
    float32 for f < -9. Only where exp underflows (f < -87; the gradient is already 0 there) does a floor
    at the dtype's smallest normal number keep tau > 0.

    Pooled queries (Nk = S * Nq; timm orders a pooling group's keys as j = s * Nq + i), as the authors'
    Hiera-CSaN: the tokens x come one per key (Hiera's q-pooling blocks pass their unpooled input), token j
    reads the descriptor of the query it was pooled into, the gates and the trunk run on every token (the
    reference code's FLOPs: 4.9G on Hiera-Tiny-Plus), tau and kappa_pub read the trunk averaged over each
    group, mu and kappa_priv each key's own trunk output, and the private path of query i is the group
    mean of v_j * kappa_priv_j.
    """

    cfg: CSaNAttention
    spread: Tensor

    def __init__(self, cfg: CSaNAttention, dim: int, num_heads: int, in_dim: int | None = None) -> None:
        super().__init__(cfg, dim, num_heads, in_dim)
        hidden = max(dim // cfg.hidden_div, cfg.hidden_min)
        width = num_heads if cfg.kappa_pub == "head" else dim
        self.tau = nn.Linear(hidden, num_heads) if cfg.tau else None
        self.mu = nn.Linear(hidden, num_heads) if cfg.mu else None
        self.kappa_pub = nn.Linear(hidden, width) if cfg.kappa_pub != "off" else None
        self.kappa_priv = nn.Linear(hidden, width) if cfg.kappa_priv else None
        self.calibrated = any(h is not None for h in (self.tau, self.mu, self.kappa_pub, self.kappa_priv))
        if self.calibrated:
            reduced = dim // cfg.reduction
            if reduced < num_heads:
                raise ValueError(f"csan: dim // reduction = {reduced} gives fewer gates than {num_heads} heads")
            self.u = nn.Linear(self.in_dim, reduced)
            self.reduce = nn.Linear(reduced, hidden)
            self.gate = None if cfg.bounded else nn.Linear(hidden, hidden)
            # gate g reads head g * H // r (contiguous, equal shares when H divides r), as a 0/1 (H, r)
            # matrix: spreading m over the gates is a tiny matmul both ways (an index would backpropagate
            # as a scatter-add, slow on CPU)
            owner = torch.arange(reduced) * num_heads // reduced
            self.register_buffer("spread", F.one_hot(owner, num_heads).T.float(), persistent=False)
        self.apply(_init)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None = None, x: Tensor | None = None) -> Tensor:
        if self.record or _explicit(q, bias, self.tau is not None, self.cfg.chunk):
            return self.forward_explicit(q, k, v, bias, x)
        return self.forward_fused(q, k, v, bias, x)

    def forward_fused(
        self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None = None, x: Tensor | None = None
    ) -> Tensor:
        """CSaN through SDPA (q scaled by tau, v by mu) with the row-chunked descriptor: no N x N."""
        m = None
        if self.calibrated:  # Function.apply is unannotated in torch
            m = _RowMeanPhi.apply(q, k, bias, self.cfg.beta, self.cfg.chunk)  # type: ignore[no-untyped-call]
        g = self.gains(m, x, k.shape[-2])
        if g.tau is not None:
            q = q * g.tau.to(q.dtype)
            bias = None if bias is None else _scale(bias, g.tau)
        vs = v if g.mu is None else v * g.mu.to(v.dtype)
        out = F.scaled_dot_product_attention(q, k, vs, attn_mask=None if bias is None else bias.to(q.dtype))
        return self.readout(out, v, g)

    def forward_explicit(
        self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None = None, x: Tensor | None = None
    ) -> Tensor:
        """The same CSaN from logits materialised once (`_KneeLogits`); keeps the attention rows when
        recording. softmax(tau s) is computed as softmax(tau beta t), the same rows: tau beta t = tau s -
        tau beta, a constant per row. Masking needs care (tau scaling that keeps -inf, rows masked
        everywhere) only when the bias holds -inf: Swin's finite -100 mask takes the plain ops."""
        masked = bias is not None and (bias.is_meta or bool(bias.min() == float("-inf")))  # meta: no values
        if self.calibrated:
            t, m = _KneeLogits.apply(q, k, bias, self.cfg.beta)  # type: ignore[no-untyped-call]  # unannotated in torch
            g = self.gains(m, x, k.shape[-2])
            tau = self.cfg.beta if g.tau is None else g.tau * self.cfg.beta
            s = _scale(t, tau) if masked and isinstance(tau, Tensor) else t * tau
        else:
            s, g = logits(q, k, bias), self.gains(None, x, k.shape[-2])
        a = normalize_rows(s, bias if masked else None)
        if self.record:
            self.keep_attention(a if g.mu is None else a * g.mu.transpose(-2, -1))
        vs = v if g.mu is None else v * g.mu.to(v.dtype)
        return self.readout(a.to(v.dtype) @ vs, v, g)

    def gains(self, m: Tensor | None, x: Tensor | None, nk: int) -> Gains:
        """The four calibrations from the descriptor m (B, H, Nq) and the tokens x, one per key (B, Nk, in_dim;
        pooled queries, see the class docstring)."""
        if not self.calibrated:
            return Gains(None, None, None, None)
        if x is None:
            raise ValueError("csan needs the tokens x, one per key (the gates read them)")
        assert m is not None  # calibrated: the caller computed the descriptor
        nq, nx = m.shape[-1], x.shape[-2]
        if nk % nq:
            raise ValueError(f"csan: {nk} keys cannot be pooling groups of {nq} queries")
        if nx != nk:
            raise ValueError(f"csan: the tokens x come one per key (pooled queries: the unpooled input tokens), "
                             f"got {nx} tokens for {nk} keys")  # fmt: skip
        desc = m.transpose(1, 2) @ self.spread.to(m.dtype)
        if nk != nq:  # token j = s * Nq + i reads the descriptor of query i, the one it was pooled into
            desc = desc.repeat(1, nk // nq, 1)
        t = self.reduce(torch.sigmoid(self.u(x)) * desc)
        t = F.gelu(t) if self.gate is None else t * torch.sigmoid(self.gate(t))
        per_query = t if nk == nq else t.unflatten(-2, (nk // nq, nq)).mean(-3)
        bounded = self.cfg.bounded

        def head(layer: nn.Linear | None, offset: float, trunk: Tensor) -> Tensor | None:
            """offset + f (bounded: offset + tanh f), as (B, H, rows of trunk, width / H)."""
            if layer is None:
                return None
            f: Tensor = layer(trunk)
            f = offset + (torch.tanh(f) if bounded else f)
            heads: Tensor = f.unflatten(-1, (self.num_heads, -1))
            return heads.transpose(1, 2)

        tau = None
        if self.tau is not None:
            f = self.tau(per_query)
            tau = 2 * torch.sigmoid(2 * f) if bounded else 1 + F.elu(f)
            tau = tau.clamp_min(torch.finfo(tau.dtype).tiny).unsqueeze(-1).transpose(1, 2)
        return Gains(tau, head(self.mu, 1.0, t), head(self.kappa_pub, 1.0, per_query), head(self.kappa_priv, 0.0, t))

    @staticmethod
    def readout(out: Tensor, v: Tensor, g: Gains) -> Tensor:
        """Public gain on the attended values plus the private path of each query's own value (pooled
        queries: the group mean of v_j * kappa_priv_j)."""
        if g.pub is not None:
            out = out * g.pub.to(out.dtype)
        if g.priv is not None:
            nq, nk = out.shape[-2], v.shape[-2]
            private = v * g.priv.to(out.dtype)
            out = out + (private if nk == nq else private.unflatten(-2, (nk // nq, nq)).mean(-3))
        return out
