"""A sweep as a Slurm job (issue 43), against a real single-host Slurm (tests/slurm.py: munged, slurmctld and slurmd
in a temporary folder, one 2-CPU node on 127.0.0.1), and the batch script `ablate slurm` writes, checked offline.

The jobs run the Slurm tutorial's commands (docs/tutorials/slurm.md, the bash block after its marker comment) with
only the shared folder, the experiments file, the sweep and the node shape replaced. Where a fault must land while
trials are provably mid-run, the job's `ablate` is tests/gate.py's (a shim first on the PATH the job inherits from
`sbatch`): trials stop at epoch 1, their checkpoint written, until the test opens the gate. Every wait is on a
condition the test reads (gate files, the store, `scontrol show job`); deadlines only fail the test.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, TINY, free_port, needs, write_sweeps
from gate import Gate, wait_for
from netns import Network
from procs import leftovers
from slurm import Slurm
from typer.testing import CliRunner

from ablate.cli import app
from ablate.execution.slurm import (
    HEAD_TRIES,
    JOBS,
    PORT_SLOTS,
    RAY_SOCKET,
    STATE_ENV,
    TEMP_MAX,
    SlurmJob,
    Submitted,
    accounted,
    jobs_file,
    script,
)
from ablate.store import Store
from ablate.training.checkpoint_storage import Storage

PAGE = ROOT / "docs" / "tutorials" / "slurm.md"
MARKER = "<!-- tests/execution/test_slurm.py runs this block"
SUBMIT = "<!-- tests/execution/test_slurm.py runs this block too"
SERVER = "<!-- tests/execution/test_slurm.py runs this block against three Slurm nodes"
SHARED, SWEEP = "/shared/ablate", "csan-paper"
SHAPE = ("--nodes", "--cpus-per-node", "--gpus-per-node")
"""The options whose values the test replaces: this machine's node."""
WORKERS = ROOT / "workers" / "slurm.sbatch"
ENDED = ("COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED")
DEADLINE = 180.0
"""Seconds any one condition may take before the test fails (never a wait in itself)."""
LONGER = 2 * DEADLINE
"""What a condition of several steps may take (a requeue after a lost node; the requeued job's run): 2 to 3 minutes
each at a load of 20 on 2 cores."""
SLOW = pytest.mark.timeout(420)
"""A test of one or two jobs, each starting a Ray and a launch: 26 to 57 s a test on 2 nearly idle cores (the file in
3 min), 2 to 4.5 min each at a load average of 20 (the file in 12 min)."""


def page_block(marker: str) -> list[list[str]]:
    """The commands of the tutorial's bash block after `marker` (continuation lines joined, comments dropped)."""
    text = PAGE.read_text()
    assert marker in text, f"{PAGE.name} lost the marker comment above its commands: {marker}"
    block = re.search(r"```bash\n(.*?)```", text[text.index(marker) :], re.S)
    assert block is not None
    argv = [shlex.split(line, comments=True) for line in block.group(1).replace("\\\n", " ").splitlines()]
    return [a for a in argv if a]


def page_commands() -> list[list[str]]:
    """The tutorial's first block: `ablate slurm ...` then `sbatch ...`."""
    argv = page_block(MARKER)
    assert [a[:2] for a in argv] == [["ablate", "slurm"], ["sbatch", argv[0][argv[0].index("-o") + 1]]], argv
    return argv


def fill(argv: list[str], experiments: Path, folder: Path, cpus: int, nodes: int = 1) -> list[str]:
    """`argv` for this machine: the shared folder, the file and the sweep replaced, `nodes` nodes of `cpus` CPUs."""
    shape = dict(zip(SHAPE, (str(nodes), str(cpus), "0"), strict=True))
    out = [shape.get(prev, a) for prev, a in zip(["", *argv], argv, strict=False)]
    out = [a.replace(SHARED, str(folder)).replace(SWEEP, "tiny") for a in out]
    return [str(experiments) if a == "experiments.yaml" else a for a in out]


# ------------------------------------------------------------------------------------------ offline
def test_the_page_block_and_the_shipped_script_are_what_the_generator_writes(tmp_path: Path) -> None:
    """The block names every placeholder the test fills; `ablate slurm` with the defaults writes
    workers/slurm.sbatch; the script passes SIGTERM on and stops Ray; a trial that fits no node is refused."""
    make, _ = page_commands()
    words = " ".join(make)
    assert all(p in words for p in (SHARED, SWEEP, "experiments.yaml", *SHAPE)), make
    shipped = script(SlurmJob("experiments.yaml", ("cpu",)))
    assert WORKERS.read_text() == shipped, (
        "workers/slurm.sbatch: regenerate it with `ablate slurm experiments.yaml cpu`"
    )
    for line in ("#SBATCH --signal=B:TERM@300", "#SBATCH --requeue", "trap 'stopping=1; kill -TERM $driver"):
        assert line in shipped
    assert "ablate launch experiments.yaml cpu --plain --yes \\\n    --storage db/checkpoints \\\n" in shipped
    many = write_sweeps(tmp_path / "e.yaml", {"big": {"base": {**TINY, "resources": {"cpus": 4, "gpus": 1}}}})
    refused = CliRunner().invoke(app, ["slurm", str(many), "--cpus-per-node", "2"])
    assert refused.exit_code == 2 and "asks for 4 CPUs" in refused.output
    refused = CliRunner().invoke(app, ["slurm", str(many), "--cpus-per-node", "4"])
    assert refused.exit_code == 2 and "--gpus-per-node is 0" in refused.output
    gpus = CliRunner().invoke(app, ["slurm", str(many), "--cpus-per-node", "4", "--gpus-per-node", "2"])
    assert "#SBATCH --gpus-per-node=2\n" in gpus.output, gpus.output
    late = CliRunner().invoke(app, ["slurm", str(many), "--cpus-per-node", "4", "--gpus-per-node", "1", "--time", "2d"])
    assert late.exit_code == 2 and "Slurm takes minutes" in late.output


