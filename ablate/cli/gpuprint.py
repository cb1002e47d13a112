"""`ablate gpu-check`'s tables: what it plans (the dry run's listing) and what it measured (`ablate.api.gpu_check`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.table import Table

if TYPE_CHECKING:
    from ablate.api import Figures, PlannedCheck


def _x(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _table(title: str, columns: Sequence[str], left: int) -> Table:
    """A table whose first `left` columns are text, the others figures."""
    table = Table(title=title, title_justify="left")
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i < left else "right")
    return table


def plan_table(planned: PlannedCheck) -> Table:
    """What the check runs, phase by phase, and how long each trial is sized to train."""
    rates = ", ".join(f"{setting} {rate:,}" for setting, rate in planned.estimated.items())
    table = _table(
        f"gpu-check: the trials each phase launches, then a plain timm loop per setting ({planned.plain_seconds:g} s "
        f"steady). Epochs: 1 to warm up, then {planned.seconds:g} s of steady training at an estimated images/s per "
        f"trial ({rates}; {planned.images:,} images an epoch); the run prints what each trial measured",
        ("phase", "key", "attention", "seed", "amp", "compile", "GPUs per trial", "epochs", "steady s at the estimate"),
        7,
    )
    for row in planned.phases:
        phase = row.phase
        gpus = f"auto ({row.probes} probes)" if phase.gpus is None else f"{phase.gpus:g}"
        for t in row.trials:
            table.add_row(phase.name, t.key[:10], t.kind, str(t.seed), str(t.amp), str(t.compile), gpus,
                          str(t.epochs), f"{t.steady:.0f}")  # fmt: skip
        table.add_section()
    return table


def tables(figures: Figures) -> list[Table]:
    """The figures as the CLI prints them."""
    where = _table(
        "where each trial trained (its stored device) and its steady epochs",
        ("phase", "key", "attention", "seed", "device", "state", "steady s", "images/s", "peak GiB", "note"),
        6,
    )
    for t in figures.trials:
        peak = None if t.peak is None else t.peak / 2**30
        notes = [f"shared its GPU with {', '.join(k[:10] for k in t.shared)}"] if t.shared else []
        if t.state == "done" and t.steady.seconds < figures.seconds:
            notes.append(f"under {figures.seconds:g} s: faster than estimated, raise --seconds")
        where.add_row(t.phase, t.key[:10], t.kind, str(t.seed), t.device or "- (not recorded)", t.state,
                      f"{t.steady.seconds:.1f}", _x(t.steady.rate, 0), _x(peak), "; ".join(notes))  # fmt: skip
    speed = _table(f"images/s per GPU on {figures.device}: launched trials vs a plain timm loop (target >= 0.97)",
                   ("attention", "setting", "launched", "plain loop", "launched / plain"), 2)  # fmt: skip
    for s in figures.throughput:
        speed.add_row(s.kind, s.setting, f"{s.launched:.0f}", _x(s.plain, 0), _x(s.ratio))
    ups = _table("speed-ups (launched images/s)", ("attention", "bf16 / fp32", "bf16+compile / bf16"), 1)
    for u in figures.speedups:
        ups.add_row(u.kind, _x(u.bf16), _x(u.compile))
    busy = _table("GPU busy fraction inside the steady epochs of the trials each GPU hosted (NVML; packed "
                  "target >= 0.9)", ("phase", "GPU (PCI bus id)", "trials", "busy", "readings", "why no figure"),
                  2)  # fmt: skip
    for b in figures.busy:
        busy.add_row(b.phase, b.gpu or "-", str(b.trials), _x(b.fraction), str(b.samples), b.reason or "")
    memory = _table("packed trials: probe's prediction vs the trial's peak",
                    ("key", "attention", "probe GiB", "peak allocated GiB", "peak / probe"), 2)  # fmt: skip
    for m in figures.memory:
        memory.add_row(m.key[:10], m.kind, f"{m.predicted / 2**30:.2f}", f"{m.peak / 2**30:.2f}", _x(m.ratio))
    return [where, speed, ups, busy, memory]
