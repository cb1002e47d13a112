"""Cost figures that measure the architecture (issue 39 items 3 and 4): steady-state throughput from the trials'
own epochs on stores with scripted timings (tests/synthetic.py), the side-by-side step timing's protocol (never a
timed value), significant digits, labels inside the cost figure, and a published section only where it belongs."""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from conftest import TINY, write_sweeps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from synthetic import fill

from ablate import units
from ablate.config import TrialConfig
from ablate.planning.keys import Trial
from ablate.planning.plan import Plan, plan
from ablate.probe import steptime
from ablate.registry import TABLES
from ablate.reporting import frames, plots, report, tables
from ablate.store import Store

#: Scripted samples/s per epoch (1..4) of each (kind, seed): epoch 1 is a worker warming up, ten times slower.
SPEED = {
    ("softmax", 0): [10, 1000, 1010, 1400],
    ("softmax", 1): [10, 2000, 2010, 2400],
    ("softmax", 2): [10, 3000, 3010, 3400],
    ("csan", 0): [10, 400, 410, 420],
    ("csan", 1): [10, 500, 5, 520],  # resumed in epoch 3: that epoch warmed a new worker up
    ("csan", 2): [10, 600, 610, 620],
}


@pytest.fixture
def store(tmp_path):
    with Store(f"sqlite:///{tmp_path / 'c.sqlite'}") as s:
        yield s


def sweep(tmp_path: Path, name: str, grid: dict, seeds: int = 3, base: dict | None = None) -> Plan:
    spec = {"base": base or TINY, "grid": grid, "seeds": seeds, "baseline": {k: v[0] for k, v in grid.items()}}
    return plan(write_sweeps(tmp_path / f"{name}.yaml", {name: spec}), name)


def timed(store: Store, tmp_path: Path, device: Callable[[Trial], str] = lambda t: "cpu") -> Plan:
    """Softmax and CSaN, 3 seeds, 4 epochs whose samples/s and s/epoch are SPEED's; CSaN seed 1 resumed after
    epoch 2; each trial on `device(t)`."""
    p = sweep(tmp_path, "timed", {"attention.kind": ["softmax", "csan"]})
    fill(store, p, lambda t: 80.0 + t.axes["seed"], epochs=4, device=device)
    rows = []
    for t in p.trials:
        for epoch, v in enumerate(SPEED[t.axes["attention.kind"], t.axes["seed"]], 1):
            rows += [(t.key, "samples_per_s", epoch, float(v), None), (t.key, "epoch_s", epoch, 1e4 / v, None)]
        if (t.axes["attention.kind"], t.axes["seed"]) == ("csan", 1):
            store.finish(t.key, "done", result={p.metric: 81.0}, resumed_from=2)
    store.log_metric_rows(rows)
    return p


def test_steady_state_throughput_leaves_out_each_process_first_epoch_and_takes_medians(store, tmp_path):
    """samples/s per variant = the median over trials of each trial's median over epochs 2+, less the epoch a
    resumed trial restarted in; s/epoch likewise; how many trials and on which device."""
    p = timed(store, tmp_path)
    data = frames.load(store, "timed")
    speed = frames.throughput(store, data)
    kind = {v: t.axes["attention.kind"] for t in p.trials for v in [t.variant]}
    by_kind = {kind[str(v)]: r for v, r in speed.iterrows()}
    assert by_kind["softmax"]["samples_s"] == 2010  # trial medians 1010, 2010, 3010 (with epoch 1: 2005)
    assert by_kind["csan"]["samples_s"] == 510  # 410, 510 (epochs 2 and 4 of the resumed trial), 610
    soft_epochs = [statistics.median(1e4 / v for v in SPEED["softmax", s][1:]) for s in range(3)]
    assert by_kind["softmax"]["epoch_s"] == pytest.approx(statistics.median(soft_epochs))
    assert list(speed["timed"]) == [3, 3] and set(speed["device"]) == {"cpu"}
    assert "step_rel" not in speed


def test_throughput_is_no_column_of_the_variant_table_and_the_cost_section_says_what_it_timed(store, tmp_path):
    """A figure of the load that reversed between runs of the same trials does not sit beside #Params and GFLOPs:
    the variant table has no speed column; the Cost section's table shows samples/s with the trials' count and
    device and says it ranks nothing, and how to get the side-by-side figure."""
    timed(store, tmp_path)
    data = frames.load(store, "timed")
    table = frames.variant_table(data, frames.throughput(store, data))
    shown = tables.variants(table, data)
    assert not any("samples/s" in h or "step" in h for h in shown.header) and shown.header[4].startswith("test.top1")
    assert not any("2010" in c for r in shown.rows for c in r) and "samples/s" not in shown.caption
    cost = tables.costs(table)
    assert (
        cost is not None and cost.header[1] == "samples/s, epochs 2+" and [r[1] for r in cost.rows] == ["2010", "510"]
    )
    assert "samples/s, s/epoch: steady-state training throughput, epochs 2+" in cost.caption
    assert (
        "median of 3 trials per variant on cpu" in cost.caption and "not a ranking of the architectures" in cost.caption
    )
    assert "`ablate report --time`" in cost.caption


