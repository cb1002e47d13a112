"""The layers of `ablate/`, bottom to top: the one list that tests/project/test_imports.py holds the import graph to and
that docs/architecture.md's layer table is checked against (tests/project/test_imports.py). A unit is a package of
`ablate/` or one of its top-level modules (`ablate` itself is the package's `__init__`); a module imports its own
unit or the units of lower layers only, and the units of one layer import none of each other."""

from __future__ import annotations

from typing import NamedTuple


class Layer(NamedTuple):
    """A row of the table: its units and what they own."""

    units: tuple[str, ...]
    owns: str


LAYERS = (
    Layer(
        ("errors", "patience", "moved", "_tv_compat", "units"),
        "errors as one paragraph; waiting out a service that restarts; old module names, for one release; the "
        "torchvision shim; numbers in significant digits, as every table prints them",
    ),
    Layer(("components",), "the plugin contract's bases: `Mechanism`, `Backbone`, `Dataset`, `ReportSection`, ..."),
    Layer(("registry",), "the registries (refuse duplicates); `BUILTINS`, the built-in components' modules"),
    Layer(("plugins",), "loading built-ins, files, modules and entry points"),
    Layer(("config",), "`TrialConfig` and its sections; which fields make the trial key (`nokey`)"),
    Layer(
        ("evidence",),
        "the small-sample policy; best or tied (`verdict`); what a two-level design confounds (`aliasing`); "
        "Lenth's test of a one-seed screen, Dong's PSE beside it, their ME and SME (`lenth`); "
        "Box-Meyer posterior probabilities of activity (`boxmeyer`); the paired bootstrap's BCa intervals and the "
        "probability of improvement (`bootstrap`); IQM, stratified bootstrap intervals and performance profiles "
        "over datasets (`aggregates`)",
    ),
    Layer(("spec",), "reading and checking `experiments.yaml`; dotted paths; the `tune:` block; metric direction"),
    Layer(("store",), "the source of truth (SQLite/PostgreSQL): schema, migrations, writes, leases, queries"),
    Layer(("provenance",), "code fingerprints; which stored trials are stale; the environment; the disk cache"),
    Layer(("nn", "data"), "built-in networks (costs and widths cached per code fingerprint) and datasets"),
    Layer(("probe",), "model probing: a training step per model and a batch per dataset on CPU, step times"),
    Layer(
        ("planning",),
        "keys, grid cells and designs; how a sweep chooses its trials (adaptive seeds, tuned arms), round by round",
    ),
    Layer(("training",), "the training loop, data parallelism, messages, checkpoints and their storage, tasks"),
    Layer(("reporting",), "frames from the store, statistics, Findings, tables, plots, rendering, report sections"),
    Layer(("tracking",), "MLflow runs (a sweep's report among their artifacts); the mirror of the store"),
    Layer(
        ("transfer",),
        "runs in and out of the store: `ablate export` to Parquet or CSV and back; `ablate import` of MLflow "
        "experiments and tables, mapped to a sweep's axes, seed and result",
    ),
    Layer(("execution",), "the launch: pre-flight, selection, Ray fan-out, task body, recorder, progress, ..."),
    Layer(
        ("gpus",),
        "the GPU check `ablate gpu-check` runs: what the driver lists and whether torch can use it, the check's "
        "sweep, each phase launched through the API's `launch` and its figures, NVML's busy fraction per GPU",
    ),
    Layer(("api", "ablate"), "the Python API (`ablate.launch`, `ablate.report`, ...); the package's facade over it"),
    Layer(("cli",), "the typer commands, over the Python API"),
)


def unit(module: str) -> str:
    """The unit of a dotted module name: `ablate.nn.mechanisms.syn.report` -> `nn`, `ablate.config` -> `config`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


LAYER_OF = {name: i for i, layer in enumerate(LAYERS) for name in layer.units}
"""Each unit's index in `LAYERS`."""


def table() -> list[str]:
    """The Markdown table docs/architecture.md shows, top layer first, as its lines."""
    rows = [f"| {i} | {', '.join(f'`{u}`' for u in layer.units)} | {layer.owns} |" for i, layer in enumerate(LAYERS)]
    return ["| Layer | Units | Owns |", "|---|---|---|", *reversed(rows)]
