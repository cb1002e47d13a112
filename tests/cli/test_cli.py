"""The CLI end to end on real components: plan, launch (dry run and real), status, runs, report, ui."""

from __future__ import annotations

import importlib.metadata
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import yaml
from conftest import TINY, write_sweeps
from noise import noise
from typer.testing import CliRunner

from ablate.cli import app
from ablate.planning.plan import plan
from ablate.store import STATES, Store

pytestmark = pytest.mark.timeout(300)


def invoke(*args: str, env: dict[str, str] | None = None) -> str:
    result = CliRunner().invoke(app, list(args), env=env)
    assert result.exit_code == 0, result.output
    return result.output


def status(*args: str) -> str:
    """`ablate status` on a console wide enough that rich neither wraps nor truncates a cell."""
    return invoke("status", *args, env={"COLUMNS": "250"})


def table(output: str, title: str) -> list[dict[str, str]] | None:
    """The rows of the rich table printed under `title` ({column: cell text}), or None if there is none.
    (The tables here are narrow enough that rich wraps no body cell; a wrapped header is joined.)"""
    lines = output.splitlines()
    if title not in lines:
        return None
    header: list[str] = []
    body: list[list[str]] = []
    for line in lines[lines.index(title) + 1 :]:
        cells = [c.strip() for c in line.strip()[1:-1].replace("┃", "│").split("│")]
        if line.startswith("┃"):
            header = [f"{a} {b}".strip() for a, b in zip(header, cells)] if header else cells
        elif line.startswith("│"):
            body.append(cells)
        elif line.startswith("└"):
            break
    return [dict(zip(header, r, strict=True)) for r in body]


def store_with_trials(tmp_path: Path) -> tuple[str, dict[str, dict[str, int]]]:
    """A store with two sweeps and trials in every state (one trial in both sweeps), and the counts
    `ablate status` should print per sweep."""
    db = f"sqlite:///{tmp_path}/r.sqlite"
    with Store(db) as store:
        trial = lambda k: {"key": k, "variant": "v", "config": {}, "axes": {}}  # noqa: E731
        store.add_trials("alpha", [trial(k) for k in ("p1", "p2", "r1", "d1", "f1", "v1", "i1", "shared")])
        store.add_trials("beta-sweep", [trial(k) for k in ("b1", "b2", "shared")])
        for key in ("r1", "d1", "f1", "v1", "i1", "shared", "b1"):
            store.mark_running(key, host="node-7")
        store.finish("d1", "done", result={"test": {"top1": 50.0}})
        store.finish("shared", "done", result={"test": {"top1": 60.0}})
        store.finish("f1", "failed", error="Traceback (most recent call last):\n  ...\nValueError: boom")
        store.finish("v1", "diverged", diverged_epoch=1, diverged_step=3)
        store.finish("b1", "failed", error="RuntimeError: out of memory")
        store.interrupt(["i1"])
    zero = dict.fromkeys(STATES, 0)
    want = {
        "alpha": {
            **zero,
            "pending": 2,
            "running": 1,
            "done": 2,
            "failed": 1,
            "diverged": 1,
            "interrupted": 1,
            "total": 8,
        },
        "beta-sweep": {**zero, "pending": 1, "done": 1, "failed": 1, "total": 3},
    }
    return db, want


def test_status_prints_the_counts_per_state_of_the_store(tmp_path: Path) -> None:
    db, want = store_with_trials(tmp_path)
    with Store(db) as store:
        assert store.status().to_dict(orient="index") == want  # the fixture is what the store says
    output = status("--db", db)
    rows = table(output, "trials per state")
    assert rows is not None and len(rows) == 2
    for row, counts in zip(rows, want.values()):  # one row per sweep, in name order
        assert {k: row[k] for k in counts} == {k: str(v) for k, v in counts.items()}
    running = table(output, "running")
    assert [(r["sweep"], r["key"], r["host"]) for r in running] == [("alpha", "r1", "node-7")]
    failures = table(output, "failures")
    assert sorted((r["sweep"], r["key"], r["state"]) for r in failures) == [
        ("alpha", "f1", "failed"),
        ("alpha", "v1", "diverged"),
        ("beta-sweep", "b1", "failed"),
    ]
    errors = {r["key"]: r["error"] for r in failures}
    assert errors["f1"] == "ValueError: boom" and errors["b1"] == "RuntimeError: out of memory"
    assert errors["v1"] == "diverged at epoch 1, step 3"  # where, as `show` says it
    assert "state: diverged at epoch 1, step 3  attempts" in invoke("show", "v1", "--db", db, "--mlflow-uri", "")
    only_beta = table(status("beta-sweep", "--db", db), "trials per state")
    assert [{k: r[k] for k in want["beta-sweep"]} for r in only_beta] == [
        {k: str(v) for k, v in want["beta-sweep"].items()}
    ]


