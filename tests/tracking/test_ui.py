"""`ablate ui` as a real process on a real MLflow store: it serves the runs page of the sweep launched last,
which headless Chromium shows in MLflow's model-training view, and a stop signal sent to it alone ends the
MLflow server and its workers too."""

from __future__ import annotations

import html
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pandas as pd
import procfs
import pytest
from conftest import chromium, free_port
from gate import wait_for
from noise import noise

from ablate.config import TrialConfig
from ablate.planning.keys import Trial, trial_key, variant_key
from ablate.reporting import report
from ablate.store import Store
from ablate.tracking.tracker import Tracker

pytestmark = pytest.mark.timeout(300)
CLI_ENV = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
#: Headless Chromium that reaches nothing but the page; 20 s of virtual time for the page's scripts to render it.
HEADLESS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--virtual-time-budget=20000")  # fmt: skip


def serving_on(port: int) -> set[int]:
    """Live processes with `--port <port>` in their command line (`ablate ui`, the mlflow server, uvicorn)."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:
            continue
        if (b"--port", str(port).encode()) in set(itertools.pairwise(args)) and alive(int(entry.name)):
            found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """Whether `pid` is a process that is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_all(proc: subprocess.Popen, port: int) -> set[int]:
    """After a test: kill `ablate ui` if it still runs, and whatever still serves `port` (the server runs in a
    session of its own), so a failing test leaves nothing behind; returns the processes that were left."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    left = serving_on(port)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


def stores(tmp_path: Path) -> tuple[str, str, dict[str, str]]:
    """A results store and an MLflow store with two sweeps, 'newer' planned after 'older' (names in the other
    order, so the name does not decide): the URLs and each sweep's experiment id."""
    db, uri = f"sqlite:///{tmp_path / 'r.sqlite'}", f"sqlite:///{tmp_path / 'm.sqlite'}"
    tracker = Tracker(uri)
    with Store(db) as store:
        for sweep in ("zz-older", "aa-newer"):
            store.upsert_sweep(sweep)
            tracker.start_sweep(store, sweep)
        return db, uri, {s: store.sweep(s).mlflow_experiment_id for s in ("zz-older", "aa-newer")}


