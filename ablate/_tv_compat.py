"""Let ``import torchvision`` (and so ``import timm``) work on a CPU-only torch.

Why this exists: torchvision 0.28.0 on PyPI is a CUDA build. Its compiled extension (``torchvision/_C.so``)
cannot load against the CPU wheel of torch 2.13.0 that this project installs, and torchvision's own Python
module then fails at import with ``operator torchvision::nms does not exist`` because it registers fake
(meta) kernels for operators whose schemas only the extension defines. timm imports torchvision, so without
this nothing that builds a model can start.

What it does: only when the extension cannot load, it defines the operator *schemas* (no kernels) with
``torch.library`` so torchvision's registrations succeed. Calling one of these operators (nms, roi_align...)
still fails, which is fine: ablate never uses them.

When it can go: as soon as a torchvision CPU wheel matching the installed torch is installable here (or
torchvision stops registering fakes for operators its extension failed to define). Import it before timm.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "box_iou_rotated(Tensor boxes1, Tensor boxes2) -> Tensor",
    "roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width, "
    "int sampling_ratio, bool aligned) -> Tensor",
    "_roi_align_backward(Tensor grad, Tensor rois, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width, SymInt batch_size, SymInt channels, SymInt height, SymInt width, "
    "int sampling_ratio, bool aligned) -> Tensor",
    "qroi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width, "
    "int sampling_ratio, bool aligned) -> Tensor",
    "ps_roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width, "
    "int sampling_ratio) -> (Tensor, Tensor)",
    "_ps_roi_align_backward(Tensor grad, Tensor rois, Tensor channel_mapping, float spatial_scale, "
    "SymInt pooled_height, SymInt pooled_width, int sampling_ratio, SymInt batch_size, SymInt channels, "
    "SymInt height, SymInt width) -> Tensor",
    "roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width) "
    "-> (Tensor, Tensor)",
    "_roi_pool_backward(Tensor grad, Tensor rois, Tensor argmax, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width, SymInt batch_size, SymInt channels, SymInt height, SymInt width) -> Tensor",
    "ps_roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width) "
    "-> (Tensor, Tensor)",
    "_ps_roi_pool_backward(Tensor grad, Tensor rois, Tensor channel_mapping, float spatial_scale, "
    "SymInt pooled_height, SymInt pooled_width, SymInt batch_size, SymInt channels, SymInt height, "
    "SymInt width) -> Tensor",
    "deform_conv2d(Tensor input, Tensor weight, Tensor offset, Tensor mask, Tensor bias, SymInt stride_h, "
    "SymInt stride_w, SymInt pad_h, SymInt pad_w, SymInt dilation_h, SymInt dilation_w, SymInt groups, "
    "SymInt offset_groups, bool use_mask) -> Tensor",
    "_deform_conv2d_backward(Tensor grad, Tensor input, Tensor weight, Tensor offset, Tensor mask, "
    "Tensor bias, SymInt stride_h, SymInt stride_w, SymInt pad_h, SymInt pad_w, SymInt dilation_h, "
    "SymInt dilation_w, SymInt groups, SymInt offset_groups, bool use_mask) "
    "-> (Tensor, Tensor, Tensor, Tensor, Tensor)",
)

_LIB: torch.library.Library | None = None


def _extension_loads() -> bool:
    """True when torchvision's compiled extension loads against this torch (the normal case on GPU hosts)."""
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        return True  # no torchvision: nothing to patch
    so = next(Path(spec.origin).parent.glob("_C*.so"), None) or next(Path(spec.origin).parent.glob("_C*.pyd"), None)
    if so is None:
        return False
    try:
        torch.ops.load_library(str(so))
    except (OSError, RuntimeError):
        return False
    return True


def ensure_torchvision_importable() -> None:
    """Define the missing ``torchvision::`` schemas once, if and only if the extension cannot load."""
    global _LIB
    if _LIB is not None or _extension_loads():
        return
    _LIB = torch.library.Library("torchvision", "DEF")
    for schema in _SCHEMAS:
        _LIB.define(schema)


ensure_torchvision_importable()
