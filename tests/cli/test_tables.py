"""What the CLI prints a user: `ablate status` and `ablate runs` at the width of a terminal (80 columns: no
header cut to `swe…`; 200: every column whole), what they list of a crowded store (counts equal to a count of
every trial, listings cut to their first rows with how many more), and `ablate sync` blaming what really
failed."""

from __future__ import annotations

import csv
import io
import json
import random
from collections import Counter
from pathlib import Path

import pytest
from conftest import TINY, free_port, write_sweeps
from test_cli import table
from typer.testing import CliRunner

from ablate.api import plan_rows
from ablate.api.plan_rows import SEED, variant_costs, write_markdown
from ablate.cli import ROWS, app
from ablate.cli.tables import markdown, markdown_cell
from ablate.config import TrialConfig
from ablate.planning.plan import load_plans, plan
from ablate.provenance.fingerprint import Fingerprint, fingerprint, record
from ablate.provenance.stale import LISTED
from ablate.store import STATES, Listing, Store
from ablate.tracking.mirror import Mirror
from ablate.tracking.tracker import Tracker

pytestmark = pytest.mark.timeout(300)

CSAN = {"attention.tau": [True, False], "attention.mu": [True, False], "attention.kappa_pub": ["unit", "off"],
        "attention.kappa_priv": [True, False]}  # fmt: skip


def launched(tmp_path: Path) -> tuple[str, list[str]]:
    """A store as a launch leaves it (the launcher's own calls on a real plan): sweep `cpu` (stack x kind, 2
    seeds, 8 trials) and `csan-components` (four CSaN switches, 2 seeds, 32 trials), with 20-character keys;
    in csan-components 4 trials done (2 of them cpu's too: CSaN with every switch on), one running on a host,
    one failed, one diverged. Returns the store's URL and csan-components' keys in plan order."""
    f = write_sweeps(tmp_path / "e.yaml", {
        "cpu": {"base": TINY, "grid": {"model.stack": ["alternating", "pure"], "attention.kind": ["softmax", "csan"]},
                "seeds": 2},
        "csan-components": {"base": {**TINY, "attention": {"kind": "csan"}}, "grid": CSAN, "seeds": 2},
    })  # fmt: skip
    db = f"sqlite:///{tmp_path}/r.sqlite"
    plans = load_plans(f)
    with Store(db) as store:
        for plan in plans.values():
            store.upsert_sweep(plan.sweep, spec_path=plan.file, metric=plan.metric, baseline=plan.baseline,
                               spec={"axes": plan.axes, "plugins": plan.plugins.to_json()})  # fmt: skip
            store.add_trials(plan.sweep, plan.trials)
        keys = [t.key for t in plans["csan-components"].trials]
        for key in keys[:7]:
            store.mark_running(key, host="gpu-node-17")
        for i, key in enumerate(keys[:4]):
            store.finish(key, "done", result={"test": {"top1": 90.0 + i / 7}})
        store.finish(keys[5], "failed", error="Traceback...\nRuntimeError: CUDA out of memory. Tried to allocate 2 GiB")
        store.finish(keys[6], "diverged", diverged_epoch=1, diverged_step=3)
    return db, keys


def at(width: int, *args: str) -> str:
    """The command's output on a terminal `width` columns wide."""
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    return result.output


def rows(output: str, title: str) -> list[dict[str, str]]:
    """The rows of the table under `title`; a row rich wrapped onto more lines is joined back (the lines it
    adds have an empty first cell)."""
    joined: list[dict[str, str]] = []
    for row in table(output, title) or []:
        if joined and not next(iter(row.values())):
            joined[-1] = {k: f"{joined[-1][k]} {v}".strip() for k, v in row.items()}
        else:
            joined.append(row)
    return joined


def headers(output: str, title: str) -> list[str]:
    found = rows(output, title)
    assert found, output
    return list(found[0])


