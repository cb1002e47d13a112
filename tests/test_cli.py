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
from typer.testing import CliRunner

from ablate.cli import app
from conftest import TINY, write_sweeps

pytestmark = pytest.mark.timeout(300)


def invoke(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_plan_json_rows_carry_key_axes_cost_and_config(tmp_path: Path) -> None:
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY, "grid": {"attention.kind": ["softmax", "csan"]}, "seeds": 2}})
    rows = json.loads(invoke("plan", str(f), "--format", "json"))
    assert len(rows) == 4
    assert {"key", "variant", "attention.kind", "seed", "params", "gflops", "config"} <= set(rows[0])
    csan = next(r for r in rows if r["attention.kind"] == "csan")
    assert csan["params"] > rows[0]["params"] and csan["config"]["attention"]["tau"] is True
    header = invoke("plan", str(f), "--format", "csv").splitlines()[0]
    assert header.startswith("sweep,key,variant,attention.kind,seed,params,gflops")


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
    status = invoke("status", "--db", db)
    assert "trials per state" in status and "s" in status
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
    cmd = [sys.executable, "-m", "ablate.cli", "ui", "--mlflow-uri", f"sqlite:///{tmp_path}/m.sqlite", "--port", str(port)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
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
