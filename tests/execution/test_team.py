"""A team's set-up, end to end on loopback (issue 29), and the cluster definitions checked offline.

The end-to-end test (marker `team`, left out of `make test`: `make team`, which CI runs too) runs the production
topology with real processes: the session's PostgreSQL server holding the results store and MLflow's database, an
`mlflow server` on it with its artifacts in a bucket (moto in server mode), a Ray head and two worker nodes on
loopback addresses, and three launchers started together on overlapping sweeps (every trial is in two of them).
While they run it stops the MLflow server, SIGKILLs a worker node with its processes, SIGTERMs a launcher and
launches it again, and stops PostgreSQL while trials report, then starts it again; at the end it checks that
every trial was trained to the end once, what each other start was cut by, the checkpoints in the bucket, MLflow
against the store, the reports, and every result against a quiet run. Every fault lands while trials are
provably mid-run: the first launchers' trials stop at epoch 1 on a gate (tests/gate.py, which runs the CLI with
the gate in its trial runner) until the test opens it, and every wait is on a condition the test reads (a pid
file, the store, the bucket, a journal, a process's exit); deadlines only fail the test.

The servers, the nodes and the launchers run the cluster tutorial's commands (docs/tutorials/cluster.md, the bash
block after its marker comment) through tests/team.py's `Team`, which bench/soak.py's random fault schedules share,
with only hosts, ports, database URLs, the bucket, the experiments file and the sweep replaced, and the loopback
options of `loopback` added to `ray start`; the relaunch is `ablate launch` exactly as written there. The fast
tests check that block, and the `workers/` definitions, against the installed CLIs and the schemas, so neither
drifts unnoticed where the end-to-end test does not run.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import signal
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import fsspec
import pytest
import yaml
from conftest import ROOT, TINY, write_sweeps
from gate import Gate
from procs import NODES, Launcher, kill_tree
from team import (
    DB,
    MLFLOW_DB,
    PLACEHOLDERS,
    README,
    Stuck,
    Team,
    Timeline,
    checkpoint_differences,
    healthy,
    journaled,
    mlflow_differences,
    orphans,
    quiet_differences,
    readme_commands,
    substitute,
)

from ablate.store import Store
from ablate.training.checkpoint_storage import Storage

GATE_SCRIPT = Path(__file__).parents[1] / "gate.py"
SWEEPS = {"alpha": [0, 1, 2, 3], "beta": [2, 3, 4, 5], "gamma": [4, 5, 0, 1]}
"""One sweep per launcher; every trial (a seed of TINY) is in two of them."""


def check_readme_block(text: str) -> None:
    """Every command of the README's block is a valid command line of the installed mlflow, ray and ablate, uses
    every placeholder the end-to-end test fills and no other, and points the launch at the servers it starts."""
    import mlflow.cli
    import ray.scripts.scripts
    import typer.main

    from ablate.cli import app

    commands = readme_commands(text)
    words = " ".join(" ".join(argv) for argv in commands.values())
    assert [p for p in PLACEHOLDERS if p not in words] == [], "README cluster block: a placeholder is gone"
    substitute([words], dict.fromkeys(PLACEHOLDERS, "x"))  # nothing else to fill
    parsers = {"mlflow server": mlflow.cli.server, "ray start --head": ray.scripts.scripts.start,
               "ray start --address": ray.scripts.scripts.start,
               "ablate launch": typer.main.get_command(app).commands["launch"]}  # type: ignore[attr-defined]  # fmt: skip
    parsed = {role: parsers[role].make_context(role, argv[2:]).params for role, argv in commands.items()}
    head, worker, launch, server = (parsed[role] for role in ("ray start --head", "ray start --address",
                                                               "ablate launch", "mlflow server"))  # fmt: skip
    assert head["head"] and not worker["head"]
    assert worker["address"] == launch["address"] == f"HEAD_IP:{head['port']}"
    assert launch["mlflow_uri"] == f"http://{server['host']}:{server['port']}"
    assert launch["storage"].startswith("s3://BUCKET/") and server["artifacts_destination"].startswith("s3://BUCKET/")
    assert (launch["db"], server["backend_store_uri"]) == (
        f"postgresql+psycopg://{DB}",
        f"postgresql+psycopg://{MLFLOW_DB}",
    )


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # ray.scripts imports Ray Serve's pydantic models
def test_the_readme_cluster_commands_parse_with_the_installed_clis() -> None:
    check_readme_block(README)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("--storage s3://BUCKET/checkpoints", "--storage /shared/checkpoints"),  # not the bucket the test serves
        ("ray start --head --port=6379", "ray start --head --prot=6379"),  # no such option of ray start
        ("--mlflow-uri http://MLFLOW_HOST:5000", "--mlflow-url http://MLFLOW_HOST:5000"),  # nor of ablate launch
        ("ray start --address=HEAD_IP:6379", "ray start --address=HEAD_IP:6380"),  # another cluster
        ("ray start --address=HEAD_IP:6379 ", "ray start --address=HEAD_IP:6379\nablate report csan-paper "),
        ("ray start --address=HEAD_IP:6379 ", "ray start --address=${HEAD_NODE}:6379 "),  # a placeholder it lacks
    ],
)
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_changed_readme_block_is_caught(old: str, new: str) -> None:
    """The README's block changed in ways the end-to-end test could not run: each fails the check (a command line
    that mlflow's or ray's click, or ablate's typer, refuses, or an assertion)."""
    import click
    import typer

    assert old in README
    with pytest.raises((AssertionError, click.UsageError, typer.TyperException)):
        check_readme_block(README.replace(old, new))
    assert substitute(["HEAD_IP:6379", "--port=6379"], {"HEAD_IP": "6379", "6379": "1"}) == ["6379:1", "--port=1"]


