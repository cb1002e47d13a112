"""A stand-in for nvidia-ml-py's `pynvml` (a test puts this folder first on sys.path): the calls gpu-check makes,
answering what the test scripts, or raising NVMLError as a missing driver, a MIG or a vGPU device does."""

from __future__ import annotations

from types import SimpleNamespace


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_DriverNotLoaded(NVMLError):
    pass


GPUS: dict[bytes, list[float]] = {}
"""Bus id (bytes, as older bindings return it) -> the busy percents its readings answer in turn; once they are used
up a reading raises NVMLError_NotSupported (utilization on a MIG device)."""
INIT_ERROR: NVMLError | None = None


def nvmlInit() -> None:
    if INIT_ERROR is not None:
        raise INIT_ERROR


def nvmlDeviceGetCount() -> int:
    return len(GPUS)


def nvmlDeviceGetHandleByIndex(index: int) -> bytes:
    return list(GPUS)[index]


def nvmlDeviceGetPciInfo(handle: bytes) -> SimpleNamespace:
    return SimpleNamespace(busId=handle)


def nvmlDeviceGetUtilizationRates(handle: bytes) -> SimpleNamespace:
    left = GPUS[handle]
    if not left:
        raise NVMLError_NotSupported("Not Supported")
    return SimpleNamespace(gpu=left.pop(0), memory=0)
