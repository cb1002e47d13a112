"""How often ablate's calls cross between its packages on two paths of a user (issue 54's measure):

    .venv/bin/python bench/crossings.py [--launch cpu] [--design five-switch-half] [--json FILE]

(a) `launch`: `ablate launch experiments.yaml SWEEP` as typed, up to the point Ray would start: the experiments
file read and checked, the sweep planned and grown, the pre-flight (one training step of each architecture, each
dataset built), the store looked at; the trace ends at the first call of `ray.init`, which is not made.
(b) a two-level design from YAML to report, in three processes: `ablate plan experiments.yaml SWEEP` (traced);
the plan's trials written done into a new SQLite store with scripted metrics through the store's write API
(tests/synthetic.py `fill`, untraced: it stands in for training); `ablate report SWEEP` of that store (traced).

Each traced step is a fresh process (`ablate`'s console entry point called in it) with an empty disk cache
(`ABLATE_CACHE`) and its own working folder, so the counts do not depend on earlier runs. A call is counted when
`sys.setprofile` (and `threading.setprofile`) sees a function of `ablate` entered, its caller being the nearest
`ablate` frame below it; a generator counts when first resumed, not at every resume. Not counted: calls made while
a module is being imported (module bodies, registration at import) and calls from the import machinery (the
finders of `ablate.moved`). Units are tests/layers.py `unit()`'s (`ablate.planning.plan` -> `planning`).

Columns: calls that cross from one unit into another; the distinct unit -> unit pairs they take; the distinct
function -> function edges that cross units; calls entering the module that `ablate.spec.sweeps` names today (found
through `ablate.moved`'s aliases when it has moved) from another module; calls entering `planning` from another
unit. Dynamic counts follow the sweep's size (trials, cells, architectures); the distinct columns do not.
"""

from __future__ import annotations

import argparse
import dis
import hashlib
import importlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import warnings
from collections import Counter
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the layers' units and the synthetic-store filler
from layers import unit  # noqa: E402

EXPERIMENTS = ROOT / "experiments.yaml"
SWEEPS_MODULE = "ablate.spec.sweeps"
"""The module the issue counted entries into (its name on main 6aa86da; an alias in `ablate.moved` if it moves)."""
PLANNING = "planning"
GENERATORS = 0x20 | 0x80 | 0x200  # CO_GENERATOR, CO_COROUTINE, CO_ASYNC_GENERATOR


class RayStarts(Exception):
    """Raised from the profiler into the call of `ray.init`: the launch's path ends there (the launch reports
    that Ray could not start and exits; what it calls meanwhile is not counted)."""


def _module(frame: FrameType) -> str:
    name = frame.f_globals.get("__name__", "")
    return name if isinstance(name, str) else ""


def _ours(module: str) -> bool:
    return module == "ablate" or module.startswith("ablate.")


@dataclass
class Tally:
    """What one traced step crossed: calls per edge ('caller module.function -> callee module.function')."""

    pairs: Counter[str] = field(default_factory=Counter)
    """'caller unit -> callee unit' -> calls."""
    edges: Counter[str] = field(default_factory=Counter)
    """The edges that cross units -> calls."""
    direct: Counter[str] = field(default_factory=Counter)
    """Of those, the calls made by the caller itself, not through a library (a pydantic validator, a decorator)."""
    sweeps: Counter[str] = field(default_factory=Counter)
    """The edges into the sweeps module from another module -> calls."""
    planning: Counter[str] = field(default_factory=Counter)
    """The edges into `planning` from another unit -> calls."""

    def row(self) -> dict[str, Any]:
        return {"pairs": dict(self.pairs), "edges": dict(self.edges), "direct": dict(self.direct),
                "sweeps": dict(self.sweeps), "planning": dict(self.planning)}  # fmt: skip


class Tracer:
    """The profile function: counts `ablate`'s calls that cross units into a `Tally`."""

    def __init__(self, sweeps: str | None) -> None:
        self.sweeps = sweeps
        self.tally = Tally()
        self.importing: Counter[int] = Counter()  # per thread: module bodies now running
        self.resume: dict[CodeType, int] = {}
        self.lock = threading.Lock()
        self.ended = False
        """Set at `ray.init`: nothing is counted after it."""

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        code = frame.f_code
        if self.ended:
            return
        if event == "return" and code.co_name == "<module>":
            self.importing[threading.get_ident()] -= 1
        if event != "call":
            return
        if code.co_name == "<module>":
            self.importing[threading.get_ident()] += 1
            return
        module = _module(frame)
        if module.split(".")[0] == "ray" and code.co_name == "init":
            self.ended = True
            raise RayStarts
        if not _ours(module) or self.importing[threading.get_ident()] > 0 or not self._first(frame):
            return
        caller = self._caller(frame.f_back)
        if caller is None:
            return
        source = _module(caller)
        edge = f"{source}.{caller.f_code.co_qualname} -> {module}.{code.co_qualname}"
        with self.lock:
            if source != module and module == self.sweeps:
                self.tally.sweeps[edge] += 1
            if unit(source) != unit(module):
                self.tally.pairs[f"{unit(source)} -> {unit(module)}"] += 1
                self.tally.edges[edge] += 1
                if caller is frame.f_back:
                    self.tally.direct[edge] += 1
                if unit(module) == PLANNING:
                    self.tally.planning[edge] += 1

    def _first(self, frame: FrameType) -> bool:
        """A plain call, or a generator's first resume (its frame at the code's first RESUME)."""
        code = frame.f_code
        if not code.co_flags & GENERATORS:
            return True
        if code not in self.resume:
            self.resume[code] = next(i.offset for i in dis.get_instructions(code) if i.opname == "RESUME")
        return frame.f_lasti == self.resume[code]

    @staticmethod
    def _caller(frame: FrameType | None) -> FrameType | None:
        """The nearest `ablate` frame below a call (through library frames: a callback is its caller's call);
        None when there is none or the import machinery comes first."""
        while frame is not None:
            if frame.f_code.co_filename.startswith("<frozen importlib"):
                return None
            if _ours(_module(frame)):
                return frame
            frame = frame.f_back
        return None


