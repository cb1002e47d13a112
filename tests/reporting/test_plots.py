"""The report's figures (`ablate.reporting.plots`): what a reader sees of their parts, drawn the cheap way."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.axes import Axes

from ablate.reporting import plots

LABELS = [f"variant {i}: tau={i % 2 == 0}, lr={i / 1000:g}" for i in range(40)]


def _chart(rows: bool, width: float = 11) -> bytes:
    """A 40-row chart as the report draws one (dots on rows, a title, a legend placed by matplotlib), its row labels
    as y ticks or by `plots._rows`."""
    fig = plots._figure(width, 1.4 + 0.26 * len(LABELS), labels=max(map(len, LABELS)))
    ax: Axes = fig.add_subplot()
    y = np.arange(len(LABELS))[::-1]
    ax.scatter(np.sin(y) + 3, y, s=9, color="0.55", label="replicates")
    ax.errorbar(np.cos(y), y, xerr=0.3, fmt="o", color=plots.MAIN, capsize=3, label="mean")
    ax.axvline(0, color="k", lw=0.8)
    ax.set_ylim(-0.6, len(LABELS) - 0.2)  # as the pairing plot sets them
    if rows:
        plots._rows(ax, y, LABELS, 8)
    else:
        ax.set_yticks(y, LABELS, fontsize=8)
    ax.legend(fontsize=8, loc="best")
    ax.set_title("forty rows", fontsize=10)
    return plots._png(fig)


@pytest.mark.parametrize("width", [11, 7.3])
def test_row_labels_look_as_y_tick_labels_do(width):
    """The rows' labels and marks drawn as texts and one line of markers (not a tick per row) make the very PNG the
    tick labels made: the same pixels, the same limits (the y limits set before, as the pairing plot does) and
    legend place."""
    assert _chart(rows=True, width=width) == _chart(rows=False, width=width)


def test_row_labels_are_the_panels_texts_and_leave_its_limits():
    fig = plots._figure(11, 4, labels=10)
    ax = fig.add_subplot()
    ax.scatter([1.0, 2.0], [0, 1])
    ax.set_ylim(-0.6, 1.8)
    before = ax.get_xlim()
    plots._rows(ax, np.array([1, 0]), ["a", "b"], 8)
    assert [t.get_text() for t in ax.texts] == ["a", "b"]
    assert ax.get_yticks().size == 0 and ax.get_xlim() == before and ax.get_ylim() == (-0.6, 1.8)


def test_the_tick_mark_is_matplotlibs():
    from matplotlib.markers import TICKLEFT

    assert plots.TICK_OUT.get_marker() == TICKLEFT
