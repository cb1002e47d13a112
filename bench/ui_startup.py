"""Seconds from starting `ablate ui` until it serves, against issue 17's budget (15 s), beside the floor:
`mlflow server` started directly with the same options.

    .venv/bin/python bench/ui_startup.py [--repeats 5]

Each side: a fresh process on a free port, timed from outside until `GET /` (the UI's page) answers 200,
then stopped with SIGTERM and waited for. The MLflow store is made (migrated) once before timing, as a launch
leaves it; the sides alternate (ABAB, BABA) so drifting load hits both alike; medians are printed.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from timing import alternate, medians

ROOT = Path(__file__).resolve().parents[1]
BUDGET = 15.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(args: list[str], port: int, cwd: Path) -> None:
    """Start `args`, return once GET / answers 200, after stopping it (SIGTERM to its group, waited for)."""
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
    proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # fmt: skip
    try:
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                if proc.poll() is not None:
                    raise SystemExit(f"{' '.join(args)} exited {proc.returncode} before serving") from None
                time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    repeats = parser.parse_args().repeats
    with tempfile.TemporaryDirectory(prefix="ablate-ui-bench-") as tmp:
        folder = Path(tmp)
        uri = f"sqlite:///{folder / 'mlflow.sqlite'}"
        sys.path.insert(0, str(ROOT))
        from ablate.tracking.tracker import Tracker

        Tracker(uri)  # the store a launch leaves: created and migrated

        def ablate_ui() -> None:
            port = free_port()
            serve([sys.executable, "-m", "ablate.cli", "ui", "--mlflow-uri", uri, "--port", str(port),
                   "--db", f"sqlite:///{folder / 'none.sqlite'}", "--no-browser"], port, folder)  # fmt: skip

        def mlflow_server() -> None:
            port = free_port()
            serve([sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri, "--port", str(port),
                   "--workers", "1"], port, folder)  # fmt: skip

        mlflow_server()  # warm-up (page cache, .pyc), the same for both sides
        times = alternate({"ablate ui": ablate_ui, "mlflow server": mlflow_server}, repeats)
    for name, seconds in medians(times).items():
        extra = f" (budget {BUDGET:.0f} s)" if name == "ablate ui" else " (floor)"
        print(f"{name:14s} {seconds:5.1f} s to serve{extra}; runs: {', '.join(f'{t:.1f}' for t in times[name])}")


if __name__ == "__main__":
    main()