# ------------------------------------------------------------------------------------------ workers/ definitions
def test_the_ray_up_cluster_definition_is_valid() -> None:
    """workers/cluster.yaml against the JSON schema the installed Ray ships (`ray up` checks the same), then Ray's
    own validation of the filled-out config (cross-field rules: the head type is a node type, ...)."""
    import jsonschema
    import ray
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = yaml.safe_load((ROOT / "workers" / "cluster.yaml").read_text())
    schema = json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())
    jsonschema.validate(config, schema)
    validate_config(prepare_config(config))
    broken = {**config, "available_node_types": {**config["available_node_types"], "gpu": {"min_worker": 0}}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)
    assert config["available_node_types"][config["head_node_type"]]["resources"] == {"CPU": 0}  # the head records
    assert any("pip install" in c and "ablate" in c for c in config["setup_commands"])


QUANTITY = r"^[+-]?(\d+(\.\d*)?|\.\d+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?$"
"""A Kubernetes resource quantity (the CRD's pattern)."""
PARAMS = {"type": "object", "additionalProperties": {"type": "string"}}
"""rayStartParams: strings only (the CRD's map[string]string; a YAML number there is refused by the API server)."""
POD_TEMPLATE = {
    "type": "object",
    "required": ["spec"],
    "properties": {
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["containers"],
            "properties": {
                "containers": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["name", "image", "resources"],
                        "properties": {
                            "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
                            "image": {"type": "string", "minLength": 1},
                            "resources": {
                                "type": "object",
                                "required": ["limits"],
                                "additionalProperties": False,
                                "properties": {
                                    kind: {
                                        "type": "object",
                                        "additionalProperties": {"type": ["string", "integer"], "pattern": QUANTITY},
                                    }
                                    for kind in ("limits", "requests")
                                },
                            },
                            "volumeMounts": {
                                "type": "array",
                                "items": {"type": "object", "required": ["name", "mountPath"]},
                            },
                        },
                    },
                },
                "volumes": {"type": "array", "items": {"type": "object", "required": ["name"]}},
            },
        },
    },
}
"""The part of a core/v1 PodTemplateSpec the manifest uses, with what a Ray pod needs (an image, resource limits:
KubeRay sizes `ray start` from them)."""
CLUSTER_SPEC = {
    "type": "object",
    "required": ["headGroupSpec"],
    "additionalProperties": False,
    "properties": {
        "headGroupSpec": {
            "type": "object",
            "required": ["template"],
            "additionalProperties": False,
            "properties": {
                "template": POD_TEMPLATE,
                "rayStartParams": PARAMS,
                "headService": {"type": "object"},
                "enableIngress": {"type": "boolean"},
                "serviceType": {"type": "string"},
            },
        },
        "workerGroupSpecs": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["groupName", "template"],
                "additionalProperties": False,
                "properties": {
                    "groupName": {"type": "string"},
                    **{n: {"type": "integer", "minimum": 0} for n in ("replicas", "minReplicas", "maxReplicas")},
                    "idleTimeoutSeconds": {"type": "integer"},
                    "numOfHosts": {"type": "integer", "minimum": 1},
                    "rayStartParams": PARAMS,
                    "template": POD_TEMPLATE,
                    "scaleStrategy": {"type": "object"},
                    "suspend": {"type": "boolean"},
                },
            },
        },
        "rayVersion": {"type": "string"},
        "enableInTreeAutoscaling": {"type": "boolean"},
        "autoscalerOptions": {"type": "object"},
        "headServiceAnnotations": {"type": "object"},
        "gcsFaultToleranceOptions": {"type": "object"},
        "suspend": {"type": "boolean"},
        "managedBy": {"type": "string"},
    },
}
"""KubeRay's ray.io/v1 RayClusterSpec as its API reference writes it down (fields, which are required, types);
unknown fields are refused, so a misspelt one (`workerGroupSpec`) fails here instead of being dropped by the
API server."""


