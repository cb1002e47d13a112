"""The library API as a notebook uses it: the docs' example, run as written, records what the CLI records."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from conftest import ROOT, TINY, write_sweeps

import ablate
from ablate.store import Store
from ablate.tracking.tracker import Tracker

pytestmark = pytest.mark.timeout(300)


PAGE = ROOT / "docs" / "concepts" / "commands.md"
"""The docs page whose "From a notebook" section holds the example."""


def readme_example() -> str:
    """The Python block under the "From a notebook" heading of `PAGE`."""
    text = PAGE.read_text()
    section = text[text.index("## From a notebook") :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None, f"{PAGE.name}'s notebook section has no python block"
    return match.group(1)


def test_the_readme_notebook_example_runs_and_records_to_the_store_mlflow_and_a_report(ray_local, tmp_path):
    code = readme_example()
    assert len(code.strip().splitlines()) <= 5
    sweeps = {"tiny": {"base": TINY, "grid": {"attention.kind": ["softmax", "csan"]}}, "other": {"base": TINY}}
    write_sweeps(tmp_path / "experiments.yaml", sweeps)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        scope: dict[str, object] = {}
        exec(compile(code, str(PAGE), "exec"), scope)
    finally:
        os.chdir(cwd)
    plan, result = scope["plan"], scope["result"]
    assert plan.sweep == "tiny" and {t.config.train.epochs for t in plan.trials} == {1}  # the override
    assert result.counts == {"done": 2}
    with Store(f"sqlite:///{tmp_path}/db/ablate.sqlite") as store:
        assert set(store.states().values()) == {"done"} and set(store.states()) == {t.key for t in plan.trials}
        assert sorted(scope["runs"]["key"]) == sorted(store.states())
    tracker = Tracker(f"sqlite:///{tmp_path}/db/mlflow.sqlite")  # MLflow by default, where the CLI records
    runs = tracker.client.search_runs([tracker.experiment("tiny")], "tags.trial_key != ''")
    assert sorted(r.data.tags["trial_key"] for r in runs) == sorted(t.key for t in plan.trials)
    assert (tmp_path / "reports" / "tiny" / "index.html").exists()


def test_the_api_exports_what_the_cli_composes():
    from ablate.api import launch, report
    from ablate.tracking.tracker import Tracker as TrackerClass

    assert ablate.launch is launch and ablate.report is report
    assert ablate.Tracker is TrackerClass and ablate.Store is Store
    with pytest.raises(AttributeError):
        ablate.nothing  # noqa: B018


def test_report_without_a_database_is_an_error_and_creates_none(tmp_path: Path):
    from ablate.reporting import ReportError

    with pytest.raises(ReportError, match="no results database"):
        ablate.report(store=f"sqlite:///{tmp_path}/none.sqlite", out=tmp_path / "reports")
    assert list(tmp_path.iterdir()) == []
