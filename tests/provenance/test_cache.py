"""The cost cache on disk: `ablate plan`'s params and GFLOPs are computed once per architecture and code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import TINY, write_sweeps
from test_plugins import experiments, plugin_source

from ablate.nn import costs
from ablate.nn.costs import model_cost
from ablate.planning.plan import plan
from ablate.provenance import cache


@pytest.fixture
def fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache folder of the test's own, and a process that has computed nothing yet."""
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(costs, "_COSTS", {})
    monkeypatch.setattr(cache, "_ENTRIES", {})
    return tmp_path / "cache" / cache.COSTS


def new_process() -> None:
    """Forget what this process computed and read, as a new `ablate plan` starts."""
    costs._COSTS.clear()
    cache._ENTRIES.clear()


def tamper(path: Path, params: int) -> None:
    """Overwrite every cached cost's parameter count: a figure that could only come from the file."""
    entries = json.loads(path.read_text())
    path.write_text(json.dumps({k: [params, *v[1:]] if isinstance(v, list) else v for k, v in entries.items()}))


def test_a_new_process_reads_costs_from_the_file(fresh: Path, tmp_path: Path) -> None:
    cfg = plan(write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY}}), "s").trials[0].config
    computed = model_cost(cfg)
    assert fresh.exists()
    new_process()
    assert model_cost(cfg) == computed  # the figures survive the trip through JSON exactly
    tamper(fresh, 12345)
    new_process()
    assert model_cost(cfg).params == 12345


def test_edited_component_code_is_computed_again(fresh: Path, tmp_path: Path) -> None:
    (tmp_path / "relu.py").write_text(plugin_source(kind="cachedrelu"))
    cfg = plan(experiments(tmp_path, ["./relu.py"], kind="cachedrelu"), "p").trials[0].config
    computed = model_cost(cfg)
    tamper(fresh, 12345)
    new_process()
    assert model_cost(cfg).params == 12345  # same code: the file's figure
    (tmp_path / "relu.py").write_text(plugin_source(kind="cachedrelu", extra="SCALE = 2"))  # a change the digest sees
    new_process()
    assert model_cost(cfg) == computed


def test_an_unusable_cache_is_passed_over(fresh: Path, tmp_path: Path) -> None:
    fresh.parent.parent.mkdir(exist_ok=True)
    fresh.parent.write_text("not a folder")  # neither readable nor writable as the cache
    cfg = plan(write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY}}), "s").trials[0].config
    assert model_cost(cfg).params > 0


#: Top-level code of a plugin file that gives its mixer WIDTH parameters more (WIDTH follows).
WIDER = """
import torch

_init = Relu.__init__


def _widened(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    self.extra = torch.nn.Parameter(torch.zeros(WIDTH))


Relu.__init__ = _widened
"""


def test_a_component_edited_within_one_process_is_counted_again(fresh: Path, tmp_path: Path) -> None:
    """A notebook plans, edits its plugin (its mixer gains parameters: same architecture key, other code) and
    plans again in the same process: the count follows the code (issue 38 item 11: the in-process cache was keyed
    by the architecture alone, and answered with the old count)."""
    counts = []
    for width in (3, 7):
        (tmp_path / "wide.py").write_text(plugin_source(kind="widerelu", extra=WIDER + f"WIDTH = {width}"))
        cfg = plan(experiments(tmp_path, ["./wide.py"], kind="widerelu"), "p").trials[0].config
        counts.append(model_cost(cfg).params)
    assert counts[1] - counts[0] == 4 * TINY["model"]["depths"][0]  # one mixer per block