def chosen_folder(tmpdir: str | None, job: str = "4242") -> tuple[str, str]:
    """Where the script puts Ray's folder, and what it prints of it: its own lines, from `temp=` to the line that
    names the folder, run by bash alone in a job's environment (`SLURM_JOB_ID`, and `TMPDIR` unless None; UTF-8,
    where bash counts a string's letters, not its bytes)."""
    text = script(SlurmJob("experiments.yaml", ("cpu",)))
    block = text[text.index("temp=${TMPDIR") : text.index("\n", text.index("echo \"Ray's folder ("))]
    env = {"PATH": os.environ["PATH"], "LC_ALL": "C.UTF-8", "SLURM_JOB_ID": job,
           **({"TMPDIR": tmpdir} if tmpdir is not None else {})}  # fmt: skip
    run = subprocess.run(["bash", "-c", f'set -uo pipefail\n{block}\necho "$temp"'], env=env, capture_output=True,
                         text=True, check=True)  # fmt: skip
    *said, folder = run.stdout.splitlines()
    return folder, "\n".join(said)


def test_rays_folder_is_the_jobs_tmpdir_unless_its_sockets_would_not_fit() -> None:
    """The job's $TMPDIR (node-local on many clusters), else /tmp; a folder over TEMP_MAX bytes (bytes, not letters)
    would make Ray's socket paths longer than Linux takes, so it is /tmp's, and the job's output says why. That Ray's
    sockets fit at TEMP_MAX: the real job of `test_a_submitted_sweep_finishes_into_the_store_and_mlflow`."""
    named = "Ray's folder (its logs: session_latest/logs): "
    assert chosen_folder(None) == ("/tmp/ray-4242", named + "/tmp/ray-4242")
    assert chosen_folder("/local/4242") == ("/local/4242/ray-4242", named + "/local/4242/ray-4242")
    edge = "/" + "x" * (TEMP_MAX - len("//ray-4242"))  # Ray's folder: TEMP_MAX bytes
    assert chosen_folder(edge)[0] == f"{edge}/ray-4242" and len(f"{edge}/ray-4242") == TEMP_MAX
    for over in (edge + "x", edge[:-1] + "é"):  # a byte more; as many letters, one of two bytes
        folder, said = chosen_folder(over)
        assert folder == "/tmp/ray-4242", (over, said)
        assert said.splitlines() == [f"Ray's folder is not {over}/ray-4242: over {TEMP_MAX} bytes, too long for "
                                     "the Unix sockets Ray makes in it", named + "/tmp/ray-4242"]  # fmt: skip


def test_ray_socket_is_as_long_as_the_longest_socket_this_ray_makes() -> None:
    """`RAY_SOCKET`, what TEMP_MAX leaves room for, against this Ray's sockets: the object store's and the raylet's
    (ray._private.node) and one per dashboard module (ray.dashboard.subprocesses, as the dashboard lists them). The
    session folder's part of it: the real job of `test_a_submitted_sweep_finishes_into_the_store_and_mlflow`."""
    from ray.dashboard.subprocesses.module import SubprocessModule
    from ray.dashboard.utils import get_all_modules

    names = ["plasma_store", "raylet", *(f"dash_{m.__name__}" for m in get_all_modules(SubprocessModule))]
    assert len(names) > 2 and max(map(len, names)) == len(RAY_SOCKET.rsplit("/", 1)[1]), names


def test_a_server_stores_jobs_are_found_from_any_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PostgreSQL store's jobs file is the user's (the state folder), one per server and database whatever the
    folder `submit` or `status` runs in and whatever password the URL carries; a SQLite store's is beside its file."""
    monkeypatch.setenv(STATE_ENV, str(tmp_path / "state"))
    url = "postgresql+psycopg://me:secret@db.example:5432/ablate"
    found = []
    for folder in ("login", "elsewhere"):
        (tmp_path / folder).mkdir()
        monkeypatch.chdir(tmp_path / folder)
        found.append(jobs_file(url))
    assert found[0] == found[1] == jobs_file("postgresql+psycopg://me@db.example:5432/ablate")
    assert found[0].parent == tmp_path / "state" / "ablate" / "slurm-jobs" and "secret" not in str(found[0])
    assert jobs_file("postgresql+psycopg://me:secret@db.example:5432/other") != found[0]
    assert jobs_file(f"sqlite:///{tmp_path}/db/ablate.sqlite") == tmp_path / "db" / JOBS