def test_the_cost_section_names_the_kinds_of_device_not_each_gpu(store, tmp_path):
    """Each trial's record names its GPU (index and NVML bus id, `ablate.training.devices.describe`): the throughput
    says which kinds of device timed a variant, so a sweep over 64 GPUs does not list 64 devices."""

    def on(t: Trial) -> str:
        if t.axes["attention.kind"] == "csan" and t.axes["seed"] == 2:
            return "cpu"
        return f"cuda:0 NVIDIA H200 pci 00000000:{0x18 + t.axes['seed']:02X}:00.0"

    timed(store, tmp_path, on)
    data = frames.load(store, "timed")
    speed = frames.throughput(store, data)
    assert sorted(speed["device"]) == ["NVIDIA H200", "NVIDIA H200, cpu"]
    caption = tables.costs(frames.variant_table(data, speed)).caption  # type: ignore[union-attr]
    assert "median of 3 trials per variant on NVIDIA H200, cpu, each where" in caption


def configs(tmp_path: Path) -> dict[str, TrialConfig]:
    """Four variants of two architectures: softmax and CSaN, each at two learning rates (a recipe, not a model)."""
    p = sweep(tmp_path, "arch", {"attention.kind": ["softmax", "csan"], "train.lr": [1e-3, 2e-3]}, seeds=1)
    return {t.variant: t.config for t in p.trials}


def test_side_by_side_times_each_architecture_once_per_round_in_turn(tmp_path):
    """One process, a warm-up step each, then round after round one step of every distinct architecture in plan
    order; a variant's figure is its architecture's, the fastest 1.0. Structure only: no timed value is asserted
    beyond being positive."""
    got = configs(tmp_path)
    times = steptime.side_by_side(got, rounds=3, batch=2)
    archs = list(dict.fromkeys(times.variants.values()))
    assert len(archs) == 2 and times.variants == steptime.architectures(got)
    assert times.order == tuple(archs * 3)  # interleaved: a, b, a, b, a, b; the warm-up round is not in it
    assert {a: len(s) for a, s in times.seconds.items()} == {a: 3 for a in archs}
    assert all(s > 0 for ss in times.seconds.values() for s in ss)
    rel = times.relative()
    assert min(rel.values()) == 1.0 and set(rel) == set(got)
    for v, arch in times.variants.items():
        assert rel[v] == times.median()[arch] / min(times.median().values())


def test_relative_step_time_is_the_median_of_rounds_over_the_fastest():
    """On scripted seconds: one slow round (a descheduled step) does not move an architecture's figure."""
    times = steptime.StepTimes(
        {"v1": "a", "v2": "b", "v3": "a"}, ("a", "b") * 3, {"a": (1.0, 9.0, 1.0), "b": (2.0,) * 3}, batch=4
    )
    assert times.relative() == {"v1": 1.0, "v2": 2.0, "v3": 1.0}


def test_report_time_times_at_the_trials_batch_and_says_how_it_was_measured(store, tmp_path):
    """`report(time=True)`: the Cost section's table adds the side-by-side ratio, timed at the batch the trials
    trained at (TINY's 128 on one worker, not a fixed small batch), which its caption and variants.csv name."""
    timed(store, tmp_path)
    report("timed", store=store, out=tmp_path / "r", formats=["md", "csv"], time=True)
    text = (tmp_path / "r" / "timed" / "report.md").read_text()
    assert "![test.top1 against params, GFLOPs and the side-by-side step time with the Pareto front]" in text
    cells = re.findall(r"\| (2010|510) \| [\d.]+ \| 3 \| ×(\d+\.\d\d) \|", text)
    assert "| step time, side by side |" in text and sorted(c[0] for c in cells) == ["2010", "510"]
    assert min(float(c[1]) for c in cells) == 1.0
    assert f"one process, CPU ({steptime.THREADS} thread), batch 128 (the trials' own" in text
    variants = pd.read_csv(tmp_path / "r" / "timed" / "variants.csv")
    assert variants["step_batch"].tolist() == [128, 128] and variants["step_rel"].min() == 1.0


