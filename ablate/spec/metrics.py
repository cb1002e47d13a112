"""Which way a metric is better, read from its name: the rule a sweep's `tune:` direction is checked against,
and the one reports, MLflow's run ordering and the launch summary follow, unless the sweep states a direction for
the metric (an import's `direction`: a metric of someone else's naming, `wer` or `perplexity`, that the rule reads
wrong). Torch-, numpy- and pandas-free, so reading a spec loads none of them."""

from __future__ import annotations

import re
from collections.abc import Mapping

DIRECTIONS = "directions"
"""The key of a sweep's recorded spec that holds the directions stated for its metrics: {metric: max or min}."""


def higher_is_better(metric: str, stated: Mapping[str, str] | None = None) -> bool:
    """Which way is better for `metric`: the direction `stated` for it (max or min), else what its name says, lower
    for losses and error rates, higher otherwise."""
    if stated and metric in stated:
        return stated[metric] == "max"
    return not re.search(r"(loss|err|error|nll)$", metric.rsplit(".", 1)[-1])
