"""Code-aware results: a trial records the code it ran with; a real edit makes exactly the trials that use the
edited code stale, a docstring or comment edit changes nothing; stale, failed and all trials can be trained
again with the old result kept; `show` and `forget` (real Ray, SQLite, MLflow, CLI processes)."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from conftest import BUILTIN_KINDS, TINY
from test_plugins import DECLARATION, edit, plugin_package, plugin_source
from typer.testing import CliRunner

import ablate
from ablate.cli import app
from ablate.config import TrialConfig
from ablate.execution.selection import Select, SelectionError, select
from ablate.planning.plan import Plan, plan
from ablate.plugins import Plugins
from ablate.provenance.fingerprint import (
    ALGORITHM,
    CACHE,
    DOCUMENTED,
    CodeMissing,
    Fingerprint,
    _module_digest,
    _now,
    _stamp,
    current,
    fingerprint,
    fingerprints,
    modules_of,
    record,
)
from ablate.provenance.stale import StaleCode, stale_code
from ablate.store import Store
from ablate.tracking.tracker import Tracker

BACKBONE = '''
from ablate.nn.backbones.vit import ViT
from ablate.registry import register_backbone


class WideViT(ViT):
    """A ViT under another name: a plugin backbone."""

    name = "wideviT"


register_backbone(WideViT())
'''


def sweep_file(folder: Path, plugins: list[str], grid: dict, base: dict | None = None) -> Path:
    path = folder / "e.yaml"
    sweeps = {"s": {"base": {**TINY, **(base or {})}, "grid": grid}}
    path.write_text(yaml.safe_dump({"plugins": plugins, "sweeps": sweeps}, sort_keys=False))
    return path


def record_done(store: Store, p: Plan, f: Path) -> None:
    """Every trial of `p` in the store, done with the code as it is now."""
    store.add_trials("s", p.trials)
    for t, fp in zip(p.trials, fingerprints([t.config for t in p.trials])):
        store.finish(t.key, "done", code=record(fp, f))


def test_only_the_cells_using_edited_code_are_stale_and_docstrings_never_count(tmp_path: Path) -> None:
    """Two plugins (a mechanism, a backbone) in a 2 x 2 grid, every trial recorded done with today's code:
    a docstring, comment, blank line or formatting edit leaves all four current; a real edit of the mechanism's
    forward makes its two cells stale, naming the mechanism; a real edit of the backbone makes its two cells
    stale. Each look plans the file again, as a launch does: the edited text is imported as a new module."""
    (tmp_path / "relu.py").write_text(plugin_source())
    (tmp_path / "wide.py").write_text(BACKBONE)
    f = sweep_file(tmp_path, ["./relu.py", "./wide.py"],
                   {"attention.kind": ["relu", "softmax"], "model.backbone": ["vit", "wideviT"]})  # fmt: skip
    p = plan(f, "s")
    p.plugins.load()
    with Store(f"sqlite:///{tmp_path / 'r.sqlite'}") as store:
        record_done(store, p, f)

        def stale() -> dict[str, set[str]]:
            p = plan(f, "s")
            p.plugins.load()
            chosen = select([p], store, Select())
            by = {t.key: f"{t.axes['attention.kind']}/{t.axes['model.backbone']}" for t in p.trials}
            assert not chosen.run and chosen.warned == list(chosen.stale)  # warn: reused, listed
            return {by[k]: set(changed) for k, changed in chosen.stale.items()}

        assert stale() == {}
        edit(tmp_path / "relu.py", '"""ReLU attention: relu(q k^T / sqrt(d)) / N, no softmax."""',
             '"""ReLU attention, reworded."""  # and a comment')  # fmt: skip
        edit(tmp_path / "relu.py", "a @ v", "a  @  v")  # formatting
        edit(tmp_path / "relu.py", "class Relu(", "# a comment\n\n\nclass Relu(")  # blank lines
        assert stale() == {}
        edit(tmp_path / "relu.py", "return a  @  v", "return (a @ v) * 2.0")
        assert stale() == {"relu/vit": {"mechanism relu"}, "relu/wideviT": {"mechanism relu"}}
        edit(tmp_path / "wide.py", 'name = "wideviT"', 'name = "wideviT"\n    patch_size = 8')
        assert stale() == {"relu/vit": {"mechanism relu"}, "relu/wideviT": {"mechanism relu", "backbone wideviT"},
                           "softmax/wideviT": {"backbone wideviT"}}  # fmt: skip


KNOB = '''kind: Literal["relu"] = "relu"
    scale: float = Field(1.0, description="Multiplies the attention output.")
    """What the attention output is multiplied by."""
    '''
"""A knob of the relu plugin's config, with a `Field` description and an attribute docstring."""


