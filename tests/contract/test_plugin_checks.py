"""What a new plugin author meets when a plugin is wrong in a way that still runs (issue 33, items 1 and 3): a mixer
whose output has the wrong shape, or a dataset whose labels, classes or images are not what it declared, is named
by `ablate plan` or `ablate check` (exit 2), never trained as another model or failed on deep in the loss."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import TINY
from test_plugins import GOOD_BODY, cli, experiments, plugin_source
from typer.testing import CliRunner

import ablate.probe.check
from ablate.cli import app
from ablate.data import DataError
from ablate.execution import trial_task
from ablate.planning.plan import plan
from ablate.probe.check import check
from ablate.training.loop import run_trial

SWAPPED = "return (a @ v).transpose(1, 2)"
"""A mixer's body returning (B, N, H, d) where (B, H, N, d) is due: same numbers, another model after reshape."""
NARROW = "return (a @ v)[..., :1]"
"""A mixer's body returning one channel per head: the wrong last dimension."""

INDENT = "\n        "
"""Between two lines of a mixer's body."""
VIT_ONLY = (
    f"if q.shape[-2] != 17:{INDENT}    raise ValueError('made for 16 patches and a class token'){INDENT}{GOOD_BODY}"
)
"""A mixer's body that runs only where its model puts it (as one that needs the backbone's token grid does)."""

EQUAL = {"embed_dim": 20, "depths": [1], "num_heads": [5], "patch_size": 2, "img_size": 4}
"""A ViT whose every mixer call has as many tokens as heads (4 patches and the class token, 5 heads): a swapped
(B, N, H, d) output has the shape of the right one there."""


def sweeps(folder: Path, plugins: list[str], bases: dict[str, dict]) -> Path:
    """An experiments file of one sweep per entry of `bases` (sweep name: its base), one seed each."""
    path = folder / "e.yaml"
    body = {"plugins": plugins, "sweeps": {name: {"base": base, "seeds": 1} for name, base in bases.items()}}
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def said(res: subprocess.CompletedProcess) -> str:
    """The command's output, its spacing and line breaks undone."""
    return " ".join((res.stdout + res.stderr).split())


def statuses(res: subprocess.CompletedProcess) -> dict[str, str]:
    """Sweep -> status of `ablate check`'s table (one variant per sweep; wide enough not to wrap)."""
    rows = [line.split("│") for line in res.stdout.splitlines() if line.startswith("│")]
    return {row[1].strip(): " ".join(row[6].split()) for row in rows}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (SWAPPED, "MixerShapeError: Relu.forward ({file}:24) returned (1, 17, 2, 16), expected (1, 2, 17, 16)"),
        (NARROW, "MixerShapeError: Relu.forward ({file}:24) returned (1, 2, 17, 1), expected (1, 2, 17, 16)"),
        ("raise RuntimeError('no mixing today')", "RuntimeError: no mixing today ({file}:26)"),
    ],
    ids=["swapped", "narrow", "raises"],
)
def test_plan_names_the_plugin_whose_model_fails_and_exits_2(body: str, message: str, tmp_path: Path) -> None:
    """plan counts FLOPs on the model: a mixer's wrong output shape or error there is one message naming the
    mechanism, its plugin file and the line, exit 2 (it was a 195-line traceback from the FLOP counter, exit 1,
    and a swapped output planned as if nothing were wrong)."""
    kind = f"relu{len(body)}"  # a kind of its own: this process keeps the costs of every kind it counted
    (tmp_path / "relu.py").write_text(plugin_source(kind=kind, body=body))
    res = CliRunner().invoke(app, ["plan", str(experiments(tmp_path, ["./relu.py"], kind=kind))])
    assert res.exit_code == 2, res.output
    text = "".join(res.output.split())  # without the spaces and line breaks: the terminal wraps long paths anywhere
    assert f"attention.kind'{kind}'(ablate_plugin_relu_" in text and "Traceback" not in text, res.output
    assert "".join(message.format(file=tmp_path / "relu.py").split()) in text, res.output


