"""Forward + backward time and peak memory of every attention variant, as ratios to softmax SDPA.

    .venv/bin/python bench/attention.py [--device cpu|cuda] [--threads N] [--budget SECONDS] [--only LABEL ...]

Shapes (B, H, N, d): ViT-S (8, 6, 197, 64); Swin-T stage-1 windows of 4 images (256, 3, 49, 32) with a
learnable relative-position-like bias plus a -100 shift mask; a long sequence (1, 3, 3136, 32). A variant
is timed as the mixer alone (q, k, v and the tokens x in, mixed values out, then backward: the module the
backbones call); "x layer" adds the fwd+bwd time of the qkv and output projections around it (timed once
per shape, the same for every variant: what a model pays per attention layer). The last row per shape is
CSaN from materialised logits (`CSaN.forward_explicit`, the reference code's way) instead of its fused path.

Time: the fastest of repeated fwd+bwd runs after a warm-up, each variant taking turns with softmax and
the projections (other processes only ever add time, and a change in load hits all three alike; CUDA:
synchronised, bf16 autocast with bf16 q/k/v, as in a model under autocast). Peak memory, measured on the
warm-up run: the highest net bytes allocated during one fwd+bwd above what was live before it (inputs
excluded); CUDA from torch.cuda.max_memory_allocated, CPU from the profiler's allocation events
(profile_memory=True: every CPU-allocator alloc/free with its running total). CPU threads: torch's
default unless --threads; on a loaded machine use --threads 1, since an OpenMP barrier waiting on a
descheduled thread adds a time slice to every op and so punishes variants with many small ops.
"""

from __future__ import annotations

import argparse
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable

import torch
from pydantic import TypeAdapter
from rich.console import Console
from rich.table import Table

from torch import Tensor, nn

from ablate.config import AttentionConfig
from ablate.nn import create_mixer
from ablate.nn.mixer import TokenMixer


@dataclass(frozen=True)
class Shape:
    name: str
    b: int
    h: int
    n: int
    d: int
    bias: bool = False


SHAPES = (
    Shape("vit-s", 8, 6, 197, 64),
    Shape("swin-window", 64 * 4, 3, 49, 32, bias=True),
    Shape("long", 1, 3, 3136, 32),
)
VARIANTS: dict[str, dict] = {
    "softmax": {"kind": "softmax"},
    "csan": {"kind": "csan"},
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
EXPLICIT = "csan explicit"


class Projections(nn.Module):
    """The rest of an attention layer: x -> qkv Linear, and the output Linear (fed one third of it)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(self.qkv(x)[..., : x.shape[-1]])


def make_inputs(s: Shape, device: torch.device, dtype: torch.dtype) -> dict[str, torch.Tensor | None]:
    g = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (torch.randn(s.b, s.h, s.n, s.d, generator=g).to(device, dtype).requires_grad_() for _ in range(3))
    x = torch.randn(s.b, s.n, s.h * s.d, generator=g).to(device, dtype).requires_grad_()
    bias = None
    if s.bias:  # relative-position-like bias (learnable, float32 as in timm) + Swin's -100 shift mask
        bias = 0.1 * torch.randn(1, s.h, s.n, s.n, generator=g)
        mask = torch.zeros(s.n, s.n)
        mask[: s.n // 2, s.n // 2 :] = mask[s.n // 2 :, : s.n // 2] = -100.0
        bias = (bias + mask).to(device).requires_grad_()
    return {"q": q, "k": k, "v": v, "x": x, "bias": bias}


def fwd_bwd(module: nn.Module, forward: Callable[..., Tensor], inp: dict, grad: Tensor, autocast) -> Callable[[], None]:
    def step() -> None:
        for t in inp.values():
            if t is not None:
                t.grad = None
        module.zero_grad(set_to_none=True)
        with autocast():
            out = forward(**inp)
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


def peak_bytes(step: Callable[[], None], device: torch.device) -> int:
    """Run ``step`` once; the peak of its net allocations."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    allocs: list[tuple[int, int, int]] = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        e = stack.pop()
        if e.tag == _EventType.Allocation:
            allocs.append((e.start_time_ns, e.extra_fields.alloc_size, e.extra_fields.total_allocated))
        stack.extend(e.children)
    if not allocs:
        return 0
    allocs.sort()
    start = allocs[0][2] - allocs[0][1]
    return max(total for _, _, total in allocs) - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--budget", type=float, default=1.0, help="seconds of timed runs per variant and shape")
    ap.add_argument("--only", nargs="*", help="variant labels to run besides softmax")
    ap.add_argument("--threads", type=int, help="torch CPU threads (1 is robust on a shared machine)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if cuda else nullcontext
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    labels = [lb for lb in [*VARIANTS, EXPLICIT] if not args.only or lb == "softmax" or lb in args.only]

    title = f"attention fwd+bwd vs softmax SDPA on {device.type}, {'bf16 autocast' if cuda else 'float32'}"
    table = Table(title=f"{title}, {torch.get_num_threads()} threads")
    for col in ("shape", "variant", "ms", "x time", "peak MiB", "x memory", "x layer time"):
        table.add_column(col, justify="left" if col in ("shape", "variant") else "right")
    t_start = time.perf_counter()
    for s in SHAPES:
        inp = make_inputs(s, device, dtype)
        grad = torch.randn(s.b, s.h, s.n, s.d, generator=torch.Generator().manual_seed(1)).to(device, dtype)
        proj = Projections(s.h * s.d).to(device)
        proj_step = fwd_bwd(proj, proj, {"x": inp["x"]}, grad.transpose(1, 2).flatten(2), autocast)
        proj_step()
        base_step = None
        for label in labels:
            cfg = TypeAdapter(AttentionConfig).validate_python(VARIANTS.get(label, VARIANTS["csan"]))
            torch.manual_seed(0)
            mixer = create_mixer(cfg, s.h * s.d, s.h).to(device)
            mix = mixer.forward_explicit if label == EXPLICIT else mixer
            step = fwd_bwd(mixer, mix, inp, grad, autocast)
            m = peak_bytes(step, device)  # also the warm-up
            if base_step is None:  # softmax: the baseline every later variant takes turns with
                base_step, base_m = step, m
            t_base, t, t_proj = seconds([base_step, step, proj_step], sync, args.budget)
            table.add_row(
                s.name, label, f"{1e3 * t:.1f}", f"{t / t_base:.2f}", f"{m / 2**20:.1f}", f"{m / max(base_m, 1):.2f}",
                f"{(t_proj + t) / (t_proj + t_base):.2f}",
            )
        table.add_section()
    Console(width=120).print(table)
    print(f"total {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