def test_db_takes_a_sqlite_files_path_as_well_as_a_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--db results.sqlite` is the file, relative to the cwd (a URL parser alone rejects a path)."""
    db, _ = store_with_trials(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert status("--db", "r.sqlite") == status("--db", db)
    missing = CliRunner().invoke(app, ["status", "--db", "none.sqlite"])
    assert missing.exit_code == 2 and "no results database" in missing.output
    assert not (tmp_path / "none.sqlite").exists()


def test_status_names_the_sweep_of_each_row(tmp_path: Path) -> None:
    db, want = store_with_trials(tmp_path)
    rows = table(status("--db", db), "trials per state")
    assert [r.get("sweep") for r in rows] == list(want)


def test_plan_json_rows_carry_key_axes_cost_and_config(tmp_path: Path) -> None:
    f = write_sweeps(
        tmp_path / "e.yaml", {"s": {"base": TINY, "grid": {"attention.kind": ["softmax", "csan"]}, "seeds": 2}}
    )
    rows = json.loads(invoke("plan", str(f), "--format", "json"))["trials"]
    assert len(rows) == 4
    assert {"key", "variant", "attention.kind", "seed", "params", "gflops", "gflops_no_attn", "config"} <= set(rows[0])
    assert 0 < rows[0]["gflops_no_attn"] < rows[0]["gflops"]
    csan = next(r for r in rows if r["attention.kind"] == "csan")
    assert csan["params"] > rows[0]["params"] and csan["config"]["attention"]["tau"] is True
    header = invoke("plan", str(f), "--format", "csv").splitlines()[0]
    assert header.startswith("sweep,key,variant,attention.kind,seed,params,gflops")


def test_plan_markdown_has_a_row_per_trial_of_every_sweep_without_the_config(tmp_path: Path) -> None:
    """`plan -f markdown` (it raised TypeError once `markdown` took a listing and plan still gave it a frame):
    the columns of every sweep in order of first use, a sweep's cell of another's axis `-`."""
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY, "grid": {"attention.kind": ["softmax", "csan"]}},
                                           "t": {"base": TINY, "grid": {"train.lr": [0.1, 0.2]}}})  # fmt: skip
    trials = json.loads(invoke("plan", str(f), "--no-costs", "--format", "json"))["trials"]
    lines = invoke("plan", str(f), "--no-costs", "--format", "markdown").splitlines()
    assert lines[:2] == ["| sweep | key | variant | attention.kind | seed | train.lr |", "|---|---|---|---|---|---|"]
    assert lines[2:] == [f"| {r['sweep']} | {r['key']} | {r['variant']} | {r.get('attention.kind', '-')} | "
                         f"{r['seed']} | {r.get('train.lr', '-')} |" for r in trials]  # fmt: skip


def test_launch_runs_the_default_sweep_unless_told_otherwise(tmp_path: Path) -> None:
    """No sweep named: the file's default only (its `default:`, else its first), and the output says which;
    `--all` every sweep; named sweeps those (dry runs: nothing is trained or written)."""
    sweeps = {"a": {"base": TINY}, "b": {"base": TINY, "seeds": 3}}
    first = write_sweeps(tmp_path / "e.yaml", sweeps)
    db = f"sqlite:///{tmp_path}/r.sqlite"
    dry = invoke("launch", str(first), "--db", db, "--dry-run")
    assert "sweep a (the file's default" in dry and "would run 1, skip 0" in dry
    assert "would run 4, skip 0" in invoke("launch", str(first), "--all", "--db", db, "--dry-run")
    assert "would run 3, skip 0" in invoke("launch", str(first), "b", "--db", db, "--dry-run")
    declared = tmp_path / "d.yaml"
    declared.write_text(yaml.safe_dump({"default": "b", "sweeps": sweeps}))
    assert "would run 3, skip 0" in invoke("launch", str(declared), "--db", db, "--dry-run")
    assert not (tmp_path / "r.sqlite").exists()


HEAVY = ("torch", "timm", "ray", "mlflow")
"""What a command that needs none of them must not import: seconds of start-up."""


def fresh_process(*args: str, heavy: tuple[str, ...] = HEAVY) -> str:
    """`ablate ARGS` in a new process (as a user runs it, pre-launch check on); its output, then a last line
    listing which of `heavy` it imported."""
    report = f"import atexit, sys; atexit.register(lambda: print(sorted(m for m in {heavy!r} if m in sys.modules)))"
    run_cli = "import runpy; sys.argv = ['ablate', *sys.argv[1:]]; runpy.run_module('ablate.cli', run_name='__main__')"
    env = {**os.environ, "RAY_ADDRESS": "", "RAY_AUTH_MODE": "disabled"}
    done = subprocess.run([sys.executable, "-c", f"{report}; {run_cli}", *args], env=env, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_launch_status_runs_report(ray_local, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))  # the costs and the checks that passed
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY, "grid": {"attention.kind": ["softmax", "csan"]},
                                                 "baseline": {"attention.kind": "softmax"}}})  # fmt: skip
    db, ml = f"sqlite:///{tmp_path}/r.sqlite", f"sqlite:///{tmp_path}/m.sqlite"
    dry = invoke("launch", str(f), "--db", db, "--dry-run")
    assert "would run 2, skip 0" in dry and not (tmp_path / "r.sqlite").exists()
    out = invoke("launch", str(f), "--db", db, "--mlflow-uri", ml, "--storage", str(tmp_path / "ck"), "--plain")
    assert "done 2" in out
    # one seed per variant: no test can separate them, so the launch names them tied, with the sweep's metric
    assert "variants of this launch: tied: attention.kind=" in out and "(test.top1 " in out
    assert (tmp_path / "cache" / "checked.json").exists() and not (tmp_path / "ck" / "checked.json").exists()
    assert "would run 0, skip 2" in invoke("launch", str(f), "--db", db, "--dry-run")
    assert "nothing to run" in invoke("launch", str(f), "--db", db, "--mlflow-uri", ml, "--plain")
    idle = fresh_process(
        "launch",
        str(f),
        "--db",
        db,
        "--mlflow-uri",
        ml,
        "--storage",
        str(tmp_path / "ck"),
        heavy=(*HEAVY, "ablate.reporting"),
    )  # MLflow in step: no run to name
    assert "nothing to run" in idle and idle.splitlines()[-1] == "[]", idle  # the check skipped every done variant
    output = status("--db", db)
    (row,) = table(output, "trials per state")
    assert row.get("sweep", "s") == "s"
    assert {k: row[k] for k in (*STATES, "total")} == {**dict.fromkeys(STATES, "0"), "done": "2", "total": "2"}
    assert row["epochs left"] == "0" and row["ETA"] == "-"
    assert table(output, "running") is None and table(output, "failures") is None
    for view in (["status"], ["runs"], ["runs", "--format", "csv"], ["runs", "--where", "attention.kind=csan"]):
        # pandas was a third of their start-up; numpy, what importing the components (to fingerprint today's
        # code) brought in, where the disk cache of fingerprints answers
        shown = fresh_process(*view, "--db", db, heavy=(*HEAVY, "pandas", "numpy"))
        assert shown.splitlines()[-1] == "[]", view
    runs = json.loads(invoke("runs", "--db", db, "--where", "attention.kind=csan", "--format", "json"))
    assert len(runs) == 1 and runs[0]["state"] == "done" and runs[0]["test.top1"] >= 0
    bad = CliRunner().invoke(app, ["runs", "--db", db, "--where", "nokey"])
    assert bad.exit_code == 2
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        invoke("report", "s", "--db", db)
    finally:
        os.chdir(cwd)
    assert (tmp_path / "reports" / "s" / "index.html").exists()


@pytest.mark.parametrize("command", [["status"], ["runs"], ["report"]])
def test_reading_commands_without_a_database_exit_2_and_create_nothing(command: list[str], tmp_path: Path) -> None:
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(app, command)
    finally:
        os.chdir(cwd)
    assert result.exit_code == 2 and "no results database" in result.output
    assert list(tmp_path.iterdir()) == []


def test_unreachable_cluster_is_a_clear_error_and_writes_nothing(tmp_path: Path) -> None:
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY}})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nobody listens there
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(app, ["launch", str(f), "--address", f"127.0.0.1:{port}", "--no-mlflow"])
    finally:
        os.chdir(cwd)
    assert result.exit_code == 2 and "cannot connect to the Ray cluster" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.yaml"]


def test_help_shows_every_default() -> None:
    """Defaults written in a help text (`[default: ...]`) survive the help's markup, as typer's own do."""
    wide = {"COLUMNS": "300"}
    launch = invoke("launch", "--help", env=wide)
    for text in ("[default: sqlite:///db/ablate.sqlite]", "[default: sqlite:///db/mlflow.sqlite]",
                 "[default: live on a terminal]", "[default: db/checkpoints]", "[default: 2000]"):  # fmt: skip
        assert text in launch, text
    assert "[default: the sweep's]" in invoke("report", "--help", env=wide)


def test_every_help_text_reads_whole_in_help() -> None:
    """Every word of each command's and option's help text is in its `--help` (markdown mode would take
    `<out>/<sweep>/` for HTML tags and drop them: "Output folder: // per sweep")."""
    command = typer.main.get_command(app)
    assert isinstance(command, typer.core.TyperGroup)
    for name, sub in command.commands.items():
        shown = invoke(name, "--help", env={"COLUMNS": "300"})
        for what, text in [(name, sub.help), *((p.name, getattr(p, "help", None)) for p in sub.params)]:
            missing = [w for w in (text or "").replace("`", "").split() if w not in shown]
            assert not missing, (name, what, missing)