def manifest(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    """The schema of a ray.io/v1 object of `kind` whose spec is `spec`: the envelope every such manifest has."""
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "ray.io/v1"},
            "kind": {"const": kind},
            "metadata": {"type": "object", "required": ["name"]},
            "spec": spec,
        },
    }


MANIFESTS = {
    "RayCluster": manifest("RayCluster", CLUSTER_SPEC),
    "RayJob": manifest(
        "RayJob",
        {
            "type": "object",
            "required": ["entrypoint"],
            "oneOf": [{"required": ["clusterSelector"]}, {"required": ["rayClusterSpec"]}],
            "additionalProperties": False,
            "properties": {
                "entrypoint": {"type": "string"},
                "clusterSelector": PARAMS,
                "rayClusterSpec": CLUSTER_SPEC,
                "runtimeEnvYAML": {"type": "string"},
                "jobId": {"type": "string"},
                "submissionMode": {"enum": ["K8sJobMode", "HTTPMode", "InteractiveMode"]},
                "shutdownAfterJobFinishes": {"type": "boolean"},
                "ttlSecondsAfterFinished": {"type": "integer", "minimum": 0},
                "activeDeadlineSeconds": {"type": "integer", "minimum": 1},
                "backoffLimit": {"type": "integer", "minimum": 0},
                "entrypointNumCpus": {"type": "number"},
                "entrypointNumGpus": {"type": "number"},
                "entrypointResources": {"type": "string"},
                "submitterPodTemplate": POD_TEMPLATE,
                "submitterConfig": {"type": "object"},
                "suspend": {"type": "boolean"},
                "metadata": PARAMS,
            },
        },
    ),
}
"""The RayCluster and RayJob manifests' schemas (ray.io/v1), as KubeRay's API reference lists their fields."""