def test_a_knobs_attribute_docstring_never_counts_and_its_default_and_description_do(tmp_path: Path) -> None:
    """A one-file plugin whose config has a knob with an attribute docstring (issue 38 item 4): editing the
    attribute docstring (and a module-level constant's, and a string statement inside a function) leaves both
    trials current for a launch (`select`) and for `status` (`stale_code`); editing the knob's
    `Field(description=...)` (a value: a syntax tree cannot tell help text from a value the code reads) makes
    them stale for both; editing its default makes the trials recorded before stale for `status` (a launch
    plans new keys, as the config changed with it)."""
    source = plugin_source().replace('kind: Literal["relu"] = "relu"', KNOB)
    source = 'from pydantic import Field\nLIMIT = 3\n"""A constant."""\n' + source
    (tmp_path / "relu.py").write_text(source.replace("return a @ v", 'x = 1\n        "a note"\n        return a @ v'))
    f = sweep_file(tmp_path, ["./relu.py"], {"attention.kind": ["relu"], "model.embed_dim": [32, 16]})
    p = plan(f, "s")
    p.plugins.load()
    with Store(f"sqlite:///{tmp_path / 'r.sqlite'}") as store:
        record_done(store, p, f)
        recorded = fingerprint(p.trials[0].config).digest

        def stale() -> tuple[set[str], dict[str, list[str]]]:
            """Each stale trial's changes as a launch and as `status` see them."""
            p = plan(f, "s")
            p.plugins.load()
            chosen = set(map(tuple, select([p], store, Select()).stale.values()))
            return {", ".join(c) for c in chosen}, stale_code(store).changed

        assert stale() == (set(), {})
        edit(tmp_path / "relu.py", '"""What the attention output is multiplied by."""', '"""Reworded: a factor."""')
        edit(tmp_path / "relu.py", '"""A constant."""', '"""A limit, reworded."""')
        edit(tmp_path / "relu.py", '"a note"', '"another note"')
        assert stale() == (set(), {})
        edit(tmp_path / "relu.py", "Multiplies the attention output.", "Scales the output.")
        assert stale() == ({"mechanism relu"}, {recorded: ["mechanism relu"]})
        record_done(store, plan(f, "s"), f)
        before = stale_code(store)
        edit(tmp_path / "relu.py", "Field(1.0,", "Field(2.0,")  # new keys for a launch: the old trials are stale
        assert before.changed == {} and list(stale_code(store).changed.values()) == [["mechanism relu"]]


def test_the_digest_algorithm_drops_only_what_it_did_not_before_and_old_records_compare_as_they_were(
    tmp_path: Path,
) -> None:
    """Algorithm 2 digests every built-in module without bare string statements past its docstrings exactly as
    algorithm 1 did, and every other one differently. A csan trial recorded by algorithm 1 (a record without
    `algorithm`, as every result before it) is current for a launch and for `status`: its components' digests
    differ by algorithm 2 (the loop's modules and csan's have attribute docstrings), so it would read stale if
    compared with them."""

    def extra_strings(path: Path) -> bool:
        tree = ast.parse(path.read_text())
        leading = {id(n.body[0]) for n in ast.walk(tree) if isinstance(n, DOCUMENTED)}
        return any(isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
                   and id(n) not in leading for n in ast.walk(tree))  # fmt: skip

    root = Path(ablate.__file__).parent
    same = {True: 0, False: 0}
    for path in sorted(root.rglob("*.py")):
        module = ".".join(path.relative_to(root.parent).with_suffix("").parts)
        module = module.removesuffix(".__init__")
        stamp = _stamp(module)[1:]
        equal = _module_digest(module, *stamp, 1) == _module_digest(module, *stamp, 2)
        assert equal is not extra_strings(path), module
        same[equal] += 1
    assert same[True] > 10 and same[False] > 10
    p = plan(sweep_file(tmp_path, [], {"attention.kind": ["csan"]}), "s")
    names = ("csan", "vit", "digits", "classify")
    old, new = _now(names, 1), _now(names, ALGORITHM)
    assert new == fingerprint(p.trials[0].config) and old.digest != new.digest
    assert {"mechanism csan", "loop"} <= set(new.changed(old))
    with Store(f"sqlite:///{tmp_path / 'r.sqlite'}") as store:
        store.add_trials("s", p.trials)
        recorded = {k: v for k, v in record(old, None).items() if k != "algorithm"}
        store.finish(p.trials[0].key, "done", code=recorded)
        assert current(Fingerprint.from_json(recorded)) == old
        assert select([p], store, Select()).stale == {} and stale_code(store).changed == {}


