"""What MLflow's UI shows of a sweep: the saved view of its runs page that the tracker keeps on the sweep's
experiment (`sweep_view`) and the addresses of the UI's pages in its model-training view (`ui_route`).

Apart from the records because it follows MLflow's UI (its tags, share keys and queries change with MLflow's
versions), not the store.
"""

from __future__ import annotations

import json
from typing import Any

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
SUMMARY = ("summary", "variant")
"""Tag of a variant's run (`ablate.tracking.variants`): the runs the sweep's view shows."""
NUMBERS = {"mean": "mean", "std": "std", "n": "n", "delta": "delta", "lo": "delta lo", "hi": "delta hi",
           "p_adj": "p adj"}  # fmt: skip
"""Columns of the report's variant table a variant's run holds, and their MLflow metric names: the metric's mean
and std over the variant's trials, its independent replicates, the paired difference to its reference with the
95% interval, and the adjusted p of that comparison."""


def sweep_view(metric: str | None) -> dict[str, Any]:
    """What a newcomer should see of a sweep in MLflow's UI, as the state of a saved view of its runs page: one run
    per variant (`SUMMARY`, its name the values of the axes that vary) holding the report's numbers for it, best
    first by the sweep's metric, those numbers as the table's columns; first in the chart view a section as wide as
    the page with a table of every number beside every variant, then one with the mean of each variant as a bar
    and its difference to the reference as a bar. The trials' own runs are a search away (the view's filter keeps
    to the variants' runs). MLflow's own defaults would show one collapsed parent row, no metric column and one
    bar per trial."""
    from ablate.spec.metrics import higher_is_better

    tag, kind = SUMMARY
    columns = [f"metrics.`{name}`" for name in NUMBERS.values()]
    state: dict[str, Any] = {"searchFilter": f"tags.{tag} = '{kind}'", "selectedColumns": columns, "groupBy": None,
                             "runsHiddenMode": "SHOW_ALL", "useGroupedValuesInCharts": False}  # fmt: skip
    if metric is None:
        return state
    mean, delta, numbers, bars = NUMBERS["mean"], NUMBERS["delta"], f"{VIEW}-variants", f"{VIEW}-bars"
    card = {"runsCountToCompare": 1000, "deleted": False, "isGenerated": False}
    charts = [
        {**card, "uuid": f"{VIEW}-numbers", "metricSectionId": numbers, "type": "DIFFERENCE",
         "compareGroups": ["Model metrics"], "chartName": f"{metric}: the report's numbers",
         "showChangeFromBaseline": False, "showDifferencesOnly": False},
        {**card, "uuid": f"{VIEW}-bar", "metricSectionId": bars, "type": "BAR", "metricKey": mean},
        {**card, "uuid": f"{VIEW}-delta", "metricSectionId": bars, "type": "BAR", "metricKey": delta},
    ]  # fmt: skip
    section = {"display": True, "isReordered": True, "deleted": False, "isGenerated": False}
    sections = [
        {**section, "uuid": numbers, "name": "Variants compared", "columns": 1},
        {**section, "uuid": bars, "name": "Means and deltas", "columns": 2},
    ]
    return {**state, "orderByKey": f"metrics.`{mean}`", "orderByAsc": not higher_is_better(metric),
            "compareRunCharts": charts, "compareRunSections": sections, "isAccordionReordered": True}  # fmt: skip


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
