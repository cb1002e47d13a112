"""tests/ follows ablate's layers: each test module sits in the folder of the layer it tests, so a contributor
finds a unit's tests where its layer is, and `pytest tests/<layer>` runs them."""

from __future__ import annotations

from pathlib import Path

from layers import LAYER_OF

TESTS = Path(__file__).resolve().parents[1]
FOLDERS = {
    "contract": ("components", "registry", "plugins", "config"),
    "datasets": ("data",),
    "project": (),
}
"""Folders named otherwise than one unit of `layers.LAYERS`: the units they cover (`project`: the repository as a
whole: docs, import layers, test marks)."""


def test_every_test_module_is_in_a_folder_named_for_a_layer() -> None:
    loose = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert not loose, f"test modules at tests/ itself, outside a layer's folder: {loose}"
    for folder in sorted({p.parent for p in TESTS.rglob("test_*.py")}):
        assert folder.parent == TESTS, f"{folder}: one level of folders, a layer's"
        units = FOLDERS.get(folder.name, (folder.name,))
        assert all(u in LAYER_OF for u in units), f"tests/{folder.name}/ names no layer of tests/layers.py"
