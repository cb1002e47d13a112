"""What `ablate plan` prints per trial: key, variant, axis values, costs and config (and, as JSON, each sweep's
design beside them), so the CLI only formats.

A large sweep has few distinct models and grid cells and many seeds: costs are counted once per architecture
and configs dumped once per cell (`Trial.resolved`), not once per trial (per trial, they were 7 of the 8.7 s
of `ablate plan` at 100,000 trials of 80 architectures).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from ablate.config import TrialConfig, identity
from ablate.planning.check import cost
from ablate.planning.plan import Plan

COSTS = ("params", "gflops", "gflops_no_attn")
"""The cost columns, in `Costs`' order."""


@dataclass(frozen=True)
class Costs:
    """A model's size as papers count it: GFLOPs per example are multiply-accumulates (torch's counter counts 2
    per MAC), with the attention matmuls and without them (the convention of most papers' tables)."""

    params: int
    gflops: float
    gflops_no_attn: float


def variant_costs(plans: Iterable[Plan]) -> dict[str, Costs]:
    """Each variant's costs, counted once per architecture (`_architecture`) on its first trial: a variant's
    trials differ only in replicates (seed, split seed, CV fold), which no network reads, and its variants in
    recipe (learning rate, epochs, ...), which none reads either. A model that fails is a `check.ModelError`
    naming its mechanism, backbone or dataset."""
    counted: dict[str, Costs] = {}
    out: dict[str, Costs] = {}
    for plan in plans:
        for t in plan.trials:
            if t.variant in out:
                continue
            arch = _architecture(t.cell)  # the cell's config: the trial's, but for the seed
            if arch not in counted:
                c = cost(t.cell)
                counted[arch] = Costs(c.params, round(c.gflops / 2, 6), round((c.gflops - c.attention_gflops) / 2, 6))
            out[t.variant] = counted[arch]
    return out


def _architecture(cfg: TrialConfig) -> str:
    """All that a model's cost reads: `nn.widths.model_key` (the model and attention identities and the data
    widths) and the code of the components (mechanism, backbone, dataset, task). The data section stands for
    the widths its dataset gives (finding them may read files); a key that tells more apart only counts more."""
    data = cfg.data.model_dump(mode="json")
    return json.dumps([identity(cfg.model), identity(cfg.attention), data, cfg.task], sort_keys=True)


def columns(plan: Plan, costs: Mapping[str, Costs] | None) -> list[str]:
    """The columns of `rows` (without the config)."""
    return ["sweep", "key", "variant", *plan.axes, "seed", *(COSTS if costs is not None else ())]


def rows(plan: Plan, costs: Mapping[str, Costs] | None, limit: int | None = None) -> list[dict[str, Any]]:
    """The first `limit` trials (default: all), one row each: sweep, key, variant, axis values, seed, and the
    variant's costs where `costs` is given."""
    out = []
    for t in plan.trials[:limit]:
        row: dict[str, Any] = {"sweep": plan.sweep, "key": t.key, "variant": t.variant, **t.axes}
        if costs is not None:
            c = costs[t.variant]
            row.update(params=c.params, gflops=c.gflops, gflops_no_attn=c.gflops_no_attn)
        out.append(row)
    return out


def document(plans: Iterable[Plan], costs: Mapping[str, Costs] | None) -> dict[str, Any]:
    """What `ablate plan --format json` prints: `sweeps`, each sweep's name and design (`DesignPlan.record`; null
    for the full grid), and `trials`, every trial's record (`records`)."""
    plans = list(plans)
    return {"sweeps": [{"sweep": p.sweep, "design": p.design.record(p.seeds) if p.design else None} for p in plans],
            "trials": records(plans, costs)}  # fmt: skip


def records(plans: Iterable[Plan], costs: Mapping[str, Costs] | None) -> list[dict[str, Any]]:
    """Every trial's row with its resolved config as JSON data (`config`): `trials` of `document`."""
    return [
        {**row, "config": t.resolved()} for plan in plans for row, t in zip(rows(plan, costs), plan.trials, strict=True)
    ]


def write_csv(plans: list[Plan], costs: Mapping[str, Costs] | None, out: TextIO) -> None:
    """Every trial's row and config (JSON text) as CSV: the columns of every plan, in order of first use; a
    value that is a list or a mapping as JSON."""
    fields = list(dict.fromkeys(c for plan in plans for c in [*columns(plan, costs), "config"]))
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(fields)
    for plan in plans:
        for row, t in zip(rows(plan, costs), plan.trials, strict=True):
            row["config"] = t.resolved_text()
            writer.writerow(json.dumps(v) if isinstance(v := row.get(f, ""), (dict, list)) else v for f in fields)
