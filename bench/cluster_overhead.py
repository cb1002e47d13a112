"""Orchestration overhead per trial on a three-node loopback Ray cluster, and the launcher's CPU share (issue 29
item 3).

    .venv/bin/python bench/cluster_overhead.py [--trials 1000] [--poll SECONDS] [--sleep SECONDS]

A Ray head and two worker nodes started as the team test starts them (`ray start --head`, `ray start --address`,
each on a loopback address of its own with --num-cpus=1: three trial slots, tests/procs.py), and one launcher
process on the head's address running --trials trials through `ablate.launch` (the library call behind `ablate
launch --address`; store in a SQLite file, no MLflow). A trial is the cheapest real task, bench/launchers_pg.py's:
digits, a one-block 16-wide ViT, one epoch (about 0.1 s of training once a worker has imported torch). The
launcher's runner is the real `run_trial`, wrapped to append when it began and ended on the worker (one machine:
one clock) to a file. `--sleep S`: trials of equal work that need no core (each sleeps S seconds and reports one
epoch): three slots on a machine of two cores can run three of those at once, so the launch's parallel efficiency
is the launcher's and Ray's alone: the trials' own time over slots x the launch call's wall (issue 58 item 2's
mark: 0.9 for 32 trials; 32 trials on 3 slots fill at most 32 / 33 of them).

Overhead of a trial: how long its slot sat idle before it, i.e. its start minus the end of the previous trial on
the same node (each node runs one trial at a time). That is everything between two trials' training: Ray handing
back the result, the launcher noticing it (its loop polls Ray every 0.2 s), the outcome and the lease release
written to the store, the next claim and submission, Ray's scheduling, the worker's task set-up (its `Started`
message to the launcher, the checkpoint folder) and tear-down. Printed: its p50, mean, p90, p99 and max
against the 50 ms target; the whole launch's overhead, (launch wall x slots - sum of trial times) / trials, which
adds start-up (Ray connect, the plan's store writes, the first trial of each node) and the tail; the ratio of the
launch's wall to its trials' own time per slot.

The launcher's CPU share: its process's CPU time (user + system, every thread, the Ray driver's included) over
wall time during the launch call, and over its whole life (interpreter start and imports too: wait4's rusage).
Every process the bench started is stopped by its pid (and what it started) and its folder removed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import yaml
from concurrency import percentile
from launchers_pg import BASE, ms
from sweep_scale import load

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the nodes the team test starts
from conftest import free_port
from gate import wait_for
from procs import NODES, Launcher, alive_nodes, kill_tree, leftovers, listening, loopback, spawn

from ablate.execution.launcher import RunConfig
from ablate.store import Store

RAY = str(Path(sys.executable).with_name("ray"))
SWEEP = "overhead"
STARTUP = 300.0
"""Seconds the nodes may take to come up before the bench gives up (a loaded machine is slow, never this slow)."""


def timed(path: str, sleep: float | None = None) -> Callable[..., Any]:
    """The real trial body (or, with `sleep`, `sleep` seconds asleep and one epoch reported), appending its key,
    node, worker process, start and end times and CPU time to `path` (pickled by value)."""

    def runner(cfg: Any, report: Any, checkpoint_dir: Path) -> Any:
        import ray

        from ablate.training.messages import TrialResult

        if sleep is None:  # imported before the clock starts, as before: torch and timm are the worker's start-up
            from ablate.training.loop import run_trial
        began, cpu = time.time(), time.process_time()
        if sleep is None:
            result = run_trial(cfg, report, checkpoint_dir)
        else:
            time.sleep(sleep)
            report(1, {"val.top1": 1.0})
            result = TrialResult("done", 1, {"test.top1": 1.0})
        ended, cpu = time.time(), time.process_time() - cpu
        node = ray.get_runtime_context().get_node_id()
        with open(path, "a") as f:
            f.write(json.dumps({"key": Path(checkpoint_dir).name, "node": node, "pid": os.getpid(), "began": began,
                                "ended": ended, "cpu": cpu}) + "\n")  # fmt: skip
        return result

    return runner


def child(folder: Path, address: str, poll: float, sleep: float | None) -> None:
    """The launcher (its own process): launch the sweep on the cluster; write its wall and CPU time."""
    import ablate
    from ablate.execution.launcher import Cluster
    from ablate.execution.progress import Display
    from ablate.planning.plan import plan

    trials = plan(folder / "e.yaml", SWEEP)
    run = RunConfig(str(folder / "checkpoints"), runner=timed(str(folder / "times.jsonl"), sleep), poll=poll)
    before, t0, began = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter(), time.time()
    result = ablate.launch(trials, f"sqlite:///{folder / 'r.sqlite'}", False, cluster=Cluster(address), run=run,
                           progress=Display(live=False))  # fmt: skip
    wall, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    (folder / "launch.json").write_text(json.dumps({"began": began, "wall": wall, "cpu": cpu,
                                                    "counts": dict(result.counts)}))  # fmt: skip


def nodes(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The trials of each node, in the order they began."""
    by_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: r["began"]):
        by_node[r["node"]].append(r)
    return by_node