def test_status_fits_80_columns_with_the_states_folded_and_shows_every_column_at_200(tmp_path: Path) -> None:
    db, keys = launched(tmp_path)
    narrow = at(80, "status", "--db", db)
    assert "…" not in narrow, narrow  # no header, sweep name or count cut
    assert max(map(len, narrow.splitlines())) <= 80
    counts = {r["sweep"]: r for r in rows(narrow, "trials per state")}
    assert list(counts["cpu"]) == ["sweep", "trials", "epochs left", "s/epoch", "ETA"]
    assert counts["csan-components"]["trials"] == "4/32 done, 25 pending, 1 running, 1 failed, 1 diverged"
    assert counts["cpu"]["trials"] == "2/8 done, 6 pending"
    (running,) = rows(narrow, "running")
    assert (running["sweep"], running["key"], running["host"]) == ("csan-components", keys[4][:10], "gpu-node-17")
    assert "left out to fit 80 columns: lease_expires, lease_host, started_at" in narrow
    failures = {r["key"]: r for r in rows(narrow, "failures")}  # the error wraps: whole keys still fit
    assert failures[keys[5]]["error"] == "RuntimeError: CUDA out of memory. Tried to allocate 2 GiB"
    assert failures[keys[6]]["state"] == "diverged"

    wide = at(200, "status", "--db", db)
    assert "…" not in wide and "left out" not in wide
    assert headers(wide, "trials per state") == ["sweep", *STATES, "total", "epochs left", "s/epoch", "ETA"]
    assert headers(wide, "running") == ["sweep", "key", "host", "started_at", "lease_host", "lease_expires"]
    assert {r["key"] for r in rows(wide, "running")} == {keys[4]}


def test_runs_fits_80_columns_keeping_state_and_metric_and_shows_every_column_at_200(tmp_path: Path) -> None:
    db, keys = launched(tmp_path)
    default = list(json.loads(at(200, "runs", "csan-components", "--db", db, "-f", "json"))[0])
    assert default == ["sweep", "key", "state", *(f"axis.{a}" for a in [*CSAN, "seed"]), "test.top1"]

    wide = at(200, "runs", "csan-components", "--db", db)
    assert "…" not in wide and "left out" not in wide
    assert headers(wide, "32 trials") == default
    assert [r["key"] for r in rows(wide, "32 trials")] == keys

    narrow = at(80, "runs", "csan-components", "--db", db)
    assert "…" not in narrow, narrow
    title = "32 trials, sweep csan-components"  # one sweep: said once, in the title
    assert headers(narrow, title) == ["key", "state", "tau", "mu", "kappa_pub", "kappa_priv", "test.top1"]
    shown = rows(narrow, title)
    assert [r["key"] for r in shown] == [k[:10] for k in keys]  # a prefix `ablate show` takes
    assert [r["state"] for r in shown[:7]] == ["done"] * 4 + ["running", "failed", "diverged"]
    assert shown[3]["test.top1"] == "90.43" and shown[3]["kappa_pub"] == "unit"
    assert "left out to fit 80 columns: seed (`--columns` picks columns" in narrow

    both = at(80, "runs", "--db", db)  # two sweeps: the replicate axis first, then the last axes
    assert "…" not in both, both
    assert headers(both, "40 trials") == ["sweep", "key", "state", "stack", "kind", "test.top1"]
    assert "left out to fit 80 columns: seed, attention.kappa_priv" in both
    everything = at(200, "runs", "--db", db)  # all of them, by the end of their paths
    assert "…" not in everything and "left out" not in everything
    assert headers(everything, "40 trials") == ["sweep", "key", "state", "stack", "kind", "seed", "tau", "mu",
                                                "kappa_pub", "kappa_priv", "test.top1"]  # fmt: skip


PLANS = {"alpha": range(0, 120), "beta": range(100, 230), "gamma": range(200, 300)}
"""Three sweeps over 300 trials; 20 trials are in both alpha and beta, 30 in both beta and gamma."""


