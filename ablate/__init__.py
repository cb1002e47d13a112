"""ablate: ablation studies of attention mechanisms, from a YAML grid to paper-style reports.

The library API (the CLI is a thin layer over it): `plan`, `launch`, `report`, `Store`, `Tracker`, with the
CLI's defaults (`ablate.api`): `ablate.launch(ablate.plan("experiments.yaml"))` records to db/ablate.sqlite
and MLflow as `ablate launch experiments.yaml` does.
Imports are lazy so that validating or planning a file never pays for torch or Ray. Modules are named
apart from the API functions (planner.plan, launcher.launch, reporting.report) so that importing a
module never shadows a function of the same name.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_API = {
    "load_plans": "ablate.planner",
    "plan": "ablate.planner",
    "plan_all": "ablate.planner",
    "TrialConfig": "ablate.config",
    "SpecError": "ablate.errors",
    "run_trial": "ablate.trial",
    "Plan": "ablate.planner",
    "launch": "ablate.api",
    "Cluster": "ablate.launcher",
    "RunConfig": "ablate.launcher",
    "LaunchResult": "ablate.launcher",
    "Select": "ablate.selection",
    "Store": "ablate.store",
    "Tracker": "ablate.tracking",
    "report": "ablate.api",
}


def __getattr__(name: str) -> Any:
    if name in _API:
        import importlib

        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'ablate' has no attribute {name!r}")


__all__ = list(_API)