def test_version_and_the_completion_script() -> None:
    """`--version` prints the package's version; `--show-completion` prints a script that completes commands
    (run here as the shell would run it, through the installed `ablate` command)."""
    version = importlib.metadata.version("ablate")
    assert invoke("--version").strip() == f"ablate {version}"
    exe = str(Path(sys.executable).parent / "ablate")
    # typer finds the shell from the processes above it: under bash (`; exit $?` keeps bash from exec'ing ablate in
    # its place), as a user's shell runs it, whatever runs the tests (make's recipes run under sh, typer refuses it)
    shell = ["bash", "-c", f"{exe} --show-completion; exit $?"]
    script = subprocess.run(shell, capture_output=True, text=True, timeout=60)
    assert script.returncode == 0 and "_ABLATE_COMPLETE=complete_bash" in script.stdout
    env = {**os.environ, "_ABLATE_COMPLETE": "complete_bash", "COMP_WORDS": "ablate la", "COMP_CWORD": "1"}
    words = subprocess.run([exe], env=env, capture_output=True, text=True, timeout=60).stdout.split()
    assert words == ["launch"]


def test_overrides_set_every_trial_and_change_keys(tmp_path: Path) -> None:
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY, "grid": {"attention.kind": ["softmax", "csan"]}}})
    plain = json.loads(invoke("plan", str(f), "--no-costs", "-f", "json"))["trials"]
    rows = json.loads(invoke("plan", str(f), "--no-costs", "-f", "json", "-s", "train.epochs=3",
                             "-s", "model.depths=[1]", "--set", "train.lr=1e-3"))["trials"]  # fmt: skip
    assert [(r["config"]["train"]["epochs"], r["config"]["model"]["depths"], r["config"]["train"]["lr"]) for r in rows]\
        == [(3, [1], 0.001)] * 2  # fmt: skip
    assert not {r["key"] for r in rows} & {r["key"] for r in plain}
    same = json.loads(invoke("plan", str(f), "--no-costs", "-f", "json", "-s", "train.epochs=2"))["trials"]  # TINY's
    assert [r["key"] for r in same] == [r["key"] for r in plain]


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("train.epochs=abc", ["override 'train.epochs=abc'", "valid integer", "found 'abc'"]),
        ("train.epoch=3", ["override 'train.epoch=3'", "'epoch' is not a key of train", "expected one of"]),
        ("attention.kind=csan", ["override 'attention.kind=csan'", "varies attention.kind"]),
        ("model.depths=[2, 2]", ["override 'model.depths=[2, 2]'", "found [2, 2]"]),
        ("train.epochs", ["override 'train.epochs'", "expected PATH=VALUE"]),
        ("train.epochs=[3", ["override 'train.epochs=[3'", "not YAML"]),
    ],
)
def test_a_bad_override_exits_2_naming_it(override: str, said: list[str], tmp_path: Path) -> None:
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY, "grid": {"attention.kind": ["softmax", "csan"]}}})
    for command in ("plan", "check", "launch"):
        result = CliRunner().invoke(app, [command, str(f), "-s", override], env={"COLUMNS": "300"})
        assert result.exit_code == 2, result.output
        for text in said:
            assert text in result.output, (command, text, result.output)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.yaml"]


