"""The SynPooling network: shapes, padding gets no weight for every pooling variant, the logit scale S."""

from __future__ import annotations

import re

import pytest
import torch
from conftest import KINDS

import ablate.nn  # noqa: F401  (registers every variant)
from ablate.config import TrialConfig
from ablate.nn.backbones.mil.layers import SynPoolingNet
from ablate.nn.diagnostics import argmax_keys, recording, summarize
from ablate.nn.factory import create_model
from ablate.registry import MECHANISMS

F = 5
POOLING_KINDS = [k for k in KINDS if not MECHANISMS.get(k).self_attention_only]
SELF_ATTENTION_ONLY = [k for k in KINDS if MECHANISMS.get(k).self_attention_only]


def net(kind: str = "softmax", pool: str = "attention", **attention: object) -> SynPoolingNet:
    model = {"size": "synpool", "embed_dim": 16, "pool_dim": 8, "num_heads": [2], "depths": [2], "pool": pool}
    cfg = TrialConfig.model_validate(dict(task="mil", data={"name": "musk1"}, model=model,
                                          attention={"kind": kind, **attention}))  # fmt: skip
    torch.manual_seed(0)
    return create_model(cfg, num_classes=2, in_chans=F)


def padded_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Two bags of 4 and 6 instances, padded to 6 with garbage that must not matter."""
    x = torch.randn(2, 6, F)
    x[0, 4:] = 100.0
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    return x, mask


def test_structure_follows_the_syn_paper() -> None:
    model = net()
    assert [type(m).__name__ for m in model.embed] == ["Linear", "ReLU", "Linear", "ReLU"]
    assert model.drop.p == 0.75 and model.head.out_features == 1
    assert model.pool.query.shape == (1, 16) and model.pool.proj.out_features == 16
    assert model.pool.q.out_features == 8 and model.pool.kv.out_features == 2 * 8
    x, mask = padded_batch()
    out = model(x, mask)
    assert out.shape == (2,) and torch.isfinite(out).all()
    model.train()
    assert not torch.equal(model(x, mask), model(x, mask))  # input dropout in training only
    model.eval()
    torch.testing.assert_close(model(x, mask), model(x, mask))


@pytest.mark.parametrize("kind", POOLING_KINDS)
def test_padding_gets_no_weight(kind: str) -> None:
    model = net(kind, **({"steps": 3} if kind == "syn" else {})).eval()
    x, mask = padded_batch()
    x.requires_grad_(True)
    out = model(x, mask)
    torch.testing.assert_close(out[0], model(x[:1, :4])[0], rtol=1e-5, atol=1e-5)  # as if the bag stood alone
    out.sum().backward()
    assert x.grad[0, 4:].abs().max() == 0 and x.grad[0, :4].abs().max() > 0
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


def test_mean_pooling_averages_the_real_instances_and_is_refused_outside_mil() -> None:
    """SynPooling ablated (`model.pool: mean`): the bag is the mean of its real instances' embeddings, padding has
    no weight, no attention is built, and an image backbone refuses the option."""
    model = net("syn", pool="mean").eval()
    x, mask = padded_batch()
    torch.testing.assert_close(model(x, mask)[0], model.head(model.embed(x[0, :4]).mean(0)).squeeze(-1))
    assert not any("mixer" in name for name, _ in model.named_modules())
    with recording(model):  # the attention diagnostics of a trial with none: nothing, not an error
        model(x, mask)
        assert summarize(model) == {} and argmax_keys(model) == {}
    with pytest.raises(ValueError, match="pool: mean pools a MIL bag's instances; vit is not a MIL backbone"):
        TrialConfig.model_validate({"model": {"size": "vit-tiny", "pool": "mean"}})


def test_logits_are_scaled_by_s_not_one_over_sqrt_d() -> None:
    model = net().eval()
    pool = model.pool
    pool.mixer.record = True
    x, mask = padded_batch()
    h = model.embed(x)
    pool(h, mask)
    k = pool.kv(pool.norm(h))[..., :8].view(2, 6, 2, 4).transpose(1, 2)
    q = pool.q(pool.query).view(1, 2, 1, 4)
    logits = (10.0 * q @ k.transpose(-2, -1)).masked_fill(~mask[:, None, None, :], float("-inf"))
    torch.testing.assert_close(pool.mixer.last_attn, logits.softmax(-1))


def test_self_attention_only_variants_are_refused() -> None:
    with pytest.raises(ValueError, match=re.escape("synpool cannot pool with attention.kind 'csan'")):
        net("csan")