def _sweeps_module() -> str | None:
    """The name of the module `ablate.spec.sweeps` is today; None when it no longer exists."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return importlib.import_module(SWEEPS_MODULE).__name__
    except ImportError:
        return None


def traced(argv: list[str]) -> Tally:
    """Run `ablate ARGV` through its console entry point in this process under the tracer."""
    (entry,) = entry_points(group="console_scripts", name="ablate")
    main = entry.load()
    tracer = Tracer(_sweeps_module())
    sys.argv = ["ablate", *argv]
    threading.setprofile(tracer)
    sys.setprofile(tracer)
    try:
        main()
    except RayStarts:
        pass
    except SystemExit as e:
        if e.code not in (0, None) and not tracer.ended:
            raise
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    return tracer.tally


def scripted(db: str, sweep: str) -> None:
    """Write `sweep`'s planned trials done, each with a fixed score from its axes and seed (no training)."""
    from synthetic import fill

    import ablate

    def score(key: str) -> float:
        return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) / 2**32

    plan = ablate.plan(str(EXPERIMENTS), sweep)
    with ablate.Store(db) as store:
        fill(store, plan, lambda t: 60 + sum(5 * score(f"{a}={v}") for a, v in t.axes.items() if a != "seed")
             + score(t.key), epochs=3)  # fmt: skip


def step(name: str, args: list[str], work: Path) -> dict[str, Any]:
    """One step in a fresh process (`--step`), its tally as JSON."""
    env = {**os.environ, "ABLATE_CACHE": str(work / f"cache-{name}"), "MLFLOW_TRACKING_URI": f"sqlite:///{work}/ml.db"}
    done = subprocess.run([sys.executable, __file__, "--step", json.dumps(args)], cwd=work, env=env,
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode:
        sys.exit(f"{name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--launch", default="cpu", help="the sweep of (a) [cpu: the file's default]")
    parser.add_argument("--design", default="five-switch-half", help="the two-level design of (b)")
    parser.add_argument("--json", type=Path, help="also write the counts, pairs and edges here")
    parser.add_argument("--step", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step:
        command = json.loads(args.step)
        if command[0] == "scripted":
            scripted(command[1], command[2])
            print("{}")
        else:
            print(json.dumps(traced(command).row()))
        return
    with tempfile.TemporaryDirectory(prefix="crossings-") as tmp:
        work = Path(tmp)
        db = f"sqlite:///{work}/design.sqlite"
        file = str(EXPERIMENTS)
        rows = {
            f"(a) launch {args.launch}": step(
                "launch",
                ["launch", file, args.launch, "--db", f"sqlite:///{work}/launch.sqlite", "--no-mlflow", "--yes"],
                work,
            ),
            f"(b) plan {args.design}": step("plan", ["plan", file, args.design], work),
        }
        step("scripted", ["scripted", db, args.design], work)
        rows[f"(b) report {args.design}"] = step("report", ["report", args.design, "--db", db, "--out",
                                                            str(work / "reports")], work)  # fmt: skip
    rows[f"(b) {args.design}: plan + report"] = {
        part: dict(sum((Counter(r[part]) for name, r in rows.items() if name.startswith("(b)")), Counter()))
        for part in ("pairs", "edges", "direct", "sweeps", "planning")
    }
    print(f"{'':<38} {'crossing units':^32} {'into sweeps':^16} {'into planning':^16}")
    print(f"{'path':<38} {'calls':>8} {'direct':>8} {'pairs':>6} {'edges':>7} {'calls':>8} {'edges':>7} {'calls':>8} "
          f"{'edges':>7}")  # fmt: skip
    for name, r in rows.items():
        print(
            f"{name:<38} {sum(r['edges'].values()):>8,} {sum(r['direct'].values()):>8,} {len(r['pairs']):>6} "
            f"{len(r['edges']):>7} "
            + " ".join(f"{sum(r[part].values()):>8,} {len(r[part]):>7}" for part in ("sweeps", "planning"))
        )
    print(f"(sweeps: {_sweeps_module() or 'a module no longer there'}; edges: distinct caller -> callee functions)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
