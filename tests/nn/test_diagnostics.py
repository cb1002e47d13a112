"""Attention diagnostics: recording on demand, entropy and column-load values, winner transfer."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import KINDS
from pydantic import TypeAdapter
from torch import Tensor, nn

from ablate.config import AttentionConfig
from ablate.nn.diagnostics import argmax_keys, column_gini, recording, row_entropy, summarize, winner_transfer
from ablate.nn.mixer import create_mixer

DIM, HEADS, N = 16, 2, 9


class Block(nn.Module):
    """A pre-norm attention block around a registered mixer (the way the backbones use them)."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.mixer = create_mixer(TypeAdapter(AttentionConfig).validate_python({"kind": kind}), DIM, HEADS)
        self.proj = nn.Linear(DIM, DIM)

    def forward(self, x: Tensor) -> Tensor:
        b, n, c = x.shape
        h = self.norm(x)
        q, k, v = self.qkv(h).view(b, n, 3, HEADS, c // HEADS).permute(2, 0, 3, 1, 4)
        return x + self.proj(self.mixer(q, k, v, x=h).transpose(1, 2).reshape(b, n, c))


def model(kind: str = "softmax") -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(Block(kind), Block(kind))


@pytest.mark.parametrize("kind", KINDS)
def test_summary_for_every_kind(kind: str) -> None:
    net, x = model(kind), torch.randn(3, N, DIM)
    net(x)
    assert all(m.mixer.last_attn is None for m in net)  # nothing kept unless asked
    with recording(net):
        net(x)
        stats = summarize(net)
        winners = argmax_keys(net)
    assert set(stats) == {"entropy/0.mixer", "gini/0.mixer", "entropy/1.mixer", "gini/1.mixer", "entropy", "gini"}
    assert all(0 <= v <= math.log(N) + 1e-6 for k, v in stats.items() if k.startswith("entropy"))
    assert all(0 <= v < 1 for k, v in stats.items() if k.startswith("gini"))
    assert stats["entropy"] == pytest.approx((stats["entropy/0.mixer"] + stats["entropy/1.mixer"]) / 2)
    assert {k: tuple(v.shape) for k, v in winners.items()} == {"0.mixer": (3, HEADS, N), "1.mixer": (3, HEADS, N)}
    assert all(not m.mixer.record and m.mixer.last_attn is None for m in net)  # off and dropped on exit


def test_reading_outside_recording_is_an_error() -> None:
    net = model()
    with recording(net):
        net(torch.randn(1, N, DIM))
    with pytest.raises(RuntimeError, match="recording"):
        summarize(net)


def test_known_entropy_and_column_load() -> None:
    n = 6
    uniform = torch.full((1, 1, n, n), 1 / n)
    one_key = torch.zeros(1, 1, n, n)
    one_key[..., 0] = 1.0
    permutation = torch.eye(n).view(1, 1, n, n)
    assert row_entropy(uniform) == pytest.approx(math.log(n))
    assert column_gini(uniform) == pytest.approx(0.0, abs=1e-6)
    assert row_entropy(one_key) == pytest.approx(0.0)
    assert column_gini(one_key) == pytest.approx((n - 1) / n)
    assert column_gini(permutation) == pytest.approx(0.0, abs=1e-6)
    unnormalised = 3 * uniform.clone()  # Syn / CSaN rows: compared as distributions
    unnormalised[..., 2, :] = 0  # a fully masked row is left out
    assert row_entropy(unnormalised) == pytest.approx(math.log(n))


def test_winner_transfer() -> None:
    prev = {"a": torch.tensor([[0, 1, 2, 3]]), "b": torch.tensor([[5, 5]])}
    assert winner_transfer(prev, prev) == 0.0
    cur = {"a": torch.tensor([[0, 2, 2, 0]]), "b": torch.tensor([[5, 4]])}
    assert winner_transfer(prev, cur) == pytest.approx(3 / 6)
    with pytest.raises(ValueError, match="layers"):
        winner_transfer(prev, {"a": cur["a"]})
    with pytest.raises(ValueError, match="shapes"):
        winner_transfer(prev, {"a": cur["a"][:, :2], "b": cur["b"]})


def test_winners_follow_the_attention() -> None:
    net, x = model(), torch.randn(2, N, DIM)
    with recording(net):
        net(x)
        before = argmax_keys(net)
    with torch.no_grad():
        net[0].qkv.weight[:DIM].mul_(-1)  # flips the first block's queries: its winners move
    with recording(net):
        net(x)
        after = argmax_keys(net)
    assert 0 < winner_transfer({"0.mixer": before["0.mixer"]}, {"0.mixer": after["0.mixer"]}) <= 1