def test_an_override_of_a_when_axis_with_a_wrong_type_is_one_problem(tmp_path: Path) -> None:
    """`-s attention.tau=maybe` where a `when:` block varies attention.tau: one problem, the override's; its value
    never reaches the grid's cells, whose values would be refused at the file's line as if they were wrong."""
    sweep = {"base": TINY, "grid": {"attention.kind": ["softmax", "csan"]},
             "when": [{"when": {"attention.kind": "csan"}, "grid": {"attention.tau": [True, False]}}]}  # fmt: skip
    f = write_sweeps(tmp_path / "e.yaml", {"s": sweep})
    result = CliRunner().invoke(app, ["plan", str(f), "-s", "attention.tau=maybe"], env={"COLUMNS": "300"})
    assert result.exit_code == 2 and "1 problem(s)" in result.output, result.output
    assert "sweep s varies attention.tau in its grid" in result.output and "valid boolean" not in result.output


def test_forget_where_a_config_path_deletes_the_trials_of_an_earlier_launch(tmp_path: Path) -> None:
    """The issue's command: a sweep launched at 4 epochs, then 5; `forget th --where 'train.epochs==4'` deletes the
    4-epoch trials (no axis varies the epochs: the path is the configs'), the 5-epoch ones stay."""
    db = f"sqlite:///{tmp_path}/r.sqlite"
    with Store(db) as store:
        for epochs in (4, 5):
            base = {**TINY, "train": {**TINY["train"], "epochs": epochs}}
            p = plan(write_sweeps(tmp_path / f"{epochs}.yaml", {"th": {"base": base, "seeds": 2}}), "th")
            store.add_trials("th", p.trials, [t.key for t in p.trials])
    args = ["forget", "th", "--where", "train.epochs==4", "--yes", "--no-mlflow", "--storage", str(tmp_path / "ck")]
    result = CliRunner().invoke(app, [*args, "--db", db], env={"COLUMNS": "300"})
    assert result.exit_code == 0 and "deleted 2 trials" in result.output, result.output
    with Store(db) as store:
        assert {c["train"]["epochs"] for c in store.configs().values()} == {5} and store.outside_plan("th") == []