def crowded(tmp_path: Path) -> tuple[str, dict[str, list[str]]]:
    """A store of PLANS, each trial in a state drawn from STATES (a seeded draw: about 40 in each); done trials
    recorded with today's code or with another training loop (stale), or with none. Returns its URL and each
    sweep's keys in plan order."""
    db = f"sqlite:///{tmp_path}/crowded.sqlite"
    now = fingerprint(TrialConfig.model_validate(TINY))
    old = Fingerprint({**now.components, "loop": "0" * 16}, now.versions)
    codes = (record(now, None), record(old, None), record(old, None), record(old, None), None)
    rng = random.Random(3)
    plans = {sweep: [f"t{i:03d}" for i in seeds] for sweep, seeds in PLANS.items()}
    with Store(db) as store:
        for sweep, keys in plans.items():
            store.upsert_sweep(sweep, metric="test.top1")
            store.add_trials(sweep, [{"key": k, "variant": k, "config": {**TINY, "seed": int(k[1:])},
                                      "axes": {"seed": int(k[1:])}} for k in keys])  # fmt: skip
        for key in sorted({k for keys in plans.values() for k in keys}):
            state = rng.choice(STATES)
            if state != "pending":
                store.mark_running(key, host="node-1")
            if state in ("done", "failed", "diverged"):
                code = rng.choice(codes)
                store.finish(key, state, result={"test": {"top1": 50.0}} if state == "done" else None,
                             error="RuntimeError: boom" if state == "failed" else None,
                             **({"code": code} if code else {}))  # fmt: skip
            elif state in ("interrupted", "preempted"):
                store.interrupt([key], state)
    return db, plans


def truth(db: str, plans: dict[str, list[str]]) -> tuple[dict[str, str], set[str]]:
    """Every trial's state, and the done trials whose recorded code differs from the code now, found one trial
    at a time (the brute force the grouped queries must agree with)."""
    with Store(db) as store:
        states, codes, configs = store.states(), store.codes(), store.configs()
    stale = {k for k, code in codes.items() if states[k] == "done" and Fingerprint.from_json(code).digest
             != fingerprint(TrialConfig.model_validate(configs[k])).digest}  # fmt: skip
    return states, stale


def test_status_counts_every_trial_and_lists_the_first_of_each_kind(tmp_path: Path) -> None:
    """Counts per sweep and state equal a count of every trial (a state left out of the count, or a sweep's
    trial counted in another, shows); running trials, failures and stale trials are listed in plan order up to
    LISTED rows, and a line counts the rest."""
    db, plans = crowded(tmp_path)
    states, stale = truth(db, plans)
    output = at(250, "status", "--db", db)
    counts = {r["sweep"]: r for r in rows(output, "trials per state")}
    assert list(counts) == list(plans)
    for sweep, keys in plans.items():
        want = Counter(states[k] for k in keys)
        assert {s: int(counts[sweep][s]) for s in STATES} == {s: want[s] for s in STATES}, sweep
        assert int(counts[sweep]["total"]) == len(keys)
    member = [(sweep, k) for sweep, keys in plans.items() for k in keys]  # plan order
    for title, kinds, what in (("running", {"running"}, "running trials"),
                               ("failures", {"failed", "diverged"}, "failures")):  # fmt: skip
        listed = [(sweep, k) for sweep, k in member if states[k] in kinds]
        assert len(listed) > LISTED
        assert [(r["sweep"], r["key"]) for r in rows(output, title)] == listed[:LISTED]
        assert f"... and {len(listed) - LISTED} more {what}:" in output
    title = f"{len(stale)} stale (done with other code than now; `launch --rerun stale` retrains)"
    listed = [(sweep, k) for sweep, k in member if k in stale]
    assert len(stale) > LISTED and [(r["sweep"], r["key"], r["changed"]) for r in rows(output, title)] == [
        (sweep, k, "loop") for sweep, k in listed[:LISTED]]  # fmt: skip
    assert f"... and {len(stale) - len({k for _, k in listed[:LISTED]})} more stale trials:" in output

    beta = at(250, "status", "beta", "--db", db)
    (row,) = rows(beta, "trials per state")
    want = Counter(states[k] for k in plans["beta"])
    assert row["sweep"] == "beta" and {s: int(row[s]) for s in STATES} == {s: want[s] for s in STATES}
    assert f"{len(stale & set(plans['beta']))} stale" in beta


def runs_of(*args: str) -> tuple[list[dict[str, str]], str]:
    """`ablate runs` as a table 200 columns wide: its rows and its output."""
    output = at(200, "runs", *args)
    titles = [line for line in output.splitlines() if line.endswith("trials") or " trials, sweep " in line]
    return rows(output, titles[0]), output


