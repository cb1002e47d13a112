"""A real single-host Slurm for the tests: munged, slurmctld and slurmd (Debian's packages) configured in a folder of
the test and run in the foreground as child processes, each in a session of its own, stopped by pid, never by name
(a machine's own Slurm, if it has one, is left alone: its config, ports and munge socket are not these).

The node is this machine on 127.0.0.1 with 2 CPUs, no cgroups (processes tracked by parentage), one partition; the
client commands (`sbatch`, `squeue`, `scontrol`, ...) reach it through `SLURM_CONF` in `env`. Given a network of hosts
(tests/netns.py), the nodes are those hosts instead, a slurmd on each in its network namespace under its hostname,
and the controller is on the bridge's address; munge's socket is a file, which every namespace reaches. Each such
node's jobs have a node-local $TMPDIR, as on a cluster: one path (`local`, set by a TaskProlog) where each node
mounts a folder of its own (`node_tmp`); the job's script gives every node the head's Ray folder, which one /tmp
shared by the nodes' Rays would make one folder, where they race for their sockets.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from gate import wait_for
from netns import Host, Network
from procs import leftovers, listening

PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel")
"""What the tests need of Slurm and munge (Debian: slurmctld slurmd slurm-client munge)."""
NODE_TIMEOUT = 15
"""Seconds after which the controller takes a network node that does not answer for lost (Slurm's default: 300)."""
KILL_WAIT = 5
"""Seconds between the SIGTERM and the SIGKILL of a job's processes at its end (Slurm's default is 30)."""


def program(name: str) -> str | None:
    """`name` on PATH or in /usr/sbin (where Debian puts the daemons; a user's PATH may lack it)."""
    return shutil.which(name) or shutil.which(name, path="/usr/sbin")


def available() -> bool:
    return all(program(p) for p in PROGRAMS)


CONF = """\
ClusterName=ablate-test
SlurmctldHost={host}({ctld_addr})
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge.sock,cred_expire=5
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool-%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
SwitchType=switch/none
JobCompType=jobcomp/filetxt
JobCompLoc={root}/jobcomp.txt
AccountingStorageType=accounting_storage/none
ReturnToService=2
JobRequeue=1
KillWait={kill_wait}
OverTimeLimit=0
MinJobAge=600
FirstJobId={first_job}
SchedulerParameters=sched_min_interval=0
{extra}{nodes}PartitionName=debug Nodes={names} Default=YES MaxTime=INFINITE State=UP
"""


class Slurm:
    """The daemons of a Slurm in `root` (a slurmd per host of `network`, else one on 127.0.0.1); `env`: what a
    client command needs to reach it."""

    def __init__(self, root: Path, cpus: int = 2, network: Network | None = None) -> None:
        self.root, self.cpus, self.network = root, cpus, network
        self.procs: list[subprocess.Popen[bytes]] = []
        self.slurmd: dict[str, subprocess.Popen[bytes]] = {}
        """Node name -> its slurmd."""
        self.env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf")}
        self.controller = network.gateway if network else "127.0.0.1"
        """slurmctld's address."""

    def start(self, ctld_port: int, d_port: int, first_job: int = 1) -> Slurm:
        """Writes the munge key and slurm.conf and starts the daemons. `first_job`: the first job id (a job's Ray
        folder, /tmp/ray-JOBID, must not be another Slurm's job's on this machine)."""
        (self.root / "state").mkdir()
        hosts = self.network.hosts if self.network else [Host("localhost", "", "127.0.0.1")]
        extra = ""
        if self.network:
            prolog = self.root / "task-prolog"
            prolog.write_text(f'#!/bin/sh\necho "export TMPDIR={self.local}"\n')
            prolog.chmod(0o755)
            extra = f"TaskProlog={prolog}\nSlurmdTimeout={NODE_TIMEOUT}\n"
            self.local.mkdir()
            for h in hosts:
                self.node_tmp(h.name).mkdir()
        nodes = "".join(f"NodeName={h.name} NodeAddr={h.addr} CPUs={self.cpus} State=UNKNOWN\n" for h in hosts)
        for h in hosts:
            (self.root / f"spool-{h.name}").mkdir()
        key = self.root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        (self.root / "slurm.conf").write_text(CONF.format(host=socket.gethostname().split(".")[0], root=self.root,
                                                          ctld_addr=self.controller, ctld_port=ctld_port,
                                                          d_port=d_port, nodes=nodes, extra=extra,
                                                          names=",".join(h.name for h in hosts), kill_wait=KILL_WAIT,
                                                          first_job=first_job))  # fmt: skip
        r = self.root
        self._spawn([program("munged"), "--foreground", "--force", f"--key-file={key}", f"--socket={r}/munge.sock",
                     f"--pid-file={r}/munged.pid", f"--log-file={r}/munged.log",
                     f"--seed-file={r}/munged.seed"])  # fmt: skip
        self._spawn([program("slurmctld"), "-D", "-i", "-f", str(r / "slurm.conf")])
        for h in hosts:
            argv = [str(program("slurmd")), "-D", "-N", h.name, "-f", str(r / "slurm.conf")]
            if self.network:
                argv = self.network.on(h, argv, f"mount --bind {self.node_tmp(h.name)} {self.local}")
            self.slurmd[h.name] = self._spawn(argv)
        return self

    @property
    def local(self) -> Path:
        """The path of every network node's $TMPDIR (short: Ray's socket paths under it are limited)."""
        assert self.network is not None
        return Path("/tmp", f"{self.network.bridge}-tmp")

    def node_tmp(self, name: str) -> Path:
        """What the network's node `name` sees at `local`."""
        assert self.network is not None
        return Path("/tmp", f"{self.network.bridge}-{name}")

    def _spawn(self, argv: list[str | None]) -> subprocess.Popen[bytes]:
        with (self.root / "daemons.log").open("ab") as out:
            self.procs.append(subprocess.Popen([str(a) for a in argv], env=self.env, start_new_session=True,
                                               stdout=out, stderr=subprocess.STDOUT))  # fmt: skip
        return self.procs[-1]

    def run(self, *argv: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
        """A client command against this Slurm (in `cwd`, with `env`, which must hold `SLURM_CONF`); its output
        (raises on a non-zero exit)."""
        done = subprocess.run(argv, cwd=cwd, env=env or self.env, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}\n{done.stdout}{done.stderr}")
        return done.stdout

    def idle(self) -> bool:
        """Whether every node is up and takes jobs (what the fixture waits for)."""
        if not listening(self.controller, int(self.conf("SlurmctldPort"))):
            return False
        with contextlib.suppress(RuntimeError):
            return set(self.run("sinfo", "-h", "-N", "-o", "%t").split()) == {"idle"}
        return False

    def conf(self, name: str) -> str:
        return next(line.split("=", 1)[1] for line in (self.root / "slurm.conf").read_text().splitlines()
                    if line.startswith(f"{name}="))  # fmt: skip

    def job(self, job: str) -> dict[str, str]:
        """`scontrol show job`'s fields of `job` (JobState, Restarts, ExitCode, ...)."""
        text = self.run("scontrol", "show", "job", "-o", job)
        return dict(word.split("=", 1) for word in text.split() if "=" in word)

    def stop(self) -> None:
        """SIGTERM the daemons started (slurmd, then slurmctld, then munged; those of a start that failed part of the
        way too), SIGKILL what does not end; each by its pid's process group, whatever the others did."""
        for proc in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=20)

    def logs(self) -> str:
        """The daemons' logs, for a failure's message."""
        names = ("daemons.log", "slurmctld.log", *(f"slurmd-{n}.log" for n in self.slurmd))
        return "\n".join(f"==== {n}\n{(self.root / n).read_text(errors='replace')[-3000:]}" for n in names
                         if (self.root / n).exists())  # fmt: skip


@contextlib.contextmanager
def running(ports: tuple[int, int], cpus: int = 2, network: Network | None = None) -> Iterator[Slurm]:
    """A Slurm in a temporary folder (short: munge's socket path is length-limited) on `ports` (slurmctld's,
    slurmd's), its nodes idle; at the end, or where its start or the wait failed part of the way, every daemon it
    started is stopped by pid and its folder removed. Its job ids start at random (a job's Ray folder, /tmp/ray-JOBID,
    must not be another session's job's). A network's nodes' $TMPDIR folders go too, after the processes a killed
    job's Ray left there."""
    root = Path(tempfile.mkdtemp(prefix="ablate-slurm-"))
    server = Slurm(root, cpus, network)
    try:
        server.start(*ports, first_job=int.from_bytes(os.urandom(2), "big") * 10 + 10_000)
        try:
            wait_for(server.idle, timeout=60)
        except TimeoutError as e:
            raise RuntimeError(f"the Slurm nodes never went idle\n{server.logs()}") from e
        yield server
    finally:
        server.stop()
        for folder in [server.local, *(server.node_tmp(h.name) for h in network.hosts)] if network else []:
            leftovers(folder)
            shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)


