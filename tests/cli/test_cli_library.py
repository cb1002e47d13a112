"""The library functions the CLI calls (`ablate.api.status`, `runs`, `show`, `forget`, `dry_run`, `workload`) give a
notebook the facts the commands print, on real stores; and the CLI stays a thin layer: short modules, only public
library names."""

from __future__ import annotations

import ast
import io
import json
from collections import Counter
from pathlib import Path

import pytest
from conftest import TINY, write_sweeps
from test_cli import invoke, store_across_sweeps, store_with_trials
from test_imports import PACKAGE, import_graph
from test_tables import at, crowded, rows, truth
from typer.testing import CliRunner

from ablate import api
from ablate.cli import app
from ablate.planning.plan import plan
from ablate.provenance.stale import LISTED
from ablate.store import STATES, Listing, Store


def test_status_from_python_gives_the_facts_status_prints(tmp_path: Path) -> None:
    """Counts per sweep and state, the first LISTED running, failed and stale trials with what changed, and the
    totals the "... and N more" lines count: the same from `ablate.api.status` as in `ablate status`, and true
    of the store (counted trial by trial)."""
    db, plans = crowded(tmp_path)
    states, stale = truth(db, plans)
    now = api.status(store=db)
    output = at(250, "status", "--db", db)
    assert now.counts == {s: {**{st: int(r[st]) for st in STATES}, "total": int(r["total"])}
                          for s, r in ((r["sweep"], r) for r in rows(output, "trials per state"))}  # fmt: skip
    for sweep, keys in plans.items():
        assert now.counts[sweep] == {**{s: Counter(states[k] for k in keys)[s] for s in STATES}, "total": len(keys)}
    for listing, title in ((now.running, "running"), (now.failed, "failures")):
        assert list(zip(listing["sweep"], listing["key"])) == [(r["sweep"], r["key"]) for r in rows(output, title)]
    assert now.total("running") - len(now.running) > 0
    assert f"... and {now.total('running') - LISTED} more running trials" in output
    title = f"{now.code.trials} stale (done with other code than now; `launch --rerun stale` retrains)"
    assert now.code.trials == len(stale)
    assert [(s, k, ", ".join(c)) for s, k, c in zip(now.stale["sweep"], now.stale["key"], now.stale["changed"])] == [
        (r["sweep"], r["key"], r["changed"]) for r in rows(output, title)]  # fmt: skip
    beta = api.status(["beta"], db)
    assert list(beta.counts) == ["beta"] and beta.code.trials == len(stale & set(plans["beta"]))


def test_status_and_show_from_python_create_no_database(tmp_path: Path) -> None:
    """A database that is not there is a LookupError saying so, and is not created (as the CLI's exit 2): one
    sentence, the same from every function and from every command that reads a store."""
    missing = f"sqlite:///{tmp_path}/none.sqlite"
    said = set()
    for read in (lambda: api.status(store=missing), lambda: api.show("k", missing), lambda: api.runs(store=missing),
                 lambda: api.forget(["k"], missing, tracker=False)):  # fmt: skip
        with pytest.raises(LookupError, match="no results database at") as e:
            read()
        said.add(str(e.value))
    with pytest.raises(api.ReportError) as e:
        api.report(store=missing)
    said.add(str(e.value))
    for command in ("status", "runs", "show", "report", "forget", "sync"):
        cli = CliRunner().invoke(app, [command, *(["k"] if command == "show" else []), "--db", missing])
        assert cli.exit_code == 2
        said.add(cli.output.removeprefix("error: ").strip())
    assert said == {f"no results database at {missing}: run `ablate launch` first (or pass --db)"}
    assert not (tmp_path / "none.sqlite").exists()


def printed(rows: Listing) -> list[dict[str, object]]:
    """`rows` as `--format json` writes them."""
    text = io.StringIO()
    rows.write_json(text)
    return list(json.loads(text.getvalue()))


def test_runs_from_python_gives_the_rows_runs_prints(tmp_path: Path) -> None:
    """`ablate.api.runs` is what `ablate runs` prints, cell for cell: the matching trials in plan order with the
    stale ones marked (true of the store, trial by trial), a page of them with the count of all, chosen columns;
    what it cannot read raises naming it, as the command's exit 2 does."""
    db, plans = crowded(tmp_path)
    states, stale = truth(db, plans)
    found = api.runs(store=db)
    assert printed(found.rows) == json.loads(invoke("runs", "--db", db, "-f", "json"))
    assert found.total == len(found.rows) == sum(map(len, plans.values()))
    member = [k for keys in plans.values() for k in keys]
    assert found.rows["key"] == member and {k for k, s in zip(member, found.rows["stale"]) if s} == stale
    done = api.runs(["beta"], db, state="done", limit=3, columns=["key", "stale"])
    assert done.rows.names == ["key", "stale"] and done.total == sum(states[k] == "done" for k in plans["beta"])
    assert done.rows["key"] == [k for k in plans["beta"] if states[k] == "done"][:3]
    assert printed(done.rows) == json.loads(invoke("runs", "beta", "--db", db, "--state", "done", "-n", "3",
                                                    "-c", "key,stale", "-f", "json"))  # fmt: skip
    assert api.runs(store=db, where=["seed<3"]).rows["key"] == [k for k in member if int(k[1:]) < 3]
    for given, ask in (("where", {"where": ["colour=red"]}), ("columns", {"columns": ["key", "colour"]})):
        with pytest.raises(api.UnknownColumn, match="no column or config path 'colour'") as e:
            api.runs(store=db, **ask)
        assert e.value.given == given
    with pytest.raises(ValueError, match="expected PATH=VALUE"):
        api.runs(store=db, where=["seed"])
    with pytest.raises(LookupError, match="no results database at"):
        api.runs(store=f"sqlite:///{tmp_path}/none.sqlite")


