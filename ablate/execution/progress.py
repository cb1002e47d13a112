"""Launch progress: a live rich view on a terminal, plain log lines anywhere else (CI, files, Ray jobs).

The live view shows the running trials, one summary line per final state (finished trials never scroll
away), and the launch as a whole: done / total, trials per hour and the ETA. Plain output is one line per
trial start and finish plus a progress line at most every `PLAIN_EVERY` seconds (and only when something
moved), so a sweep of thousands of epochs stays readable in a CI log. Both end with a summary table.
Time comes from an injectable clock, so tests drive it without waiting.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from ablate.config import REPLICATES
from ablate.evidence.verdict import Verdict, decide
from ablate.spec.metrics import higher_is_better

if TYPE_CHECKING:
    from ablate.planning.keys import Trial

PLAIN_EVERY = 30.0
"""Seconds between two progress lines of the plain output, at least."""
FINAL = ("done", "failed", "diverged")
HEADLINES = ("val.top1", "val.auc", "train.loss")
"""Epoch metrics shown as a trial's latest figure, first present wins."""
SHOWN_KEYS = 4
"""Trials named on a state's summary line (the most recent)."""


def _describe(trial: Trial | None, skip: tuple[str, ...] = ()) -> str:
    if trial is None:
        return ""
    return ", ".join(f"{k}={v}" for k, v in trial.axes.items() if v is not None and k not in skip)


