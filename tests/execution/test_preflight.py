"""The launch's pre-flight (`ablate.execution.preflight`): what it weighs before asking (`workload`), on stores whose
states and recorded code the test writes; the checks it runs are tested through `ablate launch` in
test_plugin_checks."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from conftest import TINY, write_sweeps
from synthetic import fill
from typer.testing import CliRunner

from ablate.cli import app
from ablate.execution.preflight import Workload, workload
from ablate.execution.selection import Select
from ablate.planning.plan import plan
from ablate.provenance.fingerprint import Fingerprint, fingerprint, record
from ablate.store import Store


def test_the_workload_counts_what_a_stale_rerun_policy_retrains(tmp_path: Path) -> None:
    """Four done trials, the two csan ones recorded with another torch (stale now): under the sweep's
    `stale: rerun` a launch trains those two again, and `--ask-above` must weigh them (it counted only trials
    not done: issue 38 item 11); under `stale: warn` nothing runs, and `--rerun all` runs all four."""
    grid = {"attention.kind": ["softmax", "csan"]}
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY, "grid": grid, "seeds": 2, "stale": "rerun"}})
    p = plan(f, "s")
    db = f"sqlite:///{tmp_path}/r.sqlite"
    with Store(db) as store:
        fill(store, p, value=lambda t: 50.0)
        for t in p.trials:
            fp = fingerprint(t.config)
            if t.config.attention.kind == "csan":
                fp = Fingerprint(fp.components, {**fp.versions, "torch": "0.0"})
            store.finish(t.key, "done", result={p.metric: 50.0}, code=record(fp, f))
        epochs = TINY["train"]["epochs"]
        assert workload([p], store, Select()) == Workload(2, 2 * epochs)
        assert workload([p], store, Select(stale="warn")) == Workload(0, 0)
        assert workload([p], store, Select(rerun="all")) == Workload(4, 4 * epochs)
    launch = ["launch", str(f), "--no-mlflow", "--db", db, "--storage", str(tmp_path / "ck"), "--ask-above", "3"]
    res = CliRunner().invoke(app, launch)
    assert res.exit_code == 2 and "2 trials, 4 trial-epochs, above --ask-above 3" in res.output, res.output


def test_the_workload_counts_the_later_rounds_of_adaptive_seeds_and_tuning(tmp_path: Path) -> None:
    """Adaptive seeds plan `min` seeds now and may add up to `max`; a tuned sweep plans its first round of
    configurations now and its later ones and final seeds as results come: the workload says both."""
    adaptive, base = {"min": 6, "max": 9, "threshold": 1.0}, {"attention.kind": "softmax"}
    tune = {"space": {"train.lr": {"log": [1e-4, 1e-2]}}, "budget": 4, "batch": 2, "metric": "val.top1"}
    f = write_sweeps(tmp_path / "e.yaml", {
        "a": {"base": TINY, "grid": {"attention.kind": ["softmax", "csan"]}, "seeds": adaptive, "baseline": base},
        "t": {"base": TINY, "grid": {"attention.kind": ["softmax", "csan"]}, "tune": tune},
    })  # fmt: skip
    epochs = TINY["train"]["epochs"]
    a = plan(f, "a")
    assert workload([a], None, Select()) == Workload(12, 12 * epochs, 6, 6 * epochs)
    from ablate.api import rounds
    from ablate.planning.tuning import most

    t = rounds([plan(f, "t")]).plans
    first = sum(len(p.trials) for p in t)
    work = workload(t, None, Select())
    assert work.trials == first and work.trials + work.later == most(t[0]) == 2 * 4
    assert work.most == most(t[0]) * epochs
    assert replace(work, later=0, later_epochs=0).words() == f"{first} trials, {first * epochs} trial-epochs"


def test_a_ray_that_cannot_start_is_one_paragraph_exit_2_with_nothing_written(tmp_path: Path) -> None:
    """A real start-up failure of the embedded Ray (its temp dir is a file: the raylet cannot make its session),
    on a first launch: exit 2, one paragraph saying Ray did not start and where its logs are, and neither the
    results database, the MLflow store nor its folder written (issue 38 item 7: a raw traceback, exit 1, after
    db/ was created)."""
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY}})
    (tmp_path / "notadir").touch()
    env = {**os.environ, "RAY_ADDRESS": "", "RAY_AUTH_MODE": "disabled", "RAY_TMPDIR": str(tmp_path / "notadir"),
           "ABLATE_CACHE": str(tmp_path / "cache")}  # fmt: skip
    res = subprocess.run([sys.executable, "-m", "ablate.cli", "launch", str(f), "--plain", "--yes"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    said = " ".join(res.stderr.split())
    assert res.returncode == 2 and "Traceback" not in said, res.stdout + res.stderr
    assert "error: could not start the embedded Ray on this machine: NotADirectoryError" in said, said
    assert f"Ray's logs are under {tmp_path / 'notadir'}/ray/session_latest/logs" in said, said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "e.yaml", "notadir"]
