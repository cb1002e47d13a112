"""Which way a metric is better, read from its name: the rule a sweep's `tune:` direction is checked against,
and the one reports, MLflow's run ordering and the launch summary follow (torch-, numpy- and pandas-free, so
reading a spec loads none of them)."""

from __future__ import annotations

import re


def higher_is_better(metric: str) -> bool:
    """Which way a metric's name says is better: lower for losses and error rates, higher otherwise."""
    return not re.search(r"(loss|err|error|nll)$", metric.rsplit(".", 1)[-1])
