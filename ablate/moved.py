"""Where the modules of ablate 0.1's flat layout live now, so `import ablate.planner` (a user's script, a pickle naming
a class by its old module) keeps working for one release, with a DeprecationWarning.

An old name is an alias: `ablate.planner` is the very module object `ablate.planning.plan`, so a class imported through
either is the same class. An old module split in two points at the part that holds most of its public names:
`ablate.planner` at `ablate.planning.plan` (5 of its 8 exported names: `Plan`, `expand`, `load_plans`, `plan`,
`plan_all`; trial identity, `Trial`, `trial_key`, `variant_key`, is `ablate.planning.keys`), `ablate.tuning` at
`ablate.spec.tuning` (13 of its 19 public names: the `tune:` block; the search, `Search`, `proposals`, `best`, `Failed`,
`Result`, `STARTUP`, is `ablate.planning.search`). A module renamed inside its package after the move (one word per
concept) is here too, under its previous dotted name: `ablate.training.storage` is `ablate.training.checkpoint_storage`.
The GPU check's modules left the CLI for `ablate.gpus`: `ablate.gpucheck` and `ablate.cli.gpucheck` point at
`ablate.gpus.figures` (14 of its 25 public names: the figures and the runs that measure them; the sweep, `SweepSpec`,
`Phase`, `PHASES`, `plan_phases`, `dry_run`, ..., is `ablate.gpus.sweep`). Tuning's modules are all called tuning now
(`ablate.spec.tune`, `ablate.planning.tuned`, `ablate.reporting.tuned`); `ablate.reporting.tuning`, which held Dodge's
expected best, is `ablate.reporting.expected_best`, its old name taken by the tuned sweep's report section
(`ablate.reporting.tuned`'s new name), so that one old name cannot point at its old module. `ablate.planning.table`
(what `ablate plan` prints per trial) is `ablate.api.plan_rows`. Model probing left the plan (`ablate.planning.check` is
`ablate.probe.check`) and number formatting went to the bottom (`ablate.planning.units` is `ablate.units`, where ablate
0.1 had it)."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Sequence
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType

MOVED = {
    "ablate.paths": "ablate.spec.paths", "ablate.tuning": "ablate.spec.tuning",
    "ablate.tune_check": "ablate.spec.tuning_check",
    "ablate.planner": "ablate.planning.plan", "ablate.sequential": "ablate.planning.adaptive",
    "ablate.tuned": "ablate.planning.tuning", "ablate.plan_table": "ablate.api.plan_rows",
    "ablate.check": "ablate.probe.check",
    "ablate.fingerprint": "ablate.provenance.fingerprint", "ablate.stale": "ablate.provenance.stale",
    "ablate.environment": "ablate.provenance.environment", "ablate.cache": "ablate.provenance.cache",
    "ablate.launcher": "ablate.execution.launcher", "ablate.selection": "ablate.execution.selection",
    "ablate.fanout": "ablate.execution.fanout", "ablate.worker": "ablate.execution.trial_task",
    "ablate.gangs": "ablate.execution.gangs", "ablate.packing": "ablate.execution.gpu_shares",
    "ablate.leases": "ablate.execution.heartbeat", "ablate.recorder": "ablate.execution.recorder",
    "ablate.journal": "ablate.execution.journal", "ablate.progress": "ablate.execution.progress",
    "ablate.preflight": "ablate.execution.preflight", "ablate.gpucheck": "ablate.gpus.figures",
    "ablate.trial": "ablate.training.loop", "ablate.parallel": "ablate.training.parallel",
    "ablate.messages": "ablate.training.messages", "ablate.checkpoints": "ablate.training.checkpoints",
    "ablate.storage": "ablate.training.checkpoint_storage", "ablate.tasks": "ablate.training.tasks",
    "ablate.mirror": "ablate.tracking.mirror", "ablate.verdict": "ablate.evidence.verdict",
    "ablate.steptime": "ablate.probe.steptime",
    "ablate.planning.check": "ablate.probe.check", "ablate.planning.steptime": "ablate.probe.steptime",
    "ablate.planning.units": "ablate.units",
    "ablate.training.storage": "ablate.training.checkpoint_storage",
    "ablate.spec.tune": "ablate.spec.tuning", "ablate.spec.tune_check": "ablate.spec.tuning_check",
    "ablate.planning.tuned": "ablate.planning.tuning", "ablate.reporting.tuned": "ablate.reporting.tuning",
    "ablate.tracking.records": "ablate.tracking.tracker", "ablate.reporting.seeding": "ablate.reporting.adaptive",
    "ablate.planning.table": "ablate.api.plan_rows",
    "ablate.nn.softmax": "ablate.nn.mechanisms.softmax",
    "ablate.nn.softmax.layers": "ablate.nn.mechanisms.softmax.layers",
    "ablate.nn.csan": "ablate.nn.mechanisms.csan", "ablate.nn.csan.layers": "ablate.nn.mechanisms.csan.layers",
    "ablate.nn.syn": "ablate.nn.mechanisms.syn",
    "ablate.nn.syn.layers": "ablate.nn.mechanisms.syn.layers",
    "ablate.nn.syn.report": "ablate.nn.mechanisms.syn.report",
    "ablate.nn.kernel": "ablate.nn.mechanisms.kernel", "ablate.nn.kernel.layers": "ablate.nn.mechanisms.kernel.layers",
    "ablate.nn.nlm": "ablate.nn.mechanisms.nlm", "ablate.nn.nlm.layers": "ablate.nn.mechanisms.nlm.layers",
    "ablate.nn.sparse": "ablate.nn.mechanisms.sparse", "ablate.nn.sparse.layers": "ablate.nn.mechanisms.sparse.layers",
    "ablate.nn.vit": "ablate.nn.backbones.vit", "ablate.nn.vit.layers": "ablate.nn.backbones.vit.layers",
    "ablate.nn.swin": "ablate.nn.backbones.swin", "ablate.nn.swin.layers": "ablate.nn.backbones.swin.layers",
    "ablate.nn.hiera": "ablate.nn.backbones.hiera", "ablate.nn.hiera.layers": "ablate.nn.backbones.hiera.layers",
    "ablate.nn.mil": "ablate.nn.backbones.mil", "ablate.nn.mil.layers": "ablate.nn.backbones.mil.layers",
    "ablate.cli.gpucheck": "ablate.gpus.figures", "ablate.cli.gpuhost": "ablate.gpus.host",
    "ablate.cli.gpubusy": "ablate.gpus.busy",
}  # fmt: skip
"""Old module name -> its module now. (`ablate.spec`, `ablate.tracking` and `ablate.cli` are packages now, at
their old names.) The mechanisms' and backbones' packages of `ablate.nn` moved into `ablate.nn.mechanisms` and
`ablate.nn.backbones`, each submodule named too: the finder comes before the file system's, so an old package's
submodule is the moved one, not a second copy found on the moved package's path."""


class _Alias(Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        warnings.warn(f"{spec.name} moved to {self.target}; the old name goes in the next release",
                      DeprecationWarning, stacklevel=2)  # fmt: skip
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        """The module ran when its new name was imported."""


class MovedFinder(MetaPathFinder):
    """Finds an old module name (`MOVED`) as an alias of the module it moved to."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        new = MOVED.get(fullname)
        return ModuleSpec(fullname, _Alias(new)) if new else None