def overheads(rows: list[dict[str, Any]]) -> tuple[list[float], list[float], dict[str, float]]:
    """Per trial, its node's idle time before it (the first trial of each node has none), split by whether it ran
    in the same Ray worker process as the trial before it there or in a new one; each node's first start."""
    same, fresh, first = [], [], {}
    for node, runs in nodes(rows).items():
        first[node] = runs[0]["began"]
        for a, b in itertools.pairwise(runs):
            (same if a["pid"] == b["pid"] else fresh).append(b["began"] - a["ended"])
    return same, fresh, first


def start_cluster(stack: ExitStack, work: Path, env: dict[str, str]) -> str:
    """A Ray head and two worker nodes on loopback (`NODES`), their session folders and logs in `work`, stopped
    with `stack`; the head's address once every node is alive."""
    nodes: list[subprocess.Popen[bytes]] = []
    stack.callback(lambda: [kill_tree(node) for node in nodes])
    port, dashboard = free_port(NODES[0]), free_port()
    address = f"{NODES[0]}:{port}"
    for i, ip in enumerate(NODES):
        role = ["--head", f"--port={port}", f"--dashboard-port={dashboard}"] if i == 0 else [f"--address={address}"]
        nodes.append(spawn([RAY, "start", *role, *loopback(ip, work / f"ray{i}")], env, work, work / f"node{i}.log"))
        if i == 0:
            wait_for(lambda: listening(NODES[0], port), STARTUP)
    wait_for(lambda: alive_nodes(dashboard) == len(NODES), STARTUP)
    return address


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--poll", type=float, default=RunConfig.poll, help="the launcher's Ray poll (RunConfig.poll)")
    ap.add_argument("--sleep", type=float, help="trials that sleep this many seconds instead of training")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--address", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child, a.address, a.poll, a.sleep)
        return
    work = Path(tempfile.mkdtemp(prefix="ablate-co-"))  # short: Ray's socket paths live under it
    body = "digits, 1-block ViT, 1 epoch" if a.sleep is None else f"each asleep {a.sleep:g} s"
    print(f"cluster_overhead: {a.trials} trials ({body}) on {len(NODES)} loopback nodes x 1 "
          f"CPU, {os.cpu_count()} cores, launcher poll {a.poll:g} s; {load()}", flush=True)  # fmt: skip
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_ADDRESS": "", "RAY_TMPDIR": str(work / "ray")}
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, work, ignore_errors=True)
        stack.callback(lambda: print(f"  cleaned up; {len(leftovers(work))} processes left behind"))
        address = start_cluster(stack, work, env)
        (work / "e.yaml").write_text(yaml.safe_dump({"sweeps": {SWEEP: {"base": {**BASE, "resources": {"cpus": 1}},
                                                                        "seeds": a.trials}}}))  # fmt: skip
        began = time.perf_counter()
        launcher = Launcher(SWEEP, [sys.executable, __file__, "--child", str(work), "--address", address,
                                    "--poll", str(a.poll), *(["--sleep", str(a.sleep)] if a.sleep else [])], env, work,
                            work / "launcher.log")  # fmt: skip
        stack.callback(launcher.kill)
        _, status, usage = os.wait4(launcher.proc.pid, 0)
        life = time.perf_counter() - began
        launcher.proc.returncode = os.waitstatus_to_exitcode(status)
        if launcher.proc.returncode:
            raise SystemExit(f"the launcher failed ({launcher.proc.returncode}):\n{launcher.text()[-3000:]}")
        launch = json.loads((work / "launch.json").read_text())
        rows = [json.loads(line) for line in (work / "times.jsonl").read_text().splitlines()]
        with Store(f"sqlite:///{work / 'r.sqlite'}") as store:
            frame = store.trials_frame(SWEEP)
        report(a.trials, rows, launch, frame, usage.ru_utime + usage.ru_stime, life)


