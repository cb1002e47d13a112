"""The report's account of adaptive seeding: how many seeds each cell got and why (`ablate.planning.adaptive`)."""

from __future__ import annotations

from pydantic import ValidationError

from ablate.planning.adaptive import Verdict, from_trials, procedure
from ablate.reporting.frames import SweepData
from ablate.reporting.render import Section, Table
from ablate.spec.schema import AdaptiveSeeds
from ablate.store import Store


def policy_of(store: Store, sweep: str) -> AdaptiveSeeds | None:
    """The sweep's adaptive-seeds policy as its last launch recorded it; None for fixed seeds."""
    record = store.sweep(sweep)
    raw = (record.spec or {}).get("adaptive") if record is not None else None
    if not raw:
        return None
    try:
        return AdaptiveSeeds.model_validate(raw)
    except ValidationError:  # recorded before the `min` floor of EXACT_N: judged from there (`adaptive.judged`)
        return AdaptiveSeeds.model_construct(**raw)


def verdicts(store: Store, data: SweepData) -> dict[str, Verdict] | None:
    """Each variant's adaptive-seeding verdict against the baseline (the Adaptive seeds table's and the Findings');
    None for a sweep with fixed seeds or without a baseline."""
    policy = policy_of(store, data.name)
    if policy is None or data.baseline is None:
        return None
    return from_trials(data.trials, data.baseline, data.metric, policy)


def section(store: Store, data: SweepData) -> Section | None:
    """A table of each variant's seeds and the decision that stopped them, under the design's description;
    None for a sweep with fixed seeds or without a baseline."""
    policy, judged = policy_of(store, data.name), verdicts(store, data)
    if policy is None or judged is None:
        return None
    done = data.trials[data.trials["state"] == "done"].groupby("variant")["seed"].nunique()
    rows = [[data.variants.loc[data.baseline, "label"], "baseline", str(done.get(data.baseline, 0)),
             "paired with every cell that needed more seeds"]]  # fmt: skip
    for variant, verdict in judged.items():
        rows.append([data.variants.loc[variant, "label"], verdict.decision, str(done.get(variant, 0)), verdict.reason])
    table = Table(
        f"Seeds per cell (done) and the decision that stopped them, on {data.metric}: difference to the baseline, "
        f"repeated confidence interval at the cell's last look.",
        ["variant", "decision", "seeds", "why"],
        rows,
        left=2,
    )
    return Section("Adaptive seeds", [procedure(policy), table])