def test_overrides_reach_a_real_launch_process(tmp_path: Path) -> None:
    """Through a real `ablate` process: an override applies to the default sweep's dry run, a bad one exits 2."""
    sweeps = {"a": {"base": TINY, "grid": {"train.epochs": [1, 2]}}, "b": {"base": TINY}}
    f = write_sweeps(tmp_path / "e.yaml", sweeps)
    cmd = [sys.executable, "-m", "ablate.cli", "launch", str(f), "--dry-run", "--db", f"sqlite:///{tmp_path}/r.sqlite"]
    ok = subprocess.run([*cmd, "b", "-s", "train.epochs=1"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "would run 1, skip 0" in ok.stdout, ok.stdout + ok.stderr
    bad = subprocess.run([*cmd, "-s", "train.epochs=1"], capture_output=True, text=True, timeout=120)  # sweep a
    assert bad.returncode == 2 and "sweep a varies train.epochs" in bad.stderr, bad.stdout + bad.stderr


def test_a_large_launch_needs_yes_without_a_terminal(tmp_path: Path) -> None:
    """Over the threshold (2,000 trial-epochs by default) a launch without a terminal stops before anything is
    written unless --yes; with --yes it goes on (here to an unreachable cluster, the next thing it checks)."""
    f = write_sweeps(tmp_path / "e.yaml", {"small": {"base": TINY}, "big": {"base": TINY, "seeds": 1001}})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nobody listens there
    base = ["launch", str(f), "--no-mlflow", "--address", f"127.0.0.1:{port}", "--storage", str(tmp_path / "ck"),
            "--db", f"sqlite:///{tmp_path}/r.sqlite"]  # fmt: skip
    small = CliRunner().invoke(app, base)  # the default sweep: 2 trial-epochs
    assert small.exit_code == 2 and "cannot connect" in small.output, small.output
    for args in (["--all"], ["big"], ["small", "--ask-above", "1"]):
        result = CliRunner().invoke(app, [*base, *args])
        assert result.exit_code == 2 and "pass --yes to launch it without a terminal" in result.output, result.output
    # small's one trial is big's seed 0 (one key, trained once): what the launch would select, counted once
    assert "1,001 trials, 2,002 trial-epochs" in CliRunner().invoke(app, [*base, "--all"]).output
    sure = CliRunner().invoke(app, [*base, "--all", "--yes"])
    assert sure.exit_code == 2 and "cannot connect" in sure.output, sure.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.yaml"]


def store_across_sweeps(tmp_path: Path) -> str:
    """Two sweeps whose axes overlap with other types: `attention.steps` is an int axis of `syn` and an axis of
    `mix` where one trial lacks it (its column mixes 1 and None); booleans, text and results of two metrics."""
    db = f"sqlite:///{tmp_path}/r.sqlite"
    trial = lambda k, axes: {"key": k, "variant": k, "config": {"train": {"epochs": 4}}, "axes": axes}  # noqa: E731
    with Store(db) as store:
        store.upsert_sweep("syn", metric="test.auc")
        store.upsert_sweep("mix", metric="test.top1")
        store.add_trials("syn", [trial("s1", {"attention.steps": 1, "attention.kind": "syn"}),
                                 trial("s2", {"attention.steps": -1, "attention.kind": "syn"})])  # fmt: skip
        store.add_trials("mix", [trial("m1", {"attention.kind": "softmax", "attention.steps": None, "train.lr": 0.01}),
                                 trial("m2", {"attention.kind": "ista", "attention.steps": 1, "attention.signed": True,
                                              "train.lr": 0.001})])  # fmt: skip
        store.finish("s2", "done", result={"test": {"auc": 0.9}})
        store.finish("m1", "done", result={"test": {"top1": 50.0}})
        store.mark_running("s1", host="h")
        for epoch, at in enumerate((1000.0, 1010.0, 1020.0)):  # two epochs of 10 s measured
            store.log_metrics("s1", epoch, {"train.loss": 1.0}, wall_time=at)
    return db


def keys(*args: str) -> list[str]:
    return sorted(r["key"] for r in json.loads(invoke("runs", *args, "-f", "json")))


def test_show_says_when_the_trials_mlflow_run_is_not_in_the_given_tracking_store(tmp_path: Path) -> None:
    """The launch logged to another --mlflow-uri: `show` says which URI to give, not an MLflow traceback."""
    db = store_across_sweeps(tmp_path)
    with Store(db) as store:
        store.keep_mlflow_run("m1", "0123456789abcdef0123456789abcdef", None)
    elsewhere = f"sqlite:///{tmp_path / 'other-mlflow.sqlite'}"
    out = invoke("show", "m1", "--db", db, "--mlflow-uri", elsewhere)
    assert "MLflow run 0123456789abcdef0123456789abcdef: not in " + elsewhere in out.replace("\n", " "), out


TRAIN_ONE = """
import json, sys
from ablate.config import TrialConfig
from ablate.training.loop import run_trial
print(json.dumps(run_trial(TrialConfig.model_validate(json.loads(sys.argv[1]))).environment))
"""
"""Trains the config given as JSON with the launch's own loop, and prints the environment it recorded."""


def test_show_says_what_each_result_ran_with(tmp_path: Path) -> None:
    """A trial trained by the real loop in a process whose torch was told to use its plain kernels
    (`ATEN_CPU_CAPABILITY=default`: what a CPU without AVX runs, not this machine's own) with `resources.cpus: 2`
    records both, and `show` prints them under that result; the result it replaced, recorded before ablate kept
    them, says they are not recorded."""
    cfg = {**TINY, "train": {**TINY["train"], "epochs": 1}, "resources": {"cpus": 2}}
    trained = subprocess.run([sys.executable, "-c", TRAIN_ONE, json.dumps(cfg)], capture_output=True, text=True,
                             env={**os.environ, "ATEN_CPU_CAPABILITY": "default"}, timeout=300)  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    environment = json.loads(trained.stdout.splitlines()[-1])
    db = f"sqlite:///{tmp_path}/r.sqlite"
    with Store(db) as store:
        store.upsert_sweep("s", metric="test.top1")
        store.add_trials("s", [{"key": "k1", "variant": "v", "config": cfg, "axes": {}}])
        store.finish("k1", "done", result={"test": {"top1": 50.0}}, environment={"python": "3.11"})
        store.archive(["k1"], "stale")
        store.finish("k1", "done", result={"test": {"top1": 51.0}}, environment=environment)
    out = invoke("show", "k1", "--db", db, env={"COLUMNS": "250"})
    kept, latest = out.split("result 1")[1].split("result 2")
    assert "ran with: not recorded" in kept, out
    assert "with DEFAULT kernels on 2 threads" in latest, out
    assert f"torch {importlib.metadata.version('torch')}" in latest, out


def test_runs_where_compares_by_type_across_sweeps(tmp_path: Path) -> None:
    db = store_across_sweeps(tmp_path)
    assert keys("--db", db, "--where", "attention.steps=1") == ["m2", "s1"]
    assert keys("--db", db, "--where", "attention.steps!=1") == ["m1", "s2"]  # a missing value is not 1
    assert keys("--db", db, "--where", "attention.steps>0") == ["m2", "s1"]
    assert keys("--db", db, "--where", "attention.steps<=-1") == ["s2"]
    assert keys("--db", db, "--where", "train.lr<5e-3") == ["m2"]
    assert keys("--db", db, "--where", "attention.signed=true") == ["m2"]
    assert keys("--db", db, "--where", "attention.signed=1") == []  # a boolean is not the number 1
    assert keys("--db", db, "--where", "attention.kind in [SYN, ista]") == ["m2", "s1", "s2"]
    assert keys("--db", db, "--where", "test.top1>=50", "--where", "state=done") == ["m1"]
    assert keys("mix", "--db", db, "--where", "attention.steps=1") == ["m2"]
    for bad, said in (("attention.steps<abc", "< compares numbers, found 'abc'"),
                      ("colour=red", "no column or config path 'colour'"),
                      ("attention.steps", "expected PATH=VALUE")):  # fmt: skip
        result = CliRunner().invoke(app, ["runs", "--db", db, "--where", bad])
        assert result.exit_code == 2 and said in result.output, result.output


def test_runs_shows_axes_and_each_sweeps_metric_unless_told(tmp_path: Path) -> None:
    db = store_across_sweeps(tmp_path)
    rows = json.loads(invoke("runs", "--db", db, "-f", "json"))
    assert list(rows[0]) == ["sweep", "key", "state", "axis.attention.kind", "axis.attention.steps",
                             "axis.train.lr", "axis.attention.signed", "test.top1", "test.auc"]  # fmt: skip
    assert list(json.loads(invoke("runs", "syn", "--db", db, "-f", "json"))[0]) == [
        "sweep", "key", "state", "axis.attention.steps", "axis.attention.kind", "test.auc"]  # fmt: skip
    every = json.loads(invoke("runs", "--db", db, "-f", "json", "--all-columns"))[0]
    assert {"attempts", "host", "started_at", "params", "stale"} <= set(every)
    chosen = invoke("runs", "--db", db, "-f", "csv", "--columns", "key,attention.kind,test.top1")
    assert chosen.splitlines()[:2] == ["key,axis.attention.kind,test.top1", "m1,softmax,50.0"]
    markdown = invoke("runs", "--db", db, "-f", "markdown", "-c", "key,attention.signed,test.top1").splitlines()
    assert markdown[:4] == ["| key | axis.attention.signed | test.top1 |", "|---|---|---|", "| m1 | - | 50 |",
                            "| m2 | True | - |"]  # fmt: skip
    bad = CliRunner().invoke(app, ["runs", "--db", db, "--columns", "key,colour"])
    assert bad.exit_code == 2 and "--columns: no column or config path 'colour'" in bad.output


def test_status_gives_each_sweep_its_epochs_left_and_eta(tmp_path: Path) -> None:
    """syn: s1 runs with 3 of its 4 epochs recorded 10 s apart, s3 runs with none yet, s2 is done: 5 epochs
    left at 10 s, shared by two running trials: 25 s. mix: nothing runs and nothing is measured."""
    db = store_across_sweeps(tmp_path)
    with Store(db) as store:
        store.add_trials("syn", [{"key": "s3", "variant": "s3", "config": {"train": {"epochs": 4}}, "axes": {}}])
        store.mark_running("s3", host="h")
    rows = {r["sweep"]: r for r in table(status("--db", db), "trials per state")}
    assert (rows["syn"]["epochs left"], rows["syn"]["s/epoch"], rows["syn"]["ETA"]) == ("5", "10", "25s")
    assert (rows["mix"]["epochs left"], rows["mix"]["s/epoch"], rows["mix"]["ETA"]) == ("4", "-", "-")


def test_plan_counts_each_variants_cost_once_and_prints_each_trials_own_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2 mechanisms x 2 learning rates x 3 seeds: two models counted, not four or twelve; every row has its
    variant's figures and its trial's config at its own seed (as `Trial.config` dumps it), in json and csv
    alike; the table shows `--limit` rows."""
    import csv
    import io

    from ablate.api import plan_rows
    from ablate.planning.plan import plan
    from ablate.probe.check import cost

    counted: list[str] = []

    def counting(cfg, code=None):  # the real count, its calls noted
        counted.append(cfg.attention.kind)
        return cost(cfg, code)

    monkeypatch.setattr(plan_rows, "cost", counting)
    f = write_sweeps(
        tmp_path / "e.yaml",
        {"s": {"base": TINY, "grid": {"attention.kind": ["softmax", "csan"], "train.lr": [0.1, 0.2]}, "seeds": 3}},
    )
    trials = plan(f, "s").trials
    configs = [t.config.model_dump(mode="json") for t in trials]
    rows = json.loads(invoke("plan", str(f), "--format", "json"))["trials"]
    assert counted == ["softmax", "csan"]
    assert [r["config"] for r in rows] == configs and [c["seed"] for c in configs] == [0, 1, 2] * 4
    for row, t in zip(rows, trials, strict=True):
        c = cost(t.config)
        assert (row["key"], row["params"], row["gflops"]) == (t.key, c.params, round(c.gflops / 2, 6))
    lines = list(csv.DictReader(io.StringIO(invoke("plan", str(f), "--format", "csv"))))
    assert [json.loads(r["config"]) for r in lines] == configs
    assert [{k: v for k, v in r.items() if k != "config"} for r in lines] == [
        {k: str(v) for k, v in r.items() if k != "config"} for r in rows
    ]
    shown = invoke("plan", str(f), "--limit", "2")
    assert "... 10 more rows" in shown and shown.count(trials[2].key[:10]) == 0 and trials[1].key[:10] in shown


def test_show_says_the_git_state_in_words(tmp_path: Path) -> None:
    """A launch outside a git checkout (the tutorial's workflow) records no commit: `show` says so in words."""
    db = store_across_sweeps(tmp_path)
    with Store(db) as store:
        store.finish(
            "m1", "done", result={"test": {"top1": 50.0}}, code={"digest": "d1", "git": {"sha": None, "dirty": None}}
        )
        store.finish(
            "m2", "done", result={"test": {"top1": 40.0}}, code={"digest": "d2", "git": {"sha": "ab12", "dirty": True}}
        )
    outside = invoke("show", "m1", "--db", db, "--mlflow-uri", f"sqlite:///{tmp_path / 'm.sqlite'}")
    assert "no git commit (the experiments file was not in a git checkout)" in outside.replace("\n", " "), outside
    assert "None" not in outside, outside
    inside = invoke("show", "m2", "--db", db, "--mlflow-uri", f"sqlite:///{tmp_path / 'm.sqlite'}")
    assert "git commit ab12 (with uncommitted changes)" in inside.replace("\n", " "), inside


def test_a_launch_prints_no_librarys_banner_and_what_it_and_its_report_create_is_for_their_owner_alone(
    tmp_path: Path,
) -> None:
    """A real `ablate launch` (embedded Ray left to choose its token authentication, a new MLflow store) prints
    ablate's lines only: no Ray banner, no MLflow INFO line. Started with ABLATE_UMASK unset and a permissive mask
    (022), every file and folder that it (results, MLflow store, checkpoints, which the embedded Ray's workers write
    with the mask they inherit, the check's cache) and the report create is closed to the group and others. One
    launch serves both: a CLI process and its Ray are the dear part."""
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": {**TINY, "train": {**TINY["train"], "epochs": 1}},
                                                 "grid": {"attention.kind": ["softmax"]}}})  # fmt: skip
    key = plan(f, "s").trials[0].key
    drop = ("RAY_AUTH_MODE", "RAY_ADDRESS", "MLFLOW_LOGGING_LEVEL", "ABLATE_UMASK")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["ABLATE_CACHE"] = str(tmp_path / "cache")
    db = f"sqlite:///{tmp_path}/r.sqlite"
    args = ["launch", str(f), "--db", db, "--mlflow-uri", f"sqlite:///{tmp_path}/m.sqlite",
            "--storage", str(tmp_path / "ck"), "--plain", "--yes"]  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "ablate.cli", *args], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL, umask=0o022)  # fmt: skip
    assert done.returncode == 0 and "done 1" in done.stdout, done.stdout + done.stderr
    assert noise(done.stdout + done.stderr) == [], done.stderr
    report = subprocess.run([sys.executable, "-m", "ablate.cli", "report", "s", "--db", db, "--out",
                             str(tmp_path / "reports")], env=env, cwd=tmp_path, capture_output=True, text=True,
                            timeout=300, stdin=subprocess.DEVNULL, umask=0o022)  # fmt: skip
    assert report.returncode == 0, report.stdout + report.stderr
    created = {str(p.relative_to(tmp_path)): p.stat().st_mode for p in tmp_path.rglob("*") if p != f}
    expected = {"r.sqlite", "m.sqlite", f"ck/{key}/checkpoint.pt", "reports/s/report.md", "reports/index.html"}
    assert expected <= set(created)
    assert {name: oct(mode & 0o077) for name, mode in created.items() if mode & 0o077} == {}


def test_check_on_80_columns_folds_variant_labels_instead_of_cutting_them(tmp_path: Path, monkeypatch) -> None:
    """`ablate check` on an 80-column terminal: each variant's label is whole, folded onto more lines, never cut
    to `attention.kind=so…`."""
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    f = write_sweeps(tmp_path / "e.yaml", {"th": {"base": TINY, "grid": {"attention.kind": ["softmax", "csan"]}}})
    said = fresh_process("check", str(f))
    column = "".join(line.split("│")[2].strip() for line in said.splitlines() if line.count("│") > 3)
    assert "…" not in said and column == "attention.kind=softmaxattention.kind=csan", said