def q(values: list[float], at: float) -> str:
    """The `at` quantile of `values` (seconds) in milliseconds."""
    return f"{percentile(values, at) * 1e3:.0f} ms"


def report(
    trials: int, rows: list[dict[str, Any]], launch: dict[str, Any], frame: Any, cpu: float, life: float
) -> None:
    once = (frame["state"] == "done") & (frame["attempts"] == 1)
    runs = Counter(r["key"] for r in rows)
    twice = sorted(k[:10] for k, n in runs.items() if n > 1)
    print(f"  trials: {len(runs)} of {trials} trained, {int(once.sum())} done with one attempt (store)"
          + (f"; trained twice: {', '.join(twice)}" if twice else "")
          + (f"; not once: {', '.join(frame[~once]['key'].str[:10])}" if not once.all() else ""))  # fmt: skip
    own = [r["ended"] - r["began"] for r in rows]
    same, fresh, first = overheads(rows)
    gaps = same + fresh
    slots, mean = len(first), statistics.fmean(gaps)
    per_slot = sum(own) / slots
    whole = (launch["wall"] * slots - sum(own)) / len(rows)
    per_node = [f"{len(rs)} trials, p50 {q([r['ended'] - r['began'] for r in rs], 0.5)} "
                f"({q([r['cpu'] for r in rs], 0.5)} CPU)" for rs in nodes(rows).values()]  # fmt: skip
    print(f"  trial's own time (run_trial on the worker): p50 {q(own, 0.5)}, sum {sum(own):.1f} s over {slots} "
          f"slots; per node: {'; '.join(per_node)}")  # fmt: skip
    print(f"  overhead per trial (its node idle before it, {len(gaps)} trials): p50 {q(gaps, 0.5)}, mean "
          f"{mean * 1e3:.0f} ms, p90 {q(gaps, 0.9)}, p99 {q(gaps, 0.99)}, max {max(gaps) * 1e3:.0f} ms; target < 50 "
          f"ms: {'met' if mean < 0.05 else 'missed'} (mean); p50 / own p50 "
          f"{percentile(gaps, 0.5) / percentile(own, 0.5):.1f}")  # fmt: skip
    print(f"    in the worker process of the trial before: {len(same)}, {ms(same)}; in a new worker process "
          f"(Ray starts one, which imports ablate and torch before the trial): {len(fresh)}"
          + (f", {ms(fresh)}" if fresh else ""))  # fmt: skip
    print(f"  whole launch: {launch['wall']:.1f} s for {per_slot:.1f} s of training per slot (ratio "
          f"{launch['wall'] / per_slot:.1f}); (wall x {slots} - own) / trials = {whole * 1e3:.0f} ms per trial; first "
          f"trial {min(first.values()) - launch['began']:.1f} s after the launch call; parallel efficiency (own time / "
          f"(slots x wall)) {sum(own) / (slots * launch['wall']):.3f}")  # fmt: skip
    print(f"  launcher CPU: {launch['cpu']:.1f} s in the launch call's {launch['wall']:.1f} s = "
          f"{launch['cpu'] / launch['wall']:.0%} of a core; whole process {cpu:.1f} s of {life:.1f} s = "
          f"{cpu / life:.0%}; {load()}")  # fmt: skip


if __name__ == "__main__":
    main()
