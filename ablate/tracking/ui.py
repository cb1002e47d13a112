"""The MLflow UI for `ablate ui`: the server, run so that none of it outlives the command (`UiServer`), and the
page it opens (`sweep_page`)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from ablate.tracking.view import LANDING, ui_route

if TYPE_CHECKING:
    from ablate.store import Store

UI_GRACE = 30.0
"""Seconds `ablate ui` waits for the MLflow server after forwarding a stop signal, before killing its group."""
QUIET_WARNINGS = "ignore:starlette.:UserWarning"
"""The server's Python warnings filter: Starlette's deprecation warnings (UserWarnings naming a `starlette.`
module, which MLflow's server imports) are MLflow's to mend, not the console's; a user's PYTHONWARNINGS comes
after it and wins. With `--registry-store-uri` and uvicorn at WARNING, the server prints nothing while it
serves."""


def sweep_page(base: str, store: Store | None, sweep: str | None = None) -> str:
    """The address of the runs page of `sweep`'s experiment in the MLflow UI at `base` (default: the sweep
    planned or launched last among those with an experiment), in the sweep's view (`LANDING`); the UI's experiment
    list where the store knows none. LookupError for a sweep the store lacks or that has no experiment yet."""
    frame = store.sweeps_frame() if store is not None else None
    if sweep is not None:
        if frame is None or sweep not in set(frame["name"]):
            names = ", ".join(frame["name"]) if frame is not None else ""
            raise LookupError(f"no sweep {sweep!r} in the results database (sweeps there: {names or 'none'})")
        exp = frame.set_index("name").at[sweep, "mlflow_experiment_id"]
        if not isinstance(exp, str):
            raise LookupError(f"sweep {sweep!r} has no MLflow experiment yet: `ablate sync` makes it")
    else:
        known = frame.dropna(subset=["mlflow_experiment_id"]) if frame is not None else None
        if known is None or known.empty:
            return f"{base}/{ui_route('experiments')}"
        exp = known.sort_values("updated_at").iloc[-1]["mlflow_experiment_id"]
    return f"{base}/{ui_route(f'experiments/{exp}/runs', LANDING)}"


def _die_with(parent: int) -> None:
    """In the forked server, before it runs: ask Linux to send it SIGTERM when `parent` (`ablate ui`) dies, even
    by SIGKILL, which no handler of ours sees; elsewhere nothing. A parent already gone ends it at once."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
        if os.getppid() != parent:
            os._exit(1)


class UiServer:
    """`mlflow server` on a tracking store for `ablate ui`, run until it exits or this process gets SIGTERM or
    SIGINT. The signal is forwarded to it once (it runs in a process group of its own, out of the terminal's
    reach) and waited for, at most `UI_GRACE` seconds before its whole group is killed: no server or worker
    outlives the command. One worker and no job runner, the least there is to start.

        with UiServer(uri, "127.0.0.1", 5000) as server:
            seconds = server.ready()     # None: it exited, or was told to stop, before serving
            code = server.wait()
    """

    def __init__(self, uri: str, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri, "--registry-store-uri",
                    uri, "--host", host, "--port", str(port), "--workers", "1", "--uvicorn-opts",
                    "--log-level warning"]  # fmt: skip
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopping: float | None = None
        """When the first stop signal came (monotonic seconds)."""
        self.started = 0.0
        self._saved: dict[int, Any] = {}

    def __enter__(self) -> UiServer:
        for sig in (signal.SIGTERM, signal.SIGINT):  # before the server exists: no signal can orphan it
            self._saved[sig] = signal.signal(sig, self._forward)
        self.started = time.monotonic()
        env = {
            **os.environ,
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
            "PYTHONWARNINGS": ",".join(filter(None, [QUIET_WARNINGS, os.environ.get("PYTHONWARNINGS")])),
        }
        parent = os.getpid()
        self.proc = subprocess.Popen(self.cmd, env=env, start_new_session=True,
                                     preexec_fn=lambda: _die_with(parent))  # fmt: skip
        if self.stopping is not None:
            self.proc.terminate()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self.proc is not None and self.proc.poll() is None:
                self.stopping = self.stopping or time.monotonic()
                self.proc.terminate()
            self.wait()
        finally:
            for sig, handler in self._saved.items():
                signal.signal(sig, handler)

    def _forward(self, signum: int, _frame: Any) -> None:
        self.stopping = self.stopping or time.monotonic()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signum)

    def ready(self) -> float | None:
        """Seconds from the start until the server accepts connections; None if it exited or was told to
        stop first."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        while self.proc is not None and self.proc.poll() is None and self.stopping is None:
            try:
                with socket.create_connection((host, self.port), timeout=1):
                    return time.monotonic() - self.started
            except OSError:
                time.sleep(0.1)
        return None

    def wait(self) -> int:
        """Wait for the server to exit (its group killed `UI_GRACE` seconds after a stop signal); its exit code,
        128 + N after death by signal N."""
        if self.proc is None:
            return 0
        while True:
            try:
                code = self.proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if self.stopping is not None and time.monotonic() - self.stopping > UI_GRACE:
                    self._kill_group()
        self._kill_group()  # whatever of its group is left (a worker whose parent went first)
        return code if code >= 0 else 128 - code

    def _kill_group(self) -> None:
        if self.proc is not None:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
