"""Mutation testing of the core modules, one group at a time: `make mutants` (not part of `make test`).

Each group pairs a module with the tests that claim to guard it. mutmut runs per group in a scratch copy
of the repository (its `[tool.mutmut]` section written for that group), so a planner mutant runs the
planner's tests, not the launcher's minutes of Ray. Prints the score per module: killed / (killed +
survived); timeouts count as killed, mutants no test reaches as survived.

    .venv/bin/python bench/mutants.py                 # every group (hours on 2 cores)
    .venv/bin/python bench/mutants.py planner stats   # some groups
    .venv/bin/python bench/mutants.py --list

Mutants inside Ray task bodies are invisible to tests (workers import the unmutated package), so the launcher group
measures the driver side.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GROUPS: dict[str, tuple[list[str], list[str]]] = {
    "planner": (
        ["ablate/planning/plan.py", "ablate/planning/keys.py"],
        ["tests/planning/test_plan.py", "tests/spec/test_spec.py"],
    ),
    "store": (
        ["ablate/store/writes.py", "ablate/store/leases.py", "ablate/store/database.py", "ablate/store/queries.py"],
        ["tests/store/test_store.py"],
    ),
    "launcher": (
        ["ablate/execution/launcher.py", "ablate/execution/fanout.py", "ablate/execution/gangs.py"],
        ["tests/execution/test_launcher.py", "tests/cli/test_cli.py"],
    ),
    "trial": (
        ["ablate/training/loop.py", "ablate/training/checkpoints.py", "ablate/training/parallel.py"],
        ["tests/training/test_loop.py", "tests/training/test_parallel.py"],
    ),
    "csan": (["ablate/nn/mechanisms/csan/layers.py"], ["tests/nn/test_attention.py"]),
    "stats": (["ablate/reporting/stats.py"], ["tests/reporting/test_report.py", "-k", "not real_launch"]),
}
KILLED = ("killed", "timeout")


def section(modules: list[str], tests: list[str]) -> str:
    return "\n".join([
        "[tool.mutmut]",
        'source_paths = ["ablate"]',
        f"only_mutate = {json.dumps(modules)}",
        f"pytest_add_cli_args_test_selection = {json.dumps(tests)}",
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-x", "-q"]',
        'also_copy = ["experiments.yaml", "examples"]',
        "",
    ])  # fmt: skip


def run_group(name: str, children: int) -> dict[str, int]:
    """Mutate one group in a scratch copy; return counts by mutmut status."""
    modules, tests = GROUPS[name]
    with tempfile.TemporaryDirectory(prefix=f"mutants-{name}-") as tmp:
        work = Path(tmp)
        for part in ("ablate", "tests", "examples"):
            if (ROOT / part).is_dir():
                shutil.copytree(ROOT / part, work / part, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(ROOT / "experiments.yaml", work)
        text = (ROOT / "pyproject.toml").read_text()
        text = text.split("[tool.mutmut]")[0] + section(modules, tests)
        (work / "pyproject.toml").write_text(text)
        mutmut = str(Path(sys.executable).with_name("mutmut"))
        subprocess.run([mutmut, "run", "--max-children", str(children)], cwd=work, check=False,
                       stdout=subprocess.DEVNULL)  # fmt: skip
        subprocess.run([mutmut, "export-cicd-stats"], cwd=work, check=True, stdout=subprocess.DEVNULL)
        stats = json.loads((work / "mutants" / "mutmut-cicd-stats.json").read_text())
        results = subprocess.run([mutmut, "results"], cwd=work, capture_output=True, text=True).stdout
        names = [line.split(":")[0].strip() for line in results.splitlines() if line.strip().endswith("survived")]
        diffs = [subprocess.run([mutmut, "show", m], cwd=work, capture_output=True, text=True).stdout for m in names]
        (ROOT / "mutants-survivors").mkdir(exist_ok=True)
        (ROOT / "mutants-survivors" / f"{name}.txt").write_text(results + "\n" + "\n".join(diffs))
    return stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("groups", nargs="*", help=f"groups to run (default: all of {', '.join(GROUPS)})")
    ap.add_argument("--children", type=int, default=2, help="parallel mutant runs")
    ap.add_argument("--list", action="store_true", help="print the groups and exit")
    args = ap.parse_args()
    if args.list:
        for name, (modules, tests) in GROUPS.items():
            print(f"{name}: {' '.join(modules)} <- {' '.join(tests)}")
        return
    for name in args.groups or list(GROUPS):
        s = run_group(name, args.children)
        killed = sum(s.get(k, 0) for k in KILLED)
        scored = killed + s.get("survived", 0) + s.get("no_tests", 0)
        score = killed / scored if scored else float("nan")
        print(f"{name:9s} score {score:6.1%}  killed {killed}  survived {s.get('survived', 0)}  "
              f"no tests {s.get('no_tests', 0)}  total {s.get('total', scored)}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
