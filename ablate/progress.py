"""Launch progress: a live rich table on a terminal, plain log lines anywhere else (CI, files, Ray jobs)."""

from __future__ import annotations

import sys
import time
from collections import Counter
from types import TracebackType
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table

from ablate.planner import Trial


def _describe(trial: Trial) -> str:
    return ", ".join(f"{k}={v}" for k, v in trial.axes.items() if v is not None)


class Progress:
    """Tracks trials of one launch; `live=None` picks the live table only when stdout is a terminal."""

    def __init__(self, total: int = 0, done: int = 0, live: bool | None = None, console: Console | None = None) -> None:
        self.console = console or Console()
        self.live = sys.stdout.isatty() if live is None else live
        self.total = total
        self.counts: Counter[str] = Counter(done=done)
        self.trials: dict[str, Trial] = {}
        self.running: dict[str, dict[str, Any]] = {}
        self._live: Live | None = None

    def __enter__(self) -> Progress:
        if self.live:
            self._live = Live(self.render(), console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._live is not None:
            self._live.update(self.render())
            self._live.__exit__(kind, exc, tb)
            self._live = None

    def begin(self, sweeps: list[str], total: int, done: int) -> None:
        """The launch's plan: how many trials, how many of them already done."""
        self.total, self.counts = total, Counter(done=done)
        self.message(f"{total} trials in {', '.join(sweeps)}: {done} done, {total - done} to run")

    def message(self, text: str) -> None:
        self.console.print(text)

    def _log(self, text: str) -> None:
        if not self.live:
            self.console.print(f"[{time.strftime('%H:%M:%S')}] {text}", highlight=False, markup=False)

    def submitted(self, trial: Trial) -> None:
        self.trials[trial.key] = trial

    def started(self, key: str) -> None:
        self.running[key] = {"start": time.time(), "epoch": 0, "metrics": {}}
        self._log(f"start {key[:10]} ({_describe(self.trials[key])})" if key in self.trials else f"start {key[:10]}")

    def epoch(self, key: str, epoch: int, metrics: dict[str, float]) -> None:
        run = self.running.setdefault(key, {"start": time.time(), "epoch": 0, "metrics": {}})
        run["epoch"], run["metrics"] = epoch, metrics
        self._log(f"epoch {key[:10]} {epoch}/{self._epochs(key)} {self._headline(metrics)}")

    def finished(self, key: str, state: str) -> None:
        self.running.pop(key, None)
        self.counts[state] += 1
        self._log(f"{state} {key[:10]}  [{self._summary()}]")

    def refresh(self) -> None:
        if self._live is not None:
            self._live.update(self.render())

    def _epochs(self, key: str) -> int:
        trial = self.trials.get(key)
        return trial.config.train.epochs + trial.config.train.cooldown_epochs if trial else 0

    @staticmethod
    def _headline(metrics: dict[str, float]) -> str:
        for name in ("val.top1", "val.auc", "train.loss"):
            if name in metrics:
                return f"{name}={metrics[name]:.4g}"
        return ""

    def _summary(self) -> str:
        finished = sum(self.counts.values())
        pending = self.total - finished - len(self.running)
        parts = [f"{s} {self.counts[s]}" for s in ("done", "failed", "diverged") if self.counts[s]]
        return ", ".join(parts + [f"running {len(self.running)}", f"pending {max(pending, 0)}"]) + f" / {self.total}"

    def render(self) -> Group:
        table = Table(title="running", title_justify="left", expand=False)
        for col in ("key", "axes", "epoch", "latest", "ETA"):
            table.add_column(col)
        now = time.time()
        for key, run in self.running.items():
            epochs, done = self._epochs(key), run["epoch"]
            eta = (now - run["start"]) / done * (epochs - done) if done else None
            trial = self.trials.get(key)
            table.add_row(key[:10], _describe(trial) if trial else "", f"{done}/{epochs}",
                          self._headline(run["metrics"]), f"{eta:.0f}s" if eta is not None else "-")  # fmt: skip
        finished = sum(self.counts.values())
        footer = Table.grid(padding=(0, 1))
        footer.add_row(ProgressBar(total=max(self.total, 1), completed=finished, width=40), self._summary())
        return Group(table, footer)
