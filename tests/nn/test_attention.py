"""Token mixers: the registry contract for every kind, CSaN's fused path and parameters, kernels, sparse rows."""

from __future__ import annotations

import math

import pytest
import timm
import torch
import torch.nn.functional as F
from conftest import KINDS
from pydantic import TypeAdapter

from ablate.config import AttentionConfig
from ablate.nn.accounting import flops
from ablate.nn.mechanisms.csan import CSaNAttention
from ablate.nn.mechanisms.csan.layers import CSaN, _KneeLogits, _RowMeanPhi
from ablate.nn.mechanisms.sparse import ISTAAttention
from ablate.nn.mechanisms.sparse.layers import Entmax15, Sparsemax, ista_step_size
from ablate.nn.mixer import create_mixer

B, H, N, D = 2, 3, 10, 8
DIM = H * D
NEG = float("-inf")


def config(kind: str, **knobs: object) -> AttentionConfig:
    return TypeAdapter(AttentionConfig).validate_python({"kind": kind, **knobs})


def inputs(nq: int = N, nk: int = N, in_dim: int = DIM, dtype: torch.dtype = torch.float32, seed: int = 0):
    """q, k, v and the tokens x, one per key (pooled queries: the unpooled input tokens, as Hiera's blocks)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, nq, D, generator=g, dtype=dtype, requires_grad=True)
    k = torch.randn(B, H, nk, D, generator=g, dtype=dtype, requires_grad=True)
    v = torch.randn(B, H, nk, D, generator=g, dtype=dtype, requires_grad=True)
    x = torch.randn(B, nk, in_dim, generator=g, dtype=dtype, requires_grad=True)
    return q, k, v, x


def swin_like_bias(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A learnable relative-position-like bias plus a -100 shift mask, one fully -inf row, one -inf key."""
    g = torch.Generator().manual_seed(1)
    bias = 0.5 * torch.randn(1, H, N, N, generator=g, dtype=dtype)
    bias[..., : N // 2, N // 2 :] = -100.0
    bias[..., 3, :] = NEG
    bias[..., 5, 1] = NEG
    return bias.requires_grad_()


def reference_rows(q: torch.Tensor, k: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + bias) written out (exp over the row sum) in float64; rows masked
    everywhere are zeros."""
    s = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    if bias is not None:
        s = s + bias.double()
    dead = (s == NEG).all(-1, keepdim=True)
    s = s.masked_fill(dead, 0.0)
    e = torch.exp(s - s.amax(-1, keepdim=True))
    return (e / e.sum(-1, keepdim=True)).masked_fill(dead, 0.0)


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None = None):
    """softmax(q k^T / sqrt(d) + bias) v in float64, from the formula (no SDPA)."""
    return reference_rows(q, k, bias) @ v.double()


# ------------------------------------------------------------------------------------- every registered kind
#: Inputs a kind genuinely does not read, so they get no gradient (None); every other input and every
#: parameter must get a finite, nonzero one. x feeds CSaN's gates only; ISTA uses the bias only as a
#: key mask (bias <= MASK_LEVEL), a comparison with no gradient.
UNUSED: dict[str, set[str]] = {kind: {"x"} for kind in KINDS}
UNUSED["csan"] = set()
UNUSED["ista"] = {"x", "bias"}


@pytest.mark.parametrize("kind", KINDS)
def test_forward_backward_finite_and_masked_rows_safe(kind: str) -> None:
    mixer = create_mixer(config(kind), DIM, H)
    q, k, v, x = inputs()
    bias = swin_like_bias()
    out = mixer(q, k, v, bias=bias, x=x)
    assert out.shape == (B, H, N, D)
    assert out.isfinite().all()
    out.square().sum().backward()
    unused = UNUSED[kind]
    leaves = {"q": q, "k": k, "v": v, "bias": bias, "x": x, **dict(mixer.named_parameters())}
    for name, t in leaves.items():
        if name in unused:
            assert t.grad is None, f"{kind} was expected not to use {name}"
        else:
            assert t.grad is not None and t.grad.isfinite().all() and t.grad.abs().sum() > 0, name
    assert mixer.last_attn is None  # nothing kept unless recording


@pytest.mark.parametrize("kind", KINDS)
def test_pooled_queries(kind: str) -> None:
    """Hiera's pooled-query blocks: 4x fewer queries than keys, one token per key, narrower than the attention."""
    mixer = create_mixer(config(kind), DIM, H, in_dim=DIM // 2)
    q, k, v, x = inputs(nq=N, nk=4 * N, in_dim=DIM // 2)
    out = mixer(q, k, v, x=x)
    assert out.shape == (B, H, N, D)
    out.sum().backward()
    assert q.grad.isfinite().all() and k.grad.isfinite().all()


@pytest.mark.parametrize("kind", KINDS)
def test_recording_keeps_rows_and_agrees_with_fused_path(kind: str) -> None:
    mixer = create_mixer(config(kind), DIM, H)
    q, k, v, x = inputs()
    bias = swin_like_bias()
    fused = mixer(q, k, v, bias=bias, x=x)
    mixer.record = True
    recorded = mixer(q, k, v, bias=bias, x=x)
    assert mixer.last_attn.shape == (B, H, N, N) and not mixer.last_attn.requires_grad
    torch.testing.assert_close(recorded, fused, atol=1e-5, rtol=1e-5)
    assert mixer.last_attn[..., 3, :].abs().sum() == 0  # the fully masked row attends to nothing


#: What must be exactly plain softmax attention: softmax itself, Syn with no steps, CSaN with every calibration off.
PLAIN = [
    config("softmax"),
    config("syn", steps=0),
    config("csan", tau=False, mu=False, kappa_pub="off", kappa_priv=False),
]


@pytest.mark.parametrize("record", [False, True])
@pytest.mark.parametrize("bias_kind", [None, "-inf"])
@pytest.mark.parametrize("cfg", PLAIN, ids=lambda c: c.kind)
def test_plain_attention_equals_the_formula(cfg: AttentionConfig, bias_kind: str | None, record: bool) -> None:
    """Output, rows and gradients in float64 against softmax(q k^T / sqrt(d) + bias) v written out, not
    against another SDPA call (which would share any misuse of SDPA: a dropped bias, a wrong scale).
    Recording takes the explicit rows; Syn computes those in float32 by design, hence its tolerance."""
    mixer = create_mixer(cfg, DIM, H).double()
    mixer.record = record
    q, k, v, x = inputs(dtype=torch.float64)
    bias = None if bias_kind is None else swin_like_bias(torch.float64)
    leaves = [q, k, v] + ([] if bias is None else [bias])
    w = torch.randn(B, H, N, D, dtype=torch.float64)
    ref = reference_attention(q, k, v, bias)
    g_ref = torch.autograd.grad((ref * w).sum(), leaves)
    tol = dict(atol=1e-6, rtol=1e-5) if cfg.kind == "syn" and record else dict(atol=1e-12, rtol=1e-10)
    paths = [mixer.forward_fused, mixer.forward_explicit, mixer] if isinstance(mixer, CSaN) else [mixer]
    for path in paths:
        out = path(q, k, v, bias=bias, x=x)
        torch.testing.assert_close(out, ref, **tol)
        for a, b in zip(torch.autograd.grad((out * w).sum(), leaves), g_ref):
            torch.testing.assert_close(a, b, **tol)
    if record:
        torch.testing.assert_close(mixer.last_attn.double(), reference_rows(q, k, bias), **tol)


# ---------------------------------------------------------------------------------------------------- CSaN
OFF = dict(tau=False, mu=False, kappa_pub="off", kappa_priv=False)


def test_csan_all_off_is_softmax_without_parameters() -> None:
    csan = create_mixer(CSaNAttention(**OFF), DIM, H)
    assert sum(p.numel() for p in csan.parameters()) == 0
    q, k, v, x = inputs()
    for bias in (None, swin_like_bias()):
        ref = reference_attention(q, k, v, bias).float()
        torch.testing.assert_close(csan(q, k, v, bias=bias, x=x), ref, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("component", ["tau", "mu", "kappa_pub", "kappa_priv"])
def test_csan_switched_off_component_owns_no_parameters(component: str) -> None:
    off = {component: "off" if component == "kappa_pub" else False}
    names = {n.split(".")[0] for n, _ in create_mixer(CSaNAttention(**off), DIM, H).named_parameters()}
    assert component not in names
    assert component in {n.split(".")[0] for n, _ in create_mixer(CSaNAttention(), DIM, H).named_parameters()}


KNOB_SETS = [
    {},
    {"bounded": True},
    {"kappa_pub": "head"},
    {"tau": False, "kappa_priv": False},
    {"mu": False, "kappa_pub": "off"},
]


@pytest.mark.parametrize("knobs", KNOB_SETS)
def test_csan_gradients_reach_every_enabled_component(knobs: dict) -> None:
    mixer = create_mixer(CSaNAttention(**knobs), DIM, H)
    q, k, v, x = inputs()
    mixer(q, k, v, bias=swin_like_bias(), x=x).square().sum().backward()
    for name, p in mixer.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def phi(s: torch.Tensor, beta: float) -> torch.Tensor:
    """phi_beta as the CSaN paper (Selection-as-Nonlinearity) writes it.

    s above beta, beta * exp(min(s, beta) / beta - 1) below.
    """
    return torch.where(s > beta, s, beta * torch.exp(torch.clamp(s, max=beta) / beta - 1))


def reference_csan(mixer: CSaN, q, k, v, bias, x):
    """CSaN written out from the formulas, logits materialised (the CSaN paper's equations), sharing only the
    weights, whose shapes it checks against the knobs (r = dim // reduction gates, gate g reading head
    g * H // r; trunk width max(dim // hidden_div, hidden_min)). A switched-off head is its neutral value.

    Pooled queries (Nk = S * Nq), as the authors' Hiera-CSaN: one token per key, key j = s * Nq + i pooled
    into query i; token j gates the descriptor of query i, tau and kappa_pub read the trunk averaged over
    query i's group, mu and kappa_priv each key's own, and query i's private path is the mean of
    v_j * kappa_priv_j over its group. Without pooling every group is one key, and this is the paper's CSaN."""
    cfg, nq, nk, in_dim = mixer.cfg, q.shape[-2], k.shape[-2], x.shape[-1]
    assert x.shape[-2] == nk
    group = [torch.arange(nk) % nq == i for i in range(nq)]  # the keys pooled into query i

    def over_groups(y: torch.Tensor, dim: int) -> torch.Tensor:
        """Mean over each query's group of keys along `dim` (length Nk -> Nq)."""
        return torch.stack([y.index_select(dim, g.nonzero().flatten()).mean(dim) for g in group], dim)

    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if bias is not None:
        s = s + bias
    per_head = lambda y: y.reshape(B, y.shape[1], H, -1).transpose(1, 2)  # noqa: E731
    tau, mu, pub, priv = 1.0, 1.0, 1.0, 0.0
    if cfg.tau or cfg.mu or cfg.kappa_pub != "off" or cfg.kappa_priv:
        r, h = DIM // cfg.reduction, max(DIM // cfg.hidden_div, cfg.hidden_min)
        assert mixer.u.weight.shape == (r, in_dim) and mixer.reduce.weight.shape == (h, r)
        assert (mixer.gate is None) if cfg.bounded else (mixer.gate.weight.shape == (h, h))
        m = phi(s, cfg.beta).mean(-1)  # (B, H, Nq)
        gates = torch.sigmoid(mixer.u(x))  # (B, Nk, r)
        z = gates * m.transpose(1, 2)[:, torch.arange(nk) % nq][..., torch.arange(r) * H // r]
        t = mixer.reduce(z)
        t = F.gelu(t) if cfg.bounded else t * torch.sigmoid(mixer.gate(t))  # (B, Nk, h): one per key
        t_query = over_groups(t, 1)  # (B, Nq, h)

        def f(layer: torch.nn.Linear, width: int, trunk: torch.Tensor) -> torch.Tensor:
            assert layer.weight.shape == (width, h)
            return torch.tanh(layer(trunk)) if cfg.bounded else layer(trunk)

        w = H if cfg.kappa_pub == "head" else DIM
        if cfg.tau:
            f_tau = f(mixer.tau, H, t_query)
            tau = per_head(1 + f_tau if cfg.bounded else torch.where(f_tau > 0, 1 + f_tau, torch.exp(f_tau)))
        if cfg.mu:
            mu = per_head(1 + f(mixer.mu, H, t)).transpose(-2, -1)  # (B, H, 1, Nk)
        if cfg.kappa_pub != "off":
            pub = per_head(1 + f(mixer.kappa_pub, w, t_query))
        if cfg.kappa_priv:
            priv = per_head(f(mixer.kappa_priv, w, t))  # (B, H, Nk, .)
    scaled = s * tau if bias is None else torch.where(s == NEG, s, s.nan_to_num(neginf=0.0) * tau)
    dead = (scaled == NEG).all(-1, keepdim=True)
    a = torch.softmax(scaled.masked_fill(dead, 0.0), -1).masked_fill(dead, 0.0) * mu
    return (a @ v) * pub + over_groups(v * priv, 2)


def swin_window_bias(dtype: torch.dtype) -> torch.Tensor:
    """What a shifted Swin block hands its mixer, composed as `MixedWindowAttention` composes it: a learnt
    relative-position bias (1, H, N, N) plus each window's shift mask (B windows of one image; window 0
    unmasked, window 1 with -100 between its two sub-windows), so the bias differs along the batch."""
    g = torch.Generator().manual_seed(2)
    rel = (0.5 * torch.randn(1, H, N, N, generator=g, dtype=dtype)).requires_grad_()
    half = torch.arange(N) < N // 2
    mask = torch.zeros(B, N, N, dtype=dtype)
    mask[1] = torch.where(half[:, None] == half[None, :], 0.0, -100.0)
    return (rel + mask.unsqueeze(1)).expand(1, -1, -1, -1, -1).reshape(B, H, N, N)


def assert_csan_paths_equal_reference(mixer: CSaN, bias_kind: str | None, pooled: bool, in_dim: int = DIM) -> None:
    """Output and every gradient, in float64: `forward_fused`, `forward_explicit` and what `forward` picks
    against `reference_csan`, with the weights far from init, so every head matters."""
    mixer = mixer.double()
    for p in mixer.parameters():
        torch.nn.init.normal_(p, std=0.3)
    q, k, v, x = inputs(nq=N, nk=2 * N if pooled else N, in_dim=in_dim, dtype=torch.float64)
    bias = None if bias_kind is None else swin_like_bias(torch.float64)
    if bias_kind == "finite":
        bias = bias.detach().clamp(min=-100.0).requires_grad_()
    if bias_kind == "window":
        bias = swin_window_bias(torch.float64)
    leaves = [q, k, v, *mixer.parameters()] + ([x] if mixer.calibrated else []) + ([] if bias is None else [bias])
    w = torch.randn(B, H, N, D, dtype=torch.float64)
    ref = reference_csan(mixer, q, k, v, bias=bias, x=x)
    g_ref = torch.autograd.grad((ref * w).sum(), leaves)
    for path in (mixer.forward_fused, mixer.forward_explicit, mixer):
        out = path(q, k, v, bias=bias, x=x)
        torch.testing.assert_close(out, ref, atol=1e-10, rtol=1e-10)
        for a, b in zip(torch.autograd.grad((out * w).sum(), leaves), g_ref):
            torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("knobs", [{}, {"bounded": True}, {"kappa_pub": "head"}])
@pytest.mark.parametrize(("bias_kind", "pooled"), [(None, False), ("-inf", False), ("finite", False), (None, True)])
def test_csan_paths_equal_explicit_reference(knobs: dict, bias_kind: str | None, pooled: bool) -> None:
    """The SDPA path (descriptor in uneven chunks of 3 rows), the materialised-logits path, and what
    `forward` picks, against the formulas written out here. Biases: none, masked with -inf (rows and
    keys), finite only (Swin's -100 mask: the explicit path's plain ops)."""
    assert_csan_paths_equal_reference(create_mixer(CSaNAttention(chunk=3, **knobs), DIM, H), bias_kind, pooled)


#: Every knob of CSaNAttention away from its default (DIM = 24, H = 3; defaults: beta 0.25, reduction 4,
#: hidden_div 8, hidden_min 24, so at DIM = 24 the trunk width is hidden_min's unless that is lowered).
NON_DEFAULT_KNOBS = [
    {"beta": 0.05},
    {"beta": 1.0},
    {"beta": 4.0, "bounded": True},
    {"reduction": 2},  # 12 gates, 4 per head
    {"reduction": 5},  # 4 gates over 3 heads: uneven shares (head 0 reads two)
    {"reduction": 8},  # one gate per head
    {"hidden_div": 2, "hidden_min": 1},  # trunk 12 wide, set by hidden_div
    {"hidden_div": 3, "hidden_min": 10},  # trunk 10 wide, set by hidden_min above dim // hidden_div
    {"hidden_min": 40},
    {"tau": False},
    {"mu": False},
    {"kappa_pub": "off"},
    {"kappa_priv": False},
    {"kappa_pub": "head", "kappa_priv": False},
    {"tau": False, "mu": False, "kappa_pub": "off"},  # the private path alone
    {"bounded": True, "beta": 0.5, "reduction": 3, "hidden_div": 4, "hidden_min": 2, "kappa_pub": "head"},
]


@pytest.mark.parametrize("knobs", NON_DEFAULT_KNOBS, ids=str)
@pytest.mark.parametrize(("bias_kind", "pooled"), [("-inf", False), (None, True)])
def test_csan_non_default_knobs_equal_explicit_reference(knobs: dict, bias_kind: str | None, pooled: bool) -> None:
    """Each knob changes the result the formulas say it does: a knob read as its default (or a constant)
    anywhere in either path differs from the reference, and the layer shapes follow the knobs."""
    mixer = create_mixer(CSaNAttention(chunk=3, **knobs), DIM, H)
    assert_csan_paths_equal_reference(mixer, bias_kind, pooled)


#: Every combination of CSaN's four switches (kappa_pub unit, head or off): 24 mixers.
SWITCHES = [
    {"tau": tau, "mu": mu, "kappa_pub": pub, "kappa_priv": priv}
    for tau in (True, False)
    for mu in (True, False)
    for pub in ("unit", "head", "off")
    for priv in (True, False)
]
#: Where CSaN runs: ViT (no bias), a shifted Swin window (learnt bias + per-window -100 shift mask), a mask
#: with -inf rows and keys, Hiera's pooled queries (one token per key).
PLACES = {"vit": (None, False), "swin-window": ("window", False), "-inf": ("-inf", False), "hiera": (None, True)}


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("switches", SWITCHES, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
def test_csan_every_switch_combination_equals_the_reference_everywhere(switches: dict, place: str) -> None:
    """The fused path (and the explicit one, and what `forward` picks) for every combination of the four
    switches at every place CSaN runs, output and every gradient in float64."""
    bias_kind, pooled = PLACES[place]
    assert_csan_paths_equal_reference(create_mixer(CSaNAttention(chunk=3, **switches), DIM, H), bias_kind, pooled)


def test_csan_pooled_queries_take_one_token_per_key() -> None:
    """Pooled queries read the unpooled tokens (one per key); tokens one per query are refused, not guessed at."""
    mixer = create_mixer(CSaNAttention(), DIM, H)
    q, k, v, x = inputs(nq=N, nk=2 * N)
    assert mixer(q, k, v, x=x).shape == (B, H, N, D)
    with pytest.raises(ValueError, match="one per key"):
        mixer(q, k, v, x=x[:, :N])


def test_csan_gates_read_tokens_of_their_own_width() -> None:
    """Hiera's stage transitions: tokens of width in_dim != dim feed the gates."""
    mixer = create_mixer(CSaNAttention(chunk=3, reduction=2), DIM, H, in_dim=DIM // 2)
    assert_csan_paths_equal_reference(mixer, None, True, in_dim=DIM // 2)


@pytest.mark.parametrize("bias_shape", [None, (1, H, N, N), (B, 1, 1, N), (N, N)])
def test_row_chunked_descriptor_gradcheck(bias_shape: tuple | None) -> None:
    q, k, _, _ = inputs(dtype=torch.float64)
    bias = None if bias_shape is None else torch.randn(bias_shape, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda q, k, b: _RowMeanPhi.apply(q, k, b, 0.25, 3), (q, k, bias))
    s = q @ k.transpose(-2, -1) / math.sqrt(D) + (0 if bias is None else bias)
    for beta in (0.25, 0.05, 1.5):  # the knee moves with beta
        for chunk in (1, 4, 1000):
            torch.testing.assert_close(_RowMeanPhi.apply(q, k, bias, beta, chunk), phi(s, beta).mean(-1))


def test_row_chunked_descriptor_sums_bf16_gradients_in_float32() -> None:
    """bf16 inputs (the fused path under CUDA autocast): the gradients of k and of a bias shared by the rows add one
    term per chunk of rows, 256 here. Summed in bf16 (8 significant bits) the late chunks' terms round away: up to 7%
    and 11% off the fp64 gradient of the same values; summed in float32, 0.4%, bf16's rounding of each chunk's term
    (q's gradient, summed within its chunk only, is as far off)."""
    n, chunk, beta = 1024, 4, 1.0  # beta 1: rows of logits on both sides of the knee
    torch.manual_seed(0)
    q, k = (torch.rand(1, 2, n, 16).bfloat16() for _ in range(2))
    bias = torch.rand(1, 1, 1, n).bfloat16()
    wide = [x.double().requires_grad_() for x in (q, k, bias)]
    phi(wide[0] @ wide[1].transpose(-2, -1) / 4 + wide[2], beta).mean(-1).sum().backward()
    half = [x.clone().requires_grad_() for x in (q, k, bias)]
    _RowMeanPhi.apply(*half, beta, chunk).sum().backward()
    for name, h, w in zip("qkb", half, wide):
        assert h.grad is not None and w.grad is not None and h.grad.dtype == torch.bfloat16
        error = float((h.grad.double() - w.grad).abs().max() / w.grad.abs().max())
        assert error < 0.01, (name, error)


@pytest.mark.parametrize("bias_shape", [None, (1, H, N, N), (B, 1, 1, N), (N, N)])
def test_knee_logits_gradcheck(bias_shape: tuple | None) -> None:
    """Both outputs of the explicit path's one matmul: t = s / beta and the descriptor, whose gradient
    rides on the logits' gradient."""
    q, k, _, _ = inputs(dtype=torch.float64)
    bias = None if bias_shape is None else torch.randn(bias_shape, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda q, k, b: _KneeLogits.apply(q, k, b, 0.25), (q, k, bias))
    s = q @ k.transpose(-2, -1) / math.sqrt(D) + (0 if bias is None else bias)
    for beta in (0.25, 0.05, 1.5):
        t, m = _KneeLogits.apply(q, k, bias, beta)
        torch.testing.assert_close(t, s / beta - 1)
        torch.testing.assert_close(m, phi(s, beta).mean(-1))


def test_csan_path_by_size_and_its_matmuls() -> None:
    """CPU: queries within one chunk take the explicit path (logits once: 2 forward + 4 backward N x N
    matmuls in all), longer ones SDPA + the chunked descriptor (2 + 5, and 1 + 3 for the descriptor)."""
    n = 32
    q, k, v, x = inputs(nq=n, nk=n)

    def step(chunk: int) -> int:
        mixer = create_mixer(CSaNAttention(chunk=chunk), DIM, H)
        return flops(lambda: mixer(q, k, v, x=x).sum().backward())

    matmul = 2 * B * H * n * n * D
    assert step(16) - step(n) == (2 + 5 + 1 + 3 - 6) * matmul


def test_csan_tau_stays_positive_and_starts_near_plain_attention() -> None:
    mixer = create_mixer(CSaNAttention(), DIM, H)
    q, k, v, x = inputs()
    plain = reference_attention(q, k, v).float()
    assert (mixer(q, k, v, x=x) - plain).norm() < 0.05 * plain.norm()  # init: f ~ 0
    for bounded in (False, True):
        mixer = create_mixer(CSaNAttention(bounded=bounded), DIM, H)
        torch.nn.init.constant_(mixer.tau.bias, -200.0)  # far past where 1 + f and 1 + tanh f reach 0
        tau = mixer.gains(torch.rand(B, H, N), x, N).tau
        assert (tau > 0).all()


def csan_layer_params(cfg: CSaNAttention, dim: int, heads: int, in_dim: int | None = None) -> int:
    """The per-layer formula of ablate.nn.mechanisms.csan's docstring."""
    r, h = dim // cfg.reduction, max(dim // cfg.hidden_div, cfg.hidden_min)
    w = heads if cfg.kappa_pub == "head" else dim
    heads_on = (cfg.tau + cfg.mu) * (h * heads + heads) + ((cfg.kappa_pub != "off") + cfg.kappa_priv) * (h * w + w)
    if not heads_on:
        return 0
    trunk = (in_dim or dim) * r + r + r * h + h + (0 if cfg.bounded else h * h + h)
    return trunk + heads_on


SWIN = dict(dims=(96, 192, 384, 768), heads=(3, 6, 12, 24))


@pytest.mark.parametrize(
    "knobs",
    [
        {},
        {"kappa_pub": "head"},
        {"bounded": True},
        {"kappa_pub": "off"},
        {"reduction": 2},
        {"reduction": 3, "hidden_div": 4},  # hidden_div above hidden_min from dim 96 on
        {"hidden_div": 2, "hidden_min": 100},  # hidden_min wins at the narrow stages only
        {"tau": False, "kappa_priv": False},
        {"mu": False, "kappa_pub": "head", "bounded": True, "reduction": 6},
        {"tau": False, "mu": False, "kappa_pub": "off", "kappa_priv": False},
    ],
    ids=str,
)
def test_csan_layer_parameter_formula(knobs: dict) -> None:
    cfg = CSaNAttention(**knobs)
    with torch.device("meta"):  # sizes only
        for dim, heads in zip(*SWIN.values()):
            size = sum(p.numel() for p in create_mixer(cfg, dim, heads).parameters())
            assert size == csan_layer_params(cfg, dim, heads)
            in_dim = dim // 2  # Hiera's pooled-query blocks: the gates read the narrower input tokens
            mixer = create_mixer(cfg, dim, heads, in_dim=in_dim)
            assert sum(p.numel() for p in mixer.parameters()) == csan_layer_params(cfg, dim, heads, in_dim)


def csan_added(cfg: CSaNAttention, depths: tuple[int, ...], per_block: int = 1) -> int:
    layers = zip(depths, *SWIN.values())
    return sum(d * per_block * sum(p.numel() for p in create_mixer(cfg, dim, h).parameters()) for d, dim, h in layers)


@pytest.mark.parametrize(("kappa_pub", "published"), [("unit", 29.5e6), ("head", 29.0e6)])
def test_csan_reproduces_swin_tiny_parameter_counts(kappa_pub: str, published: float) -> None:
    base = sum(p.numel() for p in timm.create_model("swin_tiny_patch4_window7_224").parameters())
    assert abs(base - 28.3e6) < 0.005 * 28.3e6
    total = base + csan_added(CSaNAttention(kappa_pub=kappa_pub), (2, 2, 6, 2))
    assert abs(total - published) < 0.005 * published


def test_csan_reproduces_swin_min_parameter_counts() -> None:
    """Published bases (pure: 8.63M, alternating: 11.8M) plus the CSaN layers: 9.5M and 12.2M."""
    assert abs(8.63e6 + csan_added(CSaNAttention(), (1, 1, 1, 1), per_block=2) - 9.5e6) < 0.005 * 9.5e6
    assert abs(11.8e6 + csan_added(CSaNAttention(), (1, 1, 1, 1)) - 12.2e6) < 0.005 * 12.2e6


# -------------------------------------------------------------------------------------------------- kernels
@pytest.mark.parametrize("sigma", [0.7, 2.5])
@pytest.mark.parametrize("kind", ["gaussian", "laplace"])
def test_kernel_attention_equals_its_formula(kind: str, sigma: float) -> None:
    """The bandwidth comes from the config (then learnt per head): the reference takes it from cfg.sigma
    and the per-head steps applied here, never from the mixer's parameter."""
    mixer = create_mixer(config(kind, sigma=sigma), DIM, H)
    step = torch.tensor([0.0, 0.3, -0.2])
    with torch.no_grad():
        mixer.log_sigma.add_(step)
    q, k, v, _ = inputs()
    bias = swin_like_bias()
    sigma = (sigma * step.exp()).view(-1, 1, 1) * D**0.25  # in unscaled units
    dist = torch.cdist(q, k)
    s = -(dist**2) / (2 * sigma**2) if kind == "gaussian" else -dist / sigma
    s = s + bias
    dead = (s == NEG).all(-1, keepdim=True)
    ref = s.masked_fill(dead, 0).softmax(-1).masked_fill(dead, 0) @ v
    out = mixer(q, k, v, bias=bias)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-4)
    out.sum().backward()
    assert mixer.log_sigma.grad.abs().min() > 0


# ------------------------------------------------------------------------------------------- sparse normalisers
def rows_of(mixer_cls: type, row: list[float]) -> torch.Tensor:
    """Run a mixer on q = the logits and k = sqrt(d) I, so that q k^T / sqrt(d) is exactly ``row``."""
    n = len(row)
    mixer = mixer_cls(config(mixer_cls.__name__.lower()), n, 1)
    q = torch.tensor(row, dtype=torch.float32).view(1, 1, 1, n)
    k = math.sqrt(n) * torch.eye(n).view(1, 1, n, n)
    return mixer.rows(q, k, None).view(-1)


@pytest.mark.parametrize(
    ("cls", "row", "expected"),
    [
        (Sparsemax, [-2, 0, 0.5], [0, 0.25, 0.75]),
        (Entmax15, [-2, 0, 0.5], [0, 0.3260, 0.6740]),
        (Sparsemax, [1, 0.5, 0.1], [0.75, 0.25, 0]),
        (Sparsemax, [3, 1, 0.2], [1, 0, 0]),
        (Sparsemax, [0.4, 0.4, 0.4, 0.4], [0.25] * 4),
        (Entmax15, [-1.0] * 5, [0.2] * 5),
    ],
)
def test_sparse_known_values(cls: type, row: list[float], expected: list[float]) -> None:
    torch.testing.assert_close(rows_of(cls, row), torch.tensor(expected, dtype=torch.float32), atol=1e-4, rtol=0)


# ------------------------------------------------------------------------------------------------------ ISTA
def ista_rows(q: torch.Tensor, k: torch.Tensor, bias: torch.Tensor | None = None, **knobs: object) -> torch.Tensor:
    return create_mixer(ISTAAttention(**knobs), q.shape[-1] * q.shape[1], q.shape[1]).rows(q, k, bias)


def test_ista_orthonormal_keys_one_step_is_thresholded_correlation_and_stays() -> None:
    k = torch.linalg.qr(torch.randn(D, D))[0].T.reshape(1, 1, D, D)  # orthonormal rows
    q = torch.randn(1, 1, 5, D)
    expected = F.relu(q @ k.transpose(-2, -1) - 0.1)
    for steps in (1, 5):
        a = ista_rows(q, k, steps=steps, step_size=1.0, threshold=0.1)
        torch.testing.assert_close(a, expected, atol=1e-5, rtol=0)


def test_ista_without_threshold_recovers_least_squares() -> None:
    g = torch.Generator().manual_seed(0)
    basis = torch.linalg.qr(torch.randn(D, 4, generator=g))[0].T  # 4 orthonormal directions in 8 dims
    k = (torch.tensor([1.0, 0.8, 0.6, 0.5]).unsqueeze(-1) * basis).view(1, 1, 4, D)  # L = 1, condition 4
    q = torch.randn(1, 1, 3, D, generator=g)
    a = ista_rows(q, k, steps=100, step_size=1.0, threshold=0.0, signed=True)  # error shrinks 0.75x a step
    least_squares = torch.linalg.lstsq(k.transpose(-2, -1), q.transpose(-2, -1)).solution.transpose(-2, -1)
    torch.testing.assert_close(a, least_squares, atol=1e-4, rtol=1e-4)


def reference_ista(q, k, steps: int, threshold: float, step_size: float | None, signed: bool) -> torch.Tensor:
    """T steps of ISTA on min_A ||Q - A K||^2 / 2 + lambda |A|_1 from A = 0, in float64: a gradient step of
    eps (1 / ||K||_F^2, or the given step clipped to 0.99 * 2 / L, L = ||K||_2^2), then soft-thresholding
    by eps * lambda (non-negative unless signed)."""
    q, k = q.double(), k.double()
    lipschitz = torch.linalg.matrix_norm(k, ord=2)[..., None, None] ** 2
    frobenius = k.square().sum((-2, -1), keepdim=True)
    eps = 1 / frobenius if step_size is None else torch.clamp(0.99 * 2 / lipschitz, max=step_size)
    a = torch.zeros(*q.shape[:-1], k.shape[-2], dtype=torch.float64)
    for _ in range(steps):
        a = a - eps * (a @ k - q) @ k.transpose(-2, -1)
        shrunk = F.relu(a.abs() - eps * threshold)
        a = a.sign() * shrunk if signed else F.relu(a - eps * threshold)
    return a


@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("step_size", [None, 0.004, 10.0])  # 10: clipped to 0.99 * 2 / L
@pytest.mark.parametrize(("steps", "threshold"), [(1, 0.0), (2, 2.0), (7, 0.5), (20, 5.0)])
def test_ista_knobs_equal_the_iteration(steps: int, threshold: float, step_size: float | None, signed: bool) -> None:
    """Rows against the iteration written out, for steps, lambda, the step and the sign away from their
    defaults (3, 0.01, None, False): a knob read as its default changes these rows."""
    q, k, _, _ = inputs()
    a = ista_rows(q.detach(), k.detach(), steps=steps, threshold=threshold, step_size=step_size, signed=signed)
    ref = reference_ista(q.detach(), k.detach(), steps, threshold, step_size, signed)
    assert ref.abs().amax() > 1e-3  # not thresholded away
    torch.testing.assert_close(a.double(), ref, atol=1e-6, rtol=1e-4)


def test_ista_step_size_is_guarded_below_two_over_lipschitz() -> None:
    k = torch.randn(B, H, N, D)
    lipschitz = torch.linalg.matrix_norm(k, ord=2) ** 2
    assert (ista_step_size(k, None).view(B, H) <= 1 / lipschitz + 1e-9).all()
    assert (ista_step_size(k, 1e6).view(B, H) < 2 / lipschitz).all()
    assert (ista_step_size(k, 1e-9) == 1e-9).all()


def test_ista_signed_zero_diagonal_and_masks() -> None:
    q, k, _, _ = inputs()
    bias = swin_like_bias().detach()
    a = ista_rows(q, k, bias, steps=5, step_size=1.0, threshold=0.0, signed=True, zero_diag=True)
    assert (a < 0).any() and (a.diagonal(dim1=-2, dim2=-1) == 0).all()
    assert (a[..., 3, :] == 0).all() and (a[..., 5, 1] == 0).all() and (a[..., : N // 2, N // 2 :] == 0).all()
    assert (ista_rows(q, k, steps=5, step_size=1.0, threshold=0.0) >= 0).all()
    with pytest.raises(ValueError, match="zero_diag"):
        ista_rows(q, torch.randn(B, H, 2 * N, D), zero_diag=True)


# ------------------------------------------------------------------------------------------- no N x N tensors
@pytest.mark.parametrize(
    "cfg",
    [config("softmax"), CSaNAttention(chunk=16), config("gaussian"), config("nlm"), config("syn", steps=0)],
    ids=lambda c: c.kind,
)
def test_fused_variants_never_materialise_n_by_n(cfg: AttentionConfig) -> None:
    """No op of forward or backward sees an (N, N) tensor: CSaN's logits exist 16 rows at a time."""
    n = 64
    mixer = create_mixer(cfg, DIM, H)
    q, k, v, x = inputs(nq=n, nk=n)
    with torch.profiler.profile(record_shapes=True) as prof:
        mixer(q, k, v, x=x).sum().backward()
    shapes = [tuple(s) for e in prof.events() for s in e.input_shapes if len(s) >= 2]
    assert (B, H, 16, n) in shapes or cfg.kind != "csan"
    assert not [s for s in shapes if s[-2:] == (n, n)]