def test_check_holds_every_mixer_to_its_output_shape_where_the_model_cannot_tell(tmp_path: Path) -> None:
    """One `ablate check` of three variants: a swapped mixer in the usual tiny ViT (caught in the model's step),
    the same mixer in a ViT with as many tokens as heads (its model step cannot see it: the mixer alone, at sizes
    that all differ, does), a mixer of the wrong width (named, not torch's reshape error in ablate's ViT); the
    right mixer passes in both models, and so does one that runs only in its model (the mixer alone is held to
    its shape, not to running outside its backbone)."""
    for kind, body in (("swapped", SWAPPED), ("narrow", NARROW), ("relu", GOOD_BODY), ("vitonly", VIT_ONLY)):
        (tmp_path / f"{kind}.py").write_text(plugin_source(kind=kind, body=body))
    equal = {**TINY, "model": {**TINY["model"], **EQUAL}}
    f = sweeps(tmp_path, ["./swapped.py", "./narrow.py", "./relu.py", "./vitonly.py"], {
        "swapped": {**TINY, "attention": {"kind": "swapped"}},
        "swapped-equal": {**equal, "attention": {"kind": "swapped"}},
        "narrow": {**TINY, "attention": {"kind": "narrow"}},
        "right": {**TINY, "attention": {"kind": "relu"}},
        "right-equal": {**equal, "attention": {"kind": "relu"}},
        "vit-only": {**TINY, "attention": {"kind": "vitonly"}},
    })  # fmt: skip
    res = cli(["check", str(f)], tmp_path, {"COLUMNS": "500"})
    assert res.returncode == 2, res.stdout + res.stderr
    rows = statuses(res)
    swapped = tmp_path / "swapped.py"
    assert "(ablate_plugin_swapped_" in rows["swapped"] and str(swapped) in rows["swapped"], rows
    assert f"Relu.forward ({swapped}:24) returned (2, 17, 2, 16), expected (2, 2, 17, 16)" in rows["swapped"], rows
    assert f"Relu.forward ({swapped}:24) returned (2, 4, 3, 8), expected (2, 3, 4, 8)" in rows["swapped-equal"], rows
    narrow = f"Relu.forward ({tmp_path / 'narrow.py'}:24) returned (2, 2, 17, 1), expected (2, 2, 17, 16)"
    assert narrow in rows["narrow"] and "reshape" not in rows["narrow"], rows
    assert rows["right"] == rows["right-equal"] == rows["vit-only"] == "ok", rows


#: A one-file dataset plugin, as the README's plugin section describes one: 4 classes of grey blobs, a split's
#: items in class order; {name}, {chans} (what its splits say), {size} (of its images) and {fault} (a line that
#: breaks the labels or images) are filled per test.
DATASET = '''
import torch
from ablate.components import Dataset
from ablate.data import Splits
from ablate.registry import register_dataset


class Blobs(Dataset):
    """Grey blobs, brighter with their class."""

    name = "{name}"

    def dims(self, cfg):
        return 1, 4

    def build(self, cfg):
        g = torch.Generator().manual_seed(0)

        def part(n):
            y = torch.arange(n) * 4 // n
            x = torch.randn(n, 1, {size}, {size}, generator=g) + y.view(-1, 1, 1, 1)
            {fault}
            return torch.utils.data.TensorDataset(x, y)

        return Splits(part(64), part(16), part(16), num_classes=4, in_chans={chans})


register_dataset(Blobs())
'''
LAST_LABEL_OUT = "y[-1] = 4  # the last item of a split: one past the classes"
FAULTS = {
    "blobs": {},
    "labels": {"fault": LAST_LABEL_OUT},
    "widths": {"chans": 3},
    "images": {"size": 16},
    "channels-last": {"fault": "x = x.permute(0, 2, 3, 1)"},
}
"""Dataset name: what its plugin gets wrong (nothing, for `blobs`)."""


def dataset_plugin(folder: Path, name: str, **wrong: object) -> str:
    """Write the dataset plugin `name` to `folder` with `wrong` filled in (else correct); its plugins entry."""
    fields = {"name": name, "chans": 1, "size": "cfg.model.img_size", "fault": "pass", **wrong}
    (folder / f"{name}.py").write_text(DATASET.format(**fields))
    return f"./{name}.py"


