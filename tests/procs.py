"""Servers, Ray nodes and launchers run as real processes on loopback, for the team test and the benches.

Each process starts in a process group of its own and is stopped through its pid (its group and what it
started), never by name: other Rays and PostgreSQL servers may run on the same machine.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from gate import wait_for
from procfs import descendants

NODES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
"""A Ray head's address and two workers': a node per loopback address, as a machine each."""
MLFLOW = str(Path(sys.executable).with_name("mlflow"))
"""The venv's `mlflow` program (its `server`)."""
AS_POSTGRES = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
"""initdb refuses root: as root, PostgreSQL's programs run as the postgres user."""


class Postgres:
    """A PostgreSQL server (Debian's pg_ctl) on loopback with trust auth, its data in `data`: stopped (fast: open
    sessions end) and started again with the options it was started with (postmaster.opts)."""

    def __init__(self, data: Path, pg_ctl: str, port: int) -> None:
        self.data, self.pg_ctl, self.port = data, pg_ctl, port
        self.down = False

    @property
    def url(self) -> str:
        """The server's URL, without a database."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}"

    @classmethod
    def create(cls, root: Path, initdb: str, pg_ctl: str, port: int, *settings: str) -> Postgres:
        """A new cluster in `root`/data (its socket and log in `root`), started on 127.0.0.1:`port`, without fsync;
        `settings`: more `name=value` server settings."""
        if AS_POSTGRES:
            shutil.chown(root, "postgres")
        data = root / "data"
        subprocess.run([*AS_POSTGRES, initdb, "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync"],
                       check=True, capture_output=True)  # fmt: skip
        options = [f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
                   *(f"-c {shlex.quote(s)}" for s in settings)]  # fmt: skip
        subprocess.run([*AS_POSTGRES, pg_ctl, "-D", str(data), "-o", " ".join(options), "-l", str(root / "log"),
                        "-w", "start"], check=True, capture_output=True)  # fmt: skip
        return cls(data, pg_ctl, port)

    @classmethod
    def of(cls, server: str, pg_ctl: str) -> Postgres:
        """The running server at the URL `server`, found by asking it for its data folder."""
        import sqlalchemy

        engine = sqlalchemy.create_engine(f"{server}/postgres")
        with engine.connect() as conn:
            data = Path(conn.exec_driver_sql("SHOW data_directory").scalar_one())
        engine.dispose()
        return cls(data, pg_ctl, engine.url.port or 5432)

    @property
    def log(self) -> Path:
        return self.data.parent / "log"

    def stop(self, mode: str = "fast") -> None:
        subprocess.run([*AS_POSTGRES, self.pg_ctl, "-D", self.data, "-m", mode, "-w", "stop"], check=True,
                       capture_output=True)  # fmt: skip
        self.down = True

    def start(self) -> None:
        options = shlex.split((self.data / "postmaster.opts").read_text())[1:]  # the postgres binary first
        at = options.index("-D")
        options = options[:at] + options[at + 2 :]
        subprocess.run([*AS_POSTGRES, self.pg_ctl, "-D", self.data, "-o", shlex.join(options), "-l", self.log, "-w",
                        "start"], check=True, capture_output=True)  # fmt: skip
        self.down = False


def loopback(ip: str, folder: Path, cpus: int = 1) -> list[str]:
    """What `ray start` needs to be one of several nodes on one machine: the node's loopback address (Ray finds a
    machine's own), `cpus` CPUs (the nodes share this machine's cores), a session folder of its own (other Rays
    may run here), a small object store, no usage report, and --block, so that the node's processes stay under
    the one started and can be killed with it."""
    return ["--block", f"--node-ip-address={ip}", f"--num-cpus={cpus}", f"--temp-dir={folder}",
            f"--object-store-memory={80 * 2**20}", "--disable-usage-stats"]  # fmt: skip


def kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a process and every process it started (a raylet's workers leave its process group), then its
    group; reaped."""
    for pid in descendants(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def listening(ip: str, port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex((ip, port)) == 0


def alive_nodes(dashboard: int) -> int:
    """Ray nodes alive, by the state API of the head's dashboard on 127.0.0.1:`dashboard` (0 until it serves)."""
    from ray.util.state import list_nodes

    try:
        return sum(n.state == "ALIVE" for n in list_nodes(address=f"http://127.0.0.1:{dashboard}"))
    except Exception:  # the dashboard is not serving yet
        return 0


def spawn(argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    """`argv` in a session of its own (its group: what `kill_tree` stops), its output appended to `log`."""
    with log.open("ab") as out:
        return subprocess.Popen(argv, env=env, cwd=cwd, start_new_session=True, stdout=out, stderr=subprocess.STDOUT)


class Launcher:
    """One `ablate launch` process, its own scratch folder (the machine it runs on) and its output."""

    def __init__(self, sweep: str, argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> None:
        self.sweep, self.log = sweep, log
        self.proc = spawn(argv, env, cwd, log)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def __enter__(self) -> MlflowServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            kill_tree(self.proc)


def leftovers(folder: Path) -> list[int]:
    """SIGKILL every process whose command line names `folder` (what a process stopped or gone left behind, such
    as an embedded Ray's servers, whose session folder is under it); their pids."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if str(folder) in cmdline.read_bytes().decode(errors="replace") and int(cmdline.parent.name) != os.getpid():
                found.append(int(cmdline.parent.name))
    for pid in found:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return found


@contextlib.contextmanager
def s3_server(port: int) -> Iterator[dict[str, str]]:
    """A real S3-compatible HTTP server (moto in server mode) on 127.0.0.1:`port` while the block runs: the
    environment that points S3 clients at it (endpoint and dummy credentials)."""
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_for(lambda: listening("127.0.0.1", port) or proc.poll() is not None, timeout=60)
        if proc.poll() is not None:
            raise RuntimeError(f"the S3 server exited at start on port {port}")
        yield {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "test",
               "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=30)


class MlflowServer:
    """A real `mlflow server` on a SQLite backend in `folder`, on `port`; stopped by killing its process group."""

    def __init__(self, folder: Path, port: int) -> None:
        self.folder, self.port = folder, port
        self.proc: subprocess.Popen[bytes] | None = None
        self.uri = f"http://127.0.0.1:{port}"

    def start(self) -> MlflowServer:
        cmd = [MLFLOW, "server", "--backend-store-uri", f"sqlite:///{self.folder / 'm.sqlite'}",
               "--default-artifact-root", str(self.folder / "art"), "--host", "127.0.0.1", "--port", str(self.port),
               "--workers", "1"]  # fmt: skip
        self.proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(self.healthy, timeout=120)
        return self

    def healthy(self) -> bool:
        """Whether it answers a call that reads its store: /health answers before the server has made its fresh
        SQLite database, and a first call then can outlast ablate's 10 s HTTP timeout on a loaded machine."""
        try:
            with urllib.request.urlopen(f"{self.uri}/api/2.0/mlflow/experiments/get-by-name?experiment_name=Default",
                                        timeout=30) as r:  # fmt: skip
                return r.status == 200
        except OSError:
            return False

    def __enter__(self) -> MlflowServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
