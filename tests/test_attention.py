"""Token mixers: the registry contract for every kind, CSaN's fused path and parameters, kernels, sparse rows."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from pydantic import TypeAdapter

from ablate import _tv_compat  # noqa: F401  (before timm)
from ablate.config import AttentionConfig, CSaNAttention, ISTAAttention
from ablate.nn import REGISTRY, create_mixer
from ablate.nn.accounting import flops
from ablate.nn.csan import CSaN, _KneeLogits, _RowMeanPhi
from ablate.nn.sparse import Entmax15, Sparsemax, ista_step_size

import timm  # noqa: E402  (after the torchvision shim)

B, H, N, D = 2, 3, 10, 8
DIM = H * D
NEG = float("-inf")


def config(kind: str, **knobs: object) -> AttentionConfig:
    return TypeAdapter(AttentionConfig).validate_python({"kind": kind, **knobs})


def inputs(nq: int = N, nk: int = N, in_dim: int = DIM, dtype: torch.dtype = torch.float32, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, nq, D, generator=g, dtype=dtype, requires_grad=True)
    k = torch.randn(B, H, nk, D, generator=g, dtype=dtype, requires_grad=True)
    v = torch.randn(B, H, nk, D, generator=g, dtype=dtype, requires_grad=True)
    x = torch.randn(B, nq, in_dim, generator=g, dtype=dtype, requires_grad=True)
    return q, k, v, x


def swin_like_bias(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A learnable relative-position-like bias plus a -100 shift mask, one fully -inf row, one -inf key."""
    g = torch.Generator().manual_seed(1)
    bias = 0.5 * torch.randn(1, H, N, N, generator=g, dtype=dtype)
    bias[..., : N // 2, N // 2 :] = -100.0
    bias[..., 3, :] = NEG
    bias[..., 5, 1] = NEG
    return bias.requires_grad_()


# ------------------------------------------------------------------------------------- every registered kind
@pytest.mark.parametrize("kind", sorted(REGISTRY))
def test_forward_backward_finite_and_masked_rows_safe(kind: str) -> None:
    mixer = create_mixer(config(kind), DIM, H)
    q, k, v, x = inputs()
    bias = swin_like_bias()
    out = mixer(q, k, v, bias=bias, x=x)
    assert out.shape == (B, H, N, D)
    assert out.isfinite().all()
    out.square().sum().backward()
    for t in (q, k, v, bias, *mixer.parameters()):
        assert t.grad is None or t.grad.isfinite().all()
    assert mixer.last_attn is None  # nothing kept unless recording


@pytest.mark.parametrize("kind", sorted(REGISTRY))
def test_pooled_queries(kind: str) -> None:
    """Hiera's pooled-query blocks: 4x fewer queries than keys, tokens wider than the attention."""
    mixer = create_mixer(config(kind), DIM, H, in_dim=DIM // 2)
    q, k, v, x = inputs(nq=N, nk=4 * N, in_dim=DIM // 2)
    out = mixer(q, k, v, x=x)
    assert out.shape == (B, H, N, D)
    out.sum().backward()
    assert q.grad.isfinite().all() and k.grad.isfinite().all()


@pytest.mark.parametrize("kind", sorted(REGISTRY))
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


# ---------------------------------------------------------------------------------------------------- CSaN
OFF = dict(tau=False, mu=False, kappa_pub="off", kappa_priv=False)


def test_csan_all_off_is_softmax_without_parameters() -> None:
    csan, softmax = create_mixer(CSaNAttention(**OFF), DIM, H), create_mixer(config("softmax"), DIM, H)
    assert sum(p.numel() for p in csan.parameters()) == 0
    q, k, v, x = inputs()
    for bias in (None, swin_like_bias()):
        torch.testing.assert_close(csan(q, k, v, bias=bias, x=x), softmax(q, k, v, bias=bias), atol=1e-6, rtol=1e-6)


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
    """phi_beta as the CSaN paper (Selection-as-Nonlinearity) writes it: s above beta, beta * exp(min(s, beta) / beta - 1) below."""
    return torch.where(s > beta, s, beta * torch.exp(torch.clamp(s, max=beta) / beta - 1))


def reference_csan(mixer: CSaN, q, k, v, bias, x):
    """CSaN written out from the formulas, logits materialised (the CSaN paper's equations), sharing only the weights."""
    cfg, nq, nk = mixer.cfg, q.shape[-2], k.shape[-2]
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if bias is not None:
        s = s + bias
    m = phi(s, cfg.beta).mean(-1)
    gates = torch.sigmoid(mixer.u(x))  # (B, Nq, r)
    r = gates.shape[-1]
    z = gates * m.transpose(1, 2).repeat_interleave(r // H, dim=-1)
    t = mixer.reduce(z)
    t = F.gelu(t) if cfg.bounded else t * torch.sigmoid(mixer.gate(t))
    f = (lambda layer: torch.tanh(layer(t))) if cfg.bounded else (lambda layer: layer(t))
    per_head = lambda y: y.reshape(B, nq, H, -1).transpose(1, 2)  # noqa: E731
    tau = 1 + f(mixer.tau) if cfg.bounded else torch.where(mixer.tau(t) > 0, 1 + mixer.tau(t), torch.exp(mixer.tau(t)))
    tau = per_head(tau)
    mu = per_head(1 + f(mixer.mu)).repeat(1, 1, nk // nq, 1)  # pooled keys take their group's mu
    scaled = s * tau if bias is None else torch.where(s == NEG, s, s.nan_to_num(neginf=0.0) * tau)
    dead = (scaled == NEG).all(-1, keepdim=True)
    a = torch.softmax(scaled.masked_fill(dead, 0.0), -1).masked_fill(dead, 0.0) * mu.transpose(-2, -1)
    own = v if nk == nq else v.reshape(B, H, nk // nq, nq, -1).amax(2)
    return (a @ v) * per_head(1 + f(mixer.kappa_pub)) + own * per_head(f(mixer.kappa_priv))


@pytest.mark.parametrize("knobs", [{}, {"bounded": True}, {"kappa_pub": "head"}])
@pytest.mark.parametrize(("bias_kind", "pooled"), [(None, False), ("-inf", False), ("finite", False), (None, True)])
def test_csan_paths_equal_explicit_reference(knobs: dict, bias_kind: str | None, pooled: bool) -> None:
    """Output and every gradient, in float64: the SDPA path (descriptor in uneven chunks of 3 rows), the
    materialised-logits path, and what `forward` picks, against the formulas written out here. Biases:
    none, masked with -inf (rows and keys), finite only (Swin's -100 mask: the explicit path's plain ops)."""
    mixer = create_mixer(CSaNAttention(chunk=3, **knobs), DIM, H).double()
    for p in mixer.parameters():  # far from init, so every head matters
        torch.nn.init.normal_(p, std=0.3)
    q, k, v, x = inputs(nq=N, nk=2 * N if pooled else N, dtype=torch.float64)
    bias = None if bias_kind is None else swin_like_bias(torch.float64)
    if bias_kind == "finite":
        bias = bias.detach().clamp(min=-100.0).requires_grad_()
    leaves = [q, k, v, x, *mixer.parameters()] + ([] if bias is None else [bias])
    w = torch.randn(B, H, N, D, dtype=torch.float64)
    ref = reference_csan(mixer, q, k, v, bias=bias, x=x)
    g_ref = torch.autograd.grad((ref * w).sum(), leaves)
    for path in (mixer.forward_fused, mixer.forward_explicit, mixer):
        out = path(q, k, v, bias=bias, x=x)
        torch.testing.assert_close(out, ref, atol=1e-10, rtol=1e-10)
        for a, b in zip(torch.autograd.grad((out * w).sum(), leaves), g_ref):
            torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("bias_shape", [None, (1, H, N, N), (B, 1, 1, N), (N, N)])
def test_row_chunked_descriptor_gradcheck(bias_shape: tuple | None) -> None:
    q, k, _, _ = inputs(dtype=torch.float64)
    bias = None if bias_shape is None else torch.randn(bias_shape, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda q, k, b: _RowMeanPhi.apply(q, k, b, 0.25, 3), (q, k, bias))
    full = phi(q @ k.transpose(-2, -1) / math.sqrt(D) + (0 if bias is None else bias), 0.25).mean(-1)
    for chunk in (1, 4, 1000):
        torch.testing.assert_close(_RowMeanPhi.apply(q, k, bias, 0.25, chunk), full)


@pytest.mark.parametrize("bias_shape", [None, (1, H, N, N), (B, 1, 1, N), (N, N)])
def test_knee_logits_gradcheck(bias_shape: tuple | None) -> None:
    """Both outputs of the explicit path's one matmul: t = s / beta and the descriptor, whose gradient
    rides on the logits' gradient."""
    q, k, _, _ = inputs(dtype=torch.float64)
    bias = None if bias_shape is None else torch.randn(bias_shape, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda q, k, b: _KneeLogits.apply(q, k, b, 0.25), (q, k, bias))
    s = q @ k.transpose(-2, -1) / math.sqrt(D) + (0 if bias is None else bias)
    t, m = _KneeLogits.apply(q, k, bias, 0.25)
    torch.testing.assert_close(t, s / 0.25 - 1)
    torch.testing.assert_close(m, phi(s, 0.25).mean(-1))


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
    plain = F.scaled_dot_product_attention(q, k, v)
    assert (mixer(q, k, v, x=x) - plain).norm() < 0.05 * plain.norm()  # init: f ~ 0
    for bounded in (False, True):
        mixer = create_mixer(CSaNAttention(bounded=bounded), DIM, H)
        torch.nn.init.constant_(mixer.tau.bias, -200.0)  # far past where 1 + f and 1 + tanh f reach 0
        tau = mixer.gains(torch.rand(B, H, N), x, N).tau
        assert (tau > 0).all()


def csan_layer_params(cfg: CSaNAttention, dim: int, heads: int) -> int:
    """The per-layer formula of ablate.nn.csan's docstring."""
    r, h = dim // cfg.reduction, max(dim // cfg.hidden_div, cfg.hidden_min)
    w = heads if cfg.kappa_pub == "head" else dim
    n = dim * r + r + r * h + h + (0 if cfg.bounded else h * h + h) + 2 * (h * heads + heads)
    return n + (cfg.kappa_pub != "off") * (h * w + w) + cfg.kappa_priv * (h * w + w)


SWIN = dict(dims=(96, 192, 384, 768), heads=(3, 6, 12, 24))


@pytest.mark.parametrize("knobs", [{}, {"kappa_pub": "head"}, {"bounded": True}, {"kappa_pub": "off"}])
def test_csan_layer_parameter_formula(knobs: dict) -> None:
    cfg = CSaNAttention(**knobs)
    for dim, heads in zip(*SWIN.values()):
        assert sum(p.numel() for p in create_mixer(cfg, dim, heads).parameters()) == csan_layer_params(cfg, dim, heads)


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
@pytest.mark.parametrize("kind", ["gaussian", "laplace"])
def test_kernel_attention_equals_its_formula(kind: str) -> None:
    mixer = create_mixer(config(kind, sigma=0.7), DIM, H)
    with torch.no_grad():
        mixer.log_sigma.add_(torch.tensor([0.0, 0.3, -0.2]))
    q, k, v, _ = inputs()
    bias = swin_like_bias()
    sigma = mixer.log_sigma.exp().view(-1, 1, 1) * D**0.25  # in unscaled units
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
    [config("softmax"), CSaNAttention(chunk=16), config("gaussian"), config("syn", steps=0)],
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