def test_check_builds_a_batch_of_each_dataset_and_names_what_it_does_not_declare(tmp_path: Path) -> None:
    """One `ablate check` of a sweep per dataset plugin: the correct one passes; a label past the classes (only the
    last item of each split has it), splits wider than the declared dims, images of another size and channels-last
    images are each one message naming the dataset and its plugin file (where training met torch's "Target 4 is
    out of bounds" or a shape error in ablate's ViT); --no-data checks the models alone, and so does a dataset at
    a path marked as the cluster's (`data.remote`)."""
    plugins = [dataset_plugin(tmp_path, name, **wrong) for name, wrong in FAULTS.items()]
    remote = {**TINY, "data": {"name": "labels", "path": "/on/the/cluster", "remote": True}}
    f = sweeps(tmp_path, plugins, {**{name: {**TINY, "data": {"name": name}} for name in FAULTS}, "remote": remote})
    res = cli(["check", str(f)], tmp_path, {"COLUMNS": "500"})
    assert res.returncode == 2, res.stdout + res.stderr
    rows = statuses(res)
    assert rows.pop("blobs") == rows.pop("remote") == "ok", rows  # data only the cluster has is not built here
    for name, row in rows.items():
        assert row.startswith(f"error: data.name '{name}' (ablate_plugin_") and str(tmp_path / f"{name}.py") in row
    labels = "its train split: an item's label 4 is not a class index 0..3 (its splits have num_classes 4)"
    assert labels in rows["labels"], rows
    widths = "its dims() declare in_chans 1 and num_classes 4, but the splits it built have in_chans 3 and"
    assert widths in rows["widths"], rows
    assert "a batch of its train split, inputs (2, 1, 16, 16) and labels (2,) torch.int64, does not fit vit (which " \
           "takes (2, 1, 8, 8) for the in_chans 1 it declares)" in rows["images"], rows  # fmt: skip
    assert "inputs (2, 8, 8, 1)" in rows["channels-last"], rows
    models = cli(["check", str(f), "--no-data"], tmp_path, {"COLUMNS": "500"})
    assert models.returncode == 0 and models.stdout.count(" ok ") == len(FAULTS) + 1, models.stdout + models.stderr


def test_a_shipped_datasets_passing_check_is_remembered_and_data_at_a_path_is_checked_again(tmp_path: Path) -> None:
    """A dataset whose code fixes its examples (`Dataset.shipped`) is built by the first check alone while a file
    keeps its passes, as a model is stepped once (a launch then imports no torch); given a `data.path`, or not
    shipped, it is built by every check: its files may change under it."""
    for name, shipped in (("fixed", True), ("loose", False)):
        text = DATASET.format(name=name, chans=1, size="cfg.model.img_size", fault="BUILT.append(n)")
        text = text.replace(f'name = "{name}"', f'name = "{name}"\n    shipped = {shipped}')
        (tmp_path / f"{name}.py").write_text("BUILT = []\n" + text)
    bases = {"fixed": {**TINY, "data": {"name": "fixed"}}, "loose": {**TINY, "data": {"name": "loose"}},
             "at-path": {**TINY, "data": {"name": "fixed", "path": str(tmp_path)}}}  # fmt: skip
    f = sweeps(tmp_path, ["./fixed.py", "./loose.py"], bases)
    memory = tmp_path / "ck" / "checked.json"

    def built(sweep: str) -> int:
        """Splits the check of `sweep` built, in a check that starts as a new process does."""
        p = plan(f, sweep)
        module = sys.modules[
            next(m.module for m in p.plugins.files if m.path.endswith(f"{p.trials[0].config.data.name}.py"))
        ]
        ablate.probe.check._DATA.clear()
        before = len(module.BUILT)
        assert all(c.ok for c in check([p], remember=memory, data=True, models=False))
        return len(module.BUILT) - before

    assert built("fixed") > 0 and built("fixed") == 0
    assert built("at-path") > 0 and built("at-path") > 0
    assert built("loose") > 0 and built("loose") > 0


def test_a_label_past_the_classes_fails_the_trial_naming_the_dataset(tmp_path: Path) -> None:
    """Training itself (no check ran): the first batch holding the bad label is a DataError naming the dataset."""
    f = sweeps(tmp_path, [dataset_plugin(tmp_path, "late", fault=LAST_LABEL_OUT)],
               {"late": {**TINY, "data": {"name": "late"}, "train": {**TINY["train"], "epochs": 1}}})  # fmt: skip
    cfg = plan(f, "late").trials[0].config
    with pytest.raises(DataError, match=r"dataset 'late' at <no path>: an item's label 4 is not a class index 0\.\.3"):
        run_trial(cfg)


