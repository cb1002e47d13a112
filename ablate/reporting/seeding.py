"""The report's account of adaptive seeding: how many seeds each cell got and why (`ablate.planning.adaptive`)."""

from __future__ import annotations

from ablate.planning import adaptive as sequential
from ablate.reporting.frames import SweepData
from ablate.reporting.render import Section, Table
from ablate.spec.schema import AdaptiveSeeds
from ablate.store import Store


def policy_of(store: Store, sweep: str) -> AdaptiveSeeds | None:
    """The sweep's adaptive-seeds policy as its last launch recorded it; None for fixed seeds."""
    record = store.sweep(sweep)
    raw = (record.spec or {}).get("adaptive") if record is not None else None
    return AdaptiveSeeds.model_validate(raw) if raw else None


def section(store: Store, data: SweepData) -> Section | None:
    """A table of each variant's seeds and the decision that stopped them, under the design's description;
    None for a sweep with fixed seeds or without a baseline."""
    policy = policy_of(store, data.name)
    if policy is None or data.baseline is None:
        return None
    verdicts = sequential.from_trials(data.trials, data.baseline, data.metric, policy)
    done = data.trials[data.trials["state"] == "done"].groupby("variant")["seed"].nunique()
    rows = [[data.variants.loc[data.baseline, "label"], "baseline", str(done.get(data.baseline, 0)),
             "paired with every cell that needed more seeds"]]  # fmt: skip
    for variant, verdict in verdicts.items():
        rows.append([data.variants.loc[variant, "label"], verdict.decision, str(done.get(variant, 0)), verdict.reason])
    table = Table(
        f"Seeds per cell (done) and the decision that stopped them, on {data.metric}: difference to the baseline, "
        f"repeated confidence interval at the cell's last look.",
        ["variant", "decision", "seeds", "why"],
        rows,
        left=2,
    )
    return Section("Adaptive seeds", [sequential.procedure(policy), table])
