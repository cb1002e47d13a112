"""What a result was produced with: code version, packages, host, device, and what its float arithmetic depends on
beyond its key. Recorded with every trial. torch is imported where it is used: `ablate show` reads the record without
it."""

from __future__ import annotations

import functools
import platform
import re
import socket
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ablate.provenance.fingerprint import git_state

if TYPE_CHECKING:
    import torch

UNVERSIONED = ("Build settings", "CPU capability", "C++ Version")
"""Lines of torch's build summary that name no library."""
PACKAGES = ("ablate", "torch", "timm", "numpy", "ray", "mlflow", "entmax", "pydantic")


@functools.cache
def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


@dataclass(frozen=True)
class Arithmetic:
    """What a trial's bits depend on beyond its key and code: one key trained twice gives the same figures to the
    last digit where all of these are the same, and may differ in more than the last digits where one is not
    (`bench/reproduce.py` measures it; docs/concepts/identity.md gives the figures). torch picks its kernels by
    the CPU's instruction set, splits sums over its threads, and calls its BLAS and oneDNN builds: each changes the
    order in which floats are added, and training carries a last-bit difference into every later weight."""

    device: str
    """`cpu` or the GPU's name."""
    cpu: str
    """The processor's model name (`/proc/cpuinfo` on Linux)."""
    capability: str
    """The instruction set torch's CPU kernels use (`torch.backends.cpu.get_cpu_capability()`: AVX512, AVX2,
    DEFAULT, ...): a CPU's own, or lower where `ATEN_CPU_CAPABILITY` asks."""
    threads: int
    """torch's intra-op threads (the trial pins them to `resources.cpus`)."""
    torch: str
    """torch's version, build label included (`2.13.0+cpu`)."""
    libraries: tuple[str, ...]
    """The compiler and math libraries torch was built with (its `torch.__config__.show()`), and CUDA and cuDNN on
    a GPU."""

    @classmethod
    def of_record(cls, record: dict[str, Any] | None) -> Arithmetic | None:
        """From a stored environment; None for a trial recorded before ablate kept it."""
        fields = (record or {}).get("arithmetic")
        if not isinstance(fields, dict):
            return None
        return cls(**{**fields, "libraries": tuple(fields.get("libraries", ()))})

    def record(self) -> dict[str, Any]:
        return {**asdict(self), "libraries": list(self.libraries)}

    def text(self) -> str:
        """One line, as `ablate show` prints it."""
        threads = f"{self.threads} thread" + ("s" if self.threads != 1 else "")
        return (f"{self.device}, {self.cpu}, torch {self.torch} with {self.capability} kernels on {threads}; "
                f"{'; '.join(self.libraries)}")  # fmt: skip


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            name, _, value = line.partition(":")
            if name.strip() == "model name":
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.cache
def torch_libraries() -> tuple[str, ...]:
    """The versioned lines of torch's build summary (compiler, BLAS, oneDNN, OpenMP), each up to its first
    parenthesis or "for": not its build settings, its switches ("NNPACK is enabled") or the capability (kept apart)."""
    import torch

    lines = [line.strip()[2:] for line in torch.__config__.show().splitlines() if line.startswith("  - ")]
    kept = [line for line in lines if not line.startswith(UNVERSIONED) and " is enabled" not in line]
    return tuple(re.split(r" \(| for ", line)[0] for line in kept)


def arithmetic(device: torch.device) -> Arithmetic:
    """This process's, as a trial on `device` computes now (after it pinned its threads)."""
    import torch

    libraries = torch_libraries()
    name = "cpu"
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        libraries += (f"CUDA {torch.version.cuda}", f"cuDNN {torch.backends.cudnn.version()}")
    return Arithmetic(name, cpu_model(), torch.backends.cpu.get_cpu_capability(), torch.get_num_threads(),
                      torch.__version__, libraries)  # fmt: skip


def environment(device: torch.device) -> dict[str, Any]:
    """The record of where and with what a trial ran; `tf32`: whether CUDA's float32 matmuls and cuDNN's
    convolutions could round to TF32, as torch held it once the trial set `train.tf32` (the policy, read back)."""
    import torch

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or platform.machine())
    return {
        **{f"git_{k}": v for k, v in git_state(Path(__file__).resolve().parent.parent).items()},
        "packages": package_versions(),
        "python": platform.python_version(),
        "host": socket.gethostname(),
        "device": f"{device.type}:{name}",
        "arithmetic": arithmetic(device).record(),
        "tf32": {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32},
    }