@pytest.mark.parametrize(
    "fault", ["x = torch.nn.functional.interpolate(x, size=16)",
              "x = x if n != 64 else torch.nn.functional.interpolate(x, size=16)"], ids=["every-split", "train-split"]
)  # fmt: skip
def test_images_of_another_size_fail_the_trial_naming_the_dataset(fault: str, tmp_path: Path) -> None:
    """The trial as a launch runs it (`trial_task.run_trial`) with no check before it (`launch --no-check`, or a
    dataset only the cluster has): images of 16 x 16 for a model of img_size 8, in every split or in the train
    split alone, are the check's DataError naming the dataset and the shapes (it was the model's error alone:
    "Input height (16) doesn't match model (8)"), with the model's error as its cause."""
    f = sweeps(tmp_path, [dataset_plugin(tmp_path, "big", fault=fault)],
               {"big": {**TINY, "data": {"name": "big"}, "train": {**TINY["train"], "epochs": 1}}})  # fmt: skip
    cfg = plan(f, "big").trials[0].config
    with pytest.raises(DataError) as e:
        trial_task.run_trial(cfg)
    said = str(e.value)
    assert said.startswith("dataset 'big' at <no path>: a batch of its train split, inputs (2, 1, 16, 16) and labels "
                           "(2,) torch.int64, does not fit vit (which takes (2, 1, 8, 8)"), said  # fmt: skip
    assert "Input height (16) doesn't match model (8)" in str(e.value.__cause__)


def test_launch_runs_the_data_check_and_refuses_before_writing_anything(tmp_path: Path) -> None:
    """`ablate launch` runs the pre-flight `ablate check` runs (issue 38 item 1): a dataset whose labels reach its
    classes, or whose images are 16 x 16 for a model of img_size 8, is exit 2 naming the dataset and its plugin
    file, with no results database, no MLflow store and no checkpoint folder written (it trained, failed and
    wrote all three); a fresh ABLATE_CACHE changes nothing."""
    for name in ("labels", "images"):
        f = sweeps(tmp_path, [dataset_plugin(tmp_path, name, **FAULTS[name])], {name: {**TINY, "data": {"name": name}}})
        res = cli(["launch", str(f), "--plain", "--yes"], tmp_path, {"ABLATE_CACHE": str(tmp_path / f"cache-{name}")})
        assert res.returncode == 2, res.stdout + res.stderr
        assert f"data.name '{name}' (ablate_plugin_{name}_" in said(res) and "Traceback" not in said(res), said(res)
        assert not (tmp_path / "db").exists(), sorted(p.name for p in (tmp_path / "db").iterdir())


def test_ablate_launch_from_python_runs_the_pre_flight_of_the_cli(tmp_path: Path) -> None:
    """`ablate.launch()` refuses a model the CLI refuses (it used to skip the model check and train it): a
    PreflightError naming the plugin's mechanism, raised before the store, MLflow or checkpoints exist."""
    import ablate
    from ablate.execution.launcher import RunConfig

    (tmp_path / "narrow.py").write_text(plugin_source(kind="narrowpre", body=NARROW))
    f = experiments(tmp_path, ["./narrow.py"], kind="narrowpre")
    db, storage = tmp_path / "r.sqlite", tmp_path / "ck"
    with pytest.raises(ablate.PreflightError, match=r"attention.kind 'narrowpre' \(ablate_plugin_narrow_"):
        ablate.launch(ablate.plan(f), f"sqlite:///{db}", f"sqlite:///{tmp_path}/m.sqlite", run=RunConfig(storage))
    assert not db.exists() and not (tmp_path / "m.sqlite").exists() and not storage.exists()


#: The plain ViT example's attention computing softmax attention itself instead of calling the mechanism's mixer:
#: every attention.kind would train this same network.
OWN_ATTENTION = "out = (q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5).softmax(-1) @ v"