def test_runs_prints_the_first_trials_says_how_many_more_and_csv_prints_every_one(tmp_path: Path) -> None:
    """A table shows the first ROWS trials in plan order (or --limit N, --all), its title and last line say how
    many there are; --state goes into the query, --where is tested on every row, both before the page is cut;
    csv (and json) print every trial; the stale column of a page and of every trial agree with the brute force.
    """
    db, plans = crowded(tmp_path)
    states, stale = truth(db, plans)
    member = [(sweep, k) for sweep, keys in plans.items() for k in keys]
    total = len(member)

    shown, output = runs_of("--db", db)
    assert f"first {ROWS} of {total} trials" in output and len(shown) == ROWS
    assert [(r["sweep"], r["key"]) for r in shown] == member[:ROWS]
    assert [r["stale"] == "loop" for r in shown] == [k in stale for _, k in member[:ROWS]]
    assert output.rstrip().endswith(f"... and {total - ROWS} more trials: `--limit N` or `--all` shows them, "
                                    "`--format csv` prints every one")  # fmt: skip
    for n in (1, 7, total - 1):
        shown, output = runs_of("--db", db, "--limit", str(n))
        assert [(r["sweep"], r["key"]) for r in shown] == member[:n] and f"... and {total - n} more trials" in output
    for args in (("--limit", str(total)), ("--limit", str(total + 5)), ("--all",)):
        shown, output = runs_of("--db", db, *args)
        assert len(shown) == total and f"{total} trials" in output and "more trials" not in output

    failed = [(sweep, k) for sweep, k in member if states[k] == "failed"]
    shown, output = runs_of("--db", db, "--state", "failed", "--limit", "5")
    assert [(r["sweep"], r["key"]) for r in shown] == failed[:5] and f"first 5 of {len(failed)} trials" in output
    late = [(sweep, k) for sweep, k in member if int(k[1:]) >= 150]
    shown, output = runs_of("--db", db, "--where", "seed>=150", "--limit", "5")
    assert [(r["sweep"], r["key"]) for r in shown] == late[:5] and f"first 5 of {len(late)} trials" in output
    shown, output = runs_of("gamma", "--db", db, "--limit", "3")
    assert [r["key"] for r in shown] == plans["gamma"][:3] and f"of {len(plans['gamma'])} trials" in output

    every = list(csv.DictReader(io.StringIO(at(200, "runs", "--db", db, "--format", "csv"))))
    assert [(r["sweep"], r["key"]) for r in every] == member
    assert {r["key"] for r in every if r["stale"]} == stale and {r["stale"] for r in every if r["stale"]} == {"loop"}
    assert len(json.loads(at(200, "runs", "--db", db, "--format", "json"))) == total
    assert len(list(csv.DictReader(io.StringIO(at(200, "runs", "--db", db, "-f", "csv", "-n", "4"))))) == 4
    bad = CliRunner().invoke(app, ["runs", "--db", db, "--limit", "0"])
    assert bad.exit_code == 2 and "--limit" in bad.output


BROKEN = '''
from typing import Literal

from ablate.config import Mechanism
from ablate.registry import register_mechanism


@register_mechanism
class Broken(Mechanism):
    """A mechanism whose report label has a bug."""

    kind: Literal["broken"] = "broken"

    def build(self, dim, num_heads, in_dim=None):
        raise NotImplementedError

    def describe(self) -> str:
        return self.words  # no such field
'''


def unreportable(tmp_path: Path) -> str:
    """A store whose sweep `s` cannot be reported: its plugin's label raises (AttributeError), in every process
    that loads the sweep's plugins from the store, as a report does. Two trials done, k0 and k1; beside it
    sweep `fine` with one trial done, ok. MLflow has none of them."""
    db = f"sqlite:///{tmp_path}/r.sqlite"
    with Store(db) as store:
        plugins = {"files": [{"path": str(tmp_path / "broken.py"), "source": BROKEN}]}
        store.upsert_sweep("s", metric="test.top1", spec={"axes": ["seed"], "plugins": plugins})
        config = {**TINY, "attention": {"kind": "broken"}}
        store.add_trials("s", [{"key": f"k{i}", "variant": "v", "config": {**config, "seed": i}, "axes": {"seed": i}}
                               for i in range(2)])  # fmt: skip
        store.upsert_sweep("fine", metric="test.top1", spec={"axes": ["seed"]})
        store.add_trials("fine", [{"key": "ok", "variant": "v", "config": {**TINY, "seed": 0}, "axes": {"seed": 0}}])
        for key in ("k0", "k1", "ok"):
            store.mark_running(key)
            store.finish(key, "done", result={"test": {"top1": 50.0}})
    return db


