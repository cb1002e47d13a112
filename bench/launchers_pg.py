"""Eight launchers on one PostgreSQL store, each with its own embedded Ray, on overlapping sweeps (issue 29 item 3).

    .venv/bin/python bench/launchers_pg.py [--launchers 8] [--trials 64] [--cpus N]

A throwaway PostgreSQL cluster (initdb + pg_ctl in a temporary folder, as the tests' `postgres` fixture starts
one: tests/procs.py) logs every statement with its duration. --launchers `ablate launch` processes (the CLI as a
user runs it: `--db postgresql+psycopg://...`, no MLflow, no pre-launch check, an embedded Ray each) start
together, each on its own sweep of 2 x --trials / --launchers trials, so that every trial is in two sweeps and
two launchers race for it. A trial is the cheapest real task: scikit-learn's 8x8 digits (shipped), a one-block
16-wide ViT, one epoch (about 0.1 s of training once a worker has imported torch). --cpus is the CLI's CPUs per
trial (default: every core, so each launcher's embedded Ray, which sizes itself to the machine, runs one trial
at a time: the lightest a launcher gets). The baseline, in the same run: one launcher alone, `--all` of the same
sweeps (the same trials) in a fresh database of the same server.

Printed per side and as ratios (launchers / baseline):
  trained / planned  the attempts the store counts, summed over the distinct planned trials: 1.0 when each
                     trial was trained exactly once (any trial with attempts != 1 or not `done` is named)
  store writes       the launchers' write transactions as PostgreSQL logged them: from the start of BEGIN to the
                     end of COMMIT (BEGIN's log time less its duration; the log has millisecond timestamps), a
                     transaction counted as a write when it inserts, updates or deletes; p50 / p99 / max. Pool
                     check-out and the pre-ping before BEGIN are not in it; the client's work between the
                     statements of a transaction is. Beside it, the part PostgreSQL spent executing them (the
                     statements' logged durations, lock waits included): the rest is the launcher's side;
                     and how many connections (server sessions) they came over
  lease claims       the claim transactions (`Store.claim`: its SELECT of claimable trials) per second, from the
                     first claim to the last, their latency, and the trials leased (= trials started) per second
  wall               from starting the launchers together to the last one's exit
Every process the bench started is stopped by its pid (and what it started) and its folder removed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import yaml
from concurrency import percentile
from sweep_scale import load

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the servers the team test starts
from conftest import free_port, fresh_database, postgres_binary
from procs import Launcher, Postgres, leftovers

from ablate.store import Store

ABLATE = str(Path(sys.executable).with_name("ablate"))
BASE = {"data": {"name": "digits"},
        "model": {"backbone": "vit", "embed_dim": 16, "depths": [1], "num_heads": [1], "patch_size": 2, "img_size": 8},
        "train": {"epochs": 1, "batch_size": 256}}  # fmt: skip
LOG_SETTINGS = ("log_min_duration_statement=0", "log_line_prefix=%m|%c| ")
"""Every statement logged with its duration, each line with its time and session."""
LINE = re.compile(r"^(\S+ \S+) UTC\|([^|]+)\| LOG:  duration: ([\d.]+) ms  (statement|parse|bind|execute)[^:]*: (.*)$")
"""A statement's log line: end time, session, duration, step (a parameterised statement is logged once per
protocol step: parse, bind, execute), text."""


@dataclass(frozen=True)
class Transaction:
    session: str
    began: float
    ended: float
    server: float
    """Seconds PostgreSQL spent on its statements (the logged durations, to the microsecond), lock waits included."""
    statements: tuple[str, ...]

    @property
    def seconds(self) -> float:
        return self.ended - self.began

    @property
    def writes(self) -> bool:
        return any(s.startswith(("INSERT", "UPDATE", "DELETE")) for s in self.statements)

    @property
    def claims(self) -> bool:
        return any("trials.lease_owner IS NULL" in s for s in self.statements)


def transactions(log: str) -> list[Transaction]:
    """The transactions of a PostgreSQL statement log (`LOG_SETTINGS`), session by session; a statement's text
    goes on over the tab-indented lines under its own."""
    open_: dict[str, tuple[float, list[float], list[str]]] = {}
    out, current = [], None
    for line in log.splitlines():
        if line.startswith("\t") and current is not None:
            current[-1] += "\n" + line[1:]
            continue
        current = None
        m = LINE.match(line)
        if not m:
            continue
        stamp, session, ms, step, text = m.groups()
        end, seconds = datetime.fromisoformat(stamp).timestamp(), float(ms) / 1e3
        if text == "BEGIN":
            open_[session] = (end - seconds, [seconds], [])
        elif session in open_:
            began, durations, statements = open_[session]
            durations.append(seconds)
            if text in ("COMMIT", "ROLLBACK"):
                out.append(Transaction(session, began, end, sum(durations), tuple(statements)))
                del open_[session]
            elif step in ("statement", "execute"):
                current = statements
                statements.append(text)
    return out


def experiments(path: Path, launchers: int, trials: int) -> list[str]:
    """One sweep per launcher, `trials` distinct trials (seeds) in all, each in two sweeps; the sweep names."""
    sweeps = {}
    for i in range(launchers):
        first, last = i * trials // launchers, (i + 2) * trials // launchers
        seeds = sorted({s % trials for s in range(first, last)}) if launchers > 1 else list(range(trials))
        sweeps[f"s{i}"] = {"base": BASE, "seeds": seeds}
    path.write_text(yaml.safe_dump({"sweeps": sweeps}, sort_keys=False))
    return list(sweeps)


def ms(values: list[float]) -> str:
    return f"p50 {percentile(values, 0.5) * 1e3:.1f} ms, p99 {percentile(values, 0.99) * 1e3:.1f} ms"


@dataclass(frozen=True)
class Side:
    wall: float
    planned: int
    trained: int
    wrong: list[str]
    writes: list[Transaction]
    claims: list[Transaction]

    def write(self, q: float) -> float:
        """Seconds of the `q` quantile of the write transactions."""
        return percentile([t.seconds for t in self.writes], q)

    @property
    def window(self) -> float:
        """Seconds from the first claim's start to the last one's end."""
        return max(max(t.ended for t in self.claims) - min(t.began for t in self.claims), 1e-3)

    @property
    def claim_rate(self) -> float:
        return len(self.claims) / self.window

    def lines(self, name: str) -> str:
        spans = [t.seconds for t in self.writes]
        return (f"  {name}: trained / planned {self.trained}/{self.planned} = {self.trained / self.planned:.2f}; "
                f"wall {self.wall:.1f} s\n"
                f"    store writes {len(spans)}: {ms(spans)}, max {max(spans) * 1e3:.0f} ms; of which in PostgreSQL "
                f"{ms([t.server for t in self.writes])}; over {len({t.session for t in self.writes})} connections\n"
                f"    lease claims {len(self.claims)} in {self.window:.1f} s: {self.claim_rate:.1f}/s, "
                f"{ms([t.seconds for t in self.claims])}; trials leased "
                f"{self.trained / self.window:.2f}/s")  # fmt: skip


def run_side(
    name: str, argvs: list[list[str]], sweeps: list[str], url: str, pg: Postgres, work: Path, stack: ExitStack
) -> Side:
    """Start one launcher per argv together on the database `url`, wait for them all; what the store (of
    `sweeps`) and the server's log say of their run."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_ADDRESS": "", "RAY_TMPDIR": str(work / "ray")}
    with Store(url):  # the schema first, as on a team's long-lived store: the launchers' upgrades find it there
        pass
    start = len(pg.log.read_bytes())
    began = time.perf_counter()
    launchers = []
    for i, argv in enumerate(argvs):
        scratch = {"ABLATE_SCRATCH": str(work / f"{name}-{i}")}  # a machine of its own
        launchers.append(Launcher(name, [ABLATE, "launch", *argv, "--db", url], {**env, **scratch}, work,
                                  work / f"{name}-{i}.log"))  # fmt: skip
        stack.callback(launchers[-1].kill)
    codes = [launcher.proc.wait() for launcher in launchers]
    wall = time.perf_counter() - began
    if any(codes):
        failed = next(launcher for launcher, code in zip(launchers, codes) if code)
        raise SystemExit(f"{name}: a launcher failed (exit codes {codes}); its output:\n{failed.text()[-3000:]}")
    log = pg.log.read_bytes()[start:].decode(errors="replace")
    sessions = transactions(log)
    with Store(url) as store:
        frame = store.trials_frame(sweeps).drop_duplicates("key")
    once = (frame["state"] == "done") & (frame["attempts"] == 1)
    wrong = [f"{r.key[:10]} {r.state} x{r.attempts}" for r in frame[~once].itertuples()]
    return Side(wall, len(frame), int(frame["attempts"].sum()), wrong, [t for t in sessions if t.writes],
                [t for t in sessions if t.claims])  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--launchers", type=int, default=8)
    ap.add_argument("--trials", type=int, default=64, help="distinct trials in all (each in two launchers' sweeps)")
    ap.add_argument("--cpus", type=float, default=float(os.cpu_count() or 1), help="the CLI's CPUs per trial")
    a = ap.parse_args()
    initdb, pg_ctl = postgres_binary("initdb"), postgres_binary("pg_ctl")
    if not (initdb and pg_ctl):
        raise SystemExit("needs PostgreSQL's initdb and pg_ctl (Debian: apt-get install postgresql)")
    work = Path(tempfile.mkdtemp(prefix="ablate-lpg-"))  # short: Ray's socket paths live under it
    print(f"launchers_pg: {a.launchers} launchers x {2 * a.trials // a.launchers} trials (of {a.trials}, each in two "
          f"sweeps), --cpus {a.cpus:g} on {os.cpu_count()} cores; {load()}", flush=True)  # fmt: skip
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, work, ignore_errors=True)
        root = Path(tempfile.mkdtemp(prefix="ablate-lpg-server-"))  # its own: the server's user must reach it
        stack.callback(shutil.rmtree, root, ignore_errors=True)
        stack.callback(lambda: print(f"  cleaned up; {len(leftovers(work) + leftovers(root))} processes left behind"))
        pg = Postgres.create(root, initdb, pg_ctl, free_port(), *LOG_SETTINGS)
        stack.callback(pg.stop, "immediate")
        sweeps = experiments(work / "e.yaml", a.launchers, a.trials)
        common = ["--storage", str(work / "checkpoints"), "--no-mlflow", "--no-check", "--plain", "--yes",
                  "--cpus", f"{a.cpus:g}"]  # fmt: skip
        argvs = {"1 launcher": [["e.yaml", "--all", *common]],
                 f"{a.launchers} launchers": [["e.yaml", s, *common] for s in sweeps]}  # fmt: skip
        sides = {name: run_side(tag, v, sweeps, fresh_database(pg.url), pg, work, stack)
                 for tag, (name, v) in zip(("one", "many"), argvs.items())}  # fmt: skip
        for name, side in sides.items():
            print(side.lines(name))
            if side.wrong:
                print(f"    not trained exactly once: {', '.join(side.wrong)}")
        one, many = sides.values()
        print(f"  ratios ({a.launchers} / 1): wall {many.wall / one.wall:.2f}, store write p50 "
              f"{many.write(0.5) / one.write(0.5):.2f}, p99 {many.write(0.99) / one.write(0.99):.2f}, "
              f"lease claims/s {many.claim_rate / one.claim_rate:.2f}; {load()}")  # fmt: skip
        if any(side.wrong or side.trained != side.planned for side in sides.values()):
            raise SystemExit(1)


if __name__ == "__main__":
    main()
