"""Syn layer: the maps and iterations against known values of the Syn paper's maps (synergetic attention for MIL),
masks, and the gradient bypass."""

from __future__ import annotations

import math

import pytest
import torch

from ablate.nn.mechanisms.syn import SynAttention
from ablate.nn.mechanisms.syn.layers import concentrate, distract, syn_steps
from ablate.nn.mixer import create_mixer

GAMMA = 0.5
X_FWD = [0.1, 0.3, 0.25, 0.05, 0.299, 0.0]
X_BWD = [0.7, 0.2, 0.05, 0.0, 0.05, 0.0]


def row(values: list[float], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


def test_one_forward_step() -> None:
    """The paper's eqs. 9-12: the step's output is not normalised again (the option does it)."""
    expected = row([0.103028, 0.402603, 0.308713, 0.050053, 0.400564, 0.0])
    torch.testing.assert_close(syn_steps(row(X_FWD), 1, GAMMA), expected, atol=1e-6, rtol=0)
    renormalized = row([0.156940, 0.613277, 0.470256, 0.076244, 0.610170, 0.0])
    torch.testing.assert_close(syn_steps(row(X_FWD), 1, GAMMA, renormalize=True), renormalized, atol=1e-6, rtol=0)


def test_hundred_forward_steps_reach_one_hot() -> None:
    torch.testing.assert_close(syn_steps(row(X_FWD), 100, GAMMA), row([0, 1, 0, 0, 0, 0]), atol=1e-6, rtol=0)


def test_tie_concentrates_on_both() -> None:
    s = 1 / math.sqrt(2)
    a = syn_steps(row([0.4, 0.4, 0.2]), 100, GAMMA, renormalize=True)
    torch.testing.assert_close(a, row([s, s, 0]), atol=1e-4, rtol=0)
    a = syn_steps(row([0.4, 0.4, 0.2]), 100, GAMMA)
    assert a[0] == a[1] and a[2] < 1e-4 * a[0]


def test_one_backward_step() -> None:
    expected = row([0.978155, 0.453562, 0.134295, 0.0, 0.134295, 0.0])
    torch.testing.assert_close(syn_steps(row(X_BWD), -1, GAMMA), expected, atol=1e-6, rtol=0)
    renormalized = row([0.893459, 0.414290, 0.122667, 0.0, 0.122667, 0.0])
    torch.testing.assert_close(syn_steps(row(X_BWD), -1, GAMMA, renormalize=True), renormalized, atol=1e-6, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_twenty_backward_steps_spread_over_the_support_and_zeros_stay_zero(dtype: torch.dtype) -> None:
    a = syn_steps(row(X_BWD, dtype), -20, GAMMA, renormalize=True)
    support = row(X_BWD, dtype) > 0
    assert (a[support] - 0.5).abs().max() < 6.3e-5
    assert (a[~support] == 0).all()
    assert (syn_steps(row(X_BWD, dtype), -100, GAMMA)[~support] == 0).all()  # exactly, even after 100


@pytest.mark.parametrize("gamma", [0.1, 0.5, 0.9, 1.0])
def test_maps_are_inverse(gamma: float) -> None:
    y = torch.linspace(-1, 1, 201, dtype=torch.float64)
    torch.testing.assert_close(concentrate(distract(y, gamma), gamma), y, atol=1e-12, rtol=0)
    torch.testing.assert_close(distract(concentrate(y, gamma), gamma), y, atol=1e-12, rtol=0)


@pytest.mark.parametrize("gamma", [0.5, 1.0])
def test_inverse_is_accurate_in_float32_at_tiny_values(gamma: float) -> None:
    """The literal Cardano form is off by 1.7e-2 (relative) at y = 1e-6 in float32."""
    exact = distract(torch.tensor(1e-6, dtype=torch.float64), gamma)
    approx = distract(torch.tensor(1e-6, dtype=torch.float32), gamma).double()
    assert abs(approx - exact) / exact < 1e-6


def syn_inputs(n: int = 7):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, n, 4, generator=g, requires_grad=True) for _ in range(3))
    bias = torch.zeros(1, 1, n, n)
    bias[..., 2] = -100.0  # key 2 masked (Swin-style), key 4 padded (-inf), query 5 sees nothing
    bias[..., 4] = float("-inf")
    bias[..., 5, :] = float("-inf")
    return q, k, v, bias


@pytest.mark.parametrize("steps", [-3, 3])
def test_masked_keys_stay_exactly_zero(steps: int) -> None:
    mixer = create_mixer(SynAttention(steps=steps, renormalize=True), 8, 2)
    mixer.record = True
    q, k, v, bias = syn_inputs()
    out = mixer(q, k, v, bias=bias)
    a = mixer.last_attn
    assert out.isfinite().all()
    assert (a[..., 2] == 0).all() and (a[..., 4] == 0).all() and (a[..., 5, :] == 0).all()
    norms = a[..., [0, 1, 2, 3, 4, 6], :].norm(dim=-1)  # every query but the blind one
    torch.testing.assert_close(norms, torch.ones_like(norms))  # unit L2 rows


