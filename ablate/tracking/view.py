"""What MLflow's UI shows of a sweep: the saved view of its runs page that the tracker keeps on the sweep's
experiment (`sweep_view`) and the addresses of the UI's pages in its model-training view (`ui_route`).

Apart from the records because it follows MLflow's UI (its tags, share keys and queries change with MLflow's
versions), not the store.
"""

from __future__ import annotations

import json
from typing import Any

from ablate.tracking.names import mlflow_name

EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")
"""Experiment tag that makes MLflow 3's UI, before 3.17, open an experiment on its runs (without it: on an empty
traces page)."""
TRAINING_VIEW = "workflowType=machine_learning"
"""Query of every MLflow UI address ablate gives: from MLflow 3.17 the UI shows every experiment as its global
workflow type says (this query, else the browser's last choice, GenAI at first: traces, prompts, judges),
whatever the experiment's kind tag; its own links keep the query."""
VIEW = "ablate"
"""Share key of the view of a sweep's runs page that the tracker keeps on the sweep's experiment (`sweep_view`, in the
experiment tag `VIEW_TAG`) and `ablate ui` opens (`LANDING`)."""
VIEW_TAG = f"mlflow.sharedViewState.{VIEW}"
"""Experiment tag where MLflow's UI (3.17) looks up a view by its share key (`viewStateShareKey` in the address)."""
LANDING = f"viewStateShareKey={VIEW}&compareRunsMode=CHART"
"""Query of the page `ablate ui` opens: the sweep's view, in the chart view of its runs."""


def sweep_view(axes: list[str], metric: str | None) -> dict[str, Any]:
    """What a newcomer should see of a sweep in MLflow's UI, as the state of a saved view of its runs page: the trials
    grouped by variant (their axes that are not replicates), best first by the sweep's metric, with the axis values
    and the metric as the table's columns; first in the chart view a section comparing the trials in variant order,
    the metric of each as a bar and parallel coordinates from the variant's axis values to the metric. MLflow's
    own defaults would show one collapsed parent row, no param or metric column and only the first 10 runs in
    charts. `axes`: the sweep's axis paths (the seed is one for every trial)."""
    from ablate.config import REPLICATES
    from ablate.spec.metrics import higher_is_better

    varied = [mlflow_name(f"axis.{a}") for a in axes if a not in REPLICATES]
    columns = [f"params.`{mlflow_name(f'axis.{a}')}`" for a in dict.fromkeys([*axes, "seed"])]
    state: dict[str, Any] = {
        "selectedColumns": columns, "runsHiddenMode": "SHOW_ALL", "useGroupedValuesInCharts": False,
        "groupBy": {"aggregateFunction": "average",
                    "groupByKeys": [{"mode": "param", "groupByData": a} for a in varied]} if varied else None,
    }  # fmt: skip
    if metric is None:
        return state
    name, section = mlflow_name(metric), f"{VIEW}-variants"
    card = {"runsCountToCompare": 1000, "metricSectionId": section, "deleted": False, "isGenerated": False}
    charts = [{**card, "uuid": f"{VIEW}-bar", "type": "BAR", "metricKey": name, "displayName": f"{name} of each trial"}]
    if varied:
        charts.append({**card, "uuid": f"{VIEW}-parallel", "type": "PARALLEL", "selectedParams": varied,
                       "selectedMetrics": [name], "showAllRuns": True})  # fmt: skip
    sections = [{"uuid": section, "name": "Variants compared", "display": True, "isReordered": True, "deleted": False,
                 "isGenerated": False}]  # fmt: skip
    return {**state, "orderByKey": f"metrics.`{name}`", "orderByAsc": not higher_is_better(metric),
            "selectedColumns": [*columns, f"metrics.`{name}`"], "compareRunCharts": charts,
            "compareRunSections": sections, "isAccordionReordered": True}  # fmt: skip


def view_state(tag: str | None) -> dict[str, Any] | None:
    """The state a view's experiment tag holds (MLflow's envelope: name, times, the state as JSON text); None where
    there is none or it is not one ablate could have written."""
    try:
        state = json.loads(json.loads(tag)["state"]) if tag else None
    except (ValueError, KeyError, TypeError):
        return None
    return state if isinstance(state, dict) else None


def ui_route(path: str, query: str = "") -> str:
    """The MLflow UI's address of `path` (`experiments/1/runs`) in its model-training view (`TRAINING_VIEW`), with
    `query` (`LANDING`) after it."""
    return f"#/{path}?{TRAINING_VIEW}" + (f"&{query}" if query else "")