def postgres_available() -> bool:
    """Whether `postgres` can start a server: PostgreSQL's initdb and pg_ctl, and the driver."""
    import importlib.util

    from conftest import postgres_binary

    return bool(postgres_binary("initdb") and postgres_binary("pg_ctl") and importlib.util.find_spec("psycopg"))


@contextlib.contextmanager
def postgres(network: Network) -> Iterator[str]:
    """A PostgreSQL server (tests/procs.py's, in a temporary folder) on the bridge's address too, where every host of
    `network` reaches it (trust from the hosts' /24, as from loopback); the URL of a fresh database there. Stopped
    and removed at the end."""
    from conftest import free_port, fresh_database, postgres_binary
    from procs import AS_POSTGRES, Postgres

    initdb, pg_ctl = postgres_binary("initdb"), postgres_binary("pg_ctl")
    assert initdb and pg_ctl, "no PostgreSQL binaries (the test's `needs` checks first)"
    root = Path(tempfile.mkdtemp(prefix="ablate-pg-"))
    try:
        port = free_port(network.gateway)
        server = Postgres.create(root, initdb, pg_ctl, port, f"listen_addresses=127.0.0.1,{network.gateway}")
        try:
            with (server.data / "pg_hba.conf").open("a") as hba:
                hba.write(f"host all all {network.gateway.rsplit('.', 1)[0]}.0/24 trust\n")
            subprocess.run([*AS_POSTGRES, pg_ctl, "-D", str(server.data), "reload"], check=True, capture_output=True)
            yield fresh_database(server.url).replace("@127.0.0.1:", f"@{network.gateway}:")
        finally:
            server.stop("immediate")
    finally:
        shutil.rmtree(root, ignore_errors=True)