def test_the_kuberay_manifests_are_valid() -> None:
    """workers/kuberay.yaml: a RayCluster and a RayJob, each valid against its schema (above); the pods run one
    image with cpu and memory limits, GPU workers ask for GPUs, the head takes no trials, every volume mount
    names a volume of its pod, the cluster runs the Ray this project pins, and the job's entrypoint is an
    `ablate launch` command line the installed CLI accepts, writing where the pods mount shared storage."""
    import jsonschema
    import ray
    import typer.main

    from ablate.cli import app

    docs = {d["kind"]: d for d in yaml.safe_load_all((ROOT / "workers" / "kuberay.yaml").read_text())}
    assert set(docs) == set(MANIFESTS)
    for kind, schema in MANIFESTS.items():
        jsonschema.validate(docs[kind], schema)
    spec = docs["RayCluster"]["spec"]
    assert spec["rayVersion"] == ray.__version__  # constraints.txt's Ray, which the tests run
    groups = [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
    assert spec["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    pods = [g["template"]["spec"] for g in groups]
    assert len({c["image"] for pod in pods for c in pod["containers"]}) == 1  # ablate and Ray alike on every node
    for pod in pods:
        volumes = {v["name"] for v in pod.get("volumes", [])}
        for c in pod["containers"]:
            assert {"cpu", "memory"} <= set(c["resources"]["limits"]), c["name"]
            assert {m["name"] for m in c.get("volumeMounts", [])} <= volumes, c["name"]
    for group in spec["workerGroupSpecs"]:
        assert group.get("minReplicas", 0) <= group.get("replicas", 0) <= group.get("maxReplicas", 2**31 - 1)
        assert all("nvidia.com/gpu" in c["resources"]["limits"] for c in group["template"]["spec"]["containers"])
    job = docs["RayJob"]["spec"]
    assert job["clusterSelector"] == {"ray.io/cluster": docs["RayCluster"]["metadata"]["name"]}
    argv = shlex.split(job["entrypoint"])
    assert argv[:2] == ["ablate", "launch"]
    params = typer.main.get_command(app).commands["launch"].make_context("launch", argv[2:]).params  # type: ignore[attr-defined]
    mounts = {m["mountPath"] for pod in pods for c in pod["containers"] for m in c.get("volumeMounts", [])}
    assert any(params["storage"].startswith(m) for m in mounts)
    broken = {**docs["RayCluster"], "spec": {**spec, "workerGroupSpec": spec["workerGroupSpecs"]}}
    with pytest.raises(jsonschema.ValidationError, match="workerGroupSpec"):
        jsonschema.validate(broken, MANIFESTS["RayCluster"])


# ------------------------------------------------------------------------------------------ the end-to-end test
EVENT = re.compile(r"^(?:\[[\d:]+\] (start|done|preempted|interrupted|failed|diverged) ([0-9a-f]{10})"
                   r"|([0-9a-f]{10}): its worker or node was (lost))", re.M)  # fmt: skip
"""A launcher's plain output about one trial: `[12:00:00] start KEY10 ...`, `KEY10: its worker or node was lost`."""


def attempts(logs: Mapping[str, str], stopped: str) -> tuple[Counter[str], Counter[str], list[tuple[str, str, str]]]:
    """What the launchers' own output says of each trial (by its key's first 10 characters): how often it started,
    how often a start ran to `done` in that launcher, and every other start with what ended it: `lost` (its node
    died), or, in the launcher `stopped` (SIGTERM), `preempted` or `stopped` (running when the launcher ended)."""
    starts, completed, cut = Counter[str](), Counter[str](), list[tuple[str, str, str]]()
    for name, text in logs.items():
        running: set[str] = set()
        for m in EVENT.finditer(text):
            event, key = (m.group(1), m.group(2)) if m.group(1) else (m.group(4), m.group(3))
            if event == "start":
                assert key not in running, f"{name} started {key} twice at once"
                running.add(key)
                starts[key] += 1
            elif key in running:  # else: a trial another launcher ran, counted here as it finished there
                running.discard(key)
                if event == "done":
                    completed[key] += 1
                else:
                    cut.append((name, key, event))
        cut += [(name, key, "stopped") for key in running]
    assert all(how == "lost" or name == stopped for name, _, how in cut), cut
    return starts, completed, cut


@pytest.mark.team
@pytest.mark.timeout(1200)
def test_a_team_set_up_survives_its_faults(postgres: str, bucket: str, tmp_path: Path) -> None:
    """See the module docstring; the timeline it prints (`pytest -s`) is the issue's closing note."""
    note = Timeline()
    work = Path(tempfile.mkdtemp(prefix="ablate-team-"))  # short: Ray's socket paths live under its session folders
    experiments = write_sweeps(
        tmp_path / "experiments.yaml", {s: {"base": TINY, "seeds": v} for s, v in SWEEPS.items()}
    )
    gate = Gate(work / "gate", epoch=1)
    with ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, work, ignore_errors=True)
        team = Team(work, tmp_path, experiments, postgres, bucket, note, cleanup)
        storage, url, uri, launchers, pg = team.storage, team.url, team.uri, team.launchers, team.pg
        team.up()

        def start(sweep: str, gated: bool, name: str) -> Launcher:
            return team.start(sweep, name, (sys.executable, str(GATE_SCRIPT), str(gate.folder), "1") if gated else ())

        for sweep in SWEEPS:
            start(sweep, gated=True, name=sweep)
        note.context = lambda: "\n".join(
            f"==== {name}\n{launcher.text()[-4000:]}" for name, launcher in launchers.items()
        )
        note("3 launchers started together on alpha, beta, gamma; trials wait at epoch 1 until the gate opens")
        store = cleanup.enter_context(Store(url))

        def published(key: str) -> bool:
            marker, recorded = Storage(storage).published(key), store.checkpoints([key]).get(key)
            return marker is not None and recorded is not None and marker["sha256"] == recorded["sha"]

        def held_everywhere() -> dict[str, int] | None:
            where = {key: team.node_of(pid) for key, pid in gate.reached().items()}
            full = set(where.values()) == set(range(len(NODES))) and all(published(k) for k in where)
            return where if full else None  # type: ignore[return-value]

        where = until(held_everywhere, "a trial at the gate on every node, its epoch-1 checkpoint published", note)
        owner = {key: _launcher_of(holder, launchers) for key, holder in store.holders(where).items()}
        note("at the gate, epoch-1 checkpoints in the bucket and the store: "
             + ", ".join(f"{k[:10]} (node {where[k]}, {owner[k]})" for k in sorted(where, key=where.get)))  # type: ignore[arg-type]  # fmt: skip

        team.mlflow.stop()
        note("F1 MLflow server stopped (SIGTERM)")

        on_b = {k for k, i in where.items() if i == 2}
        kill_tree(team.nodes[2])
        until(lambda: set(store.states(on_b).values()) == {"preempted"}
              and all(f"{k[:10]}: its worker or node was lost" in launchers[owner[k]].text() for k in on_b),
              "the dead node's trials preempted", note)  # fmt: skip
        lost = ", ".join(f"{owner[k]} recorded {k[:10]}" for k in sorted(on_b))
        note(f"F2 worker node 2 SIGKILLed with its processes: {lost} preempted and submitted it again")

        x = {owner[k] for k in on_b}
        y = min((owner[k] for k in where if k not in on_b), key=lambda name: (name in x, name))
        launchers[y].proc.send_signal(signal.SIGTERM)
        until(lambda: launchers[y].proc.poll() is not None, f"{y} to end after SIGTERM", note)
        assert launchers[y].proc.returncode == 128 + signal.SIGTERM, launchers[y].text()
        stopped = sorted(k for k in where if owner[k] == y and k not in on_b)
        note(f"F3 SIGTERM to {y}: its trials at the gate ({', '.join(k[:10] for k in stopped)}) reached no step in "
             f"the 25 s grace and were stopped, any other checkpointed at its next step; all recorded preempted, "
             f"{y} released its leases and exited 143")  # fmt: skip

        def alive(name: str) -> bool:
            return launchers[name].proc.poll() is None

        def blocked() -> set[str]:
            holders = store.holders(gate.reached())
            return {k for k, who in holders.items() if alive(_launcher_of(who, launchers))} - on_b - set(stopped)

        waiting = until(blocked, "a trial of a running launcher at the gate", note)
        pg.stop()
        note(f"F4 PostgreSQL stopped; at the gate: {', '.join(k[:10] for k in sorted(waiting))}")
        gate.open()
        journals = [work / f"launcher-{sweep}" for sweep in SWEEPS]

        def in_journals(kind: str = "") -> list[Any]:
            return [r for j in journals for r in journaled(j, storage) if type(r).__name__.startswith(kind)]

        until(lambda: waiting <= {r.key for r in in_journals("Finished")}, "their results in the journals", note)
        note(f"F5 gate opened with the store down: the trials finished, {len(in_journals())} records journaled")
        pg.start()
        until(lambda: not in_journals() and set(store.states(waiting).values()) == {"done"},
              "the journals written to the store", note)  # fmt: skip
        note("F6 PostgreSQL started again: the launchers wrote their journals to the store first, then went on")

        again = start(launchers[y].sweep, gated=False, name=f"{y} again")
        until(lambda: " trials in " in again.text(), f"{y} launched again", note)
        note(f"F7 {y} launched again, by the README's command as it is")
        team.mlflow.start()
        until(lambda: healthy(uri), "the MLflow server back", note)
        note("F8 MLflow server started again")
        for name, launcher in launchers.items():
            until(lambda launcher=launcher: launcher.proc.poll() is not None, f"{name} to end", note)  # type: ignore[misc]
        logs = {name: launcher.text() for name, launcher in launchers.items()}
        codes = {name: launcher.proc.returncode for name, launcher in launchers.items()}
        assert codes == {**dict.fromkeys(launchers, 0), y: 128 + signal.SIGTERM}, "\n".join(logs.values())
        note(f"the launchers ended: {codes}")

        synced = team.cli("sync", *SWEEPS, "--db", url, "--mlflow-uri", uri)
        reported = team.cli("report", *SWEEPS, "--db", url)
        note(f"ablate sync: {synced.strip().splitlines()[-1]}; ablate report: written")

        keys = sorted({k for s in SWEEPS for k in store.trials_frame(s)["key"]})
        trials = {k: store.trial(k) for k in keys}
        assert len(keys) == 6 and {t.state for t in trials.values()} == {"done"}, logs
        starts, completed, cut = attempts(logs, stopped=y)
        assert {k: t.attempts for k, t in trials.items()} == {k: starts[k[:10]] for k in keys}, logs  # a start each
        assert {k: completed[k[:10]] for k in keys} == dict.fromkeys(keys, 1), logs  # trained to the end once
        interrupted = {key for _, key, _ in cut}  # the other starts, each ended by a fault the test made
        assert {k[:10] for k in on_b} | {k[:10] for k in stopped} <= interrupted, cut
        gated = on_b | set(stopped)  # cut at the gate: they went on from their epoch-1 checkpoints
        once = {k for k, t in trials.items() if t.attempts == 1}  # trained from scratch in one go
        assert {k: trials[k].resumed_from for k in gated | once} == {k: int(k in gated) for k in gated | once}
        assert all(store.previous(k) == [] for k in keys)  # none was trained again from scratch as a new result
        assert all({step for _, step, *_ in store.metric_rows(k)} == {1, 2} for k in keys)
        note(f"every trial done once: {sum(starts.values())} starts for {len(keys)} trials; the cut ones: "
             + ", ".join(f"{key} ({how}, {name})" for name, key, how in cut))  # fmt: skip

        assert checkpoint_differences(store, storage, keys) == []  # each trial's last checkpoint is the bucket's
        assert orphans(storage, keys) == []  # and the only one there
        assert mlflow_differences(store, uri, list(SWEEPS), keys) == []
        fs = fsspec.core.url_to_fs(storage)[0]
        assert fs.find(f"{team.values['BUCKET']}/mlartifacts"), "no MLflow artifact in the bucket"
        for s in SWEEPS:
            written = {p.name for p in (tmp_path / "reports" / s).iterdir()}
            assert {"index.html", "report.md", "trials.csv"} <= written, reported
        assert quiet_differences(store, keys, tmp_path / "quiet") == []
        note("checked: the checkpoints in the bucket, MLflow equal to the store, the reports, and every result and "
             "epoch equal to a quiet run of the same trials")  # fmt: skip


def until(what: Callable[[], Any], why: str, timeline: Timeline) -> Any:
    """`timeline.until`, a test failure when it is stuck."""
    try:
        return timeline.until(what, why)
    except Stuck as e:
        pytest.fail(str(e), pytrace=False)


def _launcher_of(holder: str, launchers: Mapping[str, Launcher]) -> str:
    """The launcher named by a lease's holder (user@host:pid)."""
    pid = int(holder.rsplit(":", 1)[1])
    return next(name for name, launcher in launchers.items() if launcher.proc.pid == pid)
