"""A sweep as a Slurm batch job (`ablate slurm`): the script starts Ray across the allocation (the head on the first
node, one worker per other node), runs `ablate launch` as the driver, and stops Ray when it ends.

What a shared cluster needs of it: Ray's ports and session folder come from the job id, so two jobs on one node do
not collide, and the folder is under the job's $TMPDIR (node-local on many clusters) where its sockets' paths fit
(`TEMP_MAX`); Ray sees the CPUs and GPUs Slurm allocated (`--num-cpus` from the allocation, GPUs from the
`CUDA_VISIBLE_DEVICES` Slurm sets); `--signal=B:TERM@N` reaches the batch shell, which passes it on to the launcher
(a shell runs no trap while a foreground command runs, so the launcher runs in the background and the shell waits),
and the launcher checkpoints its trials and records them `preempted`; `--requeue` lets Slurm run the job again after
a preemption, and a rerun of the same launch trains only what is unfinished.

A lost worker node: the job goes on (`--no-kill`) and Ray starts its trials again elsewhere. A lost head node: its
workers requeue the job once the controller has taken that node out of it (else, `--no-kill`, the job would run on
without its batch shell until its time limit), and the requeued job trains what is not done.

`ablate slurm submit` hands the script to `sbatch` and records the job (`Submitted`, a line of `jobs_file`) so that
`ablate status` can say what Slurm says of it (`JobState`) while it waits, runs, is requeued and after.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ablate.planning.plan import Plan

DEFAULT_SIGNAL = 300
"""Seconds before the time limit at which Slurm sends SIGTERM (the launcher waits 25 s for a step boundary; a
trial's step or its checkpoint's upload may take longer on a large model)."""
SOCKET_PATH_MAX = 107
"""Bytes Linux takes in a Unix socket's path (sun_path holds 108 with the NUL; Ray checks the same)."""
RAY_SOCKET = "/session_YYYY-MM-DD_HH-MM-SS_ffffff_PPPPPPP/sockets/dash_TaskEventsHead"
"""What Ray appends to its folder for its longest socket: its session, named by its start to the microsecond and the
pid of `ray start` (at most 7 digits under Linux's largest pid_max, 4194304), then the dashboard's socket for its
module of the longest name (`dash_<class>`, ray.dashboard.subprocesses; the object store's and the raylet's are
shorter). A head whose dashboard sockets did not fit started, but its dashboard failed after a minute."""
TEMP_MAX = SOCKET_PATH_MAX - len(RAY_SOCKET)
"""The longest Ray folder whose sockets Linux takes: a job's $TMPDIR that makes a longer one gives way to /tmp."""
HEAD_TRIES = 3
"""Starts of the job's Ray head before the job gives up: at a load of 20-40 on 2 cores, 3 of 4 first starts failed."""
PORT_SLOTS = 100
"""Ray's ports are the job's slot (its id modulo this) of 20000 to 31999: jobs whose ids differ by less than this never
share one."""


@dataclass(frozen=True)
class SlurmJob:
    """What the batch script asks Slurm for and what its launch writes where."""

    file: str
    sweeps: tuple[str, ...]
    nodes: int = 1
    cpus_per_node: int = 8
    gpus_per_node: int = 0
    time: str = "24:00:00"
    partition: str | None = None
    account: str | None = None
    storage: str = "db/checkpoints"
    """Checkpoints: a folder every node mounts, or a bucket URL."""
    db: str | None = None
    mlflow_uri: str | None = None
    signal: int = DEFAULT_SIGNAL
    lease: float | None = None
    """`ablate launch --lease`: how soon another job takes over the trials of a job killed without warning."""

    @property
    def name(self) -> str:
        return "ablate-" + "-".join(self.sweeps) if self.sweeps else "ablate"

    def launch(self) -> list[str]:
        """The driver's command line, without `--address` (the script adds its own head's)."""
        argv = ["ablate", "launch", self.file, *self.sweeps, "--plain", "--yes", "--storage", self.storage]
        for flag, value in (("--db", self.db), ("--mlflow-uri", self.mlflow_uri), ("--lease", self.lease)):
            if value is not None:
                argv += [flag, f"{value:g}" if isinstance(value, float) else value]
        return argv