def test_a_plugin_file_missing_where_status_runs_reads_as_unknown_not_stale(tmp_path: Path) -> None:
    """Issue 38 item 11: a sweep's plugin file moved away after its trials were done. `status` and `runs` (new
    processes, loading the sweep's stored plugin text) mark no trial stale, and the stale check answers
    `unknown`, naming the missing file. Put back edited, the trials are stale; put back as it was, current."""
    (tmp_path / "relu.py").write_text(plugin_source())
    f = sweep_file(tmp_path, ["./relu.py"], {"attention.kind": ["relu"], "model.embed_dim": [32, 16]})
    p = plan(f, "s")
    p.plugins.load()
    db = f"sqlite:///{tmp_path / 'r.sqlite'}"
    with Store(db) as store:
        store.upsert_sweep("s", metric=p.metric, spec={"axes": p.axes, "plugins": p.plugins.to_json()})  # as launched
        record_done(store, p, f)
    moved = (tmp_path / "relu.py").rename(tmp_path / "elsewhere.py")
    env = {"ABLATE_CACHE": str(tmp_path / "cache"), "COLUMNS": "200"}
    status = cli(tmp_path, "status", "--db", db, env=env)
    runs = cli(tmp_path, "runs", "--db", db, "--format", "json", env=env)
    assert status.returncode == runs.returncode == 0, status.stderr + runs.stderr
    assert "stale (done with other code" not in status.stdout, status.stdout
    assert all(not r.get("stale") for r in json.loads(runs.stdout)), runs.stdout
    said = " ".join(status.stdout.split())  # status says which file it could not read
    assert f"2 done trials: code not checkable here, not marked stale (file {tmp_path / 'relu.py'} is missing)" in said
    with Store(db) as store:
        code = stale_code(store)
        missing = str(tmp_path / "relu.py")
        assert code.changed == {} and code.trials == 0 and code.unknown_trials == 2
        assert list(code.unknown.values()) == [f"file {missing} is missing"] and missing in code.unchecked()
        with pytest.raises(CodeMissing):
            current(fingerprint(p.trials[0].config))
        moved.rename(missing)
        edit(Path(missing), "return a @ v", "return (a @ v) * 2.0")
        code = stale_code(store)
        assert (code.unknown, code.trials, list(code.changed.values())) == ({}, 2, [["mechanism relu"]])
        edit(Path(missing), "return (a @ v) * 2.0", "return a @ v")
        assert stale_code(store) == StaleCode({}, 0)


def test_a_fingerprint_covers_the_components_modules_and_versions() -> None:
    cfg = plan_config({"attention": {"kind": "csan"}})
    fp = fingerprint(cfg)
    assert set(fp.components) == {"mechanism csan", "backbone vit", "dataset digits", "task classify", "loop"}
    assert fp.versions["torch"] and fp.versions["timm"] and len(fp.digest) == 16
    many = fingerprints([plan_config({"attention": {"kind": k}, "seed": s}) for s in range(250)
                         for k in ("csan", "softmax", "syn", "sparsemax")])  # fmt: skip
    assert len({fp.digest for fp in many}) == 4


@pytest.mark.parametrize("kind", BUILTIN_KINDS)
def test_a_mechanism_digest_covers_the_torch_code_its_config_imports_lazily(kind: str) -> None:
    """A built-in mechanism's config is torch-free and imports its mixer when it builds one: the digest must
    follow that import, or an edit to the mixer would leave results looking current."""
    cfg = plan_config({"attention": {"kind": kind}})
    mixer = cfg.attention.build(16, 2)
    assert type(mixer).__module__ in modules_of(cfg)[f"mechanism {kind}"]


def test_a_mechanisms_report_section_is_not_part_of_its_digest() -> None:
    """Syn's package registers its report section, whose tables module it imports when a report is written:
    reports format results and compute none, so that module is left out and an edit to it leaves results
    current, while the mixer's module, imported the same way, is in."""
    modules = modules_of(plan_config({"attention": {"kind": "syn"}}))["mechanism syn"]
    assert "ablate.nn.mechanisms.syn.layers" in modules and "ablate.nn.mechanisms.syn.report" not in modules


@pytest.mark.parametrize("size", ["vit-tiny", "swin-min", "hiera-tiny", "synpool"])
def test_a_backbone_digest_covers_the_network_code_it_imports_lazily(size: str) -> None:
    from ablate.nn.factory import create_model
    from ablate.nn.mixer import TokenMixer

    mil = {"task": "mil", "data": {"name": "musk1"}, "model": {"size": size}}
    images = {"data": {"name": "digits"}, "model": {"size": size, "img_size": 32, "patch_size": 4}}
    cfg = TrialConfig.model_validate(mil if size == "synpool" else images)
    with torch.device("meta"):
        model = create_model(cfg, 2 if size == "synpool" else 10, 166 if size == "synpool" else 1)
    built = {type(m).__module__ for m in model.modules()
             if type(m).__module__.startswith("ablate.") and not isinstance(m, TokenMixer)}  # fmt: skip
    assert built and built <= set(modules_of(cfg)[f"backbone {cfg.model.backbone}"])