def test_sync_blames_the_report_not_mlflow_when_the_report_fails(tmp_path: Path) -> None:
    db = unreportable(tmp_path)
    mlflow = f"sqlite:///{tmp_path}/m.sqlite"
    result = CliRunner().invoke(app, ["sync", "--db", db, "--mlflow-uri", mlflow], env={"COLUMNS": "300"})
    assert result.exit_code == 1, result.output
    assert "writing the report of sweep 's' for MLflow failed (AttributeError: 'Broken' object has no attribute " \
           "'words'), not MLflow" in result.output, result.output  # fmt: skip
    assert "2 trials and the sweep's summary wait for the report (1 trials synced" in result.output
    assert "is failing" not in result.output and "`ablate report s` shows its traceback" in result.output
    with Store(db) as store:
        assert store.unmirrored() == ["k0", "k1"]  # the other sweep is synced; these wait for the mend

    down = f"http://127.0.0.1:{free_port()}"  # MLflow itself down: still said to be MLflow
    result = CliRunner().invoke(app, ["sync", "--db", db, "--mlflow-uri", down], env={"COLUMNS": "300"})
    assert result.exit_code == 1 and f"MLflow at {down} is failing" in result.output, result.output


def test_the_launchs_mirror_says_once_that_a_report_fails_and_holds_nothing_up(tmp_path: Path) -> None:
    db = unreportable(tmp_path)
    with Store(db) as store:
        heard: list[str] = []
        mirror = Mirror(store, Tracker(f"sqlite:///{tmp_path}/m.sqlite"), heard.append).start(["k0", "k1", "ok"])
        assert mirror.close(timeout=120) == 2  # k0, k1 tried, not mirrored (`ablate sync` later); ok mirrored
        assert mirror.down is None and len(heard) == 1, heard
        assert "writing the report of sweep 's'" in heard[0] and "MLflow is not at fault" in heard[0]
        assert store.unmirrored() == ["k0", "k1"]


def test_markdown_shows_each_value_as_its_type_shows_it() -> None:
    """`markdown` makes each distinct value's cell once per column: 1, 1.0 and True are equal keys of a dict, yet
    shown as 1, 1 and True; a NaN, None and a list as `-`, `-` and JSON; `|` escaped and a newline a space."""
    rows = Listing({"v": [1, 1.0, True, 1.23456, float("nan"), None, [1, 2], "a|b\nc", 1, True]})
    cells = [line.split(" | ")[0].removeprefix("| ").removesuffix(" |") for line in markdown(rows).splitlines()[2:]]
    assert cells == ["1", "1", "True", "1.235", "-", "-", "[1, 2]", "a\\|b c", "1", "True"]


def test_plan_markdown_is_the_table_of_its_rows(tmp_path: Path) -> None:
    """`ablate plan -f markdown`'s table (`plan_rows.write_markdown`, each trial's line filled into its grid cell's)
    is, byte for byte, `markdown` of every row: two sweeps with other axes (a row without a column shows `-`), a
    list-valued axis, costs, a `|` escaped, and an axis value holding the seed's mark, whose rows are made whole."""
    sweeps = {
        "a": {"base": {**TINY, "data": {"name": "digits", "path": "x", "remote": True}}, "seeds": 3,
              "grid": {"attention.kind": ["softmax", "csan"], "data.path": ["a|b", SEED]}},
        "b": {"base": TINY, "seeds": 2, "grid": {"train.lr": [0.1, 0.2], "model.depths": [[2], [3]]}},
    }  # fmt: skip
    f = write_sweeps(tmp_path / "e.yaml", sweeps)
    plans = [plan(f, "a"), plan(f, "b")]
    for costs in (None, variant_costs(plans)):
        out = io.StringIO()
        write_markdown(plans, costs, out, markdown_cell)
        assert out.getvalue() == markdown(Listing.of_records([r for p in plans for r in plan_rows.rows(p, costs)]))
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 + 12 + 8 and sum("a\\|b" in line for line in lines) == 6, lines[:4]