def test_a_backbone_that_never_calls_the_mechanism_is_refused_naming_it(tmp_path: Path) -> None:
    """A backbone plugin whose attention does its own softmax (the mixer built, never called): `ablate check`
    exits 2 naming the backbone, its file and the mechanism, for softmax and CSaN alike (issue 38 item 2: two
    mechanisms trained one network, and the report listed two variants); the example as shipped passes."""
    source = (Path(__file__).parents[2] / "examples" / "plain_backbone" / "plainvit.py").read_text()
    mixed = "out = self.mixer(q, k, v, bias=None, x=x)"
    assert mixed in source
    base = {**TINY, "model": {"backbone": "ownvit", "size": "ownvit-micro", "img_size": 8, "patch_size": 2}}
    for name, text in (("ownvit", source.replace(mixed, OWN_ATTENTION)), ("plainvit", source)):
        (tmp_path / f"{name}.py").write_text(text.replace('"plainvit', f'"{name}'))
        kinds = {"softmax": {**base, "attention": {"kind": "softmax"}}, "csan": {**base, "attention": {"kind": "csan"}}}
        for cfg in kinds.values():
            cfg["model"] = {**cfg["model"], "backbone": name, "size": f"{name}-micro"}
        res = cli(["check", str(sweeps(tmp_path, [f"./{name}.py"], kinds)), "--no-data"], tmp_path, {"COLUMNS": "500"})
        rows = statuses(res)
        if name == "plainvit":
            assert res.returncode == 0 and set(rows.values()) == {"ok"}, res.stdout + res.stderr
            continue
        assert res.returncode == 2, res.stdout + res.stderr
        for kind, row in ((kind, rows[kind]) for kind in kinds):
            never = f"network of backbone 'ownvit' never called a mixer of attention.kind '{kind}' (every variant"
            assert "on ownvit (ablate_plugin_ownvit_" in row and f"{tmp_path / 'ownvit.py'})): UnusedMechanism: the " \
                   f"{never}" in row, row  # fmt: skip


def test_read_only_commands_show_the_store_when_a_plugin_fails_to_load(
    ray_local, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep launched with its mechanism as a plugin file, then the same file installed as a package (an entry
    point): loading the sweep's plugin now registers the kind twice. status, runs (all, one sweep), show and report
    read the store: each exits 0 showing the trial, with the plugin problem in one warning paragraph and no
    traceback (issue 38 item 3: a 60-line traceback, exit 1; report exit 2)."""
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    (tmp_path / "relu.py").write_text(plugin_source(kind="relutwice"))
    f = experiments(tmp_path, ["./relu.py"], kind="relutwice")
    db = f"sqlite:///{tmp_path}/r.sqlite"
    launched = CliRunner().invoke(app, ["launch", str(f), "--no-mlflow", "--plain", "--db", db, "--storage",
                                        str(tmp_path / "ck")])  # fmt: skip
    assert launched.exit_code == 0, launched.output
    site = tmp_path / "site"
    (site / "relu_twice-0.1.dist-info").mkdir(parents=True)
    (site / "relu_twice.py").write_text((tmp_path / "relu.py").read_text())
    (site / "relu_twice-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: relu-twice\nVersion: 0.1\n"
    )
    (site / "relu_twice-0.1.dist-info" / "entry_points.txt").write_text("[ablate.mechanisms]\nrelutwice = relu_twice\n")
    key = json.loads(cli(["runs", "--db", db, "--format", "json"], tmp_path).stdout)[0]["key"]
    reports = tmp_path / "reports"
    for args in (["status"], ["runs"], ["runs", "p"], ["show", key[:8]], ["report", "p", "--out", str(reports)]):
        env = {"PYTHONPATH": str(site), "ABLATE_CACHE": str(tmp_path / f"fresh-{args[0]}"), "COLUMNS": "300"}
        res = cli([*args, "--db", db], tmp_path, env)
        assert res.returncode == 0 and "Traceback" not in res.stderr, res.stdout + res.stderr
        assert said(res).count("warning: plugin") == 1, res.stderr
        assert "mechanism 'relutwice' is registered twice" in said(res) and "Results are shown without it" in said(res)
        assert key[:10] in res.stdout or args[0] in ("status", "report"), res.stdout  # status: counts, no keys
        assert "trials per state" in res.stdout or args[0] != "status", res.stdout
    assert (reports / "p" / "index.html").exists()
