"""A team's set-up on loopback, and what must hold of it afterwards: shared by the team test and the soak.

`Team` starts the cluster tutorial's commands (docs/tutorials/cluster.md, the bash block after its marker comment)
with only hosts, ports, database URLs, the bucket, the experiments file and the sweep replaced, and the loopback
options of `procs.loopback` added to `ray start`: an MLflow server on the PostgreSQL server's MLflow database with
its artifacts in the bucket, a Ray head and two worker nodes on loopback addresses, and any number of launchers.
tests/execution/test_team.py runs it through a scripted sequence of faults; bench/soak.py through a random
schedule (tests/chaos.py). The checks at the end (`mlflow_differences`, `checkpoint_differences`) return what is
wrong, so the test asserts none and the soak counts them.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Any

import fsspec
from conftest import ROOT, free_port, fresh_database, postgres_binary
from gate import wait_for
from procfs import descendants
from procs import NODES, Launcher, Postgres, alive_nodes, kill_tree, listening, loopback

from ablate.execution import journal
from ablate.store import Store, flatten
from ablate.training.checkpoint_storage import Storage

RAY, ABLATE, MLFLOW = (str(Path(sys.executable).with_name(name)) for name in ("ray", "ablate", "mlflow"))
MARKER = "<!-- tests/execution/test_team.py runs this block"
ROLES = ("mlflow server", "ray start --head", "ray start --address", "ablate launch")
MEASURED = ("epoch_s", "samples_per_s", "peak_mem_mb")
"""Epoch metrics that measure the machine, not the training: left out of the comparison with a quiet run."""
DEADLINE = 240.0
"""Seconds any one condition may take before the run fails (never a wait in itself)."""
CLUSTER_PAGE = ROOT / "docs" / "tutorials" / "cluster.md"
README = CLUSTER_PAGE.read_text()
"""The page whose cluster block the set-up runs (the README's until the docs site took it over)."""
DB, MLFLOW_DB = "USER:PASSWORD@DB_HOST:5432/ablate", "USER:PASSWORD@DB_HOST:5432/mlflow"
PLACEHOLDERS = (DB, MLFLOW_DB, "MLFLOW_HOST", "5000", "HEAD_IP", "6379", "BUCKET", "experiments.yaml", "csan-paper")
"""What the set-up replaces in the tutorial's block."""


def readme_commands(text: str = README) -> dict[str, list[str]]:
    """The tutorial's cluster commands by role (`ROLES`): the bash block after its marker comment, continuation
    lines joined, comments dropped."""
    assert MARKER in text, f"{CLUSTER_PAGE.name} lost the marker comment above its cluster commands"
    block = re.search(r"```bash\n(.*?)```", text[text.index(MARKER) :], re.S)
    assert block is not None, "no bash block after the README's cluster marker"
    out: dict[str, list[str]] = {}
    for line in block.group(1).replace("\\\n", " ").splitlines():
        argv = shlex.split(line, comments=True)
        if not argv:
            continue
        role = " ".join(argv[:2]) if argv[:2] != ["ray", "start"] else f"ray start {argv[2].split('=')[0]}"
        assert role in ROLES and role not in out, f"README cluster block: a command test_team.py does not run: {line}"
        out[role] = argv
    assert tuple(out) == ROLES, f"README cluster block: expected {ROLES} in this order, found {tuple(out)}"
    return out


def substitute(argv: list[str], values: Mapping[str, str]) -> list[str]:
    """`argv` with each placeholder (a key of `values`, anywhere in an argument) replaced in one pass, so a
    replacement is never replaced again; fails on a placeholder it does not know."""
    pattern = re.compile("|".join(re.escape(p) for p in sorted(values, key=len, reverse=True)))
    out = [pattern.sub(lambda m: values[m.group()], arg) for arg in argv]
    left = re.findall(r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b|\b(?:USER|PASSWORD|BUCKET)\b", " ".join(out))
    assert not left, f"README cluster block: placeholders test_team.py does not fill: {left}"
    return out


def option(argv: list[str], name: str) -> str:
    """The value of `--name VALUE` or `--name=VALUE` in `argv`."""
    for i, arg in enumerate(argv):
        if arg == name:
            return argv[i + 1]
        if arg.startswith(f"{name}="):
            return arg.split("=", 1)[1]
    raise AssertionError(f"{name} missing from {argv}")


class Service:
    """A server started, stopped and started again with the same command (its own process group)."""

    RESTART_AFTER = 5.0
    """Seconds from a start to the next `keep` may start it again (systemd's RestartSec)."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.argv, self.env, self.log = argv, env, log
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0
        self.held = threading.Lock()
        """Held by whoever stops the server on purpose (a fault): `keep` leaves it alone meanwhile."""

    def start(self) -> Service:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.argv, env=self.env, start_new_session=True, stdout=out,
                                         stderr=subprocess.STDOUT)  # fmt: skip
        self.started = time.monotonic()
        return self

    def keep(self) -> int | None:
        """Start the server again if it exited when nobody stopped it, as a supervisor (systemd's
        Restart=on-failure) would: an MLflow server whose database is down when it starts exits. Its exit code, if
        it was started again."""
        if not self.held.acquire(blocking=False):
            return None
        try:
            code = None if self.proc is None else self.proc.poll()
            if code is None or time.monotonic() - self.started < self.RESTART_AFTER:
                return None
            self.start()
            return code
        finally:
            self.held.release()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        if self.proc is not None:  # what is left of its group (an orphaned worker)
            with suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)


class Stuck(AssertionError):
    """A condition did not hold within `DEADLINE`: the message says which, with the timeline."""


class Timeline:
    """What happened when, in seconds from the start, printed as it goes and kept for failures."""

    def __init__(self, echo: bool = True) -> None:
        self.began, self.events, self.echo = time.monotonic(), list[str](), echo
        self.context: Callable[[], str] = str
        """What else a failure should show (the launchers' output, once there are launchers)."""

    def __call__(self, text: str) -> None:
        self.events.append(f"{time.monotonic() - self.began:7.1f} s  {text}")
        if self.echo:
            print(self.events[-1], flush=True)

    def __str__(self) -> str:
        return "\n".join(self.events)

    def until(self, what: Callable[[], Any], why: str, deadline: float = DEADLINE) -> Any:
        """Block until `what()` holds (a condition the caller reads); past `deadline`, raise `Stuck` saying what
        it waited for."""
        try:
            return wait_for(what, timeout=deadline)
        except TimeoutError:
            raise Stuck(f"waited {deadline:.0f} s for {why}\ntimeline:\n{self}\n{self.context()}") from None


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def journaled(scratch: Path, storage: str) -> list[Any]:
    """The records waiting in the journals of the launcher whose scratch root is `scratch`."""
    folder = scratch / Storage(storage).root.name / journal.FOLDER  # the root's name hashes the storage URL
    return [r for path in sorted(folder.glob("*.jsonl")) for r in journal.read(path)]


class Team:
    """The tutorial's set-up on loopback: PostgreSQL (the session's server, two fresh databases), an MLflow server,
    the bucket `bucket`, a Ray head and two workers (`up`), and the launchers `start` adds; everything it started
    is stopped through `cleanup`. Each node and launcher has a scratch folder of its own (a machine each)."""

    def __init__(self, work: Path, cwd: Path, experiments: Path, postgres: str, bucket: str, note: Timeline,
                 cleanup: ExitStack) -> None:  # fmt: skip
        self.readme, self.work, self.cwd, self.note = readme_commands(), work, cwd, note
        self.values = {
            DB: fresh_database(postgres).split("://", 1)[1],
            MLFLOW_DB: fresh_database(postgres).split("://", 1)[1],
            "MLFLOW_HOST": "127.0.0.1",
            "5000": str(free_port()),
            "HEAD_IP": NODES[0],
            "6379": str(free_port(NODES[0])),
            "BUCKET": bucket.removeprefix("s3://").split("/")[0],
            "experiments.yaml": str(experiments),
        }
        self.storage, self.url, self.uri = (option(self.command("x"), n) for n in ("--storage", "--db", "--mlflow-uri"))
        pg_ctl = postgres_binary("pg_ctl")
        assert pg_ctl is not None
        self.pg = Postgres.of(postgres, pg_ctl)
        self.base = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_ADDRESS": ""}
        self.dashboard = free_port()  # the default one may be another Ray's on this machine
        self.nodes: list[subprocess.Popen[bytes]] = []
        self.launchers: dict[str, Launcher] = {}
        self.mlflow = Service([MLFLOW, *substitute(self.readme["mlflow server"], self.values)[1:]],
                              {**self.base, "MLFLOW_WORKERS": "1", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
                              work / "mlflow.log")  # fmt: skip
        self.starts = 0
        cleanup.callback(lambda: self.pg.start() if self.pg.down else None)
        cleanup.callback(self.mlflow.stop, signal.SIGKILL)
        cleanup.callback(lambda: [kill_tree(node) for node in self.nodes if node.poll() is None])
        cleanup.callback(lambda: [launcher.kill() for launcher in self.launchers.values()])

    def command(self, sweep: str) -> list[str]:
        """The tutorial's `ablate launch` for `sweep`, filled in."""
        return substitute(self.readme["ablate launch"], {**self.values, "csan-paper": sweep})

    def up(self) -> None:
        """The MLflow server, the Ray head and two workers, each started and seen serving."""
        self.mlflow.start()
        self.start_node(0, f"--dashboard-port={self.dashboard}")
        self.note.until(lambda: listening(NODES[0], int(self.values["6379"])), "the Ray head")
        self.start_node(1)
        self.start_node(2)
        self.note.until(lambda: alive_nodes(self.dashboard) == len(NODES), "three Ray nodes")
        self.note.until(lambda: healthy(self.uri), "the MLflow server")
        self.note("up: PostgreSQL (a results and an MLflow database), S3, MLflow server, Ray head + 2 workers")

    def start_node(self, i: int, *extra: str) -> None:
        """Node `i` (0: the head) by the tutorial's `ray start`, in a session folder of its own each start."""
        role = "ray start --head" if i == 0 else "ray start --address"
        self.starts += 1
        folder = self.work / f"ray{i}" if self.starts <= len(NODES) else self.work / f"ray{i}.{self.starts}"
        argv = [RAY, *substitute(self.readme[role], self.values)[1:], *loopback(NODES[i], folder), *extra]
        env = {**self.base, "ABLATE_SCRATCH": str(self.work / f"node{i}")}
        with (self.work / f"ray{i}.log").open("ab") as out:
            proc = subprocess.Popen(argv, env=env, start_new_session=True, stdout=out, stderr=subprocess.STDOUT)
        if i < len(self.nodes):
            self.nodes[i] = proc
        else:
            self.nodes.append(proc)

    def start(self, sweep: str, name: str, prefix: tuple[str, ...] = (), extra: tuple[str, ...] = ()) -> Launcher:
        """A launcher of `sweep` by the tutorial's command (`ablate` run through `prefix`, a wrapper that runs
        the CLI, when given), with `extra` options, its scratch folder its sweep's."""
        argv = self.command(sweep)[1:]  # without `ablate`
        cmd = [*prefix, "--", *argv, *extra] if prefix else [ABLATE, *argv, *extra]
        env = {**self.base, "ABLATE_SCRATCH": str(self.work / f"launcher-{sweep}")}
        self.launchers[name] = Launcher(sweep, cmd, env, self.cwd, self.work / f"{name}.log")
        return self.launchers[name]

    def node_of(self, pid: int) -> int | None:
        """The node a process runs under."""
        return next((i for i, node in enumerate(self.nodes) if pid in descendants(node.pid)), None)

    def cli(self, *args: str) -> str:
        """`ablate ARGS` here; its output, failing on a non-zero exit."""
        run = subprocess.run([ABLATE, *args], cwd=self.cwd, env=self.base, capture_output=True, text=True,
                             timeout=600)  # fmt: skip
        assert run.returncode == 0, run.stdout + run.stderr
        return run.stdout


def checkpoint_differences(store: Store, storage: str, keys: list[str]) -> list[str]:
    """Where a trial's checkpoint in the bucket is not what it should be: its marker names an object whose size or
    SHA-256 does not match, or differs from the checkpoint the store records with the result."""
    fs, prefix = fsspec.core.url_to_fs(storage)
    recorded, out = store.checkpoints(keys), []
    for k in keys:
        marker = Storage(storage).published(k)
        if marker is None:
            out.append(f"{k[:10]}: no published checkpoint")
            continue
        try:
            data = fs.cat_file(f"{prefix}/{k}/{marker['object']}")
        except FileNotFoundError:
            out.append(f"{k[:10]}: its marker names {marker['object']}, which is not in the bucket")
            continue
        if len(data) != marker["size"] or hashlib.sha256(data).hexdigest() != marker["sha256"]:
            out.append(f"{k[:10]}: {marker['object']} does not match its marker's size and SHA-256")
        if (recorded.get(k) or {}).get("sha") != marker["sha256"]:
            out.append(f"{k[:10]}: the published checkpoint is not the one the store records with the result")
    return out


def mlflow_differences(store: Store, uri: str, sweeps: list[str], keys: list[str]) -> list[str]:
    """Where MLflow is not the store: one MLflow run per trial across the sweeps' experiments (a shared trial's run
    lives in one of them), with the store's run id, status, params and result, and per metric exactly the store's
    steps, each once; each sweep's parent run holds its summary."""
    from ablate.tracking.tracker import RUN_STATUS, Tracker, mlflow_name, params_of

    tracker, out = Tracker(uri), []
    if unmirrored := store.unmirrored(sweeps):
        out.append(f"unmirrored after sync: {unmirrored}")
    experiments = [tracker.client.get_experiment_by_name(s).experiment_id for s in sweeps]
    for s in sweeps:
        parent = tracker.client.get_run(store.sweep(s).mlflow_run_id)
        if not any(k.startswith(f"{parent.data.tags['report.metric']}/mean/") for k in parent.data.metrics):
            out.append(f"sweep {s}: its parent run has no summary")
    for key in keys:
        runs = tracker.client.search_runs(experiments, f"tags.trial_key = '{key}'")
        if len(runs) != 1:
            out.append(f"{key[:10]}: {len(runs)} MLflow runs")
            continue
        run, record = runs[0], store.trial(key)
        if run.info.run_id != record.mlflow_run_id or run.info.status != RUN_STATUS[record.state]:
            out.append(
                f"{key[:10]}: MLflow run {run.info.run_id} {run.info.status}, the store's {record.mlflow_run_id}"
            )
        if run.data.params != params_of(record.config, store.membership(run.data.tags["sweep"], key).axes):
            out.append(f"{key[:10]}: MLflow params differ from the store's")
        if not {mlflow_name(k): v for k, v in flatten(record.result).items()}.items() <= run.data.metrics.items():
            out.append(f"{key[:10]}: MLflow metrics differ from the store's result")
        rows = store.metric_rows(key)
        for name in {n for n, *_ in rows}:
            steps = sorted(m.step for m in tracker.client.get_metric_history(run.info.run_id, name))
            if steps != sorted(s for n, s, *_ in rows if n == name):
                out.append(f"{key[:10]}: MLflow steps of {name} {steps} are not the store's")
    return out


def quiet_differences(store: Store, keys: list[str], folder: Path) -> list[str]:
    """Where a trial's recorded result or epochs differ from the same trial trained again here, alone and
    uninterrupted, from its recorded config (torch's threads set from its config, as on a Ray worker)."""
    import torch

    from ablate.config import TrialConfig
    from ablate.training.loop import run_trial

    threads, out = torch.get_num_threads(), []
    try:
        for key, config in store.configs(keys).items():
            epochs: dict[Any, float] = {}
            report = lambda e, metrics, epochs=epochs: epochs.update({(n, e): v for n, v in metrics.items()})  # noqa: E731
            result = run_trial(TrialConfig.model_validate(config), report, folder / key)
            if flatten(store.trial(key).result) != result.metrics:
                out.append(f"{key[:10]}: result {flatten(store.trial(key).result)} != quiet {result.metrics}")
            recorded = {(n, step): v for n, step, v, _ in store.metric_rows(key) if n not in MEASURED}
            if recorded != {at: v for at, v in epochs.items() if at[0] not in MEASURED}:
                out.append(f"{key[:10]}: its epochs' metrics differ from a quiet run's")
    finally:
        torch.set_num_threads(threads)
    return out


def orphans(storage: str, keys: list[str]) -> list[str]:
    """Checkpoint objects in the bucket that no marker names (an upload cut short, an old object not removed)."""
    fs, prefix = fsspec.core.url_to_fs(storage)
    out = []
    for k in keys:
        marker = Storage(storage).published(k)
        named = marker["object"] if marker else None
        with suppress(FileNotFoundError):
            out += [f"{k[:10]}/{Path(p).name}" for p in fs.ls(f"{prefix}/{k}") if p.endswith(".pt")
                    and Path(p).name != named]  # fmt: skip
    return out
