"""The Syn paper's multiple-instance network: instance embedding, SynPooling, one logit per bag.

Dropout(input_dropout) on the raw instance features, L x (Linear + ReLU) to width D, SynPooling (one
trainable query attends over the bag's instances, with the pooling's attention variant taken from the
mixer registry: softmax, syn, sparsemax, ...), Linear(D, 1). The loss applies the sigmoid. Linear weights
and the query start Xavier-uniform with zero biases, as in the paper; mixers keep their own init.

The network of the `synpool` backbone (declared in `ablate.nn.backbones.mil`).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ablate.components import Mechanism
from ablate.config import ModelConfig
from ablate.nn.mixer import create_mixer


class SynPooling(nn.Module):
    """A trainable query (1, D) pools a bag: LayerNorm on the instances, k/v to M = pool_dim over H heads,
    q to M, logits S * q.k (no 1/sqrt(d)), the mixer's row map, weighted sum of v, projection back to D.

    The mixer divides by sqrt(d) itself, so the query enters it pre-scaled by S * sqrt(d).
    """

    def __init__(self, att: Mechanism, dim: int, pool_dim: int, num_heads: int, scale: float) -> None:
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
        pooled: Tensor = self.proj(out.transpose(1, 2).reshape(B, -1))
        return pooled


class MeanPooling(nn.Module):
    """The mean of a bag's real instances: SynPooling ablated (`model.pool: mean`)."""

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        if mask is None:
            return x.mean(dim=1)
        keep = mask[..., None].to(x.dtype)
        return (x * keep).sum(dim=1) / keep.sum(dim=1).clamp_min(1)


class SynPoolingNet(nn.Module):
    """Bag classifier: forward(x (B, N, F), mask (B, N) True = real instance) -> (B,) logits."""

    def __init__(self, m: ModelConfig, att: Mechanism, in_features: int) -> None:
        super().__init__()
        assert m.depths is not None and m.embed_dim is not None and m.num_heads is not None  # set by validation
        layers: list[nn.Module] = []
        for i in range(m.depths[0]):
            layers += [nn.Linear(in_features if i == 0 else m.embed_dim, m.embed_dim), nn.ReLU()]
        self.drop = nn.Dropout(m.input_dropout)
        self.embed = nn.Sequential(*layers)
        self.pool = (SynPooling(att, m.embed_dim, m.pool_dim, m.num_heads[0], m.pool_scale) if m.pool == "attention"
                     else MeanPooling())  # fmt: skip
        self.head = nn.Linear(m.embed_dim, 1)
        pooling = [self.pool.q, self.pool.kv, self.pool.proj] if isinstance(self.pool, SynPooling) else []
        for module in [*self.embed, *pooling, self.head]:
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                nn.init.zeros_(module.bias)
        if isinstance(self.pool, SynPooling):
            nn.init.xavier_uniform_(self.pool.query)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        logit: Tensor = self.head(self.pool(self.embed(self.drop(x)), mask))
        return logit.squeeze(-1)