@pytest.mark.parametrize("steps", [-2, 2])
def test_gradient_bypass_is_straight_through(steps: int) -> None:
    """With the bypass, gradients are those of plain softmax attention; without, they differ."""
    q, k, v, bias = syn_inputs()
    w = torch.randn(2, 2, 7, 4)
    grads = {}
    configs = {"plain": SynAttention(steps=0), "bypass": SynAttention(steps=steps)}
    configs["through"] = SynAttention(steps=steps, bypass=False)
    for name, cfg in configs.items():
        mixer = create_mixer(cfg, 8, 2)
        mixer.record = True  # rows explicit for steps = 0 too, so the weights @ v gradients are comparable
        out = mixer(q, k, v, bias=bias)
        grads[name] = torch.autograd.grad((out * w).sum(), (q, k))
        assert all(g.isfinite().all() for g in grads[name])
    # the value path (v) sees the iterated rows, so only q and k gradients equal plain attention's
    torch.testing.assert_close(grads["bypass"][0], _qk_grads_through_values_of(q, k, v, bias, w, steps)[0])
    assert not torch.allclose(grads["through"][0], grads["bypass"][0])


def _qk_grads_through_values_of(q, k, v, bias, w, steps):
    """Straight-through by hand: d/d(q, k) of sum(w * (a0 @ v)) evaluated with grad_out = w @ v^T."""
    s = q @ k.transpose(-2, -1) / 2 + bias
    dead = (s == float("-inf")).all(-1, keepdim=True)
    a0 = s.masked_fill(dead, 0).softmax(-1).masked_fill(dead, 0)
    return torch.autograd.grad((a0 * (w @ v.transpose(-2, -1)).detach()).sum(), (q, k))


def reference_syn(q, k, v, steps: int, gamma: float, renormalize: bool = False) -> torch.Tensor:
    """The Syn layer from the paper's definition in float64: softmax rows, then |steps| times normalise and
    map, the map gamma a^3 + (1 - gamma) a or (steps < 0) its inverse, found by bisection (monotone on
    [0, 1], where L2-normalised rows live), not by the library's closed form; normalised at the end only
    with `renormalize`."""
    q, k, v = q.double(), k.double(), v.double()
    a = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(-1)
    for _ in range(abs(steps)):
        a = a / a.norm(dim=-1, keepdim=True)
        if steps > 0:
            a = gamma * a**3 + (1 - gamma) * a
        else:
            lo, hi = torch.zeros_like(a), torch.ones_like(a)
            for _ in range(60):
                mid = (lo + hi) / 2
                below = gamma * mid**3 + (1 - gamma) * mid < a
                lo, hi = torch.where(below, mid, lo), torch.where(below, hi, mid)
            a = (lo + hi) / 2
    if renormalize:
        a = a / a.norm(dim=-1, keepdim=True)
    return a @ v


@pytest.mark.parametrize("steps", [1, 4, -1, -3])
@pytest.mark.parametrize("gamma", [0.2, 0.9, 1.0])
def test_mixer_follows_gamma_and_steps(gamma: float, steps: int) -> None:
    """The mixer's output against the definition for gamma and steps away from the defaults (0.5, 0): a
    mixer that reads gamma as 0.5, or takes a different number of steps, fails. Without the bypass the
    gradients are the definition's too (forward steps: the reference is differentiable)."""
    q, k, v, _ = syn_inputs()
    ref = reference_syn(q, k, v, steps, gamma)
    for bypass in (True, False):
        out = create_mixer(SynAttention(steps=steps, gamma=gamma, bypass=bypass), 8, 2)(q, k, v)
        torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)
    renormalized = create_mixer(SynAttention(steps=steps, gamma=gamma, renormalize=True), 8, 2)(q, k, v)
    torch.testing.assert_close(renormalized.double(), reference_syn(q, k, v, steps, gamma, True), atol=1e-5, rtol=1e-5)
    if steps > 0:
        w = torch.randn(2, 2, 7, 4, dtype=torch.float64)
        g_ref = torch.autograd.grad((ref * w).sum(), (q, k, v))
        out = create_mixer(SynAttention(steps=steps, gamma=gamma, bypass=False), 8, 2)(q, k, v)
        for a, b in zip(torch.autograd.grad((out.double() * w).sum(), (q, k, v)), g_ref):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_gamma_outside_unit_interval_is_a_validation_error() -> None:
    for bad in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError, match="gamma"):
            SynAttention(gamma=bad)