JOBS = "slurm-jobs.jsonl"
"""The submitted jobs of a store, one JSON line each: beside its SQLite file (where every node and the login node
look); for a server's store (PostgreSQL), in the user's state folder (`state_folder`), one file per server and
database, so that `ablate status` of that store finds them from any folder of any machine that shares the home."""
STATE_ENV = "XDG_STATE_HOME"
"""Where the user keeps state that outlives a session (the XDG default: ~/.local/state); ablate's is `ablate` in it."""
SHOWN = 5
"""The latest submitted jobs `ablate status` asks Slurm about."""
ENDED = ("COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
         "DEADLINE")  # fmt: skip
"""Slurm's states of a job that has ended (a requeued one is PENDING again)."""


@dataclass(frozen=True)
class Submitted:
    """A job `ablate slurm submit` handed to sbatch."""

    job: str
    sweeps: tuple[str, ...]
    script: str
    folder: str
    """Where it was submitted from: its output file (`%x-%j.out`) and the launch's relative paths are there."""


@dataclass(frozen=True)
class JobState:
    """What Slurm says of a submitted job now: `scontrol show job` while Slurm holds it, `sacct` after."""

    job: Submitted
    state: str
    """Slurm's JobState (PENDING, RUNNING, COMPLETED, ...), or `unknown` (`reason` says why)."""
    restarts: int | None
    """Times it was requeued (None: accounting, which does not say)."""
    nodes: str
    reason: str

    @property
    def ended(self) -> bool:
        return self.state in ENDED


@dataclass(frozen=True)
class Submission:
    """What `submit` did: the job, and the jobs of the same SQLite store that were waiting or running then."""

    job: Submitted
    alongside: tuple[JobState, ...]

    @property
    def warning(self) -> str | None:
        """Why a job beside another one on one SQLite store may break it, or None."""
        if not self.alongside:
            return None
        others = ", ".join(f"{j.job.job} ({j.state.lower()})" for j in self.alongside)
        return (f"job {others} of this SQLite store has not ended: SQLite over a shared filesystem takes one job at "
                "a time (its WAL, which the store uses, wants all its writers on one machine: jobs on two nodes "
                "may corrupt it, or wait on locks a network filesystem does not keep). Use PostgreSQL (--db "
                "postgresql+psycopg://...) for jobs that run at once, or submit this one with "
                f"-- --dependency=afterany:{self.alongside[-1].job.job}.")  # fmt: skip


def jobs_file(db: str | None) -> Path:
    """Where the jobs submitted for the store `db` (a URL; None: the default) are recorded: beside a SQLite file; for a
    server's store, a file in the user's state folder named by the store's URL without its password (a password
    changed or left out finds the same jobs)."""
    import hashlib
    import os

    from sqlalchemy.engine import URL, make_url

    from ablate.store.engine import database_url, sqlite_file

    url = database_url(db)
    path = sqlite_file(url)
    if path is not None:
        return path.parent / JOBS
    u = make_url(url)
    named = URL.create(u.drivername, u.username, None, u.host, u.port, u.database, u.query).render_as_string()
    folder = Path(os.environ.get(STATE_ENV) or Path.home() / ".local" / "state") / "ablate" / "slurm-jobs"
    return folder / f"{hashlib.sha256(named.encode()).hexdigest()[:16]}.jsonl"


