"""The token-mixer interface every attention variant implements, and the registry that selects one.

A mixer sees what an attention module has after its q/k/v projection and returns the mixed values; the
module around it (timm's, patched by `ablate.nn.surgery`) keeps its projections, bias and output
projection. So one variant works unchanged in ViT, Swin windows and Hiera's pooled-query blocks. Which
mixer a config gets is the mechanism's own business (`Mechanism.build`); mechanisms are registered in
`ablate.registry.MECHANISMS`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from ablate.components import Mechanism


@dataclass(frozen=True)
class TokenGrid:
    """Where an attention's tokens lie: `prefix` tokens off the grid first (ViT's class token), then a `height`
    x `width` grid in row-major order (ViT: the patches; Swin: one window)."""

    prefix: int
    height: int
    width: int


class TokenMixer(nn.Module):
    """Base class: ``forward(q, k, v, bias, x) -> out``.

    q: (B, H, Nq, d); k, v: (B, H, Nk, d); bias: additive, broadcastable to (B, H, Nq, Nk) (Swin's
    relative-position bias plus shift mask; -inf or a large negative value masks), or None; x: the
    tokens the keys were projected from, one per key, (B, Nk, in_dim), for variants whose gates read the
    token (CSaN; Hiera's pooled-query blocks pass their unpooled input tokens, so Nk = 4 Nq there, 2 x 2
    pooling; elsewhere they are the queries' tokens too). Returns (B, H, Nq, d).
    Constructor: dim = H * d (the attention width), in_dim = width of x (Hiera's stage transitions
    project dim -> dim_out, so in_dim can differ from dim; defaults to dim).

    Diagnostics: when ``self.record`` is True, a variant hands the attention rows of its forward to
    ``self.keep_attention`` (stored in ``self.last_attn``, (B, H, Nq, Nk), detached); otherwise it must not
    materialise them.

    ``self.grid``: the tokens' layout (`TokenGrid`), set by a backbone whose tokens have one
    (`Backbone.token_grid`), else None.
    """

    def __init__(self, cfg: Mechanism, dim: int, num_heads: int, in_dim: int | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.dim = dim
        self.num_heads = num_heads
        self.in_dim = in_dim or dim
        self.record = False
        self.last_attn: Tensor | None = None
        self.grid: TokenGrid | None = None

    def forward(self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None = None, x: Tensor | None = None) -> Tensor:
        raise NotImplementedError

    def key_width(self, head_dim: int) -> int:
        """Channels a query is compared with a key over, for heads `head_dim` wide: what the logits' matmul is
        counted at (`ablate.nn.accounting.attention_matmuls`). Non-local means' patch form compares
        neighbourhoods of tokens, wider than one."""
        return head_dim

    def keep_attention(self, attn: Tensor) -> None:
        """Store `attn` (B, H, Nq, Nk) as this forward's rows while recording (`ablate.nn.diagnostics`)."""
        if self.record:
            self.last_attn = attn.detach()


def create_mixer(cfg: Mechanism, dim: int, num_heads: int, in_dim: int | None = None) -> TokenMixer:
    """The mixer of an attention config (the timm ``create_model`` pattern), checked to be a TokenMixer."""
    mixer = cfg.build(dim, num_heads, in_dim)
    if not isinstance(mixer, TokenMixer):
        raise TypeError(f"mechanism {cfg.kind!r}: build() returned {type(mixer).__name__}, not a TokenMixer")
    return mixer


class MixerShapeError(ValueError):
    """A mixer whose output is not (B, H, Nq, dv): the model around it would reshape it into another model."""


def expect_output(mixer: TokenMixer, q: Tensor, v: Tensor, out: object) -> None:
    """Raise a MixerShapeError unless `out` is what `TokenMixer.forward` promises for `q` and `v`: a tensor
    (B, H, Nq, dv), q's first three sizes and v's last, exactly (a transposed (B, Nq, H, dv) included)."""
    expected = (*q.shape[:-1], v.shape[-1])
    got = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
    if got != expected:
        code = type(mixer).forward.__code__
        raise MixerShapeError(f"{type(mixer).__qualname__}.forward ({code.co_filename}:{code.co_firstlineno}) "
                              f"returned {got}, expected {expected}: (B, H, Nq, d) of q {tuple(q.shape)} and v "
                              f"{tuple(v.shape)}")  # fmt: skip


@contextmanager
def outputs_checked(model: nn.Module) -> Iterator[list[TokenMixer]]:
    """Within it, every call of a TokenMixer in `model` (itself included) checks its output (`expect_output`),
    and the mixers called are listed in what it yields (the pre-launch check refuses a model that never calls the
    configured mechanism's): the pre-launch check and plan's FLOP count run under it, training does not."""
    called: list[TokenMixer] = []

    def hook(mixer: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], out: object) -> None:
        assert isinstance(mixer, TokenMixer)
        named = dict(zip(("q", "k", "v"), args)) | kwargs
        expect_output(mixer, named["q"], named["v"], out)
        called.append(mixer)

    handles = [m.register_forward_hook(hook, with_kwargs=True) for m in model.modules() if isinstance(m, TokenMixer)]
    try:
        yield called
    finally:
        for h in handles:
            h.remove()


#: An additive bias at or below this masks a key (-inf does too). exp(-50) ~ 2e-22 is zero next to float32's
#: resolution, so such a key gets no softmax weight anyway; Swin's shift mask is -100. Variants without
#: logits to add a bias to (Syn's row maps, ISTA) use it to zero masked keys.
MASK_LEVEL = -50.0


def logits(q: Tensor, k: Tensor, bias: Tensor | None = None, scale: float | None = None) -> Tensor:
    """q k^T * scale + bias, scale defaulting to d^-0.5 (the query is scaled: N x d, not N x N, work)."""
    s = (q * (q.shape[-1] ** -0.5 if scale is None else scale)) @ k.transpose(-2, -1)
    return s if bias is None else s + bias


def _softmax(s: Tensor) -> Tensor:
    return s.softmax(-1)


def normalize_rows(s: Tensor, bias: Tensor | None, normalize: Callable[[Tensor], Tensor] = _softmax) -> Tensor:
    """``normalize(s)`` (softmax unless given) over the last dim; rows masked everywhere (all -inf) come
    out as zeros, not NaN.

    Only a bias can mask a whole row, so without one the rows go through untouched (no extra N x N passes).
    """
    if bias is None:
        return normalize(s)
    dead = s.amax(-1, keepdim=True) == float("-inf")
    return normalize(s.masked_fill(dead, 0.0)).masked_fill(dead, 0.0)


def key_keep(bias: Tensor | None) -> Tensor | None:
    """Boolean, broadcastable like ``bias``: True where a key is not masked (see MASK_LEVEL)."""
    return None if bias is None else bias > MASK_LEVEL


def softmax_rows(q: Tensor, k: Tensor, bias: Tensor | None) -> Tensor:
    """Explicit softmax(q k^T / sqrt(d) + bias): for diagnostics and reference implementations."""
    return normalize_rows(logits(q, k, bias), bias)


class RowsMixer(TokenMixer):
    """A variant whose attention rows are inherently explicit (N x N): ``out = rows(q, k, bias) @ v``."""

    def rows(self, q: Tensor, k: Tensor, bias: Tensor | None) -> Tensor:
        raise NotImplementedError

    def forward(self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None = None, x: Tensor | None = None) -> Tensor:
        a = self.rows(q, k, bias)
        self.keep_attention(a)
        return a.to(v.dtype) @ v