def serving(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def start_ui(tmp_path: Path) -> tuple[subprocess.Popen[str], int, dict[str, str]]:
    """`ablate ui` over two sweeps' stores on a free port, in a session of its own (a test signals it alone);
    with its port and the sweeps' experiment ids."""
    db, uri, experiments = stores(tmp_path)
    port = free_port()
    cmd = [sys.executable, "-m", "ablate.cli", "ui", "--db", db, "--mlflow-uri", uri, "--port", str(port)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=CLI_ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)  # fmt: skip
    return proc, port, experiments


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_ui_prints_the_last_sweeps_runs_page_and_a_stop_signal_leaves_no_process(tmp_path: Path, stop: int) -> None:
    proc, port, experiments = start_ui(tmp_path)
    try:
        wait_for(lambda: serving(port) or proc.poll() is not None, timeout=240)
        assert proc.poll() is None, proc.communicate()[0]
        exp = experiments["aa-newer"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ajax-api/2.0/mlflow/experiments/get?experiment_id={exp}",
                                    timeout=10) as r:  # fmt: skip
            assert json.load(r)["experiment"]["name"] == "aa-newer"  # the server serves this MLflow store
        under = procfs.descendants(proc.pid)
        assert serving_on(port) - {proc.pid} <= under and len(under) >= 2  # the mlflow server, its uvicorn worker
        assert procfs.listening(under) and not procfs.beyond_loopback(procfs.listening(under))  # no --host given
        os.kill(proc.pid, stop)  # to `ablate ui` alone, as a service manager or `kill` sends it
        out = proc.communicate(timeout=120)[0]
    finally:
        left = kill_all(proc, port)
    assert proc.returncode == 0, out
    assert f"http://127.0.0.1:{port}/#/experiments/{exp}/runs" in out
    assert noise(out) == [], out  # the server's uvicorn lines, its registry echo, Starlette's warnings
    assert not [pid for pid in under if alive(pid)] and not left, out


def test_the_page_ui_prints_opens_on_training_runs_in_headless_chromium(tmp_path: Path) -> None:
    """The page `ablate ui` prints, as Chromium renders it once its scripts ran: MLflow's model-training view of
    the sweep's experiment (runs and models in the sidebar), not its GenAI view (traces, prompts, judges), which
    MLflow 3.17 shows by default whatever the experiment's kind tag."""
    browser = chromium()
    proc, port, experiments = start_ui(tmp_path)
    try:
        assert proc.stdout is not None
        page = next(word for line in proc.stdout for word in line.split() if word.startswith("http://"))
        wait_for(lambda: serving(port) or proc.poll() is not None, timeout=240)
        assert proc.poll() is None, proc.communicate()[0]
        done = subprocess.run([browser, *HEADLESS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page],
                              capture_output=True, text=True, timeout=180)  # fmt: skip
    finally:
        kill_all(proc, port)
    exp = experiments["aa-newer"]
    tabs = set(re.findall(rf'href="#/experiments/{exp}/([a-z-]+)', done.stdout))
    assert done.returncode == 0 and {"runs", "models"} <= tabs, (tabs, done.stdout[-2000:], done.stderr[-2000:])
    assert not tabs & {"prompts", "judges", "chat-sessions", "evaluation-runs"}, tabs


#: Scripted test.top1 per kind and seed: 6 seeds, so the report gives each difference to softmax an interval.
SCORES = {"softmax": [71.25, 72.5, 70.0, 71.0, 73.0, 70.5], "csan": [80.75, 81.0, 79.5, 82.0, 80.25, 81.5]}


def compared(tmp_path: Path) -> tuple[str, str, list[str], pd.DataFrame]:
    """Stores with one sweep over attention.kind (softmax the baseline), 6 seeds, its trials done with `SCORES` and
    mirrored, the sweep ended: the URLs, the trial runs' names and the report's variant table."""
    db, uri = f"sqlite:///{tmp_path / 'r.sqlite'}", f"sqlite:///{tmp_path / 'm.sqlite'}"
    tracker, trials = Tracker(uri), []
    for kind, scores in SCORES.items():
        for seed in range(len(scores)):
            cfg = TrialConfig.model_validate({"attention": {"kind": kind}, "seed": seed})
            trials.append(Trial(trial_key(cfg), variant_key(cfg), cfg, {"attention.kind": kind, "seed": seed}))
    names = []
    with Store(db) as store:
        store.upsert_sweep("grid", metric="test.top1", spec={"axes": ["attention.kind", "seed"]},
                           baseline=trials[0].variant)  # fmt: skip
        store.add_trials("grid", trials)
        for t in trials:
            value = SCORES[t.config.attention.kind][t.config.seed]
            store.mark_running(t.key, host="h", device="cpu")
            store.finish(t.key, "done", result={"test": {"top1": value}})
            run = tracker.start_trial(store, "grid", t.key)
            tracker.end_trial(run, "done", result={"test": {"top1": value}})
            names.append(tracker.client.get_run(run).info.run_name)
        tracker.end_sweep(store, "grid")
        report("grid", store=store, out=tmp_path / "report", formats=("csv",))
    return db, uri, names, pd.read_csv(tmp_path / "report" / "grid" / "variants.csv", index_col="variant")


def test_ui_lands_on_each_variants_mean_and_interval_from_the_report(tmp_path: Path) -> None:
    """The page `ablate ui` prints, as headless Chromium renders it without a click: the sweep's view (`sweep_view`)
    in the chart view, showing one run per variant under its short name (the axis value), best first, and a table
    holding each variant's mean and the 95% interval of its difference to the baseline: the report's own numbers
    as MLflow prints them (two decimals). The trials' runs are not listed (MLflow's own landing shows one collapsed
    parent run and no value; before the variants' runs, one bar per trial)."""
    browser = chromium()
    db, uri, trial_names, table = compared(tmp_path)
    port = free_port()
    cmd = [sys.executable, "-m", "ablate.cli", "ui", "--db", db, "--mlflow-uri", uri, "--port", str(port)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=CLI_ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        page = next(word for line in proc.stdout for word in line.split() if word.startswith("http://"))
        wait_for(lambda: serving(port) or proc.poll() is not None, timeout=240)
        assert proc.poll() is None, proc.communicate()[0]
        # charts render once in the window and their data came: a desktop's window, a minute of the page's time
        flags = [f for f in HEADLESS if not f.startswith("--virtual-time-budget")]
        flags += ["--virtual-time-budget=60000", "--window-size=1600,1200"]
        done = subprocess.run([browser, *flags, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page],
                              capture_output=True, text=True, timeout=240)  # fmt: skip
    finally:
        kill_all(proc, port)
    words = [html.unescape(w) for w in re.findall(r">([^<>]+)<", done.stdout) if w.strip()]
    assert "Variants compared" in words and "Model Metrics" in words, (done.stderr[-2000:], words[-80:])
    names = {v: f"kind={k}" for v, k in table["axis.attention.kind"].items()}
    best_first = [names[v] for v in table.sort_values("mean", ascending=False).index]
    numbers = words[words.index("Model Metrics") + 1 :]  # the table of every number: a row per metric
    header = [w for w in words[words.index("Compare by") : words.index("Model Metrics")] if w in names.values()]
    assert header == best_first, header
    for column, metric in (("mean", "mean"), ("lo", "delta lo"), ("hi", "delta hi")):
        shown = numbers[numbers.index(metric) + 1 : numbers.index(metric) + 1 + len(header)]
        by_name = {names[v]: x for v, x in table[column].items()}
        assert shown == [f"{by_name[n]:.2f}" if by_name[n] == by_name[n] else "-" for n in header], (metric, shown)
    assert not set(trial_names) & set(words), "trial runs listed"


def test_ui_for_an_unknown_sweep_exits_2_and_stops_the_server_it_started(tmp_path: Path) -> None:
    db, uri, _ = stores(tmp_path)
    port = free_port()
    cmd = [sys.executable, "-m", "ablate.cli", "ui", "nope", "--db", db, "--mlflow-uri", uri, "--port", str(port)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=CLI_ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)  # fmt: skip
    try:
        out = proc.communicate(timeout=120)[0]
    finally:
        left = kill_all(proc, port)
    assert proc.returncode == 2, out
    assert "no sweep 'nope'" in out and "aa-newer, zz-older" in out
    assert not left, out


def test_ui_killed_with_sigkill_takes_its_server_down_too(tmp_path: Path) -> None:
    """SIGKILL reaches no handler of `ablate ui`: the server learns of its death from the kernel (the parent-death
    signal it asked for before it started) and stops with its worker."""
    _, uri, _ = stores(tmp_path)
    port = free_port()
    cmd = [sys.executable, "-m", "ablate.cli", "ui", "--mlflow-uri", uri, "--port", str(port), "--no-browser"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=CLI_ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)  # fmt: skip
    try:
        wait_for(lambda: serving(port) or proc.poll() is not None, timeout=240)
        assert proc.poll() is None, proc.communicate()[0]
        under = procfs.descendants(proc.pid)
        assert len(under) >= 2  # the mlflow server and its worker
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)  # (its output pipe stays open while a child holds it)
        wait_for(lambda: not [pid for pid in under if alive(pid)], timeout=120)
    finally:
        left = kill_all(proc, port)
    assert not left
