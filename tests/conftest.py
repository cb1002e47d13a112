"""Shared fixtures: a real local Ray for the session, tiny sweeps on real data, stores in tmp folders."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import procs
import pytest
import yaml
from markers import guard, mark
from procs import Postgres

from ablate.plugins import load_builtins
from ablate.registry import MECHANISMS, REGISTRIES

ROOT = Path(__file__).resolve().parents[1]
#: A real MIDatasets file (MIT, licence beside it), for the .jld reader.
MUSK1_JLD = ROOT / "tests" / "data" / "mil" / "Musk1.jld"

load_builtins()
#: The built-in mechanisms: every one must be registered (a missing registration fails the tests over KINDS).
BUILTIN_KINDS = ("softmax", "csan", "syn", "gaussian", "laplace", "nlm", "sparsemax", "entmax15", "ista")
#: Every registered mechanism kind, for tests parametrised over the registry.
KINDS = sorted(MECHANISMS.names())

#: A tiny real trial: scikit-learn's 8x8 digits, a 2-block ViT; about a second per epoch here.
TINY = {
    "data": {"name": "digits"},
    "model": {
        "backbone": "vit",
        "embed_dim": 32,
        "depths": [2],
        "num_heads": [2],
        "patch_size": 2,
        "img_size": 8,
        "mlp_ratio": 2,
    },
    "train": {"epochs": 2, "batch_size": 128, "lr": 2e-3},
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks every test by what it costs (tests/markers.py), before `-m` selects: `make quick` runs `-m quick`."""
    mark(items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    """In a quick run (`-m quick`), a test and its fixtures start no process: a wrong mark fails loudly."""
    if item.config.getoption("markexpr") != "quick":
        return (yield)
    with guard():
        return (yield)


@pytest.fixture(autouse=True)
def _file_plugins_stay_in_their_test():
    """Forget, after each test, the plugin files it loaded in this process (modules `ablate_plugin_*`) and
    what they registered: two tests' files that register one kind would collide as two projects' do (a
    RegistryError), and a test must not see another's components. Reaches into the registries on purpose:
    no product code unregisters."""
    before = set(sys.modules)
    yield
    added = {m for m in set(sys.modules) - before if m.startswith("ablate_plugin_")}
    for registry in REGISTRIES:
        kept = {n: e for n, e in registry._entries.items() if e.source.split(":")[0] not in added}
        if len(kept) != len(registry._entries):
            registry._entries = kept
            for listener in registry._listeners:
                listener()
    for module in added:
        del sys.modules[module]


def write_sweeps(path: Path, sweeps: dict) -> Path:
    path.write_text(yaml.safe_dump({"sweeps": sweeps}, sort_keys=False))
    return path


def scenario(script: str, root: Path, timeout: int = 600) -> dict:
    """Run tests/<script> (a launch on a Ray of its own, e.g. logical GPUs) in a fresh process with `root` as its
    folder; what it printed last, as JSON."""
    here = Path(__file__).parent
    out = subprocess.run([sys.executable, str(here / script), str(root)], cwd=here, capture_output=True, text=True,
                         timeout=timeout)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def ray_local():
    """One embedded Ray (2 CPUs) for every launch test of the session; launches reuse it."""
    import ray

    from ablate.execution.embedded import start_embedded

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    start_embedded(num_cpus=2, object_store_mb=128)
    yield ray
    ray.shutdown()


def needs(found: object, reason: str) -> None:
    """Skip the test, saying `reason`, where what it needs from outside the package (a PostgreSQL server, Chromium,
    the S3 server) is missing; under CI (`CI=true`), which installs all of it, fail instead: a skip there would
    silently drop a part of the suite."""
    if found:
        return
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(f"{reason} [CI=true: required, not skipped]", pytrace=False)
    pytest.skip(reason)


def importable(module: str) -> bool:
    """Whether `module` imports here (a driver or server of the dev extra)."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


#: Where Debian's postgresql package puts its server programs (`<version>/bin`), without linking them onto PATH.
POSTGRES_HOME = Path("/usr/lib/postgresql")


def postgres_binary(name: str) -> str | None:
    """A PostgreSQL server program: on PATH, else the newest version's under `POSTGRES_HOME`."""
    found = shutil.which(name)
    if found:
        return found
    newest = max(POSTGRES_HOME.glob(f"*/bin/{name}"), key=lambda p: float(p.parts[-3]), default=None)
    return str(newest) if newest else None


def chromium() -> str:
    """The Chromium (or Chrome) binary for headless-browser tests (`needs` it)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    needs(browser, "no Chromium on this machine (Debian: apt-get install chromium)")
    return browser


@pytest.fixture(scope="session")
def postgres():
    """A real PostgreSQL server for the session (Debian's initdb and pg_ctl, on loopback, trust auth): the URL
    of its server, without a database. Needs the binaries and the driver (`needs`)."""
    initdb, pg_ctl = postgres_binary("initdb"), postgres_binary("pg_ctl")
    needs(initdb and pg_ctl, "PostgreSQL tests need initdb and pg_ctl, on PATH or in /usr/lib/postgresql/<version>/bin "
                             "(Debian: apt-get install postgresql)")  # fmt: skip
    needs(importable("psycopg"), "PostgreSQL tests need the driver: pip install 'ablate[postgres]'")
    root = Path(tempfile.mkdtemp(prefix="ablate-postgres-"))  # not under pytest's 0700 folder: the server reads it
    server = Postgres.create(root, initdb, pg_ctl, free_port())
    yield server.url
    with contextlib.suppress(subprocess.CalledProcessError):  # a test left it stopped
        server.stop("immediate")
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def slurm():
    """A real single-host Slurm for the session (tests/slurm.py: munged, slurmctld and slurmd in a temporary folder,
    one 2-CPU node on 127.0.0.1), stopped by pid at the end. Needs Debian's programs, and root (slurmd starts jobs
    as their user; `needs`)."""
    from slurm import available, running

    needs(available(), "Slurm tests need munged, slurmctld, slurmd and Slurm's client commands "
                       "(Debian: apt-get install slurmctld slurmd slurm-client munge)")  # fmt: skip
    needs(os.geteuid() == 0, "Slurm tests run slurmd, which needs root")
    with running((free_port(), free_port())) as server:
        yield server


def fresh_database(server: str) -> str:
    """A new, empty database on the PostgreSQL `server`; its URL."""
    import sqlalchemy

    name = f"t_{uuid.uuid4().hex[:12]}"
    engine = sqlalchemy.create_engine(f"{server}/postgres", isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    engine.dispose()
    return f"{server}/{name}"


def free_port(ip: str = "127.0.0.1") -> int:
    """A TCP port free on `ip` now (for servers the tests start)."""
    with socket.socket() as s:
        s.bind((ip, 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def s3_server():
    """A real S3-compatible HTTP server for the session (moto in server mode, on loopback): the environment
    that points S3 clients at it (endpoint and dummy credentials), for this process and the ones it starts."""
    needs(importable("s3fs"), "S3 storage tests need the driver: pip install 'ablate[s3]'")
    needs(importable("moto.server"), "S3 storage tests need moto[s3] and flask (the dev extra)")

    with procs.s3_server(free_port()) as env:
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            yield env
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


@pytest.fixture
def bucket(s3_server) -> str:
    """A fresh bucket on the session's S3 server: the storage URL of a prefix in it."""
    import fsspec

    name = f"b-{uuid.uuid4().hex[:12]}"
    fsspec.filesystem("s3", skip_instance_cache=True).mkdir(name)
    return f"s3://{name}/sweeps"