def plan_config(over: dict) -> object:
    from ablate.config import TrialConfig

    return TrialConfig.model_validate({**TINY, **over})


def cli(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "RAY_ADDRESS": "", "RAY_AUTH_MODE": "disabled", **(env or {})}
    return subprocess.run([sys.executable, "-m", "ablate.cli", *args], cwd=tmp_path, env=full, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)  # fmt: skip


def here(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in this process (what starts no Ray: no interpreter's imports to pay again), as `cli` answers."""
    res = CliRunner().invoke(app, list(args))
    return subprocess.CompletedProcess(args, res.exit_code, res.stdout, res.stderr)


@pytest.mark.timeout(360)  # three launches in CLI processes: about 120 s on 2 cores at load ~20
def test_rerun_stale_and_failed_keep_old_results_and_forget_deletes_what_it_lists(tmp_path: Path) -> None:
    planted = "if __import__('os').environ.get('FAIL_RELU'): raise RuntimeError('planted')\n        return a @ v"
    (tmp_path / "relu.py").write_text(plugin_source(body=planted))
    f = sweep_file(tmp_path, ["./relu.py"], {"attention.kind": ["relu", "softmax"]},
                   {"train": {**TINY["train"], "epochs": 1}, "resources": {"retries": 0}})  # fmt: skip
    relu, soft = (t.key for t in plan(f, "s").trials)
    db, mlflow = f"sqlite:///{tmp_path}/r.sqlite", f"sqlite:///{tmp_path}/m.sqlite"
    args = ("launch", str(f), "--db", db, "--mlflow-uri", mlflow, "--plain", "--storage", str(tmp_path / "ck"))
    first = cli(tmp_path, *args, "--no-check", env={"FAIL_RELU": "1"})
    assert first.returncode == 1 and "planted" in first.stdout, first.stdout + first.stderr
    again = cli(tmp_path, *args, "--rerun", "failed")
    assert again.returncode == 0, again.stdout + again.stderr
    with Store(db) as store:
        assert store.states() == {relu: "done", soft: "done"}
        assert store.trial(soft).attempts == 1  # only the failed trial ran again
        assert [p["state"] for p in store.previous(relu)] == ["failed"]
    edit(tmp_path / "relu.py", "return a @ v", "return (a @ v) * 2.0")
    warn = here(*args)
    assert warn.returncode == 0 and "1 done trials ran with other code" in warn.stdout, warn.stdout
    assert f"stale {relu[:10]} attention.kind=relu seed=0: changed mechanism relu" in warn.stdout
    assert "0 already done" not in warn.stdout and "nothing to run" in warn.stdout  # trained nothing
    status = here("status", "--db", db)
    assert "1 stale" in status.stdout and "mechanism relu" in status.stdout, status.stdout
    report = here("report", "s", "--db", db, "--out", str(tmp_path / "reports"))
    assert report.returncode == 0, report.stderr
    md = (tmp_path / "reports" / "s" / "report.md").read_text()
    assert "1 stale†" in md and "changed: mechanism relu" in md
    rerun = cli(tmp_path, *args, "--stale", "rerun")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    with Store(db) as store:
        assert store.trial(soft).attempts == 1 and store.trial(relu).state == "done"
        assert [p["reason"] for p in store.previous(relu)] == ["failed", "stale"]
        old_run = store.previous(relu)[1]["mlflow_run_id"]
        assert old_run and old_run != store.trial(relu).mlflow_run_id  # the old run stays, a new one holds it
    show = here("show", relu[:8], "--db", db, "--mlflow-uri", mlflow)
    assert show.returncode == 0, show.stderr
    for text in ("mechanism relu", "ablate_plugin_relu", "ablate.nn.mixer", "RuntimeError: planted", "MLflow run"):
        assert text in show.stdout, (text, show.stdout)
    refused = here("forget", "--where", "attention.kind=relu", "--db", db, "--mlflow-uri", mlflow)
    assert refused.returncode == 2 and "--yes" in refused.stderr
    gone = here("forget", "--where", "attention.kind=relu", "--yes", "--db", db, "--mlflow-uri", mlflow,
               "--storage", str(tmp_path / "ck"))  # fmt: skip
    assert gone.returncode == 0 and "deleted 1 trials" in gone.stdout, gone.stdout + gone.stderr
    with Store(db) as store:
        assert set(store.states()) == {soft} and store.previous(relu) == []
        assert set(store.metrics_frame()["key"]) == {soft}
    assert not (tmp_path / "ck" / relu).exists() and (tmp_path / "ck" / soft).exists()
    tracker = Tracker(mlflow)
    live = tracker.client.search_runs([tracker.experiment("s")], "tags.trial_key != ''")
    assert [r.data.tags["trial_key"] for r in live] == [soft]


def test_an_edit_to_a_module_a_plugin_imports_makes_its_cells_stale(tmp_path: Path, monkeypatch) -> None:
    """A plugin package whose mechanism takes its scale from a helper module of the same package: editing
    the helper (not the mechanism's module) makes the mechanism's cells stale."""
    pkg = tmp_path / "fpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "helpers.py").write_text("def scale(x):\n    return x\n")
    source = plugin_source(kind="pkgrelu", body="return helpers.scale(a @ v)")
    (pkg / "attn.py").write_text("from fpkg import helpers\n" + source.replace("ReluConfig", "PkgReluConfig"))
    monkeypatch.syspath_prepend(str(tmp_path))
    f = sweep_file(tmp_path, ["fpkg.attn"], {"attention.kind": ["pkgrelu", "softmax"]})
    p = plan(f, "s")
    p.plugins.load()
    with Store(f"sqlite:///{tmp_path / 'r.sqlite'}") as store:
        record_done(store, p, f)
        edit(pkg / "helpers.py", "return x", "return 2 * x")
        stale = select([p], store, Select()).stale
    assert stale == {p.trials[0].key: ["mechanism pkgrelu"]}


def test_an_edit_to_the_layers_of_a_plugin_package_shaped_like_the_built_ins_changes_its_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plugin package whose `__init__.py` declares the mechanism and whose `build` imports the mixer from
    `.layers` (a relative import, as a package split like the built-ins writes it): editing layers.py alone
    changes the mechanism's digest, whether or not this process has imported layers.py yet."""
    package = plugin_package(tmp_path, "splitpkg", kind="splitrelu")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = plan(sweep_file(tmp_path, ["splitpkg"], {"attention.kind": ["splitrelu"]}), "s").trials[0].config
    assert "splitpkg.layers" not in sys.modules and "splitpkg.layers" in modules_of(cfg)["mechanism splitrelu"]
    before = fingerprint(cfg)
    edit(package / "layers.py", "return a @ v", "return (a @ v) * 2.0")
    assert fingerprint(cfg).changed(before) == ["mechanism splitrelu"]
    cfg.attention.build(8, 2)  # imports splitpkg.layers: its file is now found through the module
    before = fingerprint(cfg)
    edit(package / "layers.py", "return (a @ v) * 2.0", "return (a @ v) * 3.0")
    assert fingerprint(cfg).changed(before) == ["mechanism splitrelu"]


def test_only_and_rerun_all_choose_trials_by_key_and_state(tmp_path: Path) -> None:
    f = sweep_file(tmp_path, [], {"attention.kind": ["csan", "softmax", "syn"]})
    p = plan(f, "s")
    a, b, c = (t.key for t in p.trials)
    with Store(f"sqlite:///{tmp_path / 'r.sqlite'}") as store:
        store.add_trials("s", p.trials)
        store.finish(a, "done", code=record(fingerprint(p.trials[0].config), f))
        store.finish(b, "diverged")
        assert list(select([p], store, Select()).run) == [b, c]
        assert list(select([p], store, Select(only=(c[:6],))).run) == [c]
        assert list(select([p], store, Select(rerun="diverged")).run) == [b]
        everything = select([p], store, Select(rerun="all"))
        assert list(everything.run) == [a, b, c] and everything.again == {a: "all", b: "all"}
        with pytest.raises(SelectionError, match="matches no planned trial"):
            select([p], store, Select(only=("zzzz",)))


def test_every_view_agrees_on_what_is_stale_and_a_dry_run_says_what_a_launch_does_with_it(
    ray_local, tmp_path: Path
) -> None:
    """Two sweeps of one plugin file, launched. A comment, blank-line and docstring edit leaves both trials
    current; after a real edit a dry run marks both stale and says what each `--stale` policy does with them;
    once `launch a --stale rerun` trained a's again, `status` and `runs` of every sweep (which load each sweep's
    stored plugin text, b's the old one) agree with the view of sweep a: only b's trial is stale."""
    (tmp_path / "relu.py").write_text(plugin_source())
    base = {**TINY, "attention": {"kind": "relu"}, "train": {**TINY["train"], "epochs": 1}}
    sweeps = {"a": {"base": base}, "b": {"base": {**base, "train": {**base["train"], "lr": 1e-3}}}}
    f = tmp_path / "e.yaml"
    f.write_text(yaml.safe_dump({"plugins": ["./relu.py"], "sweeps": sweeps}))
    a, b = (plan(f, s).trials[0].key for s in ("a", "b"))
    db = f"sqlite:///{tmp_path}/r.sqlite"
    args = ("--db", db, "--mlflow-uri", f"sqlite:///{tmp_path}/m.sqlite", "--plain", "--storage", str(tmp_path / "ck"))

    def ablate(*argv: str) -> str:
        done = CliRunner().invoke(app, list(argv), env={"COLUMNS": "200"})
        assert done.exit_code == 0, done.output
        return done.output

    def dry(*extra: str) -> tuple[dict[str, str], str]:
        """The dry run's `state action` per trial, and its output."""
        text = ablate("launch", str(f), "--all", "--db", db, "--dry-run", *extra)
        rows = {k: [c.strip() for c in line.split("│") if c.strip()] for line in text.splitlines()
                for k in (a, b) if line.startswith(f"│ {k[:10]}")}  # fmt: skip
        return {k: " ".join(row[-2:]) for k, row in rows.items()}, text

    assert "done 2" in ablate("launch", str(f), "--all", *args, "--no-check")
    edit(tmp_path / "relu.py", '"""ReLU attention: relu(q k^T / sqrt(d)) / N, no softmax."""', '"""Reworded."""')
    edit(tmp_path / "relu.py", "class Relu(", "# a comment\n\n\nclass Relu(")
    current, text = dry()
    assert current == {a: "done skip", b: "done skip"} and "would run 0, skip 2\n" in text
    edit(tmp_path / "relu.py", "return a @ v", "return (a @ v) * 2.0")
    warned, text = dry()
    assert warned == {a: "stale keep (stale: warn)", b: "stale keep (stale: warn)"}
    assert "would run 0, skip 2 (2 of them stale, kept)" in text
    assert all(f"stale {k[:10]} seed=0: changed mechanism relu" in text for k in (a, b)), text
    rerun, text = dry("--stale", "rerun")
    assert rerun == {a: "stale rerun (stale)", b: "stale rerun (stale)"} and "would run 2, skip 0" in text
    assert "done 1" in ablate("launch", str(f), "a", *args, "--stale", "rerun", "--no-check")
    fresh = ("runs", "--db", db, "--format", "json")  # new processes, as a user runs them: nothing cached
    for runs, want in ((cli(tmp_path, *fresh).stdout, {a: "", b: "mechanism relu"}), (ablate(*fresh, "a"), {a: ""})):
        got = {r["key"]: r.get("stale", "") for r in json.loads(runs)}  # no column: none stale
        assert got == want, runs
    status = cli(tmp_path, "status", "--db", db).stdout
    assert "1 stale" in status and b in status and a not in status, status


CHILD = """
import json, sys
from ablate.provenance.fingerprint import KINDS, Fingerprint, _imports, _module_digest, current

names, plugins = json.loads(sys.argv[1]), json.loads(sys.argv[2])
if plugins is not None:
    from ablate.plugins import Plugins
    Plugins.from_json(plugins).load()
fp = current(Fingerprint({f"{kind} {name}": "" for kind, name in zip(KINDS, names)}))
parsed = _imports.cache_info().misses + _module_digest.cache_info().misses
out = {"components": fp.components, "versions": fp.versions, "parsed": parsed, "modules": list(sys.modules)}
print(json.dumps(out))
"""
"""A new process's `current` for components `names` (after loading `plugins`, as stored with a sweep; none
loaded, not even the built-ins, for None): its fingerprint, how many files it parsed, the modules it imported."""


def in_new_process(folder: Path, names: list[str], plugins: dict | None = None) -> dict:
    path = os.pathsep.join([str(folder), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "ABLATE_CACHE": str(folder / "cache"), "PYTHONPATH": path}
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(names), json.dumps(plugins)], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def date(*paths: Path, ago: int = 3600) -> None:
    """Date files `ago` seconds back (a moment that differs at each call): a fingerprint is kept on disk only
    when no file it covers was modified just before it was computed (`fingerprint.SETTLED_NS`), and a date in
    the future (negative `ago`) is never that long before."""
    then = time.time_ns() - ago * 10**9
    for path in paths:
        os.utime(path, ns=(then, then))


def test_a_new_process_takes_a_kept_fingerprint_without_importing_any_component(tmp_path: Path) -> None:
    """A process that loaded the built-ins computes a fingerprint and keeps it; a new one that loads nothing gets
    the same without importing a component module or the registries, or parsing a file. One kept with another
    torch version is computed again; a cache file that is not JSON, or whose entries are damaged, is passed
    over: computed again, the same."""
    names = ["csan", "vit", "digits", "classify"]
    computed = in_new_process(tmp_path, names, {})
    here = fingerprint(plan_config({"attention": {"kind": "csan"}}))
    assert computed["parsed"] and computed["components"] == here.components
    kept = in_new_process(tmp_path, names)
    assert (kept["components"], kept["versions"]) == (computed["components"], computed["versions"])
    builtins = {"ablate.nn.mechanisms.csan", "ablate.nn.backbones.vit", "ablate.registry"}
    assert not kept["parsed"] and not builtins & set(kept["modules"])
    file = tmp_path / "cache" / CACHE
    entries = json.loads(file.read_text())
    older = {k: {**e, "fingerprint": {**e["fingerprint"], "versions": {"torch": "1.0"}}} for k, e in entries.items()}
    for changed in (older, "{not json", {key: {"files": 3} for key in entries}):  # torch since, damaged files
        file.write_text(changed if isinstance(changed, str) else json.dumps(changed))
        again = in_new_process(tmp_path, names, {})
        assert again["parsed"] and (again["components"], again["versions"]) == (kept["components"], kept["versions"])


def test_a_kept_fingerprint_is_computed_again_when_a_file_it_covers_changes(tmp_path: Path) -> None:
    """A plugin package: while its files may still change unseen (dated in the future here) its fingerprint is
    computed and not kept; once settled it is kept and taken; an edit of its mixer module alone that keeps the
    file's size makes it computed again (and kept anew), as does a module its declaration imports lazily that
    did not exist and now does."""
    package = plugin_package(tmp_path, "keptpkg", kind="keptrelu")
    lazily = "\n\ndef later():\n    from . import tools\n"
    (package / "__init__.py").write_text((package / "__init__.py").read_text() + lazily)
    names, plugins = ["keptrelu", "vit", "digits", "classify"], {"modules": ["keptpkg"]}
    files = list(package.glob("*.py"))
    date(*files, ago=-3600)
    fresh = in_new_process(tmp_path, names, plugins)
    assert not (tmp_path / "cache" / CACHE).exists()
    date(*files)
    computed = in_new_process(tmp_path, names, plugins)
    assert computed["parsed"] and computed["components"] == fresh["components"]
    assert not in_new_process(tmp_path, names, plugins)["parsed"]
    edit(package / "layers.py", "return a @ v", "return a - v")  # the same size
    date(package / "layers.py")
    edited = in_new_process(tmp_path, names, plugins)
    assert edited["parsed"] and edited["components"] != computed["components"]
    kept = in_new_process(tmp_path, names, plugins)
    assert not kept["parsed"] and kept["components"] == edited["components"]
    (package / "tools.py").write_text("SCALE = 2\n")
    date(package / "tools.py")
    added = in_new_process(tmp_path, names, plugins)
    assert added["components"]["mechanism keptrelu"] != edited["components"]["mechanism keptrelu"]


def test_a_kept_fingerprint_is_of_the_plugin_loaded_and_its_file_on_disk(tmp_path: Path) -> None:
    """A package and a file in one folder register one kind with different code (two sweeps, each loading
    one; the file torch-free, as importing torch takes seconds): each process gets the fingerprint of the
    plugin it loaded, not the one kept for the other, though the other's files are unchanged and importable.
    A process that loads a sweep's stored text of the file, as `ablate status` does, gets the fingerprint kept
    for it, and after the file was edited on disk (keeping its size) the edited file's."""
    names = ["keptfile", "vit", "digits", "classify"]
    plugin_package(tmp_path, "keptfilepkg", kind="keptfile")
    (tmp_path / "relu.py").write_text(DECLARATION.format(kind="keptfile", build="return SCALE") + "SCALE = 1\n")
    package, file = {"modules": ["keptfilepkg"]}, Plugins.from_list(["./relu.py"], tmp_path).to_json()
    date(*tmp_path.rglob("*.py"))
    by_package = in_new_process(tmp_path, names, package)["components"]["mechanism keptfile"]
    by_file = in_new_process(tmp_path, names, file)["components"]["mechanism keptfile"]
    assert by_file != by_package
    kept = in_new_process(tmp_path, names, file)
    assert not kept["parsed"] and kept["components"]["mechanism keptfile"] == by_file
    edit(tmp_path / "relu.py", "SCALE = 1", "SCALE = 2")
    date(tmp_path / "relu.py")
    edited = in_new_process(tmp_path, names, file)["components"]["mechanism keptfile"]
    assert edited not in (by_file, by_package)


def test_built_in_components_keep_their_golden_fingerprints() -> None:
    """Every built-in component's digest (and the loop's) equals the one pinned in tests/golden_fingerprints.json:
    a refactor that moves one would make every stored result of it stale (issue 40 item 1)."""
    import golden_fingerprints

    golden = json.loads(golden_fingerprints.GOLDEN.read_text())
    now = golden_fingerprints.current_digests()
    moved = sorted(n for n in {**golden["components"], **now["components"]}
                   if golden["components"].get(n) != now["components"].get(n))  # fmt: skip
    assert now == golden, (
        f"the code digests of {', '.join(moved)} changed: every stored result of them is stale now. A refactor must "
        f"keep them; if the change is meant to change what they compute, regenerate: {golden_fingerprints.REGENERATE}"
    )


#: Records a csan trial done with the code of the checkout it runs in (argv: store URL, sweep file).
RECORD = """
import sys
from ablate.provenance.fingerprint import fingerprint, record
from ablate.planning.plan import plan
from ablate.store import Store
p = plan(sys.argv[2], "s")
with Store(sys.argv[1]) as store:
    store.add_trials("s", p.trials)
    for t in p.trials:
        store.finish(t.key, "done", code=record(fingerprint(t.config), sys.argv[2]))
"""
#: What the stale check of the checkout it runs in says of that store: digests changed, trials stale, unknown.
STALE = """
import json, sys
import ablate.provenance.fingerprint
from ablate.planning.plan import plan
from ablate.execution.selection import Select, select
from ablate.provenance.stale import stale_code
from ablate.store import Store
assert ablate.provenance.fingerprint.__file__.startswith(sys.argv[3]), ablate.provenance.fingerprint.__file__
with Store(sys.argv[1]) as store:
    code = stale_code(store)
    chosen = select([plan(sys.argv[2], "s")], store, Select())
    print(json.dumps({"changed": list(code.changed.values()), "unknown": code.unknown, "stale": len(chosen.stale)}))
"""


ROOT = Path(__file__).resolve().parents[2]
MOVED_PARALLEL, MOVED_MESSAGES = "ablate.training.parallel", "ablate.training.messages"
LOOP_MODULE = "ablate.training.loop"
"""Two modules the training loop digest covers or imports, moved by the test below, and the loop itself."""


def _move(src: Path, module: str, package: str) -> None:
    """Move ablate's `module` (dotted) into `package` under the scratch copy's ablate/, as a developer would: every
    import of it and every dotted reference rewritten (`from ablate import a, b` split), then imports sorted by
    the project's ruff settings, which reorders them by their new paths."""
    parent, _, name = module.rpartition(".")
    old = src.joinpath(*module.split(".")).with_suffix(".py")
    new = src / "ablate" / package / f"{name}.py"
    new.parent.mkdir(exist_ok=True)
    (new.parent / "__init__.py").touch()
    old.rename(new)
    target = f"ablate.{package}.{name}"

    def split(m: re.Match[str]) -> str:
        names = [n.strip() for n in m[2].split(",")]
        out = [f"from {parent} import {', '.join(n for n in names if n != name)}"] if len(names) > 1 else []
        return "\n".join([*out, f"from ablate.{package} import {name}"]) if name in names else m[0]

    for path in (src / "ablate").rglob("*.py"):
        text = path.read_text()
        moved = re.sub(rf"^from ({re.escape(parent)}) import ([\w, ]+)$", split, text, flags=re.M)
        moved = re.sub(rf"\b{re.escape(module)}\b", target, moved)
        if moved != text:
            path.write_text(moved)
    sort = [sys.executable, "-m", "ruff", "check", "--quiet", "--fix", "--select", "I", "--config",
            str(ROOT / "pyproject.toml"), str(src / "ablate")]  # fmt: skip
    subprocess.run(sort, check=True, capture_output=True)


def test_a_pure_move_of_ablates_modules_keeps_stored_results_current(tmp_path: Path) -> None:
    """In a scratch copy of the package: csan trials recorded done, then two modules of the training loop moved into
    a new package (`parallel`, which the loop lists by name, and `messages`, which the loop imports), every import
    of them and `LOOP` updated and imports re-sorted: a new process's stale check and a launch's selection find
    nothing stale. An edit to an expression of a moved module then makes them stale (issue 40 item 1: module
    names, import lines and their order were in the digests, so any move made every stored result stale)."""
    import shutil

    src = tmp_path / "src"
    shutil.copytree(Path(ablate.__file__).parent, src / "ablate", ignore=shutil.ignore_patterns("__pycache__"))
    f = sweep_file(tmp_path, [], {"attention.kind": ["csan"]})
    db = f"sqlite:///{tmp_path / 'r.sqlite'}"
    env = {**os.environ, "PYTHONPATH": str(src), "ABLATE_CACHE": str(tmp_path / "cache")}

    def run(script: str, *args: str) -> str:
        done = subprocess.run([sys.executable, "-c", script, db, str(f), *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=240)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    run(RECORD)
    for module in (MOVED_PARALLEL, MOVED_MESSAGES):
        _move(src, module, "loop")
    loop = (src / "ablate").joinpath(*LOOP_MODULE.split(".")[1:]).with_suffix(".py").read_text()
    assert "from ablate.loop import" in loop  # the move re-sorted the loop's imports
    assert json.loads(run(STALE, str(src)).splitlines()[-1]) == {"changed": [], "unknown": {}, "stale": 0}
    moved = src / "ablate" / "loop" / "parallel.py"
    edit(moved, moved.read_text(), moved.read_text() + "\n\ndef _moved_and_edited() -> int:\n    return 1\n")
    assert json.loads(run(STALE, str(src)).splitlines()[-1]) == {"changed": [["loop"]], "unknown": {}, "stale": 1}
