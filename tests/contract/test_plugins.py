"""Plugins: a user's mechanism from a file or an installed distribution, used exactly like a built-in one;
every way a plugin can be broken is a clear error (exit 2, nothing written) before anything runs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import KINDS, TINY
from typer.testing import CliRunner

import ablate.probe.check
from ablate.cli import app
from ablate.config import TrialConfig
from ablate.errors import SpecError
from ablate.planning.plan import Plan, load_plans, plan
from ablate.probe.check import check, check_config, fingerprint
from ablate.registry import BACKBONES, Registry, RegistryError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "cosine_attention" / "experiments.yaml"
#: The example plugins (a mechanism, a dataset, a backbone): folder -> (its file, the variants of its sweep).
EXAMPLES = {
    "cosine_attention": ("cosine.py", 3),
    "shapes_dataset": ("shapes.py", 2),
    "plain_backbone": ("plainvit.py", 4),
}

#: A minimal mechanism's torch-free declaration; {kind} and {build} (the body of `build`) are filled per test.
DECLARATION = '''
from typing import Literal
from ablate.config import Mechanism
from ablate.registry import register_mechanism


@register_mechanism
class ReluConfig(Mechanism):
    """ReLU attention: relu(q k^T / sqrt(d)) / N, no softmax."""

    kind: Literal["{kind}"] = "{kind}"

    def build(self, dim, num_heads, in_dim=None):
        {build}

    def describe(self):
        return "ReLU attention"
'''
#: Its torch code, the mixer; {body} ends its forward.
LAYERS = """
import torch.nn.functional as F
from ablate.nn.mixer import TokenMixer


class Relu(TokenMixer):
    def forward(self, q, k, v, bias=None, x=None):
        a = F.relu(q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5 + (0 if bias is None else bias)) / k.shape[-2]
        {body}
"""
BUILD = "return Relu(self, dim, num_heads, in_dim)"
GOOD_BODY = "return a @ v"


def plugin_source(kind: str = "relu", body: str = GOOD_BODY, extra: str = "") -> str:
    """A plugin module: the declaration and the mixer in one file, then `extra` at its top level."""
    return DECLARATION.format(kind=kind, build=BUILD) + LAYERS.format(body=body) + extra + "\n"


def plugin_package(folder: Path, name: str, kind: str, body: str = GOOD_BODY, extra: str = "") -> Path:
    """A plugin package shaped like the built-ins: the declaration in `__init__.py` (torch-free: what planning
    imports), the mixer in `layers.py` (`extra` at its top level), imported relatively when a mixer is built."""
    package = folder / name
    package.mkdir(parents=True)
    relative = f"from .layers import Relu\n        {BUILD}"
    (package / "__init__.py").write_text(DECLARATION.format(kind=kind, build=relative))
    (package / "layers.py").write_text(LAYERS.format(body=body) + extra + "\n")
    return package


def edit(path: Path, old: str, new: str) -> None:
    """Change a file's text and make sure its modification time moves (coarse clocks)."""
    before = path.stat().st_mtime_ns
    path.write_text(path.read_text().replace(old, new))
    if path.stat().st_mtime_ns == before:
        os.utime(path, ns=(before + 1_000_000, before + 1_000_000))


def experiments(folder: Path, plugins: list[str], kind: str = "relu") -> Path:
    sweeps = {"p": {"base": {**TINY, "attention": {"kind": kind}}, "seeds": 1}}
    path = folder / "e.yaml"
    path.write_text(yaml.safe_dump({"plugins": plugins, "sweeps": sweeps}, sort_keys=False))
    return path


