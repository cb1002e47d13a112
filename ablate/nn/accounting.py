"""What a model costs, without training: parameters, forward FLOPs per example, peak forward memory.

`measure` counts the figures of `ablate.nn.costs.model_cost` (what `ablate plan` shows per trial) on a network
built on the meta device (no memory).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from ablate.config import TrialConfig
from ablate.nn.build import count_params
from ablate.nn.factory import create_model
from ablate.nn.mixer import TokenMixer, outputs_checked
from ablate.registry import BACKBONES

if TYPE_CHECKING:
    from torch._C._profiler import _ProfilerEvent

__all__ = ["count_flops", "count_params", "example_input", "flops", "measure", "peak_bytes", "peak_memory"]


Inputs = Tensor | Sequence[Tensor]


def _call(model: nn.Module, inputs: Inputs) -> Tensor:
    out: Tensor = model(inputs) if isinstance(inputs, Tensor) else model(*inputs)
    return out


def _batch(inputs: Inputs) -> int:
    return (inputs if isinstance(inputs, Tensor) else inputs[0]).shape[0]


def count_flops(model: nn.Module, inputs: Inputs) -> int:
    """Forward FLOPs per example (inputs: a batch tensor, or the model's positional arguments), as
    `flops` counts them, under no_grad."""
    with torch.no_grad():
        return flops(lambda: _call(model, inputs)) // _batch(inputs)


def flops(fn: Callable[[], object]) -> int:
    """FLOPs of everything ``fn`` runs, a backward pass it calls included.

    Counted by torch's flop registry: matmuls (mm, addmm, bmm, baddbmm), convolutions and fused
    attention, 2 FLOPs per multiply-accumulate (so half of a forward count is the "FLOPs" papers quote,
    e.g. Swin-T 4.5 G). Elementwise ops, softmax, norms, pooling and sorting are not counted. SDPA counts
    its two matmuls forward, 4 * B * H * Nq * Nk * d, and the five of its backward (the logits
    recomputed): on CUDA through its fused-kernel entries; on the meta device and in the math fallback
    it decomposes into counted bmm; on CPU its fused kernels have no registry entry, so they are mapped
    to the same formulas here.
    """
    counter = FlopCounterMode(display=False, custom_mapping=_CPU_SDPA)
    with counter:
        fn()
    return counter.get_total_flops()


def _sdpa_flops(query: torch.Size, key: torch.Size, value: torch.Size, *_: object, **__: object) -> int:
    count: int = sdpa_flop_count(query, key, value)
    return count


def _sdpa_backward_flops(
    grad: torch.Size, query: torch.Size, key: torch.Size, value: torch.Size, *_: object, **__: object
) -> int:
    count: int = sdpa_backward_flop_count(grad, query, key, value)
    return count


_CPU_SDPA = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _sdpa_flops,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: _sdpa_backward_flops,
}


def peak_memory(model: nn.Module, inputs: Inputs, grad: bool = True) -> int:
    """Peak bytes allocated during one forward pass, above what was allocated when it started.

    grad=True keeps autograd on (training memory: activations saved for backward count); False is
    inference.
    """
    device = (inputs if isinstance(inputs, Tensor) else inputs[0]).device

    def forward() -> None:
        with torch.set_grad_enabled(grad):
            _call(model, inputs)

    return peak_bytes(forward, device)


def peak_bytes(fn: Callable[[], object], device: torch.device) -> int:
    """Peak bytes allocated while ``fn`` runs, above what was allocated when it started.

    CUDA: torch.cuda.max_memory_allocated relative to memory_allocated before the call. CPU: the same
    quantity from the profiler's allocator events: the running sum of every allocation and free (torch
    tensors only, not Python objects or the allocator's own caching), its maximum taken.
    """
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        start = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - start
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    changes = sorted(_allocations(prof.profiler.kineto_results.experimental_event_tree()))
    live = peak = 0
    for _, nbytes in changes:
        live += nbytes
        peak = max(peak, live)
    return peak


def _allocations(events: list[_ProfilerEvent]) -> list[tuple[int, int]]:
    """(time, signed bytes) of every CPU allocator event in the profiler's event tree."""
    from torch._C._profiler import _ExtraFields_Allocation

    out: list[tuple[int, int]] = []
    for e in events:
        fields = e.extra_fields
        if isinstance(fields, _ExtraFields_Allocation) and fields.device.type == "cpu":
            out.append((e.start_time_ns, fields.alloc_size))
        out += _allocations(e.children)
    return out


def example_input(cfg: TrialConfig, in_chans: int, batch: int = 1, device: str | torch.device = "cpu") -> Inputs:
    """A batch of the shape the trial's model takes (its backbone component says: images, bags and a mask)."""
    return BACKBONES.get(cfg.model.backbone).example(cfg.model, in_chans, batch, device)


def measure(cfg: TrialConfig, num_classes: int, in_chans: int) -> tuple[int, float, float]:
    """The figures of a `Cost` (`ablate.nn.costs`): params, GFLOPs and attention GFLOPs, counted on the meta device."""
    with torch.device("meta"):
        model = create_model(cfg, num_classes, in_chans).eval()
    total, attention = _flops(cfg, model, num_classes, in_chans)
    return count_params(model), total / 1e9, attention / 1e9


def _flops(cfg: TrialConfig, meta_model: nn.Module, num_classes: int, in_chans: int) -> tuple[int, int]:
    """(all, attention-matmul) FLOPs per example on the meta device; on a real CPU model when a variant
    uses an op the meta device lacks (e.g. torch.autocast has no meta device type). A genuine error
    surfaces from the CPU attempt."""
    try:
        return _counted(meta_model, example_input(cfg, in_chans, device="meta"))
    except (NotImplementedError, RuntimeError):
        return _counted(create_model(cfg, num_classes, in_chans).eval(), example_input(cfg, in_chans))


def _counted(model: nn.Module, inputs: Inputs) -> tuple[int, int]:
    """Counted with every mixer's output shape checked (`outputs_checked`): a mixer that returns another shape
    fails here, naming itself, not in the reshape after it or as a model that counts but is not the one meant."""
    with attention_matmuls(model) as attention, outputs_checked(model):
        total = count_flops(model, inputs)
    return total, sum(attention) // _batch(inputs)


@contextmanager
def attention_matmuls(model: nn.Module) -> Iterator[list[int]]:
    """Collect, per token-mixer call, the FLOPs of its two attention matmuls as dense products
    (2 B H Nq Nk (dk + dv), dk the channels a query and a key are compared over: the head dim, or what the
    mixer's `key_width` says, e.g. non-local means' patches), whatever the mechanism computes in between."""
    found: list[int] = []

    def hook(module: nn.Module, args: tuple[Tensor, ...], out: Tensor) -> None:
        assert isinstance(module, TokenMixer)
        q, k, v = args[:3]
        *lead, nq, d = q.shape
        found.append(2 * math.prod(lead) * nq * k.shape[-2] * (module.key_width(d) + v.shape[-1]))

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, TokenMixer)]
    try:
        yield found
    finally:
        for h in handles:
            h.remove()
