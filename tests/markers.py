"""Markers by cost, read from what a test uses, so `make quick` can leave out the tests that start Ray, processes,
servers or a browser without anyone keeping a list: a test's marks come from the fixtures it requests and from
the code it reaches (its own body, its fixtures' bodies and the helpers of tests/ they call). The guard makes
the marks stay true: in a quick run, starting a process raises."""

from __future__ import annotations

import contextlib
import inspect
import os
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
#: The marks that say what a test costs; `slow` is their union, `quick` everything else (and not `team`).
COSTS = {
    "ray": "starts or uses Ray (the session's embedded Ray or nodes of its own)",
    "spawns": "starts processes (the CLI, a child interpreter, a process pool, a server program)",
    "server": "needs a server for the session (PostgreSQL, the S3 server)",
    "browser": "runs headless Chromium",
    "trains": "trains a real model through the training loop (seconds of CPU each)",
}
#: Fixtures whose resource a test holds by requesting them (pytest adds the ones they request in turn).
FIXTURE_MARKS = {"ray_local": "ray", "postgres": "server", "s3_server": "server", "slurm": "server"}
#: What code names when it reaches a costly resource: a module, or a function's module-qualified name (prefixes).
NAMED = {
    "subprocess": "spawns",
    "multiprocessing": "spawns",
    "concurrent.futures.process": "spawns",
    "ray": "ray",
    "ablate.execution.embedded.start_embedded": "ray",
    "conftest.chromium": "browser",
    "ablate.training.loop.run_trial": "trains",
    "ablate.execution.trial_task.run_trial": "trains",
}
#: The programs a quick test may start: the fingerprint's `git` lookups (milliseconds, the library's own), and
#: `uname -p`, which Python's `platform` runs once per process (then cached) when asked for the processor: mlflow's
#: import does, so a quick run of a subset whose first mlflow import is inside a test would fail without it.
ALLOWED = {"git", "uname"}


def _qualified(obj: object) -> str | None:
    if isinstance(obj, types.ModuleType):
        return obj.__name__
    module, name = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    return f"{module}.{name}" if isinstance(module, str) and isinstance(name, str) else None


def _ours(obj: object) -> bool:
    """Whether `obj` is a function, class or module of tests/ (a helper or a test module in a layer's folder),
    whose code is read in turn."""
    module = obj if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", None)
    module = module if isinstance(module, types.ModuleType) else sys.modules.get(str(module))
    file = getattr(module, "__file__", None)
    return file is not None and TESTS in Path(file).resolve().parents


def _codes(obj: object) -> Iterator[tuple[types.CodeType, dict[str, object]]]:
    """The code objects (with their globals) of a function or of a class's methods."""
    if isinstance(obj, type):
        for member in vars(obj).values():
            yield from _codes(getattr(member, "__func__", member))
    elif isinstance(obj, types.FunctionType):
        obj = inspect.unwrap(obj)  # a decorated helper (`contextlib.contextmanager`): the code it wraps
        yield obj.__code__, obj.__globals__


class Reach:
    """The costs reached from code, each code object read once per session."""

    def __init__(self) -> None:
        self.seen: dict[types.CodeType, set[str]] = {}

    def of(self, obj: object) -> set[str]:
        found: set[str] = set()
        for code, names in _codes(obj):
            found |= self.code(code, names)
        return found

    def code(self, code: types.CodeType, names: dict[str, object]) -> set[str]:
        if code in self.seen:
            return self.seen[code]
        found = self.seen[code] = set()  # a recursive helper reaches nothing new through itself
        imported = {f"{m}.{n}" for m in code.co_names if "." in m and m not in names for n in code.co_names}
        found |= {NAMED[n] for n in imported | set(code.co_names) - set(names) if n in NAMED}  # function-local imports
        for name in code.co_names:
            obj = names.get(name)
            found |= self.named(obj)
            if isinstance(obj, types.ModuleType) and _ours(obj):  # procs.spawn(...): the module's attributes used
                for attribute in code.co_names:
                    found |= self.named(getattr(obj, attribute, None), follow_modules=False)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):  # a nested function, lambda or comprehension
                found |= self.code(const, names)
            elif "getfixturevalue" in code.co_names and const in FIXTURE_MARKS:  # request.getfixturevalue("postgres")
                found.add(FIXTURE_MARKS[str(const)])
        return found

    def named(self, obj: object, follow_modules: bool = True) -> set[str]:
        qualified = _qualified(obj)
        if qualified is None:
            return set()
        found = {mark for prefix, mark in NAMED.items() if qualified == prefix or qualified.startswith(prefix + ".")}
        if _ours(obj) and not isinstance(obj, types.ModuleType):
            found |= self.of(obj)
        return found


def costs(item: pytest.Item, reach: Reach) -> set[str]:
    """What `item` costs: the marks of the fixtures it requests and of the code it and they reach."""
    found = {FIXTURE_MARKS[name] for name in getattr(item, "fixturenames", ()) if name in FIXTURE_MARKS}
    found |= reach.of(getattr(item, "function", None))
    info = getattr(item, "_fixtureinfo", None)
    for defs in info.name2fixturedefs.values() if info else ():
        for fixturedef in defs:
            found |= reach.of(fixturedef.func)
    return found


def mark(items: list[pytest.Item]) -> None:
    """Marks each item with its costs, `slow` where it has any, else `quick` (unless it is a `team` test)."""
    reach = Reach()
    for item in items:
        found = costs(item, reach)
        for name in sorted(found):
            item.add_marker(name)
        if found:
            item.add_marker("slow")
        elif item.get_closest_marker("team") is None:
            item.add_marker("quick")


def _refuse(what: str) -> None:
    raise RuntimeError(f"a quick test {what}: it costs what `make quick` leaves out. Request the fixture that "
                       f"holds the resource (tests/markers.py reads marks from fixtures and the code they reach), "
                       f"so the test is marked slow")  # fmt: skip


@contextlib.contextmanager
def guard() -> Iterator[None]:
    """Starting a process (so Ray, a server, a browser, the CLI) raises while a quick run's test runs, except
    `ALLOWED` programs."""
    start = subprocess.Popen._execute_child  # type: ignore[attr-defined]

    def execute_child(self: subprocess.Popen[bytes], args: object, *rest: object, **kw: object) -> None:
        argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)  # type: ignore[call-overload]
        if Path(os.fsdecode(argv[0])).name not in ALLOWED:
            _refuse(f"started {argv[:3]}")
        start(self, args, *rest, **kw)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess.Popen, "_execute_child", execute_child)
        patch.setattr("multiprocessing.util.spawnv_passfds", lambda *a, **k: _refuse("spawned a process"))
        patch.setattr(os, "fork", lambda: _refuse("forked"))
        yield