def cli(args: list[str], cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAY_ADDRESS": "", "RAY_AUTH_MODE": "disabled", **(env or {})}
    return subprocess.run([sys.executable, "-m", "ablate.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip


BROKEN = {
    "duplicate": (plugin_source(kind="csan"),
                  "mechanism 'csan' is registered twice: by ablate.nn.mechanisms.csan:CSaNAttention"),
    "raises": (plugin_source(extra="raise RuntimeError('broken at import')"), "RuntimeError: broken at import"),
    "no-kind": (plugin_source().replace('kind: Literal["relu"] = "relu"', "tau: float = 1.0"),
                "needs a field kind: Literal['<name>'] = '<name>'"),
    "wrong-shape": (plugin_source(body="return (a @ v)[..., :1]"),
                    "attention.kind 'relu' (ablate_plugin_relu_"),
}  # fmt: skip


def test_two_plugin_files_of_one_name_in_two_projects_are_two_modules(tmp_path: Path) -> None:
    """Project a's ./relu.py and project b's ./relu.py, planned in one process (a notebook): b's plugin is
    loaded too, not mistaken for a's because the file names agree."""
    files = []
    for project, kind in (("a", "relua"), ("b", "relub")):
        (tmp_path / project).mkdir()
        (tmp_path / project / "relu.py").write_text(plugin_source(kind=kind))
        files.append(experiments(tmp_path / project, ["./relu.py"], kind=kind))
    kinds = [plan(f, "p").trials[0].config.attention.kind for f in files]
    assert kinds == ["relua", "relub"]


def test_an_edited_plugin_file_runs_its_new_text_where_the_old_one_was_imported(tmp_path: Path) -> None:
    """A process that imported a plugin file's old text (a Ray worker of a long-lived cluster, a notebook) and
    is handed its edited text with the next trial runs the new text: its components replace the old ones (not
    refused as a second registration, not skipped as a module already imported)."""
    import torch

    from ablate.plugins import FilePlugin, Plugins

    path = str(tmp_path / "relu.py")
    q, k, v = torch.randn(3, 1, 2, 5, 4).unbind(0)

    def outputs(source: str) -> torch.Tensor:
        Plugins(files=(FilePlugin(path, source),)).load()
        mixer = TrialConfig.model_validate({**TINY, "attention": {"kind": "editrelu"}}).attention.build(8, 2)
        assert type(mixer).__module__ == FilePlugin(path, source).module
        return mixer(q, k, v)

    old = outputs(plugin_source(kind="editrelu"))
    new = outputs(plugin_source(kind="editrelu", body="return (a @ v) * 2.0"))
    assert torch.equal(new, 2 * old)
    assert torch.equal(outputs(plugin_source(kind="editrelu")), old)  # and back: the first text again


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_plugin_exits_2_naming_it_and_writes_nothing(case: str, tmp_path: Path) -> None:
    source, message = BROKEN[case]
    (tmp_path / "relu.py").write_text(source)
    f = experiments(tmp_path, ["./relu.py"])
    res = cli(["launch", str(f), "--no-mlflow", "--plain"], tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    text = " ".join((res.stdout + res.stderr).split())
    assert message in text and ("relu.py" in text or case == "wrong-shape"), text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.yaml", "relu.py"]  # no db/, no checkpoints


def test_a_missing_plugin_is_a_spec_error_at_its_line(tmp_path: Path) -> None:
    f = experiments(tmp_path, ["no_such_pkg.attention"])
    res = CliRunner().invoke(app, ["plan", str(f), "--no-costs"])
    assert res.exit_code == 2
    line = next(i for i, text in enumerate(f.read_text().splitlines(), 1) if "no_such_pkg" in text)
    assert f"{f}:{line}: plugins[0]: plugin no_such_pkg.attention: no module named 'no_such_pkg'" in res.output.replace(
        "\n", ""
    )


def test_entry_point_plugin_is_listed_and_used_without_a_plugins_key(tmp_path: Path) -> None:
    """An installed distribution (a dist-info on sys.path) exposing `ablate.mechanisms`: no `plugins:` needed."""
    site = tmp_path / "site"
    (site / "relu_attention-0.1.dist-info").mkdir(parents=True)
    (site / "relu_attention.py").write_text(plugin_source())
    (site / "relu_attention-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: relu-attention\nVersion: 0.1\n"
    )
    (site / "relu_attention-0.1.dist-info" / "entry_points.txt").write_text(
        "[ablate.mechanisms]\nrelu = relu_attention\n"
    )
    env = {"PYTHONPATH": str(site)}
    listed = cli(["plugins"], tmp_path, env)
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if " relu " in line)
    assert "mechanism" in row and "relu_attention" in row
    f = experiments(tmp_path, [])
    checked = cli(["check", str(f)], tmp_path, env)
    assert checked.returncode == 0 and "ok" in checked.stdout, checked.stdout + checked.stderr
    assert cli(["check", str(f)], tmp_path).returncode == 2  # without the distribution: unknown kind


@pytest.mark.parametrize("example", list(EXAMPLES))
def test_each_example_launches_as_a_plugin_file_and_checks_as_an_installed_package(
    example: str, ray_local, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its experiments file at tiny size (one seed, one epoch) launched through the CLI on the session's Ray, the
    file under `plugins:`; then its own pyproject.toml installed (pip, offline), the file and the `plugins:` key
    gone: a fresh process finds the component through its entry point and steps every variant (`ablate check`)."""
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))  # no check remembered from another run
    file, variants = EXAMPLES[example]
    folder = shutil.copytree(ROOT / "examples" / example, tmp_path / example)
    spec = yaml.safe_load((folder / "experiments.yaml").read_text())
    for sweep in spec["sweeps"].values():
        sweep["seeds"], sweep["base"]["train"]["epochs"] = 1, 1
    (folder / "experiments.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    db, storage = f"sqlite:///{tmp_path}/r.sqlite", str(tmp_path / "ck")
    launch = ["launch", str(folder / "experiments.yaml"), "--all", "--no-mlflow", "--plain", "--db", db, "--storage"]
    res = CliRunner().invoke(app, [*launch, storage])
    assert res.exit_code == 0 and f"done {variants};" in res.output, res.output

    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", "--no-index"]
    res = subprocess.run([*pip, "--target", str(tmp_path / "site"), str(folder)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    (folder / file).unlink()
    del spec["plugins"]
    (folder / "experiments.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    env = {"PYTHONPATH": str(tmp_path / "site"), "COLUMNS": "200", "ABLATE_CACHE": str(tmp_path / "cache2")}
    res = cli(["check", "experiments.yaml"], folder, env)
    assert res.returncode == 0 and res.stdout.count(" ok ") == variants, res.stdout + res.stderr


def test_the_plugins_table_fits_80_columns_with_every_source_whole(tmp_path: Path) -> None:
    """`ablate plugins` on an 80-column terminal, the three examples loaded: no line wider, no cell cut short;
    a plugin file's long source (its module, class and path) wraps onto more lines of its row."""
    files = {folder: ROOT / "examples" / folder / file for folder, (file, _) in EXAMPLES.items()}
    f = tmp_path / "e.yaml"
    f.write_text(yaml.safe_dump({"plugins": [str(p) for p in files.values()]}))
    res = CliRunner().invoke(app, ["plugins", str(f)], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert max(map(len, lines)) <= 80 and "…" not in res.output, res.output
    current, sources = "", dict[str, str]()  # name -> source, the lines a wrapped row adds joined back
    for line in lines:
        if line.startswith("│"):
            _, name, source = (cell.strip() for cell in line.split("│")[1:-1])
            current = name or current
            sources[current] = sources.get(current, "") + source
    for name, cls, folder in (("cosine", "CosineAttention", "cosine_attention"), ("shapes", "Shapes", "shapes_dataset"),
                              ("plainvit", "PlainViT", "plain_backbone")):  # fmt: skip
        assert re.fullmatch(rf"ablate_plugin_\w+:{cls} ?\({re.escape(str(files[folder]))}\)", sources[name]), sources


def test_the_python_blocks_of_the_plugin_page_run() -> None:
    """docs/plugins.md's Python is real: every block runs as written (they register nothing in this process)."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "plugins.md").read_text(), re.S)
    assert len(blocks) == 2
    for block in blocks:
        exec(compile(block, "docs/plugins.md", "exec"), {})


def test_a_plugin_mechanisms_knobs_are_in_the_schema(tmp_path: Path) -> None:
    schema = cli(["schema", str(EXAMPLE)], tmp_path)
    assert "Initial temperature multiplying the cosine logits." in schema.stdout  # the plugin's field docstring


COUNTING = "if q.device.type != 'meta':\n            FORWARDS.append(1)\n        return a @ v"
"""A mixer's body that counts its real (non-meta) forwards in its module's FORWARDS."""


def steps_of_a_fresh_check(p: Plan, remember: Path | None, module: str) -> int:
    """The real forwards of `module`'s counting mixer in a check of `p` that starts as a new process does."""

    def forwards() -> int:
        return len(getattr(sys.modules.get(module), "FORWARDS", []))

    ablate.probe.check._CACHE.clear()
    before = forwards()
    assert all(c.ok for c in check([p], remember=remember))
    return forwards() - before


def test_a_passing_check_is_remembered_across_processes_in_a_file(tmp_path: Path) -> None:
    """A relaunch reads the remembered fingerprints instead of stepping the model again; without the file
    (or with another architecture) the step runs."""
    (tmp_path / "counted.py").write_text(plugin_source(kind="counted", body=COUNTING, extra="FORWARDS = []"))
    p = plan(experiments(tmp_path, ["./counted.py"], kind="counted"), "p")
    module = p.plugins.files[0].module
    memory = tmp_path / "ck" / "checked.json"
    assert steps_of_a_fresh_check(p, memory, module) > 0 and memory.exists()
    assert steps_of_a_fresh_check(p, memory, module) == 0
    assert steps_of_a_fresh_check(p, None, module) > 0
    other = p.trials[0].config.model_copy(
        update={"model": p.trials[0].config.model.model_copy(update={"embed_dim": 16})}
    )
    assert fingerprint(other) != fingerprint(p.trials[0].config)


def test_an_edited_layers_py_of_a_plugin_package_is_checked_again(tmp_path: Path, monkeypatch) -> None:
    """A plugin package split like the built-ins (its mixer in layers.py, imported relatively by the
    declaration's `build`): a remembered pass stands until layers.py alone is edited; then the check steps the
    model again (the process keeps running the layers it imported: only whether a step ran is counted)."""
    package = plugin_package(tmp_path, "checkedpkg", kind="checkedrelu", body=COUNTING, extra="FORWARDS = []")
    monkeypatch.syspath_prepend(str(tmp_path))
    p = plan(experiments(tmp_path, ["checkedpkg"], kind="checkedrelu"), "p")
    memory = tmp_path / "ck" / "checked.json"
    assert steps_of_a_fresh_check(p, memory, "checkedpkg.layers") > 0
    assert steps_of_a_fresh_check(p, memory, "checkedpkg.layers") == 0
    edit(package / "layers.py", "return a @ v", "return (a @ v) * 2.0")
    assert steps_of_a_fresh_check(p, memory, "checkedpkg.layers") > 0
    assert steps_of_a_fresh_check(p, memory, "checkedpkg.layers") == 0


def test_registry_refuses_a_second_source_for_a_name() -> None:
    reg: Registry[int] = Registry("thing")
    reg.register("a", 1, source="first.py")
    reg.register("a", 1, source="first.py")  # the same module imported again: a no-op
    with pytest.raises(RegistryError, match=re.escape("thing 'a' is registered twice: by first.py and by second.py")):
        reg.register("a", 2, source="second.py")
    with pytest.raises(RegistryError, match="unknown thing 'b'; registered: a"):
        reg.get("b")


MIL = {"task": "mil", "data": {"name": "musk1"}, "model": {"size": "synpool", "embed_dim": 16},
       "train": {"batch_size": 2}}  # fmt: skip
SIZES = {"vit": TINY["model"], **{b: dict(backbone=b, **m) for b, m in {
    "swin": dict(embed_dim=24, depths=(2, 2), num_heads=(2, 4), img_size=8, patch_size=1, window_size=4),
    "hiera": dict(embed_dim=8, depths=(1, 1), num_heads=(1,), img_size=8, patch_size=1, window_size=2),
}.items()}}  # fmt: skip


@pytest.mark.parametrize("backbone", sorted(BACKBONES.names()))
@pytest.mark.parametrize("kind", KINDS)
def test_every_mechanism_passes_the_check_on_every_backbone_that_takes_it(kind: str, backbone: str) -> None:
    raw = MIL if BACKBONES.get(backbone).task == "mil" else {**TINY, "model": SIZES[backbone]}
    raw = {**raw, "attention": {"kind": kind, **({"steps": 2} if kind == "syn" else {})}}
    try:
        cfg = TrialConfig.model_validate(raw)
    except ValueError as e:  # a backbone may refuse a mechanism, with its reason
        assert (kind, backbone) in REFUSED and REFUSED[kind, backbone] in str(e), e
        return
    assert (kind, backbone) not in REFUSED
    assert check_config(cfg) is None


#: The pairs a backbone refuses at these sizes, and the reason it gives.
REFUSED = {
    ("csan", "synpool"): "synpool cannot pool with attention.kind 'csan'",
    ("nlm", "synpool"): "nlm cannot run on this synpool",  # it takes learned projections only
    ("nlm", "hiera"): "nlm cannot run on this hiera",  # two stages: the second widens its tokens
}


def test_a_plugin_package_beside_the_experiments_file_is_shipped_to_workers(tmp_path: Path) -> None:
    """`plugins: [mypkg.relu]` for a package that is not installed, its mechanism split like the built-ins (the
    declaration in `mypkg/relu/__init__.py`, the mixer in `layers.py`, imported relatively when the worker
    builds the model): its folder travels with the task as a zip, and the trial runs on a Ray worker."""
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    plugin_package(tmp_path / "mypkg", "relu", kind="relu")
    f = experiments(tmp_path, ["mypkg.relu"])
    elsewhere = tmp_path / "run"  # the launcher runs from another folder: only the shipped zip has mypkg
    elsewhere.mkdir()
    res = cli(["launch", str(f), "--no-mlflow", "--plain", "--db", f"sqlite:///{tmp_path}/r.sqlite"], elsewhere)
    assert res.returncode == 0 and "done 1" in res.stdout, res.stdout + res.stderr


def test_a_kind_nothing_registers_is_named_first_and_its_knobs_are_not_compared_with_others(tmp_path: Path) -> None:
    """The package that registers `gone` uninstalled (nothing registers it), its sweeps written for it: the kind is
    the problem, named where it is written with what is registered and the plugins loaded, before the grid's
    other problems, and no knob of it is compared with the other mechanisms' (syn's `renormalize`)."""
    (tmp_path / "other.py").write_text(plugin_source(kind="otherrelu"))
    sweeps = {
        "a": {"base": {**TINY, "attention": {"kind": "gone", "normalize": True}},
              "grid": {"attention.power": [1, 2], "train.lrr": [0.1]}},
        "b": {"base": TINY, "grid": {"attention.kind": ["softmax", "gone"]},
              "when": [{"when": {"attention.kind": "gone"}, "grid": {"attention.normalize": [True, False]}}]},
    }  # fmt: skip
    f = tmp_path / "e.yaml"
    f.write_text(yaml.safe_dump({"plugins": ["./other.py"], "sweeps": sweeps}, sort_keys=False))
    with pytest.raises(SpecError) as info:
        load_plans(f)
    problems = [str(p) for p in info.value.problems]
    said = "attention.kind names no registered mechanism (got 'gone') (registered: softmax, csan,"
    lines = f.read_text().splitlines()
    at = [i for i, line in enumerate(lines, 1) if line.strip() in ("kind: gone", "- gone")]
    assert problems[0].startswith(f"{f}:{at[0]}: sweeps.a.base.attention.kind: {said}"), problems
    assert problems[1].startswith(f'{f}:{at[1]}: sweeps.b.grid["attention.kind"][1]: {said}'), problems
    assert all(", otherrelu; plugins loaded: " in p and p.endswith(f"{tmp_path / 'other.py'})") for p in problems[:2])
    assert len(problems) == 3 and "'lrr' is not a key of train" in problems[2], problems
    assert not any("renormalize" in p or "is not a key of attention" in p for p in problems), problems
