"""`make gpu-install`, the one command that puts a CUDA torch and the project on a GPU machine: it asks for what
constraints.txt pins, from one index (PyPI's Linux torch wheel is the CUDA build) through a pip that no configuration
reaches, so a CPU wheel that pip's configuration offers cannot win; WHEELS=DIR installs from a folder alone. Its pip
lines are taken from `make -n` and resolved for real by pip (`--dry-run`), against a CPU torch planted in pip's
configuration as a cluster's pip.conf or this machine's offers one. `make install` keeps this machine's CPU torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from conftest import needs
from test_constraints import PINNED, pins

ROOT = Path(__file__).resolve().parents[2]
DRY = "--dry-run --quiet --ignore-installed --no-deps --report"


def make_n(*args: str) -> list[str]:
    """The commands `make gpu-install ARGS` would run, in order."""
    done = subprocess.run(["make", "-n", "gpu-install", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if not line.startswith("make")]


def torch_line(lines: list[str]) -> str:
    (line,) = [line for line in lines if "pip install" in line and "torch==" in line]
    return line


def wheel(folder: Path, name: str, version: str) -> Path:
    """A wheel with metadata alone, enough for pip to resolve it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return path


def resolved(command: str, report: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], dict]:
    """Run a pip install line as a dry run; what pip would install, by name: (version, where from, needs)."""
    done = subprocess.run(["bash", "-c", f"{command} {DRY} {report}"], cwd=ROOT, capture_output=True, text=True,
                          env=env, timeout=300)  # fmt: skip
    if done.returncode:
        return done, {}
    picked = json.loads(report.read_text())["install"]
    return done, {
        i["metadata"]["name"]: (i["metadata"]["version"], i["download_info"]["url"], i["metadata"].get("requires_dist"))
        for i in picked
    }


def test_the_gpu_install_asks_for_the_pins_from_one_index_after_removing_the_venvs_torch() -> None:
    lines = make_n()
    line = torch_line(lines)
    pinned = pins((ROOT / "constraints.txt").read_text())
    assert {n.lower(): v for n, v in PINNED.findall(line)} == {n: str(pinned[n]) for n in ("torch", "torchvision")}
    assert line.startswith("PIP_CONFIG_FILE=/dev/null ") and " --isolated " in line
    assert "--index-url https://pypi.org/simple " in line and "-c constraints.txt" in line
    uninstall = next(i for i, cmd in enumerate(lines) if "pip uninstall" in cmd)
    assert "torch torchvision" in lines[uninstall] and uninstall < lines.index(line)
    (project,) = [cmd for cmd in lines if "pip install" in cmd and "-e '.[gpu]'" in cmd]
    assert "-c constraints.txt" in project and lines.index(project) > lines.index(line)
    custom = torch_line(make_n("TORCH_INDEX=https://download.pytorch.org/whl/cu126"))
    assert "--index-url https://download.pytorch.org/whl/cu126 " in custom


def test_make_install_keeps_the_cpu_torch() -> None:
    done = subprocess.run(["make", "-n", "-B", "install"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "uninstall" not in done.stdout and "--isolated" not in done.stdout and "[gpu]" not in done.stdout


def test_offline_both_installs_read_the_wheel_folder_alone(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    for name in ("torch", "torchvision"):
        pinned = pins((ROOT / "constraints.txt").read_text())[name]
        wheel(wheels, name, str(pinned))
    lines = make_n(f"WHEELS={wheels}")
    installs = [cmd for cmd in lines if "pip install" in cmd]
    assert len(installs) == 2 and all(f"--no-index --find-links {wheels}" in cmd for cmd in installs)
    assert "--index-url" not in torch_line(lines)
    done, picked = resolved(torch_line(lines), tmp_path / "report.json", dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert {name: Path(url).name for name, (_, url, _) in picked.items()} == {
        p.name.split("-")[0]: p.name for p in wheels.iterdir()
    }


def test_a_cpu_torch_that_pips_configuration_offers_does_not_win(tmp_path: Path) -> None:
    """A +cpu build of the pinned release sorts above it (PEP 440): offered by a pip.conf or a PIP_* variable, plain
    pip takes it; the gpu install's line reads neither and takes PyPI's wheel, which needs CUDA's libraries."""
    pinned = str(pins((ROOT / "constraints.txt").read_text())["torch"])
    cpu = wheel(tmp_path / "cpu-wheels", "torch", f"{pinned}+cpu")
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nfind-links = {cpu.parent}\n")
    env = {**os.environ, "PIP_CONFIG_FILE": str(conf), "PIP_FIND_LINKS": str(cpu.parent)}
    plain = f"{sys.executable} -m pip install torch=={pinned}"
    done, picked = resolved(plain, tmp_path / "plain.json", env)
    assert done.returncode == 0, done.stderr
    assert picked["torch"][0] == f"{pinned}+cpu"  # what the planted configuration makes plain pip take
    done, picked = resolved(torch_line(make_n()), tmp_path / "gpu.json", env)
    needs(done.returncode == 0, f"PyPI unreachable: {done.stderr.strip()[-300:]}")
    version, url, requires = picked["torch"]
    assert version == pinned and url.startswith("https://files.pythonhosted.org/"), url
    assert any(r.startswith("nvidia-") for r in requires or []), requires  # the CUDA build