def test_a_slurm_whose_start_fails_part_of_the_way_leaves_no_daemon(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests' Slurm (tests/slurm.py `running`, the fixtures' way to start one) whose start raises after munged and
    slurmctld are up (here: no slurmd program) stops both by pid before the error reaches the test."""
    import slurm

    needs(slurm.available() and os.geteuid() == 0, "Slurm's programs and root")
    started: list[subprocess.Popen[bytes]] = []
    spawn = Slurm._spawn

    def spawned(self: Slurm, argv: list[str | None]) -> subprocess.Popen[bytes]:
        started.append(spawn(self, argv))
        return started[-1]

    monkeypatch.setattr(Slurm, "_spawn", spawned)
    monkeypatch.setattr(slurm, "program", lambda name: "/nonexistent/slurmd" if name == "slurmd" else shutil.which(
        name, path=f"{os.environ['PATH']}:/usr/sbin"))  # fmt: skip
    with pytest.raises(FileNotFoundError, match="slurmd"), slurm.running((free_port(), free_port())):
        pytest.fail("a Slurm without slurmd started")
    try:
        assert [Path(p.args[0]).name for p in started] == ["munged", "slurmctld"]
        assert [p.poll() is not None for p in started] == [True, True], "a daemon outlived the failed start"
    finally:
        for p in started:  # what a broken `running` left
            if p.poll() is None:
                p.kill()
                p.wait()


# ------------------------------------------------------------------------------------------ against Slurm
class Sweep:
    """A tiny sweep in a folder of its own (the page's /shared/ablate), submitted by the page's commands; its jobs'
    $TMPDIR is `tmpdir` (None: unset, so /tmp, whatever the test's own environment says)."""

    def __init__(
        self,
        slurm: Slurm,
        folder: Path,
        seeds: int,
        cpus: int,
        gated: bool,
        *extra: str,
        tmpdir: Path | None = None,
        nodes: int = 1,
        db: str | None = None,
    ) -> None:
        self.slurm, self.folder, self.tmp = slurm, folder, tmpdir or Path("/tmp")
        self.cpus, self.nodes = cpus, nodes
        experiments = write_sweeps(folder / "experiments.yaml", {"tiny": {"base": TINY, "seeds": seeds}})
        make, self.submit_argv = (fill(a, experiments, folder, cpus, nodes) for a in page_commands())
        here = Path.cwd()
        os.chdir(folder)  # where the page's reader runs it: `-o` and the job's relative paths are in the folder
        try:
            made = CliRunner().invoke(app, [*make[1:], *extra])
        finally:
            os.chdir(here)
        assert made.exit_code == 0, made.output
        self.env = {**slurm.env, "RAY_ADDRESS": "", "RAY_AUTH_MODE": "disabled"}
        self.env.pop("TMPDIR", None)
        if tmpdir is not None:
            self.env["TMPDIR"] = str(tmpdir)
        self.env["PATH"] = f"{Path(sys.executable).parent}:{self.env['PATH']}"
        self.env[STATE_ENV] = str(folder / "state")  # a server's store's jobs file: here, not in the user's home
        self.gate = Gate(folder / "gate", epoch=1)
        if gated:  # the job's `ablate` runs the CLI with its trials held at epoch 1
            shim = folder / "bin" / "ablate"
            shim.parent.mkdir()
            shim.write_text(
                f'#!/bin/sh\nexec {sys.executable} {ROOT / "tests" / "gate.py"} {self.gate.folder} 1 -- "$@"\n'
            )
            shim.chmod(0o755)
            self.env["PATH"] = f"{shim.parent}:{self.env['PATH']}"
        self.db = db or f"sqlite:///{folder}/ablate.sqlite"
        """The store's URL: the folder's SQLite file (the page's), or `db`."""
        self.store = Store(self.db)
        self.jobs: list[str] = []

    def __enter__(self) -> Sweep:
        return self

    def __exit__(self, *failed: object) -> None:
        """Its jobs cancelled (whatever state the test left them in), its store closed, its Rays' leftovers gone."""
        for job in self.jobs:
            self.slurm.run("scancel", job)
        self.close()

    def cli(self, *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """The real `ablate` command in the folder (or `cwd`) with the jobs' environment: what a job submitted from
        it runs (the gate's shim, where gated) is on its PATH."""
        ablate = str(Path(sys.executable).parent / "ablate")
        return subprocess.run([ablate, *argv], cwd=cwd or self.folder, env={**self.env, "COLUMNS": "200"},
                              capture_output=True, text=True, timeout=120)  # fmt: skip

    def submitted(self, argv: list[str], *sbatch: str) -> tuple[str, str]:
        """`ablate slurm submit` (`argv`, a page's line, `sbatch` options added at its end) run: the job's id, and what
        was said on stderr."""
        done = self.cli(*argv[1:], *sbatch)
        assert done.returncode == 0 and re.fullmatch(r"\d+\n", done.stdout), done.stdout + done.stderr
        self.jobs.append(done.stdout.strip())
        return self.jobs[-1], done.stderr

    def filled(self, argv: list[str], *extra: str) -> list[str]:
        """A page's command line for this sweep (its folder, file, node shape and store); `extra` inserted before its
        `--` (the sbatch options), or at its end."""
        out = fill(argv, self.folder / "experiments.yaml", self.folder, self.cpus, self.nodes)
        servers = {"--db": self.db, "--mlflow-uri": f"sqlite:///{self.folder}/mlflow.sqlite"}  # the page's, or ours
        out = [servers.get(prev, a) for prev, a in zip(["", *out], out, strict=False)]
        cut = out.index("--") if "--" in out else len(out)
        return [*out[:cut], *extra, *out[cut:]]

    def sbatch(self) -> str:
        """The page's `sbatch` line, run in the folder; the job's id."""
        text = self.slurm.run(*self.submit_argv, cwd=self.folder, env=self.env)
        self.jobs.append(text.split()[-1])
        return self.jobs[-1]

    def until(self, what: Callable[[], Any], why: str, deadline: float = DEADLINE) -> Any:
        try:
            return wait_for(what, timeout=deadline)
        except TimeoutError:
            pytest.fail(f"waited {deadline:.0f} s for {why}\n{self.logs()}", pytrace=False)

    def ended(self, job: str, deadline: float = DEADLINE) -> str:
        """Block until `job` ends; its state."""
        ended = lambda: (s := self.slurm.job(job)["JobState"]) in ENDED and s  # noqa: E731
        return str(self.until(ended, f"job {job} to end", deadline))

    def logs(self) -> str:
        jobs = "\n".join(f"==== {p.name}\n{p.read_text(errors='replace')[-4000:]}" for p in self.folder.glob("*.out"))
        for host in self.slurm.network.hosts if self.slurm.network else []:  # why a node's Ray did not start
            for log in sorted(self.slurm.node_tmp(host.name).glob("ray-*/session_*/logs/raylet.*")):
                jobs += f"\n==== {host.name}: {log}\n{log.read_text(errors='replace')[-1500:]}"
        return f"{jobs}\n{self.slurm.logs()}"

    def trial_keys(self) -> list[str]:
        return sorted(self.store.trials_frame("tiny")["key"])

    def check_done_once(self, attempts: int) -> None:
        """Every trial done, started `attempts` times, resumed (when started again) from its epoch-1 checkpoint,
        each epoch recorded once, nothing trained again as a new result, MLflow holding the store's runs."""
        trials = {k: self.store.trial(k) for k in self.trial_keys()}
        assert {k: (t.state, t.attempts) for k, t in trials.items()} == dict.fromkeys(trials, ("done", attempts)), (
            self.logs()
        )
        assert all((t.resumed_from or 0) >= 1 for t in trials.values()) if attempts > 1 else True
        self.check_epochs_once()
        assert self.store.unmirrored(["tiny"]) == []
        import mlflow

        client = mlflow.MlflowClient(f"sqlite:///{self.folder}/mlflow.sqlite")
        experiment = client.get_experiment_by_name("tiny").experiment_id
        for k, t in trials.items():
            runs = client.search_runs([experiment], f"tags.trial_key = '{k}'")
            assert [(r.info.run_id, r.info.status) for r in runs] == [(t.mlflow_run_id, "FINISHED")], k

    def check_epochs_once(self) -> None:
        """Every trial's epochs recorded once each (a resumed attempt wrote none twice), no result trained again."""
        for k in self.trial_keys():
            steps = [(name, step) for name, step, *_ in self.store.metric_rows(k)]
            assert len(steps) == len(set(steps)) and {s for _, s in steps} == {1, 2}, (k, steps)
            assert self.store.previous(k) == []

    def ray_folder(self, job: str) -> Path:
        """Where the job's Ray keeps its session (the script's `temp`)."""
        return self.tmp / f"ray-{job}"

    def close(self) -> None:
        self.store.close()
        for job in self.jobs:  # what a killed job's Ray may have left: its session folder names the job
            leftovers(self.ray_folder(job))
            shutil.rmtree(self.ray_folder(job), ignore_errors=True)


@contextlib.contextmanager
def sweeps(slurm: Slurm, folder: Path) -> Iterator[Callable[..., Sweep]]:
    """Sweeps in `folder` on `slurm` (Sweep's arguments after the two), each cancelled and closed at the end."""
    folder.mkdir(exist_ok=True)
    with contextlib.ExitStack() as stack:
        yield lambda *args, **named: stack.enter_context(Sweep(slurm, folder, *args, **named))


@pytest.fixture
def sweep(slurm: Slurm, tmp_path: Path) -> Iterator[Callable[..., Sweep]]:
    """Sweeps on the one-node Slurm: `sweep(seeds, cpus=2, gated=False, *extra, tmpdir=None)`."""

    def make(seeds: int, cpus: int = 2, gated: bool = False, *extra: str, tmpdir: Path | None = None) -> Sweep:
        return made(seeds, cpus, gated, *extra, tmpdir=tmpdir)

    with sweeps(slurm, tmp_path) as made:
        yield make


def test_slurms_accounting_without_a_database_says_how_each_job_ended(
    slurm: Slurm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `ablate status` says of a job once the controller has forgotten it (MinJobAge after its end), here asked
    while it still knows it: Slurm's accounting, which Debian's Slurm keeps without slurmdbd's database as job
    completion records (the test Slurm's JobCompType=jobcomp/filetxt; plain `sacct` says accounting is disabled, so
    `accounted` reads `sacct --completion`): a cancelled job and a completed one, and their node."""
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    cancelled = slurm.run("sbatch", "--parsable", "--wrap", "sleep 600", cwd=tmp_path).strip()
    completed = slurm.run("sbatch", "--parsable", "--wrap", "true", cwd=tmp_path).strip()
    wait_for(lambda: slurm.job(cancelled)["JobState"] == "RUNNING", timeout=DEADLINE)
    slurm.run("scancel", cancelled)
    jobs = [cancelled, completed]
    said = {j: wait_for(lambda j=j: accounted(Submitted(j, (), "", "")), timeout=DEADLINE) for j in jobs}
    assert {j: (a.state, a.nodes) for j, a in said.items()} == {
        cancelled: ("CANCELLED", "localhost"),
        completed: ("COMPLETED", "localhost"),
    }, said


@SLOW
def test_a_submitted_sweep_finishes_into_the_store_and_mlflow(sweep: Callable[..., Sweep]) -> None:
    """The job's Ray keeps its session under the job's $TMPDIR, here one that makes its folder TEMP_MAX bytes long (a
    byte less for a job id of 5 digits): Ray's sockets fit there, as `slurm.RAY_SOCKET` measured."""
    node = Path("/tmp", f"ablate-tmpdir-{uuid.uuid4().hex}"[: TEMP_MAX - len("/tmp//ray-123456")])
    node.mkdir()
    try:
        s = sweep(seeds=3, tmpdir=node)
        job = s.sbatch()
        assert s.ended(job) == "COMPLETED", s.logs()
        assert s.slurm.job(job)["ExitCode"] == "0:0"
        s.check_done_once(attempts=1)
        out = next(s.folder.glob(f"*-{job}.out")).read_text()
        assert f"Ray's folder (its logs: session_latest/logs): {node}/ray-{job}\n" in out
        assert len(str(s.ray_folder(job))) >= TEMP_MAX - 1 and "Ray's folder is not" not in out
        assert leftovers(s.ray_folder(job)) == [], "the job's Ray outlived it"
        assert not s.ray_folder(job).exists() and not Path(f"/tmp/ray-{job}").exists()
    finally:
        shutil.rmtree(node, ignore_errors=True)


@SLOW
def test_a_ray_head_whose_start_fails_starts_again_and_the_job_completes(sweep: Callable[..., Sweep]) -> None:
    """The head's first start fails for real: the job's GCS port is held (as a killed job's leftover Ray holds it)
    until the job says the try failed; the next try starts the head, 10 s later, and the sweep completes, the failed
    try's folder gone with the job."""
    s = sweep(seeds=1)
    job, _ = s.submitted(s.filled(page_block(SUBMIT)[0]), "--hold")
    failed = f"the Ray head did not start (try 1 of {HEAD_TRIES}"
    out = lambda: "".join(p.read_text(errors="replace") for p in s.folder.glob(f"*-{job}.out"))  # noqa: E731
    with socket.socket() as held:  # no SO_REUSEPORT: gRPC's bind, which sets it, fails
        held.bind(("0.0.0.0", 20000 + int(job) % PORT_SLOTS * 10))
        held.listen()
        s.slurm.run("scontrol", "release", job)
        s.until(lambda: failed in out(), "the head's first try to fail")
    assert s.ended(job) == "COMPLETED", s.logs()
    assert "try 2 of" not in out(), out()
    s.check_done_once(attempts=1)
    assert not s.ray_folder(job).exists() and not Path(f"{s.ray_folder(job)}.failed-1").exists()


@SLOW
def test_sigterm_mid_trial_then_requeue_resumes_and_trains_nothing_twice(sweep: Callable[..., Sweep]) -> None:
    s = sweep(seeds=2, gated=True)
    job = s.sbatch()
    held = s.until(lambda: len(s.gate.reached()) == 2 and s.gate.reached(), "both trials at the gate")
    s.slurm.run("scancel", "--batch", "--signal=TERM", job)
    storage = Storage(str(s.folder / "checkpoints"))
    s.until(lambda: all((storage.folder(k) / "preempt").exists() for k in held), "the launcher's stop requests")
    s.gate.open()  # the trials take their next step, checkpoint there and stop
    assert s.ended(job) == "FAILED" and s.slurm.job(job)["ExitCode"] == "143:0", s.logs()
    assert set(s.store.states(held).values()) == {"preempted"}
    s.slurm.run("scontrol", "requeue", job)
    s.until(lambda: s.slurm.job(job)["Restarts"] == "1", "the requeue")
    assert s.ended(job) == "COMPLETED", s.logs()
    s.check_done_once(attempts=2)


@SLOW
def test_two_jobs_of_one_sweep_train_each_trial_once(sweep: Callable[..., Sweep]) -> None:
    s = sweep(seeds=2, cpus=1, gated=True)  # a job of 1 CPU runs one trial at a time: one each at the gate
    jobs = [s.sbatch(), s.sbatch()]

    def two_launchers() -> bool:
        holders = s.store.holders(s.gate.reached())
        return len({h.rsplit(":", 1)[1] for h in holders.values()}) == 2

    s.until(two_launchers, "a trial of each job at the gate")
    s.gate.open()
    assert [s.ended(j) for j in jobs] == ["COMPLETED", "COMPLETED"], s.logs()
    s.check_done_once(attempts=1)


@SLOW
def test_a_job_killed_by_its_time_limit_leaves_what_the_next_job_finishes(sweep: Callable[..., Sweep]) -> None:
    s = sweep(2, 2, True, "--lease", "3")
    job = s.sbatch()
    s.until(lambda: len(s.gate.reached()) == 2, "both trials at the gate")
    s.slurm.run("scontrol", "update", f"JobId={job}", "TimeLimit=0:0")  # past it: killed at the next check (<30 s)
    assert (s.ended(job), s.slurm.job(job)["Reason"]) == ("TIMEOUT", "TimeLimit"), s.logs()
    left = s.store.states()  # running (SIGKILLed KillWait after the SIGTERM, its leases lapsing) or preempted
    assert set(left.values()) <= {"running", "preempted"} and len(left) == 2, left
    s.gate.open()
    again = s.sbatch()
    assert s.ended(again) == "COMPLETED", s.logs()
    s.check_done_once(attempts=2)


@SLOW
def test_submit_and_walk_away_status_follows_the_job_and_scancel_leaves_it_resumable(
    sweep: Callable[..., Sweep],
) -> None:
    """`ablate slurm submit` returns with the job id once sbatch took the job; `ablate status` shows the job's Slurm
    state beside the store's progress while it waits or runs and after it ended; a plain `scancel` of a job whose
    trials are mid-run leaves them to the next submit, which resumes them: every trial done once."""
    s = sweep(seeds=2, gated=True)
    block = page_block(SUBMIT)  # a plain scancel's trials taken over in 3 s, not 60:
    submitting, watching = s.filled(block[0], "--lease", "3"), s.filled(block[1])
    assert [submitting[:3], watching[:2]] == [["ablate", "slurm", "submit"], ["ablate", "status"]], submitting

    def submit(*sbatch: str) -> tuple[str, str]:
        return s.submitted(submitting, "--job-name=walked-away", *sbatch)

    def status() -> str:
        done = s.cli(*watching[1:])
        return done.stdout + done.stderr

    f = s.folder
    refused = s.cli(*submitting[1:], "--bogus")
    assert refused.returncode == 2 and "sbatch refused the job" in refused.stderr, refused.stderr
    job, said = submit()
    assert said == ""
    assert s.slurm.job(job)["JobName"] == "walked-away"  # sbatch's option won over the script's #SBATCH line
    assert (f / "ablate-tiny.sbatch").read_text() == script(SlurmJob(
        str(f / "experiments.yaml"), ("tiny",), cpus_per_node=2, storage=f"{f}/checkpoints",
        db=f"sqlite:///{f}/ablate.sqlite", mlflow_uri=f"sqlite:///{f}/mlflow.sqlite", lease=3.0,
    ))  # fmt: skip
    held = s.until(lambda: len(s.gate.reached()) == 2 and s.gate.reached(), "both trials at the gate")
    now = status()
    assert re.search(rf"{job}\W+tiny\W+RUNNING", now) and "running" in now, now
    second, said = submit("--hold")  # a second job on this SQLite store while the first runs: warned, held
    assert said.startswith(f"warning: job {job} (running) of this SQLite store has not ended: SQLite over a shared "
                           "filesystem takes one job at a time"), said  # fmt: skip
    s.slurm.run("scancel", second)
    s.slurm.run("scancel", job)
    assert s.ended(job) == "CANCELLED", s.logs()
    left = s.store.states(held)
    assert set(left.values()) <= {"preempted", "running"}, left
    assert re.search(rf"{job}\W+tiny\W+CANCELLED", status())
    s.gate.open()
    again, said = submit()
    assert said == "", said  # the jobs before it have ended
    assert s.ended(again) == "COMPLETED", s.logs()
    now = status()
    assert re.search(rf"{job}\W+tiny\W+CANCELLED", now) and re.search(rf"{again}\W+tiny\W+COMPLETED", now), now
    s.check_done_once(attempts=2)


# ------------------------------------------------------------------------------------------ across nodes
HOSTS = ("node1", "node2", "node3")
MEASURES = ("epoch_s", "samples_per_s", "peak_mem_mb")
"""Metrics of the machine's state, not of the training: a node's equal a one-node run's in everything else."""


@pytest.fixture
def nodes() -> Iterator[tuple[Slurm, Network]]:
    """A Slurm of three 1-CPU nodes, each a host of its own on one machine (tests/netns.py: a network namespace and
    hostname each, on a bridge the fixture makes), the controller on the bridge; all removed after, by pid."""
    import netns
    from slurm import available, running

    needs(available() and netns.available(), "multi-node Slurm tests need root, iproute2 and Slurm's programs")
    net = Network(HOSTS).create()
    try:
        with running((free_port(), free_port()), cpus=1, network=net) as server:
            yield server, net
    finally:
        net.remove()


@pytest.fixture
def spread(nodes: tuple[Slurm, Network], tmp_path: Path) -> Iterator[Callable[..., Sweep]]:
    """Sweeps on the three nodes, in the shared folder: `spread(seeds, cpus, gated, *extra, nodes=, db=)`."""
    with sweeps(nodes[0], tmp_path / "shared") as made:
        yield made


@pytest.mark.team
@pytest.mark.timeout(900)
def test_a_three_node_job_runs_trials_on_every_node_as_one_node_would(
    nodes: tuple[Slurm, Network], spread: Callable[..., Sweep], tmp_path: Path
) -> None:
    """`sbatch --nodes=3` of the page's script: the Ray head on the first node, a Ray worker on each other (srun),
    the driver on the head; each node has 1 CPU, so the three gated trials wait at the gate one on each node (the
    store's host column names all three); the job completes, and every trial's metrics equal a one-node launch's."""
    slurm, _ = nodes
    s = spread(3, 1, True, nodes=3)
    job = s.sbatch()
    s.until(lambda: len(s.gate.reached()) == 3, "a trial at the gate on each node")
    hosts = s.store.trial_rows("tiny")["host"]
    assert sorted(hosts) == list(HOSTS), (hosts, s.logs())
    s.gate.open()
    assert s.ended(job) == "COMPLETED", s.logs()
    s.check_done_once(attempts=1)
    out = next(s.folder.glob(f"*-{job}.out")).read_text()
    assert f"Ray's folder (its logs: session_latest/logs): {slurm.local}/ray-{job}\n" in out
    alone = tmp_path / "alone"
    launch = [str(Path(sys.executable).parent / "ablate"), "launch", str(s.folder / "experiments.yaml"), "tiny",
              "--plain", "--yes", "--no-mlflow", "--db", f"sqlite:///{alone}/ablate.sqlite",
              "--storage", str(alone / "checkpoints")]  # fmt: skip
    done = subprocess.run(launch, env={**os.environ, "RAY_ADDRESS": ""}, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    one = Store(f"sqlite:///{alone}/ablate.sqlite")
    try:
        for k in s.gate.reached():  # to the last bit, all but the machine's measures (times, peak memory)
            assert [r[:3] for r in s.store.metric_rows(k) if r[0] not in MEASURES] == [
                r[:3] for r in one.metric_rows(k) if r[0] not in MEASURES
            ], k
    finally:
        one.close()


@pytest.mark.team
@pytest.mark.timeout(900)
def test_a_worker_node_lost_mid_sweep_its_trial_resumes_on_another_and_every_trial_is_done_once(
    nodes: tuple[Slurm, Network], spread: Callable[..., Sweep]
) -> None:
    """node3's processes (its slurmd, its Ray, its trial) SIGKILLed while a trial of each node waits at the gate:
    once the controller has taken node3 for lost, the job goes on (`--no-kill`), node3's trial starts again on node1
    or node2 from its epoch-1 checkpoint, and the job completes with every trial done once, no epoch twice."""
    slurm, net = nodes
    s = spread(3, 1, True, nodes=3)
    job = s.sbatch()
    s.until(lambda: len(s.gate.reached()) == 3, "a trial at the gate on each node")
    rows = s.store.trial_rows("tiny")
    (lost,) = [k for k, h in zip(rows["key"], rows["host"], strict=True) if h == "node3"]
    killed = net.kill(net.hosts[2])
    assert slurm.slurmd["node3"].pid in killed and s.gate.reached()[lost] in killed
    s.until(lambda: down(slurm, "node3"), "the controller to take node3 for lost (SlurmdTimeout): a job without "
            "--no-kill ends there")  # fmt: skip
    assert s.slurm.job(job)["JobState"] == "RUNNING"
    s.gate.open()
    assert s.ended(job) == "COMPLETED", s.logs()
    trials = {k: s.store.trial(k) for k in rows["key"]}
    assert {k: t.state for k, t in trials.items()} == dict.fromkeys(trials, "done"), s.logs()
    assert trials[lost].attempts == 2 and (trials[lost].resumed_from or 0) >= 1, trials[lost]
    assert trials[lost].host in ("node1", "node2") and all(t.attempts == 1 for k, t in trials.items() if k != lost)
    s.check_epochs_once()


def down(slurm: Slurm, node: str) -> bool:
    """Whether the controller has taken `node` for lost."""
    return slurm.run("sinfo", "-h", "-n", node, "-o", "%t").strip().startswith("down")


@pytest.mark.team
@pytest.mark.timeout(900)
def test_two_jobs_on_two_nodes_share_a_postgresql_store_then_a_lost_head_node_leaves_the_requeue_what_is_not_done(
    nodes: tuple[Slurm, Network], spread: Callable[..., Sweep], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page's PostgreSQL block on three 1-CPU nodes, one PostgreSQL server on the bridge. Two one-node jobs
    submitted at once run on two nodes, a trial of each at the gate at once, and train each trial once; `ablate status`
    of the store, from a folder that is not the one they were submitted from, lists both. Then the sweep grows by two
    trials and a two-node job takes them, one at the gate on each of its nodes: its head node's processes (slurmd, the
    batch shell, the launcher, Ray's head, a trial) SIGKILLed by pid. Slurm takes the node for lost and requeues the
    job, which finishes the sweep on the nodes left: the two new trials resumed from their epoch-1 checkpoints, the
    first two not trained again, no epoch twice; `ablate status` says the job restarted once and completed."""
    import slurm as cluster

    needs(cluster.postgres_available(), "the PostgreSQL tests' programs and driver (initdb, pg_ctl, psycopg)")
    slurm, net = nodes
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with cluster.postgres(net) as db:
        s = spread(2, 1, True, db=db)
        monkeypatch.setenv(STATE_ENV, s.env[STATE_ENV])  # where the test's `ablate` keeps the jobs
        block = page_block(SERVER)
        assert [block[0][:3], block[1][:2]] == [["ablate", "slurm", "submit"], ["ablate", "status"]], block

        def status() -> str:
            done = s.cli(*s.filled(block[1])[1:], cwd=elsewhere)
            return done.stdout + done.stderr

        first = [s.submitted(s.filled(block[0], "--lease", "3"))[0] for _ in range(2)]
        s.until(lambda: len(s.gate.reached()) == 2, "a trial of each job at the gate")
        placed = {s.slurm.job(j)["NodeList"] for j in first}
        holders = s.store.holders(s.gate.reached())
        assert len(placed) == 2 and set(s.store.trial_rows("tiny")["host"]) == placed, (placed, s.logs())
        assert len({h.rsplit(":", 1)[1] for h in holders.values()}) == 2, holders  # two launchers
        now = status()
        recorded = jobs_file(db).read_text() if jobs_file(db).exists() else "(no jobs file)"
        assert all(re.search(rf"{j}\W+tiny\W+RUNNING", now) for j in first), (first, recorded, now)
        s.gate.open()
        assert [s.ended(j) for j in first] == ["COMPLETED", "COMPLETED"], s.logs()
        s.check_done_once(attempts=1)
        before = {k: s.store.trial(k) for k in s.trial_keys()}

        (s.gate.folder / "open").unlink()  # the gate holds the new trials
        write_sweeps(s.folder / "experiments.yaml", {"tiny": {"base": TINY, "seeds": 4}})
        s.nodes = 2
        job, _ = s.submitted(s.filled(block[0], "--lease", "3"))
        new = lambda: {k: pid for k, pid in s.gate.reached().items() if k not in before}  # noqa: E731
        s.until(lambda: len(new()) == 2, "the new trials at the gate, one on each of the job's nodes")
        head = s.slurm.job(job)["BatchHost"]
        killed = net.kill(next(h for h in net.hosts if h.name == head))
        assert slurm.slurmd[head].pid in killed and set(new().values()) & set(killed), (head, killed)
        requeued = lambda: s.slurm.job(job)["Restarts"] == "1"  # noqa: E731
        # SlurmdTimeout, then Ray's minute without its head (the workers' Ray gives up), then the workers' watch
        s.until(requeued, f"a worker to requeue the job of the lost {head}", LONGER)
        assert down(slurm, head)
        s.gate.open()
        assert s.ended(job, LONGER) == "COMPLETED", s.logs()  # a new Ray, the launch, two trials resumed
        trials = {k: s.store.trial(k) for k in s.trial_keys()}
        assert {k: t.state for k, t in trials.items()} == dict.fromkeys(trials, "done") and len(trials) == 4, s.logs()
        for k, t in before.items():  # not trained again
            assert (trials[k].attempts, trials[k].finished_at, trials[k].host) == (1, t.finished_at, t.host), k
        for k in new():
            assert trials[k].attempts == 2 and (trials[k].resumed_from or 0) >= 1 and trials[k].host != head, k
        s.check_epochs_once()
        now = status()
        assert re.search(rf"{job}\W+tiny\W+COMPLETED\W+1\b", now) and all(
            re.search(rf"{j}\W+tiny\W+COMPLETED", now) for j in first), now  # fmt: skip