def test_show_from_python_gives_the_facts_show_prints(tmp_path: Path) -> None:
    """One trial by a prefix of its key: its sweeps, its results (the one kept when it was retrained, with the
    reason, then the latest), metrics (steps recorded, last value) and its MLflow run looked up where told; a
    prefix matching several trials is the CLI's error, word for word."""
    db = store_across_sweeps(tmp_path)
    with Store(db) as store:
        store.archive(["m1"], "stale")
        store.mark_running("m1", host="h")
        store.keep_mlflow_run("m1", "0123456789abcdef0123456789abcdef", None)
        store.log_metrics("m1", 0, {"train.loss": 2.0}, wall_time=1.0)
        store.log_metrics("m1", 1, {"train.loss": 1.5}, wall_time=2.0)
        store.finish("m1", "failed", error="ValueError: boom")
    elsewhere = f"sqlite:///{tmp_path / 'other-mlflow.sqlite'}"
    shown = api.show("m1", db, elsewhere)
    printed = invoke("show", "m1", "--db", db, "--mlflow-uri", elsewhere).replace("\n", " ")
    assert shown.trial.key == "m1" and shown.sweeps == ["mix"] and f"sweeps: {', '.join(shown.sweeps)}" in printed
    assert [(a.state, a.kept, a.reason) for a in shown.attempts] == [("done", True, "stale"), ("failed", False, None)]
    assert "result 1 (kept when retrained: stale): done" in printed and "result 2: failed" in printed
    assert shown.metrics.columns == {"name": ["train.loss"], "steps": [2], "last": [1.5]}
    assert shown.mlflow is not None and shown.mlflow.url is None and shown.mlflow.uri == elsewhere
    assert f"MLflow run {shown.mlflow.run_id}: not in {elsewhere}" in printed
    assert api.show("m1", db, False).mlflow is None
    with pytest.raises(LookupError) as e:
        api.show("m", db)
    cli = CliRunner().invoke(app, ["show", "m", "--db", db])
    said = "'m' matches 2 trials: give more of the key"
    assert str(e.value) == said and cli.exit_code == 2 and said in cli.output


def test_forget_from_python_deletes_the_trials_and_their_checkpoints(tmp_path: Path) -> None:
    db, _ = store_with_trials(tmp_path)
    folder = tmp_path / "checkpoints" / "f1"
    folder.mkdir(parents=True)
    (folder / "last.pt").write_bytes(b"x")
    gone = api.forget(["f1", "d1"], db, str(tmp_path / "checkpoints"), tracker=False)
    assert (gone.trials, gone.runs) == (2, 0) and not folder.exists()
    with Store(db) as store:
        assert not {"f1", "d1"} & set(store.states()) and "p1" in store.states()


def test_dry_run_and_workload_from_python_say_what_launch_would_do_and_write_nothing(tmp_path: Path) -> None:
    """With one trial done in the store: the dry run's counts are the line `launch --dry-run` prints, the
    workload weighs the others, and neither call creates a database where there is none."""
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY, "grid": {"attention.kind": ["softmax", "csan"]}}})
    p = plan(f, "s")
    fresh = f"sqlite:///{tmp_path}/fresh.sqlite"
    assert api.dry_run([p], fresh).counts() == (len(p.trials), 0, 0) and api.workload([p], fresh).trials == 2
    assert not (tmp_path / "fresh.sqlite").exists()
    db = f"sqlite:///{tmp_path}/r.sqlite"
    with Store(db) as store:
        store.add_trials("s", [{"key": t.key, "variant": t.variant, "config": t.config.model_dump(mode="json"),
                                "axes": t.axes} for t in p.trials])  # fmt: skip
        store.mark_running(p.trials[0].key, host="h")
        store.finish(p.trials[0].key, "done", result={"test": {"top1": 1.0}})
    would = api.dry_run([p], db)
    assert would.counts() == (1, 1, 0)
    assert "would run 1, skip 1" in invoke("launch", str(f), "s", "--dry-run", "--db", db)
    work = api.workload([p], db)
    assert (work.trials, work.epochs) == (1, TINY["train"]["epochs"])
    assert work.asks(work.most - 1) and not work.asks(work.most)
    with Store(db) as store:
        assert list(api.unfinished([p], store)["key"]) == [p.trials[1].key]


CLI = PACKAGE / "cli"
MOST_LINES = 300


def test_the_cli_is_short_modules_over_the_public_library() -> None:
    """No command module of ablate/cli over MOST_LINES lines; the library never imports the CLI; and the CLI takes
    from the library only what it offers everyone: no `_private` name of a module outside ablate.cli (the library's
    internals stay the library's, so what a command calls a notebook can call)."""
    long = {f.name: n for f in CLI.glob("*.py") if (n := len(f.read_text().splitlines())) > MOST_LINES}
    assert long == {}
    graph = import_graph(PACKAGE)
    assert {m for m, deps in graph.items() if not m.startswith("ablate.cli") and any(
        d.startswith("ablate.cli") for d in deps)} == set()  # fmt: skip
    borrowed = []
    for file in CLI.glob("*.py"):
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ablate"):
                if node.module.startswith("ablate.cli"):
                    continue
                borrowed += [
                    f"{file.name}: {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.endswith("__")
                ]
    assert borrowed == []
