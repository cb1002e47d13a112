"""Forward + backward time, FLOPs and peak memory of every attention variant, as ratios to softmax SDPA.

    .venv/bin/python bench/attention.py [--device cpu|cuda] [--threads N] [--budget SECONDS] [--only LABEL ...]

Each shape is a real timm attention layer patched by `ablate.nn.backbones.vit` / `ablate.nn.backbones.swin`
(qkv projection, mixer, output
projection): ViT-S, timm `Attention` (384 wide, 6 heads) on 8 images of 197 tokens; Swin-T stage 1,
timm `WindowAttention` (96 wide, 3 heads, 7 x 7 windows) on the 4 x 64 windows of four 56 x 56 maps, its
learnt relative-position bias plus the -100 shift mask of timm's shifted block; a long sequence, ViT
attention 96 wide, 3 heads, one image of 3136 tokens (56 x 56). Two timings per variant:
"ms" is the mixer alone (the q, k, v, bias and tokens the layer hands it, in timm's memory layout: q, k, v
are views of one qkv tensor), forward and backward; "layer ms" is the whole layer. "x FLOPs" are the
ratios of counted forward + backward FLOPs (`ablate.nn.accounting.flops`: matmuls only), the floor a
variant's time ratio could reach if every op ran as fast per FLOP as softmax's. "csan" is what
`CSaN.forward` picks for the shape; "csan fused" (SDPA + row-chunked descriptor) and "csan explicit"
(logits materialised once) are its two paths forced. A second table times whole models (`create_model`,
224 px, 1000 classes, a training step's forward and backward; --models, default ViT-S/16 and Swin-T):
what a trial pays per step.

Time: the fastest of repeated fwd+bwd runs after a warm-up, the variant taking turns with softmax (other
processes only ever add time, and a change in load hits both alike; CUDA: synchronised, bf16 autocast, as
in a model under autocast). Peak memory, measured on the warm-up run of the mixer: the highest net bytes
allocated during one fwd+bwd above what was live before it (inputs excluded;
`ablate.nn.accounting.peak_bytes`). CPU threads: torch's default unless --threads; on a loaded machine use
--threads 1, since an OpenMP barrier waiting on a descheduled thread adds a time slice to every op and so
punishes variants with many small ops.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

import ablate  # noqa: F401  (installs the torchvision shim before timm is imported)

# isort: split
import torch
from pydantic import TypeAdapter
from rich.console import Console
from rich.table import Table
from timm.layers import Attention
from timm.models.swin_transformer import SwinTransformerBlock
from torch import Tensor, nn

from ablate.config import AttentionConfig, TrialConfig
from ablate.nn.accounting import flops, peak_bytes
from ablate.nn.backbones.swin.layers import MixedWindowAttention
from ablate.nn.backbones.vit.layers import MixedAttention
from ablate.nn.factory import create_model


@dataclass(frozen=True)
class Shape:
    name: str
    batch: int
    tokens: int
    dim: int
    heads: int
    window: int = 0
    """> 0: a Swin window layer; batch = windows of window^2 tokens, shifted (masked) every other block."""


SHAPES = (
    Shape("vit-s", 8, 197, 384, 6),
    Shape("swin-window", 4 * 64, 49, 96, 3, window=7),
    Shape("long", 1, 3136, 96, 3),
)
VARIANTS: dict[str, dict] = {
    "softmax": {"kind": "softmax"},
    "csan": {"kind": "csan"},
    "csan fused": {"kind": "csan"},
    "csan explicit": {"kind": "csan"},
    "csan head-wise": {"kind": "csan", "kappa_pub": "head"},
    "csan bounded": {"kind": "csan", "bounded": True},
    "syn +3": {"kind": "syn", "steps": 3},
    "syn -3": {"kind": "syn", "steps": -3},
    "gaussian": {"kind": "gaussian"},
    "laplace": {"kind": "laplace"},
    "sparsemax": {"kind": "sparsemax"},
    "entmax15": {"kind": "entmax15"},
    "ista": {"kind": "ista"},
}


#: whole models timed per variant: size preset and batch
MODELS = {"vit-small": 4, "swin-tiny": 2}
FORCED = ("csan fused", "csan explicit")


def make_layer(s: Shape, label: str, device: torch.device) -> tuple[nn.Module, Tensor | None]:
    """The patched timm layer for ``label`` (seeded alike for every variant), and its shift mask if any."""
    cfg = TypeAdapter(AttentionConfig).validate_python(VARIANTS[label])
    torch.manual_seed(0)
    if s.window:
        side = 8 * s.window  # an 8 x 8-window map; timm's shifted block computes its -100 mask
        block = SwinTransformerBlock(s.dim, (side, side), s.heads, window_size=s.window, shift_size=s.window // 2)
        layer = MixedWindowAttention.adopt(block.attn, cfg)
        mask = block.attn_mask
    else:
        layer, mask = MixedAttention.adopt(Attention(s.dim, s.heads, qkv_bias=True), cfg), None
    if label in FORCED:
        mixer = layer.mixer
        mixer.forward = mixer.forward_fused if label == "csan fused" else mixer.forward_explicit
    return layer.to(device), None if mask is None else mask.to(device)


def mixer_inputs(layer: nn.Module, x: Tensor, mask: Tensor | None, autocast: Callable) -> dict[str, Tensor | None]:
    """What the layer hands its mixer for ``x`` (under the run's autocast), as leaves that keep their layout."""
    seen: dict[str, Tensor | None] = {}

    def grab(_: nn.Module, args: tuple, kwargs: dict) -> None:
        seen.update(zip("qkv", args), **kwargs)

    handle = layer.mixer.register_forward_pre_hook(grab, with_kwargs=True)
    with torch.no_grad(), autocast():
        layer(x) if mask is None else layer(x, mask)
    handle.remove()
    return {
        name: None
        if t is None
        else torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
        .copy_(t)
        .requires_grad_(t.is_floating_point())
        for name, t in seen.items()
    }


def fwd_bwd(
    module: nn.Module, forward: Callable[[], Tensor], leaves: list[Tensor], grad: Tensor, autocast
) -> Callable[[], None]:
    def step() -> None:
        for t in leaves:
            t.grad = None
        module.zero_grad(set_to_none=True)
        with autocast():
            out = forward()
        out.backward(grad)

    return step


def seconds(steps: list[Callable[[], None]], sync: Callable[[], None], budget: float) -> list[float]:
    """Fastest run of each step (warmed up by the caller), the steps taking turns so that a change in the
    machine's load hits them alike: at least 2 rounds, more within ``budget`` seconds."""
    times: list[list[float]] = [[] for _ in steps]
    while len(times[0]) < 2 or (sum(map(sum, times)) < budget and len(times[0]) < 20):
        for step, ts in zip(steps, times):
            t0 = time.perf_counter()
            step()
            sync()
            ts.append(time.perf_counter() - t0)
    return [min(ts) for ts in times]


@dataclass
class Steps:
    """One variant at one shape: its mixer and layer steps, warmed up, with their counts."""

    mixer: Callable[[], None]
    layer: Callable[[], None]
    mixer_flops: int
    layer_flops: int
    peak: int


def variant_steps(s: Shape, label: str, device: torch.device, dtype: torch.dtype, autocast) -> Steps:
    layer, mask = make_layer(s, label, device)
    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(s.batch, s.tokens, s.dim, generator=g).to(device, dtype).requires_grad_()
    y_grad = torch.randn(s.batch, s.tokens, s.dim, generator=g).to(device, dtype)
    inp = mixer_inputs(layer, x, mask, autocast)
    out_grad = torch.randn(inp["q"].shape, generator=g).to(device, dtype)
    leaves = [t for t in inp.values() if t is not None and t.requires_grad]
    mix = lambda: layer.mixer(inp["q"], inp["k"], inp["v"], bias=inp.get("bias"), x=inp.get("x"))  # noqa: E731
    mixer = fwd_bwd(layer.mixer, mix, leaves, out_grad, autocast)
    whole = fwd_bwd(layer, lambda: layer(x) if mask is None else layer(x, mask), [x], y_grad, autocast)
    peak = peak_bytes(mixer, device)  # also the warm-up
    whole()
    return Steps(mixer, whole, flops(mixer), flops(whole), peak)


def model_steps(size: str, batch: int, label: str, device: torch.device, autocast) -> tuple[Callable[[], None], int]:
    """A training step's forward + backward of the ``size`` model with ``label``'s attention, and its FLOPs."""
    cfg = TrialConfig.model_validate({"model": {"size": size}, "attention": VARIANTS[label]})
    torch.manual_seed(0)
    model = create_model(cfg, 1000, 3).to(device)
    images = torch.randn(batch, 3, cfg.model.img_size, cfg.model.img_size, device=device)
    labels = torch.randint(0, 1000, (batch,), device=device)
    loss = lambda: nn.functional.cross_entropy(model(images), labels)  # noqa: E731
    step = fwd_bwd(model, loss, [], torch.tensor(1.0, device=device), autocast)
    step()
    return step, flops(step)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--budget", type=float, default=1.0, help="seconds of timed runs per variant and shape")
    ap.add_argument("--only", nargs="*", help="variant labels to run besides softmax")
    ap.add_argument("--threads", type=int, help="torch CPU threads (1 is robust on a shared machine)")
    ap.add_argument("--models", nargs="*", default=list(MODELS), help=f"sizes to time whole ({', '.join(MODELS)})")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if cuda else nullcontext
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    labels = [lb for lb in VARIANTS if not args.only or lb == "softmax" or lb in args.only]

    title = f"attention fwd+bwd vs softmax SDPA on {device.type}, {'bf16 autocast' if cuda else 'float32'}"
    table = Table(title=f"{title}, {torch.get_num_threads()} threads")
    cols = ("ms", "x time", "x FLOPs", "peak MiB", "x memory", "layer ms", "x layer time", "x layer FLOPs")
    for col in ("shape", "variant", *cols):
        table.add_column(col, justify="left" if col in ("shape", "variant") else "right")
    t_start = time.perf_counter()
    for s in SHAPES:
        base: Steps | None = None
        for label in labels:
            v = variant_steps(s, label, device, dtype, autocast)
            base = base or v
            t_base, t, tl_base, tl = seconds([base.mixer, v.mixer, base.layer, v.layer], sync, args.budget)
            table.add_row(
                s.name,
                label,
                f"{1e3 * t:.1f}",
                f"{t / t_base:.2f}",
                f"{v.mixer_flops / base.mixer_flops:.2f}",
                f"{v.peak / 2**20:.1f}",
                f"{v.peak / max(base.peak, 1):.2f}",
                f"{1e3 * tl:.1f}",
                f"{tl / tl_base:.2f}",
                f"{v.layer_flops / base.layer_flops:.2f}",
            )
        table.add_section()
    console = Console(width=150)
    console.print(table)
    models = Table(title=f"whole model: a training step's forward + backward, 224 px, {device.type}")
    for col in ("model", "batch", "variant", "ms", "x time", "x FLOPs"):
        models.add_column(col, justify="left" if col in ("model", "variant") else "right")
    for size in args.models:
        batch = MODELS.get(size, 2)
        base_step, base_flops = model_steps(size, batch, "softmax", device, autocast)
        for label in (lb for lb in labels if lb not in FORCED):
            step, n = model_steps(size, batch, label, device, autocast)
            t_base, t = seconds([base_step, step], sync, args.budget)
            models.add_row(size, str(batch), label, f"{1e3 * t:.0f}", f"{t / t_base:.2f}", f"{n / base_flops:.2f}")
        models.add_section()
    if args.models:
        console.print(models)
    print(f"total {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
