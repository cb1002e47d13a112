"""A real two-node Ray cluster on loopback: a sweep over a plugin's mechanism, launched with --address, runs on
both nodes (so the plugin is imported on the second node), lands in the store and MLflow, and its report
uses the plugin's words."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from conftest import TINY, free_port
from gate import Gate, wait_for
from procs import kill_tree
from test_plugins import plugin_source

from ablate.store import Store
from ablate.tracking.closing import waited
from ablate.tracking.tracker import Tracker

pytestmark = pytest.mark.timeout(420)
RAY = str(Path(sys.executable).with_name("ray"))
GATE_SCRIPT = Path(__file__).parents[1] / "gate.py"
IP = "127.0.0.2"  # Ray 2.60 cannot hold two nodes on 127.0.0.1


def start_node(args: list[str], env: dict, cpus: int) -> subprocess.Popen:
    """`ray start --block` in its own process group, so the test can stop exactly what it started."""
    return subprocess.Popen([RAY, "start", "--block", "--node-ip-address", IP, "--num-cpus", str(cpus),
                             "--object-store-memory", str(80 * 2**20), "--disable-usage-stats", *args],
                            env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


def nodes_alive(address: str, env: dict) -> int:
    out = subprocess.run([sys.executable, "-c", f"import ray; ray.init(address={address!r}); "
                          "print(sum(n['Alive'] for n in ray.nodes()))"],
                         env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    return int(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 and out.stdout.strip() else 0


@contextmanager
def two_nodes(cpus: int = 1) -> Iterator[tuple[str, dict, list[subprocess.Popen]]]:
    """A head and a worker node (`cpus` CPUs each) on loopback; stopped (their process groups killed) on exit."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_ADDRESS": ""}
    address = f"{IP}:{free_port(IP)}"
    nodes = [start_node(["--head", "--port", address.split(":")[1], "--include-dashboard", "false"], env, cpus)]
    try:
        deadline = time.monotonic() + 120
        while nodes_alive(address, env) < 1:
            assert time.monotonic() < deadline, "head did not start"
            time.sleep(1)
        nodes.append(start_node(["--address", address], env, cpus))
        while nodes_alive(address, env) < 2:
            assert time.monotonic() < deadline + 60, "second node did not join"
            time.sleep(1)
        yield address, env, nodes
    finally:
        for p in nodes:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=30)
        marker = Path(tempfile.gettempdir(), "ray", "ray_current_cluster")  # `ray start --head` points ray.init() here
        if marker.exists() and marker.read_text().strip() == address:
            marker.unlink()


def test_sweep_runs_across_two_nodes(tmp_path: Path) -> None:
    with two_nodes() as (address, env, _):
        cfg = {**TINY, "train": {**TINY["train"], "epochs": 3}}
        plugin_dir = tmp_path / "plugin"  # outside the repository, not installed
        plugin_dir.mkdir()
        (plugin_dir / "relu.py").write_text(plugin_source())
        f = tmp_path / "e.yaml"
        f.write_text(
            yaml.safe_dump(
                {
                    "plugins": ["./plugin/relu.py"],
                    "sweeps": {"two": {"base": {**cfg, "attention": {"kind": "relu"}}, "seeds": 4}},
                }
            )
        )
        db, ml = f"sqlite:///{tmp_path}/r.sqlite", f"sqlite:///{tmp_path}/m.sqlite"
        run = subprocess.run([sys.executable, "-m", "ablate.cli", "launch", str(f), "--address", address, "--db", db,
                              "--mlflow-uri", ml, "--plain", "--storage", str(tmp_path / "ck")],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
        assert run.returncode == 0, run.stdout + run.stderr
        with Store(db) as store:
            t = store.trials_frame("two")
        assert set(t["state"]) == {"done"} and len(t) == 4
        assert t["node_id"].nunique() == 2  # the plugin's trials ran on both nodes
        tracker = Tracker(ml, str(tmp_path / "art"))
        waited(tracker)  # what MLflow's mirror had not sent as the launch ended, its closing process sends
        runs = tracker.client.search_runs([tracker.experiment("two")], "tags.trial_key != ''")
        assert {r.data.tags["trial_key"] for r in runs} == set(t["key"])
        report = subprocess.run([sys.executable, "-m", "ablate.cli", "report", "two", "--db", db, "--format", "md"],
                                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
        assert report.returncode == 0, report.stderr
        assert "ReLU attention, attn-FFN" in (tmp_path / "reports" / "two" / "report.md").read_text()


def test_a_lost_node_preempts_its_trial_which_resumes_on_the_other(tmp_path: Path) -> None:
    """Two trials, one per node, provably mid-run (held at epoch 1 by the gate); the worker node dies (its
    processes killed, as a spot reclaim does): its trial is recorded `preempted`, starts again on the head
    node from its epoch-1 checkpoint and finishes; the other trial is untouched. Each node has room for both
    trials: they are on two nodes because trial tasks are spread (Ray's default put both on the launcher's
    node, the head, which has them at a quarter of its CPUs)."""
    with two_nodes(cpus=4) as (address, env, nodes):
        cfg = {**TINY, "train": {**TINY["train"], "epochs": 3}, "resources": {"cpus": 1}}
        f = tmp_path / "e.yaml"
        f.write_text(yaml.safe_dump({"sweeps": {"s": {"base": cfg, "seeds": 2}}}))
        gate = Gate(tmp_path / "gate", epoch=1)
        db = f"sqlite:///{tmp_path}/r.sqlite"
        args = ["launch", str(f), "--address", address, "--db", db, "--no-mlflow", "--plain", "--no-check",
                "--storage", str(tmp_path / "ck")]  # fmt: skip
        launcher = subprocess.Popen([sys.executable, str(GATE_SCRIPT), str(gate.folder), "1", "--", *args],
                                    cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True)  # fmt: skip
        try:
            gate.wait(2)
            with Store(db) as store:  # the launcher records each trial's node as its start message comes in
                placed = wait_for(lambda: (n := store.trials_frame("s")["node_id"]).notna().all() and n.tolist())
            assert len(set(placed)) == 2, placed
            kill_tree(nodes[1])
            gate.open()
            out, _ = launcher.communicate(timeout=300)
        finally:
            if launcher.poll() is None:
                launcher.kill()
        assert launcher.returncode == 0, out
        assert "its worker or node was lost; resuming from its checkpoint" in out
        with Store(db) as store:
            t = store.trials_frame("s").set_index("attempts")
        assert set(t["state"]) == {"done"} and sorted(t.index) == [1, 2]
        assert t.loc[2, "resumed_from"] == 1 and t.loc[1, "resumed_from"] == 0, out
