"""A chaos soak of the team set-up (issue 42): random faults, drawn from a seed, on the whole thing at once.

    .venv/bin/python bench/soak.py SECONDS [--seed N] [--lease 20] [--launchers 3] [--out FILE]
    make soak SECONDS=1800 SEED=7

The set-up is the team test's (tests/team.py: the cluster tutorial's commands on loopback): a PostgreSQL server
started here holding the results store and MLflow's database, an MLflow server with its artifacts in a bucket on
the S3 test server (moto; every S3 client reaches it through `chaos.Proxy`), a Ray head and two worker nodes, and
launchers: `--launchers` at a time, each on the next of a chain of sweeps where every trial (a seed of the tests'
TINY trial, three epochs) is in two sweeps, a new one started as one ends, one whose run a fault cut started again.

For SECONDS the faults of `chaos.schedule(seed)` land as drawn, each in a thread of its own, so they overlap:
  node             a worker node SIGKILLed with its processes, started again after a while
  launcher-term    a launcher SIGTERMed, started again (with the fault's clock skew) after a while
  launcher-kill    a launcher SIGKILLed with what it started, started again after a while
  launcher-new     one more launcher, on the next sweep, with the fault's clock skew
  postgres-restart PostgreSQL stopped (fast) and started at once
  postgres-down    PostgreSQL stopped for a few seconds (refusing connections), then started
  mlflow-down      the MLflow server stopped for a while, then started
  bucket-down      the bucket unreachable for a while (connections refused, open ones cut)
  checkpoint-kill  the next trial to write a checkpoint (its file, or its upload) SIGKILLed halfway through
Launchers run the CLI through tests/chaos.py, which skews their clock and witnesses every training attempt.

Then every fault is undone, the launchers end, every sweep is launched once more, `ablate sync` and `ablate
report` run, and the invariants are checked: every planned trial done with its final metrics; each trained to the
end exactly once (the witnesses), never two trainings of one key at once (the witnesses' locks); no done result
changed afterwards (the store watched every second) or kept as a previous result; no lease held; MLflow equal to
the store (one run per trial); every trial's published checkpoint whole and the one the store records; and every
sweep's trial table equal to the one a quiet launch of the same sweeps records (the same trials, the same values to
the last digit, measured columns aside). A violation prints the seed, the faults as they ran and the invariant;
the exit status is 1. The figures (trials, faults by kind, overlaps, violations, trials trained more than once,
results lost, the time from the last fault to every trial done) are printed and written to --out as JSON.
Every process the soak started is stopped by its pid (and what it started) and its folders removed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path.insert(0, str(TESTS))  # the set-up the team test starts
import chaos  # noqa: E402
from conftest import TINY, free_port, postgres_binary  # noqa: E402
from procs import Launcher, Postgres, kill_tree, leftovers, s3_server  # noqa: E402
from team import (  # noqa: E402
    ABLATE,
    MEASURED,
    Team,
    Timeline,
    checkpoint_differences,
    healthy,
    mlflow_differences,
    orphans,
)

from ablate.planning.plan import plan  # noqa: E402
from ablate.store import Store  # noqa: E402

EPOCHS = 3
"""Epochs per trial: long enough for faults to land mid-run, and a mid-training checkpoint to resume from."""
MAX_LAUNCHERS = 5
"""Launchers at once at most (the machine's cores are shared by all of them and the nodes)."""
VOLATILE = {"attempts", "resumed_from", "host", "node_id", "device", "created_at", "started_at", "finished_at",
            "duration_s", "error", "mlflow_run_id", "lease_host", "lease_expires", "peak_memory", "sweep",
            "position"}  # fmt: skip
"""Trial-table columns that say how a trial ran, not what it gave: left out of the comparison with a quiet run."""


def sweeps(n: int) -> dict[str, dict[str, Any]]:
    """A chain of `n` sweeps, s0, s1, ...: sweep i holds seeds 2i to 2i + 3, so every trial is in two of them."""
    base = {**TINY, "train": {**TINY["train"], "epochs": EPOCHS}}
    return {f"s{i}": {"base": base, "seeds": list(range(2 * i, 2 * i + 4))} for i in range(n)}


@dataclass
class Soak:
    """What the soak runs and what it saw."""

    team: Team
    work: Path
    seed: int
    lease: float
    launchers: int
    proxy: chaos.Proxy
    note: Timeline
    chain: list[str]
    began: float = field(default_factory=time.monotonic)
    queue: list[tuple[str, float]] = field(default_factory=list)
    """Sweeps to launch (again), with the launcher's clock skew, before the next new one."""
    next_sweep: int = 0
    cut: set[str] = field(default_factory=set)
    """Launchers a fault stopped (the fault starts their sweep again)."""
    seen: set[str] = field(default_factory=set)
    """Launchers whose end the supervisor has handled."""
    ran: list[tuple[chaos.Fault, float, float]] = field(default_factory=list)
    """Each fault with when it began and ended (seconds from the start)."""
    errors: list[str] = field(default_factory=list)
    """Faults that could not be carried out (a soak problem, not the product's)."""
    results: chaos.Watch = field(init=False)
    """The watch on done results: it reaches back a launcher's largest clock skew and a lease (the longest a finish
    may take from its stamp to its commit: outages stay under it)."""
    all_done_at: float | None = None
    mlflow_restarts: int = 0
    """Times the MLflow server exited by itself and was started again (`mlflow_up`)."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.results = chaos.Watch(back=chaos.skew_max(self.lease) + self.lease)

    def now(self) -> float:
        return time.monotonic() - self.began

    # ------------------------------------------------------------------------------------------ launchers
    def launch(self, sweep: str, skew: float, *extra: str) -> Launcher:
        with self.lock:
            name = f"{sweep}#{sum(n.split('#')[0] == sweep for n in self.team.launchers)}"
            prefix = (sys.executable, str(TESTS / "chaos.py"), str(self.work), str(skew))
            launcher = self.team.start(sweep, name, prefix, ("--lease", str(self.lease), "--yes", *extra))
        self.note(f"launcher {name} started (clock {skew:+.1f} s)")
        return launcher

    def running(self) -> dict[str, Launcher]:
        with self.lock:
            return {n: la for n, la in self.team.launchers.items() if la.proc.poll() is None}

    def supervise(self, until: float) -> None:
        """Keep `launchers` launchers running: a cut sweep again first, else the next new one (until `until`)."""
        for name, launcher in list(self.team.launchers.items()):
            code = launcher.proc.poll()
            if code is None or name in self.seen:
                continue
            self.seen.add(name)
            if name not in self.cut and code != 0:
                self.note(f"launcher {name} exited {code}: its sweep goes again")
                self.queue.append((launcher.sweep, 0.0))
        self.keep_mlflow()
        while self.queue and len(self.running()) < MAX_LAUNCHERS:
            self.launch(*self.queue.pop(0))
        while self.now() < until and len(self.running()) < self.launchers and self.next_sweep < len(self.chain):
            self.launch(self.chain[self.next_sweep], 0.0)
            self.next_sweep += 1

    # ------------------------------------------------------------------------------------------ faults
    def inject(self, fault: chaos.Fault, n: int) -> None:
        """Carry out one fault (in its own thread), undoing it after its time."""
        began = self.now()
        self.note(f"F{n} begins: {fault}")
        try:
            getattr(self, f"_{fault.kind.replace('-', '_')}")(fault, n)
        except Exception as e:  # the soak goes on; the note names it
            self.errors.append(f"F{n} {fault.kind}: {type(e).__name__}: {e}")
            self.note(f"F{n} {fault.kind} could not be carried out: {e}")
        self.ran.append((fault, began, self.now()))
        self.note(f"F{n} {fault.kind} ends")

    def _node(self, fault: chaos.Fault, n: int) -> None:
        kill_tree(self.team.nodes[fault.pick])
        time.sleep(fault.seconds)
        self.team.start_node(fault.pick)

    def _stop_launcher(self, fault: chaos.Fault, sig: int) -> None:
        running = sorted(self.running().items())
        if not running:
            return
        name, launcher = running[fault.pick % len(running)]
        self.cut.add(name)
        self.note(f"  {name} {'SIGTERM' if sig == signal.SIGTERM else 'SIGKILL'}")
        if sig == signal.SIGTERM:
            launcher.proc.send_signal(sig)
            with suppress(subprocess.TimeoutExpired):
                launcher.proc.wait(timeout=60)
        launcher.kill()
        time.sleep(fault.seconds)
        self.queue.insert(0, (launcher.sweep, fault.skew))

    def _launcher_term(self, fault: chaos.Fault, n: int) -> None:
        self._stop_launcher(fault, signal.SIGTERM)

    def _launcher_kill(self, fault: chaos.Fault, n: int) -> None:
        self._stop_launcher(fault, signal.SIGKILL)

    def _launcher_new(self, fault: chaos.Fault, n: int) -> None:
        if self.next_sweep < len(self.chain):
            self.queue.append((self.chain[self.next_sweep], fault.skew))
            self.next_sweep += 1

    def _postgres_restart(self, fault: chaos.Fault, n: int) -> None:
        self.team.pg.stop()
        self.team.pg.start()

    def _postgres_down(self, fault: chaos.Fault, n: int) -> None:
        self.team.pg.stop()
        time.sleep(fault.seconds)
        self.team.pg.start()

    def _mlflow_down(self, fault: chaos.Fault, n: int) -> None:
        with self.team.mlflow.held:
            self.team.mlflow.stop()
            time.sleep(fault.seconds)
            self.team.mlflow.start()

    def keep_mlflow(self) -> None:
        """Start the MLflow server again if it exited by itself (its database down as it started)."""
        code = self.team.mlflow.keep()
        if code is not None:
            self.mlflow_restarts += 1
            self.note(f"the MLflow server exited {code} (its database was down as it started): started again")

    def mlflow_up(self) -> bool:
        self.keep_mlflow()
        return healthy(self.team.uri)

    def _bucket_down(self, fault: chaos.Fault, n: int) -> None:
        self.proxy.down()
        time.sleep(fault.seconds)
        self.proxy.up()

    def _checkpoint_kill(self, fault: chaos.Fault, n: int) -> None:
        chaos.request_kill(self.work, n, fault.pick)

    # ------------------------------------------------------------------------------------------ watching
    def watch(self, store: Store, keys: set[str] | None = None) -> None:
        """Note each done trial's finish time and result the first time it is seen, and any later change
        (`chaos.Watch`); with `keys`, when all of them are first seen done."""
        for line in self.results.look(store):
            self.note(line)
        if keys and self.all_done_at is None and keys <= self.results.done.keys():
            self.all_done_at = self.now()


def keep_logs(work: Path, to: Path) -> None:
    """Copy the servers', nodes' and launchers' logs and the witnesses' record to `to`."""
    to.mkdir(parents=True, exist_ok=True)
    for log in [*work.glob("*.log"), *work.glob("attempts.jsonl")]:
        shutil.copy(log, to)


def planned(experiments: Path, sweeps_: list[str]) -> set[str]:
    """The keys of the sweeps' trials, as `ablate plan` gives them."""
    return {t.key for s in sweeps_ for t in plan(experiments, s).trials}


def witnesses(work: Path) -> list[dict[str, Any]]:
    path = work / "attempts.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def compare_with_quiet(store: Store, quiet: Store, sweeps_: list[str]) -> list[str]:
    """Where a sweep's trial table differs from a quiet launch's, the columns of `VOLATILE` and `MEASURED` aside."""
    out = []
    for s in sweeps_:
        a, b = (st.trials_frame(s).set_index("key").sort_index() for st in (store, quiet))
        columns = [c for c in a.columns if c not in VOLATILE and not any(m in c for m in MEASURED)]
        if list(a.index) != list(b.index):
            out.append(f"sweep {s}: trials {list(a.index)} != quiet {list(b.index)}")
        elif not a[columns].equals(b.reindex(columns=columns)):
            diff = [c for c in columns if not a[c].equals(b[c]) if c in b]
            out.append(f"sweep {s}: columns {diff or 'set'} differ from a quiet launch's")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("seconds", type=float, help="how long faults are injected")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lease", type=float, default=20.0, help="the launchers' --lease (seconds)")
    ap.add_argument("--launchers", type=int, default=3, help="launchers kept running at once")
    ap.add_argument("--out", type=Path, help="write the figures here as JSON")
    ap.add_argument("--logs", type=Path, help="copy the launchers', servers' and witnesses' logs here")
    args = ap.parse_args()
    faults = chaos.schedule(args.seed, args.seconds, args.lease)
    root = Path(tempfile.mkdtemp(prefix="ablate-soak-"))  # short: Ray's socket paths live under it
    note = Timeline()
    note(f"soak: seed {args.seed}, {args.seconds:.0f} s, {len(faults)} faults drawn, lease {args.lease:.0f} s")
    violations: list[str] = []
    figures: dict[str, Any] = {"seed": args.seed, "seconds": args.seconds, "lease": args.lease}
    initdb, pg_ctl = postgres_binary("initdb"), postgres_binary("pg_ctl")
    assert initdb and pg_ctl, "the soak needs PostgreSQL's initdb and pg_ctl (Debian: apt-get install postgresql)"
    with ExitStack() as servers:
        servers.callback(leftovers, root)
        servers.callback(shutil.rmtree, root, ignore_errors=True)
        root.chmod(0o755)  # PostgreSQL's programs run as its own user here when this runs as root
        (root / "pg").mkdir()
        pg = Postgres.create(root / "pg", initdb, pg_ctl, free_port())
        servers.callback(lambda: pg.stop("immediate") if not pg.down else None)
        env = servers.enter_context(s3_server(free_port()))
        proxy = chaos.Proxy(int(env["AWS_ENDPOINT_URL"].rsplit(":", 1)[1])).up()
        os.environ.update({**env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{proxy.port}"})
        import fsspec

        fsspec.filesystem("s3", skip_instance_cache=True).mkdir("soak")
        chain = list(sweeps(int(args.seconds / 10) + 8))  # more than the launchers get through
        experiments = root / "experiments.yaml"
        experiments.write_text(yaml.safe_dump({"sweeps": sweeps(len(chain))}, sort_keys=False))
        with ExitStack() as cleanup:
            team = Team(root / "team", root, experiments, pg.url, "s3://soak/sweeps", note, cleanup)
            (root / "team").mkdir()
            if args.logs:  # the evidence, kept whether the soak passes, fails or is stuck
                cleanup.callback(keep_logs, root / "team", args.logs)
            team.up()
            soak = Soak(team, root / "team", args.seed, args.lease, args.launchers, proxy, note, chain)
            note.context = lambda: "\n".join(f"==== {n}\n{la.text()[-3000:]}" for n, la in team.launchers.items())
            store = cleanup.enter_context(Store(team.url))
            threads, pending = [], list(enumerate(faults, 1))
            soak.began = time.monotonic()
            while soak.now() < args.seconds:
                while pending and pending[0][1].at <= soak.now():
                    n, fault = pending.pop(0)
                    threads.append(threading.Thread(target=soak.inject, args=(fault, n), daemon=True))
                    threads[-1].start()
                soak.supervise(until=args.seconds)
                soak.watch(store)
                time.sleep(0.2)
            for t in threads:
                t.join()
            for request in [*(root / "team" / "kill").glob("*.save"), *(root / "team" / "kill").glob("*.upload")]:
                request.unlink()  # no trial wrote a checkpoint before the schedule ended: the fault did not land
            last_fault = max((end for _, _, end in soak.ran), default=0.0)
            note(f"schedule over: {len(soak.ran)} faults, all undone; launchers end")
            for i, node in enumerate(team.nodes):
                if node.poll() is not None:
                    team.start_node(i)
            note.until(soak.mlflow_up, "the MLflow server")
            keys = planned(experiments, chain[: soak.next_sweep])
            while soak.running() or soak.queue:
                soak.supervise(until=0)
                soak.watch(store, keys)
                time.sleep(0.5)
            started = chain[: soak.next_sweep]
            third = [started[i :: args.launchers] for i in range(args.launchers)]
            again = [soak.launch(group[0], 0.0, *group[1:]) for group in third if group]
            note(f"every sweep launched once more ({len(started)} sweeps, {len(again)} launchers)")
            while any(la.proc.poll() is None for la in again):
                soak.watch(store, keys)
                time.sleep(0.5)
            soak.watch(store, keys)
            codes = {n: la.proc.returncode for n, la in team.launchers.items()}
            note(f"launchers ended: {Counter(codes.values())}")
            synced = team.cli("sync", *started, "--db", team.url, "--mlflow-uri", team.uri)
            note(f"ablate sync: {synced.strip().splitlines()[-1] if synced.strip() else ''}")
            team.cli("report", *started, "--db", team.url, "--out", str(root / "reports"))
            note("ablate report: every sweep's report built")

            states = store.states(keys)
            if missing := sorted(k[:10] for k in keys if states.get(k) != "done"):
                violations.append(f"not done: {missing}")
            no_metrics = [k[:10] for k in keys if not store.trial(k).result or not store.metric_rows(k)]
            violations += [f"no final metrics: {no_metrics}"] if no_metrics else []
            seen = witnesses(root / "team")
            ended = Counter(w["key"] for w in seen if w["event"] == "end" and w["trained"])
            trained = Counter(w["key"] for w in seen if w["event"] == "delivered" and w["state"] == "done"
                              and (w["resumed_from"] or 0) < EPOCHS)  # fmt: skip
            twice = sorted(k[:10] for k, c in trained.items() if c > 1)
            never = sorted(k[:10] for k in keys if ended[k] == 0 or trained[k] == 0)
            violations += [f"trained to the end more than once: {twice}"] if twice else []
            violations += [f"done without a witnessed training: {never}"] if never else []
            if concurrent := sorted({w["key"][:10] for w in seen if w["event"] == "concurrent"}):
                violations.append(f"two trainings of one key at once: {concurrent}")
            if soak.results.changed:
                violations.append(f"done results changed afterwards: {[k[:10] for k in soak.results.changed]}")
            if kept := [k[:10] for k in keys if store.previous(k)]:
                violations.append(f"trained again as a new result: {kept}")
            if held := store.holders(keys):
                violations.append(f"leases left held: {sorted(k[:10] for k in held)}")
            violations += mlflow_differences(store, team.uri, started, sorted(keys))
            violations += checkpoint_differences(store, team.storage, sorted(keys))
            left = orphans(team.storage, sorted(keys))
            kinds = Counter(f.kind for f, _, _ in soak.ran)
            killed = [w for w in seen if w["event"] == "killed"]
            figures.update(
                trials=len(keys), sweeps=len(started), faults=len(soak.ran), by_kind=dict(sorted(kinds.items())),
                checkpoint_kills_landed=len(killed),
                overlapping=chaos.overlapping([chaos.Fault(b, f.kind, e - b, f.pick) for f, b, e in soak.ran]),
                starts=sum(w["event"] == "begin" for w in seen), trained_more_than_once=len(twice),
                trainings_cut_after_they_ended=sum(ended.values()) - sum(trained.values()),
                results_lost=len(soak.results.changed) + len(missing), orphan_objects=len(left),
                fault_errors=soak.errors, mlflow_restarts=soak.mlflow_restarts,
                launcher_exits=dict(Counter(str(c) for c in codes.values())),
                seconds_from_last_fault_to_all_done=(round(soak.all_done_at - last_fault, 1)
                                                     if soak.all_done_at is not None else None),
            )  # fmt: skip
        note("the set-up stopped; a quiet launch of the same sweeps (embedded Ray, SQLite, no faults)")
        quiet_db = f"sqlite:///{root / 'quiet.sqlite'}"
        run = subprocess.run([ABLATE, "launch", str(experiments), *started, "--plain", "--yes", "--no-mlflow",
                              "--db", quiet_db, "--storage", str(root / "quiet")], cwd=root, capture_output=True,
                             text=True, env={**os.environ, "RAY_ADDRESS": "", "RAY_AUTH_MODE": "disabled"})  # fmt: skip
        if run.returncode != 0:
            violations.append(f"the quiet launch exited {run.returncode}: {run.stdout[-2000:]}{run.stderr[-2000:]}")
        else:
            with Store(team.url) as store, Store(quiet_db) as quiet:
                violations += compare_with_quiet(store, quiet, started)
        figures["violations"] = violations
    print(json.dumps(figures, indent=2))
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
    if violations:
        print(f"\nSOAK FAILED: seed {args.seed} ({args.seconds:.0f} s, lease {args.lease:.0f} s)", file=sys.stderr)
        print("the faults as they ran:\n" + "\n".join(f"  {f} [{b:.1f}-{e:.1f} s]" for f, b, e in soak.ran),
              file=sys.stderr)  # fmt: skip
        print("violated:\n" + "\n".join(f"  {v}" for v in violations), file=sys.stderr)
        return 1
    print(f"soak passed: seed {args.seed}, {figures['trials']} trials, {figures['faults']} faults, no violation")
    return 0


if __name__ == "__main__":
    sys.exit(main())
