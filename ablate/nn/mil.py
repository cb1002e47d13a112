"""The Syn paper's multiple-instance network: instance embedding, SynPooling, one logit per bag.

Dropout(input_dropout) on the raw instance features, L x (Linear + ReLU) to width D, SynPooling (one
trainable query attends over the bag's instances, with the pooling's attention variant taken from the
mixer registry: softmax, syn, sparsemax, ...), Linear(D, 1). The loss applies the sigmoid. Linear weights
and the query start Xavier-uniform with zero biases, as in the paper; mixers keep their own init.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ablate.config import AttentionConfig, ModelConfig
from ablate.nn.mixer import create_mixer


class SynPooling(nn.Module):
    """A trainable query (1, D) pools a bag: LayerNorm on the instances, k/v to M = pool_dim over H heads,
    q to M, logits S * q.k (no 1/sqrt(d)), the mixer's row map, weighted sum of v, projection back to D.

    The mixer divides by sqrt(d) itself, so the query enters it pre-scaled by S * sqrt(d).
    """

    def __init__(self, att: AttentionConfig, dim: int, pool_dim: int, num_heads: int, scale: float) -> None:
        super().__init__()
        self.num_heads, self.head_dim = num_heads, pool_dim // num_heads
        self.q_scale = scale * self.head_dim**0.5
        self.query = nn.Parameter(torch.empty(1, dim))
        self.norm = nn.LayerNorm(dim)
        self.q = nn.Linear(dim, pool_dim)
        self.kv = nn.Linear(dim, 2 * pool_dim)
        self.proj = nn.Linear(pool_dim, dim)
        self.mixer = create_mixer(att, pool_dim, num_heads, in_dim=dim)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """x: (B, N, D) instance embeddings; mask: (B, N) bool, True = a real instance (padding gets no
        weight). Returns (B, D)."""
        B, N, _ = x.shape
        k, v = self.kv(self.norm(x)).view(B, N, 2, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q = self.q(self.query).view(1, self.num_heads, 1, self.head_dim).expand(B, -1, -1, -1) * self.q_scale
        bias = None
        if mask is not None:  # padding: -inf logits, and zero keys/values for mixers with key statistics (ISTA)
            keep = mask[:, None, :, None]
            k, v = k * keep, v * keep
            bias = torch.zeros(B, 1, 1, N, dtype=x.dtype, device=x.device)
            bias = bias.masked_fill(~mask[:, None, None, :], float("-inf"))
        out = self.mixer(q, k, v, bias=bias, x=self.query.expand(B, 1, -1))  # (B, H, 1, d)
        return self.proj(out.transpose(1, 2).reshape(B, -1))


class SynPoolingNet(nn.Module):
    """Bag classifier: forward(x (B, N, F), mask (B, N) True = real instance) -> (B,) logits."""

    def __init__(self, m: ModelConfig, att: AttentionConfig, in_features: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for i in range(m.depths[0]):
            layers += [nn.Linear(in_features if i == 0 else m.embed_dim, m.embed_dim), nn.ReLU()]
        self.drop = nn.Dropout(m.input_dropout)
        self.embed = nn.Sequential(*layers)
        self.pool = SynPooling(att, m.embed_dim, m.pool_dim, m.num_heads[0], m.pool_scale)
        self.head = nn.Linear(m.embed_dim, 1)
        for module in [*self.embed, self.pool.q, self.pool.kv, self.pool.proj, self.head]:
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                nn.init.zeros_(module.bias)
        nn.init.xavier_uniform_(self.pool.query)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        return self.head(self.pool(self.embed(self.drop(x)), mask)).squeeze(-1)


#: Variants that calibrate self-attention from each key's own query (CSaN's column gains and private path):
#: a single pooling query has none, so they are refused rather than silently pooling padded instances.
SELF_ATTENTION_ONLY = ("csan",)


def build_synpool(m: ModelConfig, att: AttentionConfig, num_classes: int, in_chans: int) -> nn.Module:
    """The MIL network; in_chans is the instance feature width F, num_classes 2 (or 1): one logit."""
    if num_classes not in (1, 2):
        raise ValueError(f"synpool is a binary bag classifier (one logit); got num_classes {num_classes}")
    if att.kind in SELF_ATTENTION_ONLY:
        raise ValueError(f"synpool cannot pool with attention.kind {att.kind!r}: it calibrates self-attention")
    if m.depths[0] < 1:
        raise ValueError(f"synpool needs at least one embedding layer (depths [L], L >= 1); got {m.depths}")
    return SynPoolingNet(m, att, in_chans)