def submit(job: SlurmJob, script_file: Path, sbatch: Sequence[str] = ()) -> Submission:
    """`sbatch` the script (`sbatch`: options before it, which win over its #SBATCH lines) from the current
    folder and record the job; a RuntimeError with sbatch's words where it refused. The jobs of the same SQLite
    store that have not ended come with it (a server's store takes several jobs at once)."""
    from ablate.store.engine import database_url, sqlite_file

    sqlite = sqlite_file(database_url(job.db)) is not None
    alongside = tuple(s for s in map(state, submitted(job.db)) if sqlite and not s.ended and s.state != "unknown")
    argv = ["sbatch", "--parsable", *sbatch, str(script_file)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    except FileNotFoundError as e:
        raise RuntimeError("sbatch is not on the PATH: submit from a node of the Slurm cluster (a login node)") from e
    if done.returncode != 0:
        raise RuntimeError(f"sbatch refused the job (exit {done.returncode}): {done.stderr.strip()}")
    record = Submitted(done.stdout.strip().split(";")[0], job.sweeps, str(script_file.resolve()), str(Path.cwd()))
    file = jobs_file(job.db)
    file.parent.mkdir(parents=True, exist_ok=True)
    with file.open("a") as f:
        f.write(json.dumps(asdict(record)) + "\n")
    return Submission(record, alongside)


def submitted(db: str | None, sweeps: Sequence[str] | None = None) -> list[Submitted]:
    """The latest `SHOWN` jobs recorded for the store `db` that run any of `sweeps` (None: any), oldest first."""
    file = jobs_file(db)
    if not file.exists():
        return []
    records = [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
    jobs = [Submitted(r["job"], tuple(r["sweeps"]), r["script"], r["folder"]) for r in records]
    return [j for j in jobs if sweeps is None or set(j.sweeps) & set(sweeps)][-SHOWN:]


def state(job: Submitted) -> JobState:
    """What Slurm says of `job`: its controller while it holds the job (until MinJobAge after its end), then its
    accounting (where the cluster keeps one)."""
    shown = _ask("scontrol", "show", "job", "--oneliner", job.job)
    if shown is not None:
        fields = dict(word.split("=", 1) for word in shown.split() if "=" in word)
        return JobState(job, fields.get("JobState", "unknown"), int(fields.get("Restarts", "0")),
                        fields.get("NodeList", "").replace("(null)", ""),
                        fields.get("Reason", "").replace("None", ""))  # fmt: skip
    return accounted(job) or JobState(job, "unknown", None, "", "neither Slurm's controller (scontrol) nor its "
                                      "accounting (sacct) knows the job any more")  # fmt: skip


def accounted(job: Submitted) -> JobState | None:
    """What Slurm's accounting says of `job`'s latest run (`sacct`: slurmdbd's database where the cluster has one,
    else its job completion records, `sacct --completion`, which jobcomp/filetxt keeps without a database); None
    where neither knows it."""
    for source in ((), ("--completion",)):
        lines = (_ask("sacct", *source, "--noheader", "--allocations", "--parsable2", "--jobs", job.job,
                      "--format", "State,NodeList") or "").splitlines()  # fmt: skip
        if lines and "|" in lines[-1]:
            said, nodes = lines[-1].split("|", 1)
            return JobState(job, said.split()[0] if said.strip() else "unknown", None, nodes, "")
    return None


def _ask(*argv: str) -> str | None:
    """A Slurm command's output, None where it failed or is not there."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def refusal(job: SlurmJob, plans: Sequence[Plan]) -> str | None:
    """Why the job could not run a sweep's trials, or None: a trial worker must fit one node's allocation (Ray
    places a worker on one node), and a GPU sweep needs GPUs."""
    if not re.fullmatch(r"(\d+-)?\d+(:\d+){0,2}|\d+", job.time):
        return f"--time {job.time!r}: Slurm takes minutes, MM:SS, HH:MM:SS, D-HH or D-HH:MM:SS"
    for p in plans:
        for t in p.trials:
            cpus, gpus = t.config.resources.cpus, t.config.resources.gpus
            if cpus > job.cpus_per_node:
                return f"{p.sweep}: a trial worker asks for {cpus:g} CPUs; --cpus-per-node is {job.cpus_per_node}"
            if (gpus == "auto" and not job.gpus_per_node) or (gpus != "auto" and gpus > job.gpus_per_node):
                return f"{p.sweep}: a trial worker asks for {gpus} GPUs; --gpus-per-node is {job.gpus_per_node}"
    return None


def script(job: SlurmJob) -> str:
    """The batch script: `sbatch` it from the folder the launch should run in (the experiments file's paths are
    relative to it)."""
    optional = [f"#SBATCH --gpus-per-node={job.gpus_per_node}" if job.gpus_per_node else "",
                f"#SBATCH --partition={job.partition}" if job.partition else "",
                f"#SBATCH --account={job.account}" if job.account else ""]  # fmt: skip
    argv = [shlex.quote(a) for a in job.launch()]
    cut = argv.index("--storage")  # then one option and its value per line
    lines = [" ".join(argv[:cut]), *(" ".join(argv[i : i + 2]) for i in range(cut, len(argv), 2))]
    return TEMPLATE.format(
        name=job.name,
        nodes=job.nodes,
        cpus=job.cpus_per_node,
        time=job.time,
        optional="".join(line + "\n" for line in optional if line),
        signal=job.signal,
        slots=PORT_SLOTS,
        temp_max=TEMP_MAX,
        socket_max=SOCKET_PATH_MAX,
        head_tries=HEAD_TRIES,
        launch=" \\\n    ".join(lines),
    )


TEMPLATE = """\
#!/usr/bin/env bash
# An ablate sweep as a Slurm job, written by `ablate slurm`: a Ray head on the first node, a Ray worker on each
# other node, `ablate launch` as the driver. Submit it from the folder the launch runs in: sbatch THIS_FILE
#SBATCH --job-name={name}
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task={cpus}
#SBATCH --time={time}
{optional}#SBATCH --signal=B:TERM@{signal}
#SBATCH --requeue
#SBATCH --no-kill
#SBATCH --open-mode=append
#SBATCH --output=%x-%j.out
set -uo pipefail

# Ray's ports and session folder are this job's own: another job on a node has other ones (jobs whose ids differ
# by less than {slots} always), all below Linux's ephemeral ports (32768 up), which any connection may take.
slot=$(( SLURM_JOB_ID % {slots} ))
port=$(( 20000 + slot * 10 ))           # Ray's servers: port to port + 9
worker_ports=$(( 21000 + slot * 110 ))  # its worker processes: 110 per node
# Ray's folder: the node-local $TMPDIR many clusters give a job (their /tmp may be small), else /tmp. Ray makes
# Unix sockets in it, whose paths Linux limits to {socket_max} bytes: a folder longer than {temp_max} is in /tmp.
temp=${{TMPDIR:-/tmp}}/ray-$SLURM_JOB_ID
if (( $(printf %s "$temp" | wc -c) > {temp_max} )); then
    echo "Ray's folder is not $temp: over {temp_max} bytes, too long for the Unix sockets Ray makes in it"
    temp=/tmp/ray-$SLURM_JOB_ID
fi
echo "Ray's folder (its logs: session_latest/logs): $temp"
# What this job's Ray left on this node (a killed run's, before a requeue; a failed start's): the processes that name
# its folder, which would hold the job's ports, and the folder, whose address file would say the head is up.
leftovers() {{
    local p args
    for p in /proc/[0-9]*; do
        mapfile -d "" args 2>/dev/null <"$p/cmdline" || continue
        [[ ${{p#/proc/}} != "$$" && "${{args[*]}}" == *"$temp/"* ]] && kill -KILL "${{p#/proc/}}" 2>/dev/null
    done
}}
leftovers
rm -rf "$temp" "$temp".failed-*
head_ip=$(hostname -I | cut -d' ' -f1)  # this node's first address, where the other nodes reach the head
node=(--block --temp-dir="$temp" --num-cpus="$SLURM_CPUS_PER_TASK" --disable-usage-stats
      --node-manager-port=$((port + 7)) --object-manager-port=$((port + 8)) --runtime-env-agent-port=$((port + 6))
      --dashboard-agent-listen-port=$((port + 3)) --dashboard-agent-grpc-port=$((port + 4))
      --metrics-export-port=$((port + 5)) --min-worker-port=$worker_ports --max-worker-port=$((worker_ports + 109)))
# GPUs: Ray counts those in CUDA_VISIBLE_DEVICES, which Slurm sets to the ones it allocated.

# The head, in up to {head_tries} tries: a start fails on a loaded node (a raylet that crashed, or that did not
# register within Ray's fixed 30 s) or while a port of this job's is held (by another's leftovers): what a failed try
# left goes, and the next try comes 10 s later, then 20 s.
for try in $(seq {head_tries}); do
    ray start --head --node-ip-address="$head_ip" --port=$port --ray-client-server-port=$((port + 1)) \\
        --dashboard-port=$((port + 2)) "${{node[@]}}" &
    head=$!
    until [[ -e $temp/ray_current_cluster ]] || ! kill -0 $head 2>/dev/null; do  # written once the head serves
        sleep 1
    done
    kill -0 $head 2>/dev/null && [[ -e $temp/ray_current_cluster ]] && break
    echo "the Ray head did not start (try $try of {head_tries}; its logs: $temp.failed-$try/session_latest/logs)" >&2
    (( try < {head_tries} )) || exit 1
    leftovers
    mv "$temp" "$temp.failed-$try" 2>/dev/null  # kept for its logs until the job ends
    sleep $(( try * 10 ))
done
# The workers once the head serves (a worker's Ray gives up 30 s after it starts if the head does not answer).
# --ntasks too: srun would take the job's (one per node, SLURM_NTASKS) and ask for more CPUs than it may use.
# --no-kill, here and above: a worker node lost ends neither the job nor the other workers; Ray starts its trials
# again on the nodes left, from their checkpoints. But the head's node lost, Slurm would take it out of the job and
# run the job on without this shell (it was there) until its time limit: a worker whose Ray ends on its own (the
# head gone) waits for the controller to take the head's node out of the job, then requeues the job, which trains
# what is not done. Told to stop (SIGTERM: this job's end), a worker just ends. What its Ray left first goes (agents
# and workers whose parent died, which Slurm, tracking processes by parentage, may miss): they would hold the job's
# ports on this node, which the requeued job's head may be.
worker='trap "exit 0" TERM
ray start --address="$head_address" "$@" & wait $!
ours() {{
    tr "\\0" "\\n" <"$1/environ" | grep -cx -e SLURM_JOB_ID="$SLURM_JOB_ID" -e SLURM_STEP_ID="$SLURM_STEP_ID"
}} 2>/dev/null
for p in /proc/[0-9]*; do
    [[ ${{p#/proc/}} != "$$" && $(ours "$p") == 2 ]] && kill -KILL "${{p#/proc/}}" 2>/dev/null
done
while sleep 10; do
    nodes=$(squeue -h -j "$SLURM_JOB_ID" -t RUNNING -o %N) && [[ -n $nodes ]] || continue
    scontrol show hostnames "$nodes" | grep -qx "$head_node" && continue
    echo "the head node $head_node is lost: requeueing job $SLURM_JOB_ID" >&2
    exec scontrol requeue "$SLURM_JOB_ID"
done'
if (( SLURM_JOB_NUM_NODES > 1 )); then
    export head_node=$SLURMD_NODENAME head_address="$head_ip:$port"
    srun --nodes=$((SLURM_JOB_NUM_NODES - 1)) --ntasks=$((SLURM_JOB_NUM_NODES - 1)) --ntasks-per-node=1 --no-kill \\
        --exclude="$SLURMD_NODENAME" bash -c "$worker" worker "${{node[@]}}" &
    others=$!
fi

# SIGTERM (the time limit's warning, a preemption, scancel --signal=TERM --batch) goes on to the launcher, which
# checkpoints its running trials at their next step and records them preempted; a rerun resumes them.
{launch} \\
    --address "$head_ip:$port" &
driver=$!
trap 'stopping=1; kill -TERM $driver 2>/dev/null' TERM
wait $driver
status=$?
if [[ -n ${{stopping:-}} ]]; then wait $driver; status=$?; fi  # the trap cut the first wait short

kill -TERM $head ${{others:-}} 2>/dev/null
wait
rm -rf "$temp" "$temp".failed-*
exit $status
"""
