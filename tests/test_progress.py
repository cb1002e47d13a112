"""Launch progress: the live table on a terminal, plain log lines elsewhere."""

from __future__ import annotations

import io
from pathlib import Path

from conftest import TINY, write_sweeps
from rich.console import Console

from ablate.planner import plan
from ablate.progress import Progress


def run_events(tmp_path: Path, live: bool) -> str:
    f = write_sweeps(
        tmp_path / "e.yaml", {"s": {"base": TINY, "grid": {"attention.kind": ["softmax", "csan"]}, "seeds": 2}}
    )
    trials = plan(f, "s").trials
    buf = io.StringIO()
    progress = Progress(total=4, done=1, live=live, console=Console(file=buf, force_terminal=live, width=140))
    with progress:
        for t in trials[1:]:
            progress.submitted(t)
        progress.started(trials[1].key)
        progress.epoch(trials[1].key, 1, {"val.top1": 61.5, "train.loss": 1.2})
        progress.started(trials[2].key)
        progress.finished(trials[3].key, "failed")
        progress.refresh()
    return buf.getvalue()


def test_live_table_shows_running_trials_and_overall_counts(tmp_path: Path) -> None:
    text = run_events(tmp_path, live=True)
    assert "attention.kind=softmax" in text and "1/2" in text and "val.top1=61.5" in text
    assert "done 1, failed 1, running 2, pending 0 / 4" in text


def test_plain_lines_without_a_terminal(tmp_path: Path) -> None:
    lines = run_events(tmp_path, live=False).splitlines()
    assert any(" start " in ln and "attention.kind=" in ln for ln in lines)
    assert any(" epoch " in ln and "1/2 val.top1=61.5" in ln for ln in lines)
    assert any(" failed " in ln and "[done 1, failed 1" in ln for ln in lines)
    assert not any("\x1b[" in ln for ln in lines)
