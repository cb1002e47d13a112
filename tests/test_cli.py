"""The CLI end to end on real components: plan, launch (dry run and real), status, runs, report, ui."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from conftest import TINY, write_sweeps
from typer.testing import CliRunner

from ablate.cli import app
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
        assert {k: v for k, v in row.items() if k != "sweep"} == {k: str(v) for k, v in counts.items()}
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
    only_beta = table(status("beta-sweep", "--db", db), "trials per state")
    assert [{k: v for k, v in r.items() if k != "sweep"} for r in only_beta] == [
        {k: str(v) for k, v in want["beta-sweep"].items()}
    ]


def test_status_names_the_sweep_of_each_row(tmp_path: Path) -> None:
    db, want = store_with_trials(tmp_path)
    rows = table(status("--db", db), "trials per state")
    assert [r.get("sweep") for r in rows] == list(want)


def test_plan_json_rows_carry_key_axes_cost_and_config(tmp_path: Path) -> None:
    f = write_sweeps(
        tmp_path / "e.yaml", {"s": {"base": TINY, "grid": {"attention.kind": ["softmax", "csan"]}, "seeds": 2}}
    )
    rows = json.loads(invoke("plan", str(f), "--format", "json"))
    assert len(rows) == 4
    assert {"key", "variant", "attention.kind", "seed", "params", "gflops", "gflops_no_attn", "config"} <= set(rows[0])
    assert 0 < rows[0]["gflops_no_attn"] < rows[0]["gflops"]
    csan = next(r for r in rows if r["attention.kind"] == "csan")
    assert csan["params"] > rows[0]["params"] and csan["config"]["attention"]["tau"] is True
    header = invoke("plan", str(f), "--format", "csv").splitlines()[0]
    assert header.startswith("sweep,key,variant,attention.kind,seed,params,gflops")


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


def test_launch_status_runs_report(ray_local, tmp_path: Path) -> None:
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY, "grid": {"attention.kind": ["softmax", "csan"]},
                                                 "baseline": {"attention.kind": "softmax"}}})  # fmt: skip
    db, ml = f"sqlite:///{tmp_path}/r.sqlite", f"sqlite:///{tmp_path}/m.sqlite"
    dry = invoke("launch", str(f), "--db", db, "--dry-run")
    assert "would run 2, skip 0" in dry and not (tmp_path / "r.sqlite").exists()
    out = invoke("launch", str(f), "--db", db, "--mlflow-uri", ml, "--storage", str(tmp_path / "ck"), "--plain")
    assert "done 2" in out
    assert "would run 0, skip 2" in invoke("launch", str(f), "--db", db, "--dry-run")
    assert "nothing to run" in invoke("launch", str(f), "--db", db, "--mlflow-uri", ml, "--plain")
    output = status("--db", db)
    (row,) = table(output, "trials per state")
    assert row.get("sweep", "s") == "s"
    assert {k: v for k, v in row.items() if k != "sweep"} == {**dict.fromkeys(STATES, "0"), "done": "2", "total": "2"}
    assert table(output, "running") is None and table(output, "failures") is None
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


def test_ui_serves_the_mlflow_store_on_loopback(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable,
        "-m",
        "ablate.cli",
        "ui",
        "--mlflow-uri",
        f"sqlite:///{tmp_path}/m.sqlite",
        "--port",
        str(port),
    ]
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "mlflow ui did not come up"
                time.sleep(1)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        out = proc.communicate(timeout=60)[0]
    assert f"http://127.0.0.1:{port}" in out


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