def _duration(seconds: float) -> str:
    days, rest = divmod(round(seconds), 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return (f"{days}d " if days else "") + f"{h}:{m:02d}:{s:02d}"


@dataclass
class _Running:
    start: float
    epoch: int = 0
    metrics: dict[str, float] = field(default_factory=dict)


class Display:
    """What a launch shows of its trials, live or plain (a trial's own position is `checkpoints.Progress`);
    `live=None` picks the live view only when stdout is a terminal. `clock` (seconds, monotonic) times trials,
    the rate and the plain output's throttle."""

    def __init__(
        self,
        total: int = 0,
        done: int = 0,
        live: bool | None = None,
        console: Console | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.console = console or Console()
        self.live = sys.stdout.isatty() if live is None else live
        self.clock = clock
        self.total, self.skipped = total, done
        self.counts: Counter[str] = Counter(done=done)
        self.sweeps: list[str] = []
        self.trials: dict[str, Trial] = {}
        self.running: dict[str, _Running] = {}
        self.finished_keys: dict[str, list[str]] = {}
        """Keys per final state, in the order they finished (this launch)."""
        self.last: dict[str, dict[str, float]] = {}
        """The last epoch metrics of each trial that finished here."""
        self.metrics: dict[str, str] = {}
        """The metric of each trial's sweep, by key: what the summary ranks variants by."""
        self.results: dict[str, dict[str, float]] = {}
        """The final metrics (test scores) of each trial that returned here."""
        self.began = clock()
        self._plain_at = self.began
        self._moved = False
        self._live: Live | None = None

    def __enter__(self) -> Display:
        if self.live:
            self._live = Live(self.render(), console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._live is not None:
            self._live.update(self.render())
            self._live.__exit__(kind, exc, tb)
            self._live = None
        self.console.print(self.summary())

    def begin(self, sweeps: list[str], total: int, done: int, metrics: dict[str, str] | None = None) -> None:
        """The launch's plan: how many trials, how many of them already done, each trial's sweep metric."""
        self.sweeps, self.total, self.skipped, self.counts = sweeps, total, done, Counter(done=done)
        self.metrics = metrics or {}
        self.began = self._plain_at = self.clock()
        self.message(f"{total} trials in {', '.join(sweeps)}: {done} done, {total - done} to run")

    def message(self, text: str) -> None:
        self.console.print(text)

    def _log(self, text: str) -> None:
        if not self.live:
            self.console.print(f"[{time.strftime('%H:%M:%S')}] {text}", highlight=False, markup=False)

    def submitted(self, trial: Trial) -> None:
        self.trials[trial.key] = trial

    def started(self, key: str) -> None:
        self.running[key] = _Running(self.clock())
        described = _describe(self.trials.get(key))
        self._log(f"start {key[:10]}" + (f" ({described})" if described else ""))

    def epoch(self, key: str, epoch: int, metrics: dict[str, float]) -> None:
        run = self.running.setdefault(key, _Running(self.clock()))
        run.epoch, run.metrics = epoch, metrics
        self._moved = True
        self.refresh()

    def result(self, key: str, metrics: dict[str, float]) -> None:
        """A trial's final metrics, as it returned them."""
        self.results[key] = metrics

    def finished(self, key: str, state: str, detail: str = "") -> None:
        """A trial ended in `state`; `detail` says where a diverged one diverged (`diverged at epoch 3, step 17`)."""
        run = self.running.pop(key, None)
        if run is not None and run.metrics:
            self.last[key] = run.metrics
        self.counts[state] += 1
        self.finished_keys.setdefault(state, []).append(key)
        self._moved = True
        headline = self._headline(run.metrics) if run else ""
        said = " ".join(filter(None, [f"{state} {key[:10]}", detail.removeprefix(f"{state} "), headline]))
        self._log(f"{said}  [{self._summary()}]")

    def refresh(self) -> None:
        """Redraw the live view, or print the plain progress line when it is due and something moved."""
        if self._live is not None:
            self._live.update(self.render())
        elif not self.live and self._moved and self.clock() - self._plain_at >= PLAIN_EVERY:
            self._plain_at, self._moved = self.clock(), False
            epochs = " ".join(f"{k[:10]} {r.epoch}/{self._epochs(k)}" for k, r in list(self.running.items())[:4])
            self._log(f"progress {self._summary()}; {self._pace()}" + (f"; epochs {epochs}" if epochs else ""))

    def _epochs(self, key: str) -> int:
        trial = self.trials.get(key)
        return trial.config.train.epochs + trial.config.train.cooldown_epochs if trial else 0

    @staticmethod
    def _headline(metrics: dict[str, float]) -> str:
        for name in HEADLINES:
            if name in metrics:
                return f"{name}={metrics[name]:.4g}"
        return ""

    def _finished(self) -> int:
        return sum(self.counts[s] for s in FINAL)

    def _summary(self) -> str:
        pending = self.total - sum(self.counts.values()) - len(self.running)
        parts = [f"{s} {self.counts[s]}" for s in FINAL if self.counts[s]]
        return ", ".join(parts + [f"running {len(self.running)}", f"pending {max(pending, 0)}"]) + f" / {self.total}"

    def _pace(self) -> str:
        """Trials per hour of this launch and the ETA of the rest; running trials count by their share of
        epochs done, so an estimate appears before the first trial finishes."""
        elapsed = self.clock() - self.began
        partial = sum(r.epoch / e for k, r in self.running.items() if (e := self._epochs(k)))
        work = self._finished() - self.skipped + partial
        left = self.total - self._finished() - partial
        if elapsed <= 0 or work <= 0:
            return "ETA -"
        rate = work / elapsed
        return f"{rate * 3600:.1f} trials/h, ETA {_duration(max(left, 0) / rate)}"

    def _trial_eta(self, key: str, run: _Running, now: float) -> str:
        epochs = self._epochs(key)
        if not run.epoch:
            return "-"
        return _duration((now - run.start) / run.epoch * max(epochs - run.epoch, 0))

    def render(self) -> Group:
        table = Table(title=f"running {len(self.running)}", title_justify="left", expand=False)
        for col in ("key", "axes", "epoch", "latest", "ETA"):
            table.add_column(col)
        now = self.clock()
        for key, run in self.running.items():
            table.add_row(key[:10], _describe(self.trials.get(key)), f"{run.epoch}/{self._epochs(key)}",
                          self._headline(run.metrics), self._trial_eta(key, run, now))  # fmt: skip
        lines = [self._state_line(state) for state in FINAL if state in self.finished_keys]
        footer = Table.grid(padding=(0, 1))
        footer.add_row(ProgressBar(total=max(self.total, 1), completed=self._finished(), width=40),
                       f"{self._finished()}/{self.total} finished:", self._summary(), "|", self._pace())  # fmt: skip
        return Group(table, *lines, footer)

    def _state_line(self, state: str) -> Text:
        keys = self.finished_keys[state]
        named = ", ".join(
            f"{k[:10]}" + (f" {h}" if (h := self._headline(self.last.get(k, {}))) else "")
            for k in reversed(keys[-SHOWN_KEYS:])
        )
        more = f" (+{len(keys) - SHOWN_KEYS} more)" if len(keys) > SHOWN_KEYS else ""
        return Text(f"{state} {len(keys)} this launch: {named}{more}")

    def best(self) -> list[tuple[str, Verdict, dict[str, str]]]:
        """Per sweep metric (`begin`), the variants of the trials done here, best or tied (`ablate.evidence.verdict`,
        the report's rule: paired over the replicates two variants share): (the metric, the verdict, each variant's
        axes in words with its mean and trials)."""
        scores: dict[str, dict[str, dict[Hashable, float]]] = {}
        ratio = 0.0
        for key in self.finished_keys.get("done", []):
            trial, name = self.trials.get(key), self.metrics.get(key, "")
            if trial is not None and name in self.results.get(key, {}):
                replicate = tuple(trial.axes.get(p) for p in REPLICATES)
                scores.setdefault(name, {}).setdefault(trial.variant, {})[replicate] = self.results[key][name]
                if "data.fold" in trial.axes:  # folds of a cross-validation: the corrected resampled t
                    ratio = 1 / (getattr(trial.config.data, "folds", 2) - 1)
        first = {t.variant: t for t in reversed(self.trials.values())}
        out = []
        for name, by_variant in scores.items():
            found = decide(by_variant, higher_is_better(name), ratio=ratio)
            if found is None:
                continue
            labels = {v: f"{_describe(first[v], REPLICATES) or 'the only one'} ({name} {found.means[v]:.4g}, mean of "
                         f"{len(values)})" for v, values in by_variant.items()}  # fmt: skip
            out.append((name, found, labels))
        return out

    def summary(self) -> Group:
        """The end of a launch: trials per state, the best variant so far or those tied, and where the report
        will be."""
        table = Table(title="launch summary", title_justify="left")
        for col in ("state", "trials", "of them this launch"):
            table.add_column(col, justify="left" if col == "state" else "right")
        for state, n in self.counts.items():
            here = n - (self.skipped if state == "done" else 0)
            table.add_row(state, str(n), str(here))
        pending = self.total - sum(self.counts.values())
        if pending > 0:
            table.add_row("not finished", str(pending), "-")
        parts: list[Table | Text] = [table]
        elapsed = self.clock() - self.began
        parts.append(Text(f"{self._finished()}/{self.total} finished in {_duration(elapsed)}; {self._pace()}"))
        for _, found, labels in self.best():
            parts.append(Text(f"variants of this launch: {found.words(labels)}"))
        if where := self.report_hint():
            parts.append(Text(where))
        return Group(*parts)

    def report_hint(self) -> str | None:
        """Where the launch's report will be, and the command that writes it (None before `begin`)."""
        if not self.sweeps:
            return None
        others = " and the other sweeps' beside it" if len(self.sweeps) > 1 else ""
        return f"report: `ablate report {' '.join(self.sweeps)}` writes reports/{self.sweeps[0]}/index.html{others}"
