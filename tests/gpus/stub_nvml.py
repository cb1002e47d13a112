"""The stub pynvml (tests/gpus/nvml_stub/pynvml.py) as what `import pynvml` finds for one test, in place of any
installed nvidia-ml-py."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

STUB = Path(__file__).parent / "nvml_stub" / "pynvml.py"


def stub_pynvml(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """A fresh copy of the stub (no GPU, no failure scripted), importable as `pynvml` until the test ends."""
    spec = importlib.util.spec_from_file_location("pynvml", STUB)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    return module
