"""ablate: ablation studies of attention mechanisms, from a YAML grid to paper-style reports.

The library API (the CLI is a thin layer over it): `plan`, `launch`, `report`, `Store`, `Tracker`, with the
CLI's defaults (`ablate.api`): `ablate.launch(ablate.plan("experiments.yaml"))` records to db/ablate.sqlite
and MLflow as `ablate launch experiments.yaml` does.
Imports are lazy so that validating or planning a file never pays for torch or Ray. Modules are named
apart from the API functions (planning.plan.plan is a module's function, reporting.report the package's) so
that importing a module never shadows a function of the same name. Modules that moved out of the old flat
layout are still found at their old names for one release (`ablate.moved`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

from ablate.moved import MovedFinder

__version__ = "0.1.0"

_API = {
    "load_plans": "ablate.planning.plan",
    "plan": "ablate.planning.plan",
    "plan_all": "ablate.planning.plan",
    "TrialConfig": "ablate.config",
    "SpecError": "ablate.errors",
    "run_trial": "ablate.training.loop",
    "Plan": "ablate.planning.plan",
    "launch": "ablate.api",
    "Cluster": "ablate.execution.launcher",
    "RunConfig": "ablate.execution.launcher",
    "LaunchResult": "ablate.execution.launcher",
    "Select": "ablate.execution.selection",
    "Checks": "ablate.execution.preflight",
    "PreflightError": "ablate.execution.preflight",
    "Store": "ablate.store",
    "Tracker": "ablate.tracking.tracker",
    "report": "ablate.api",
}


def __getattr__(name: str) -> Any:
    if name in _API:
        import importlib

        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'ablate' has no attribute {name!r}")


class _TorchvisionShim(MetaPathFinder):
    """Runs `ablate._tv_compat` the first time anything imports torchvision (timm does), so that no module has
    to remember to import the shim before timm; then it steps aside for the normal finders."""

    done = False

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname == "torchvision" and not self.done:
            self.done = True
            import ablate._tv_compat  # noqa: F401  (defines what torchvision's failed extension would have)
        return None


if "torchvision" not in sys.modules:
    sys.meta_path.insert(0, _TorchvisionShim())
if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, MovedFinder())  # before the file system's: see ablate.moved.MOVED

__all__ = list(_API)