def test_the_cost_figure_names_a_step_time_only_when_timed(store, tmp_path):
    """Without `--time` the cost plot has params and GFLOPs only, and its description says so."""
    p = sweep(tmp_path, "sized", {"attention.kind": ["softmax", "csan"]}, seeds=1)
    fill(store, p, lambda t: 70.0, cost=lambda t: (10**6 * (2 if t.axes["attention.kind"] == "csan" else 1), 10**9))
    report("sized", store=store, out=tmp_path / "r", formats=["md"])
    assert (
        "![test.top1 against params, GFLOPs with the Pareto front](cost.png)"
        in (tmp_path / "r" / "sized" / "report.md").read_text()
    )


def test_the_side_by_side_batch_is_a_workers_micro_batch_of_the_trials():
    """What one step of a trial takes: batch_size over workers and accumulation steps; the most common where
    variants differ; side_by_side times at it unless told otherwise."""

    def cfg(batch: int, workers: int = 1, accum: int | None = None) -> TrialConfig:
        train = {**TINY["train"], "batch_size": batch, "accum_steps": accum}
        return TrialConfig.model_validate({**TINY, "train": train, "resources": {"workers": workers}})

    assert steptime.batch_of({"a": cfg(32, workers=2), "b": cfg(64, workers=2, accum=2)}) == 16
    assert steptime.batch_of({"a": cfg(8), "b": cfg(32), "c": cfg(32), "d": cfg(8), "e": cfg(64)}) == 8
    assert steptime.side_by_side({"a": cfg(6)}, rounds=1).batch == 6


def test_costs_print_in_significant_digits():
    """A tiny model is not 0.00M nor 0.000 GFLOPs; no false decimals on a large one; rounding up keeps 3 digits."""
    assert [units.params(n) for n in (42_123, 1_234_567, 87_800_000, 999_999)] == ["0.0421M", "1.23M", "87.8M", "1.00M"]
    assert [units.gflops(g) for g in (0.000312, 4.381, 1234.5)] == ["0.000312", "4.38", "1234"]
    assert units.params(-21_000, sign=True) == "-0.0210M" and units.params(float("nan")) == "-"


def test_cost_labels_stay_inside_the_figure(store, tmp_path):
    """The costliest variant is the best, so the Pareto front labels the panel's right edge: every label is drawn
    inside the figure (a label running right from it was cut by the figure's edge)."""
    kinds = ["softmax", "csan", "sparsemax", "entmax15"]
    p = sweep(tmp_path, "front", {"attention.kind": kinds}, seeds=2)
    rank = {k: i + 1 for i, k in enumerate(kinds)}
    size = lambda t: rank[t.axes["attention.kind"]]  # noqa: E731
    fill(store, p, lambda t: 70.0 + 5 * size(t), cost=lambda t: (10**6 * size(t), 2 * 10**9 * size(t)))
    data = frames.load(store, "front")
    fig = plots.cost_figure(frames.variant_table(data), data)
    assert fig is not None
    renderer = FigureCanvasAgg(fig).get_renderer()
    labels = [t for ax in fig.axes for t in ax.texts]
    assert len(labels) == 2 * len(kinds)  # every variant is on the front of both panels
    for t in labels:
        box = t.get_window_extent(renderer)
        assert box.x0 >= 0 and box.x1 <= fig.bbox.x1 and box.y0 >= 0 and box.y1 <= fig.bbox.y1, t.get_text()


def test_effect_differences_of_percentages_are_percentage_points():
    assert plots._unit("test.top1", difference=True) == " (pp)" and plots._unit("test.top1") == " (%)"
    assert plots._unit("test.auc", difference=True) == ""


def published(store: Store, tmp_path: Path, name: str, grid: dict, base: dict | None = None) -> list[str] | None:
    """The lines of report.md's "Published numbers" section; None when the report has none."""
    fill(store, sweep(tmp_path, name, grid, seeds=1, base=base), lambda t: 70.0)
    report(name, store=store, out=tmp_path / "r", formats=["md"])
    md = (tmp_path / "r" / name / "report.md").read_text()
    if "\n## Published numbers\n" not in md:
        return None
    body = md.split("\n## Published numbers\n", 1)[1].split("\n## ", 1)[0]
    return [line for line in body.splitlines() if line.strip()]


def test_no_published_section_where_no_variants_mechanism_is_published(store, tmp_path):
    """Softmax is a row of the CSaN paper's table, as its baseline; a softmax and sparsemax sweep gets no section."""
    assert published(store, tmp_path, "plain", {"attention.kind": ["softmax", "sparsemax"]}) is None


def test_one_line_when_a_published_mechanism_has_no_row_for_these_variants(store, tmp_path):
    """CSaN ablated (mu off: no published row has it): the section is one line naming the paper."""
    base = {**TINY, "attention": {"kind": "csan", "mu": False}}
    lines = published(store, tmp_path, "ablated", {"attention.tau": [True, False]}, base=base)
    assert lines == [
        "None comparable (no published row has these variants' mechanism settings and stack): "
        f"{TABLES.get('csan-imagenet').source}."
    ]
