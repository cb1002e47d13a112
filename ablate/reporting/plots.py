"""The report's figures as PNG bytes (matplotlib's Agg canvas, no pyplot state, so reports can be written
from headless machines, and from threads: drawing holds a lock, as matplotlib is not thread-safe). Each
function returns None when its figure has nothing to show.

Figures stay readable at a glance on any sweep size: at most MAX_ROWS variants per bar chart (the best
ones and the baseline), at most MAX_CURVES variants per curve panel; titles say when rows were left out.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Mapping

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.markers import TICKLEFT, MarkerStyle
from matplotlib.ticker import MaxNLocator
from scipy import special

from ablate.evidence import ALPHA, lenth
from ablate.reporting.bands import Band
from ablate.reporting.frames import DIAGNOSTICS, LOSSES, SweepData, val_metric
from ablate.reporting.halfnormal import Screen
from ablate.reporting.pairing import Pairs

MAX_ROWS = 40
MAX_CURVES = 8
MAX_LABEL = 80
DPI = 100
BASE = "#d62728"
MAIN = "#1f77b4"


def _figure(width: float, height: float, labels: int = 0, panels: int = 1, legend: int = 0) -> Figure:
    """A figure with margins set in inches: room for `labels` characters of y tick labels and `legend`
    rows of a legend below the panels (tight_layout would draw every text twice, the largest cost of a
    report)."""
    fig = Figure(figsize=(width, height))
    left, bottom = 0.75 + 0.056 * labels, 0.6 + 0.17 * legend
    fig.subplots_adjust(left=left / width, right=1 - 0.25 / width, bottom=bottom / height, top=1 - 0.5 / height,
                        wspace=0.3 if panels > 1 else None, hspace=0.45)  # fmt: skip
    return fig


HINTING = "no_hinting"
"""Glyphs drawn as the font outlines them, without FreeType's hinting: FreeType runs a glyph's hinting
program each time a label is measured, laid out and drawn, a fifth of the time of a large report's figures
(they are mostly text). At 8-10 pt the difference is a shade of antialiasing."""
ZLIB = 3
"""PNG compression: on these figures (flat colours and text) zlib's fast levels (1-3) write smaller files than
its default 6, in two thirds of the time."""
_DRAWING = threading.Lock()
"""Held while a figure draws: matplotlib is not thread-safe, and HINTING is set in its global rcParams."""


def _png(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    with _DRAWING, mpl.rc_context({"text.hinting": HINTING}):
        fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None}, pil_kwargs={"compress_level": ZLIB})
    return buf.getvalue()


TICK_OUT = MarkerStyle(TICKLEFT)
"""A y tick's mark, drawn out (`TICKLEFT` is an int, which Line2D's types do not take but MarkerStyle's do)."""


def _rows(ax: Axes, y: np.ndarray, labels: list[str], fontsize: float) -> None:
    """Rows' labels left of the panel as y tick labels look (mark, pad, font), each a text, their marks one line of
    markers: matplotlib makes each tick of five artists and copies its properties, most of a 40-row chart's drawing."""
    ax.set_yticks([])
    rc = mpl.rcParams
    size, width, color = rc["ytick.major.size"], rc["ytick.major.width"], rc["ytick.color"]
    label = color if rc["ytick.labelcolor"] == "inherit" else rc["ytick.labelcolor"]
    marks = Line2D(np.zeros(len(y)), y, transform=ax.get_yaxis_transform("tick1"), color=color, linestyle="none",
                   marker=TICK_OUT, markeredgecolor=color, markersize=size, markeredgewidth=width, clip_on=False,
                   zorder=Line2D.zorder + 0.01)  # fmt: skip
    ax.add_artist(marks)  # not `plot`: marks at the panel's edge are no data, and leave the limits as ticks do
    at, va, ha = ax.get_yaxis_text1_transform(rc["ytick.major.pad"] + size)
    for yi, text in zip(y, labels, strict=True):
        ax.text(0, yi, text, transform=at, va=va, ha=ha, fontsize=fontsize, color=label, clip_on=False)


def _clip(text: str, limit: int = MAX_LABEL) -> str:
    """At most `limit` characters, cut in the middle: labels differ most at their ends (lr=..., beta=...)."""
    if len(text) <= limit:
        return text
    head = limit // 2
    return text[: head - 1] + "…" + text[len(text) - (limit - head) :]


def bounds(metric: str) -> tuple[float, float]:
    """The range a metric can take: accuracies in percent, AUC and shares in [0, 1], losses and entropies
    at least 0; a band of mean ± std is clipped to it (no AUC band above 1)."""
    last = metric.rsplit(".", 1)[-1]
    if last in ("top1", "top5", "acc"):
        return 0.0, 100.0
    if last in ("auc", "gini", "col_gini", "winner_transfer", "f1", "precision", "recall"):
        return 0.0, 1.0
    if last in ("loss", "entropy", "nll") or last.endswith(("loss", "err", "error")):
        return 0.0, np.inf
    return -np.inf, np.inf


def band(mean: pd.Series | np.ndarray, std: pd.Series | np.ndarray, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) of mean ± std clipped to the metric's range (a missing std: no band)."""
    m, s = np.asarray(mean, dtype=float), np.nan_to_num(np.asarray(std, dtype=float))
    lo, hi = bounds(metric)
    return np.clip(m - s, lo, hi), np.clip(m + s, lo, hi)


def _errors(mean: pd.Series | np.ndarray, std: pd.Series | np.ndarray, metric: str) -> np.ndarray:
    """Asymmetric error bars (below, above) of the clipped band, as matplotlib wants them."""
    lower, upper = band(mean, std, metric)
    m = np.asarray(mean, dtype=float)
    return np.vstack([np.maximum(m - lower, 0), np.maximum(upper - m, 0)])


def pick(table: pd.DataFrame, higher: bool, limit: int) -> pd.DataFrame:
    """At most `limit` variants with a value: the best ones by mean, the baseline always among them,
    in table order."""
    measured = table[table["n"] > 0]
    best = measured["mean"].rank(ascending=not higher, method="first") <= limit - 1
    return measured[best | measured["is_baseline"]]


def pareto(cost: np.ndarray, score: np.ndarray, higher: bool = True) -> np.ndarray:
    """Mask of points no other point beats: none is at most as costly and at least as good, and strictly
    better in one of the two (NaN points are never on the front). One pass in order of cost."""
    s = np.asarray(score if higher else -score, dtype=float)
    cost = np.asarray(cost, dtype=float)
    front = np.zeros(len(cost), bool)
    best, best_cost = -np.inf, np.nan
    for i in np.lexsort((-s, cost)):
        if np.isnan(cost[i]) or np.isnan(s[i]):
            continue
        if s[i] > best or (s[i] == best and cost[i] == best_cost):
            front[i], best, best_cost = True, s[i], cost[i]
    return front


def variants_plot(table: pd.DataFrame, data: SweepData) -> bytes | None:
    """Metric per variant: mean ± std over replicates, each replicate a dot, the baseline in red."""
    shown = pick(table, data.higher, MAX_ROWS)
    if shown.empty:
        return None
    labels = [_clip(s) for s in shown["label"]]
    fig = _figure(11, 1.4 + 0.26 * len(shown), labels=max(map(len, labels)))
    ax = fig.add_subplot()
    y = np.arange(len(shown))[::-1]
    dots = data.trials[data.trials["variant"].isin(shown.index)].dropna(subset=["value"])
    pos = dict(zip(shown.index, y))
    ax.scatter(dots["value"], dots["variant"].map(pos), s=9, color="0.55", zorder=2, label="replicates")
    xerr = _errors(shown["mean"], shown["std"], data.metric)
    ax.errorbar(shown["mean"], y, xerr=xerr, fmt="none", ecolor="0.25", capsize=3, zorder=3)
    base = shown["is_reference"].to_numpy()  # the baseline's cell on each dataset
    ax.scatter(shown["mean"][~base], y[~base], color=MAIN, s=30, zorder=4, label="mean ± std")
    if base.any():
        ax.scatter(shown["mean"][base], y[base], color=BASE, s=30, zorder=4, label="baseline")
    if base.sum() == 1:  # one baseline: its mean as a line (per dataset, means are not comparable across)
        ax.axvline(shown["mean"][base].iloc[0], color=BASE, lw=0.8, ls="--")
    _rows(ax, y, labels, 8)
    ax.set_xlabel(data.metric + _unit(data.metric))
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    left = f" (best {len(shown)} of {int((table['n'] > 0).sum())})" if len(shown) < (table["n"] > 0).sum() else ""
    ax.set_title(f"{data.metric} per variant{left}", fontsize=10)
    return _png(fig)


COSTS = (("params", "#params (M)", 1e6), ("gflops", "GFLOPs per example (MACs)", 1.0),
         ("step_rel", "relative step time (side by side, one process, CPU, the trials' batch)", 1.0))  # fmt: skip
"""The costs a panel can plot: exact counts and (`report --time`) every architecture timed side by side. A
trial's own timing (hours, s/epoch, samples/s) is not among them: it measures its queue, the worker's warm-up and
the machine's load as much as the architecture, and a Pareto front on it reversed between runs of the same trials
(the Cost section's table lists it, ranking nothing)."""


def cost_plot(table: pd.DataFrame, data: SweepData) -> bytes | None:
    """`cost_figure` as PNG bytes."""
    fig = cost_figure(table, data)
    return None if fig is None else _png(fig)


def cost_figure(table: pd.DataFrame, data: SweepData) -> Figure | None:
    """Metric vs #params, GFLOPs and the measured step costs (`COSTS`), the Pareto front (cheaper and better
    than every other) marked and labelled; a cost on which the measured variants do not differ gets no panel
    (all points on one x), and no figure when none differs."""
    measured = table[table["n"] > 0]
    costs = [c for c in COSTS if c[0] in measured and measured[c[0]].nunique() > 1]
    if not costs:
        return None
    fig = _figure(5.5 * len(costs), 4.6, panels=len(costs))
    for k, (col, label, unit) in enumerate(costs):
        ax = fig.add_subplot(1, len(costs), k + 1)
        x = measured[col].to_numpy(float) / unit
        yv = measured["mean"].to_numpy(float)
        front = pareto(x, yv, data.higher)
        ax.errorbar(x, yv, yerr=_errors(yv, measured["std"], data.metric), fmt="o", color=MAIN, ms=4, alpha=0.6,
                    capsize=2, label="variant (mean ± std)")  # fmt: skip
        order = np.argsort(x[front])
        ax.step(x[front][order], yv[front][order], where="post", color="k", lw=1.2, label="Pareto front")
        ax.scatter(x[front], yv[front], facecolor="none", edgecolor="k", s=80, zorder=5)
        base = measured["is_baseline"].to_numpy()
        ax.scatter(x[base], yv[base], color=BASE, s=60, zorder=6, label="baseline")
        if front.sum() <= 12:
            _label(ax, x[front], yv[front], [_clip(t, 40) for t in measured["label"][front]])
        ax.set_xlabel(label)
        ax.set_ylabel(data.metric + _unit(data.metric))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    fig.suptitle(f"{data.metric} against cost ({len(measured)} variants)", fontsize=10)
    return fig


def _label(ax: Axes, x: np.ndarray, y: np.ndarray, texts: list[str]) -> None:
    """Label points inside the panel: a label runs from its point towards the panel's middle (left of a point in
    the right half, below a point in the top half), so the panel's edge never cuts it."""
    x0, x1 = ax.get_xlim()
    y0, y1 = ax.get_ylim()
    for xi, yi, text in zip(x, y, texts):
        right, top = xi > (x0 + x1) / 2, yi > (y0 + y1) / 2
        ax.annotate(text, (xi, yi), fontsize=7, textcoords="offset points",
                    xytext=(-4 if right else 4, -4 if top else 4),
                    ha="right" if right else "left", va="top" if top else "bottom")  # fmt: skip


def _panels(curves: pd.DataFrame, table: pd.DataFrame, names: dict[str, str], title: str) -> bytes | None:
    """One panel per metric name present: mean over replicates per epoch, a band of ± std."""
    present = [n for n in names if n in set(curves["name"])]
    if not present:
        return None
    variants = list(dict.fromkeys(curves["variant"]))
    rows = -(-len(variants) // 2)
    fig = _figure(max(4.6 * len(present), 9), 4.2 + 0.17 * rows, panels=len(present), legend=rows + 1)
    colors = [f"C{i}" for i in range(10) if i != 3]  # C3 is red: the baseline's
    for k, name in enumerate(present):
        ax = fig.add_subplot(1, len(present), k + 1)
        for variant, c in curves[curves["name"] == name].groupby("variant", sort=False):
            color = BASE if table.loc[variant, "is_baseline"] else colors[variants.index(variant) % len(colors)]
            ax.plot(c["step"], c["mean"], color=color, lw=1.4, label=_clip(table.loc[variant, "label"]))
            lower, upper = band(c["mean"], c["std"], name)
            ax.fill_between(c["step"], lower, upper, color=color, alpha=0.15, lw=0)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(names[name])
        ax.grid(alpha=0.3)
    fig.legend(*fig.axes[0].get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=10)
    return _png(fig)


def curves_plot(curves: pd.DataFrame, table: pd.DataFrame, data: SweepData) -> bytes | None:
    val = val_metric(data.metric)
    names = {**{n: n for n in LOSSES}, val: val + _unit(val)}
    return _panels(curves, table, names, "training curves: mean over replicates, band = ± std")


def diagnostics_plot(curves: pd.DataFrame, table: pd.DataFrame) -> bytes | None:
    return _panels(curves, table, DIAGNOSTICS, "attention diagnostics per epoch (mean over layers and replicates)")


def effects_plot(eff: pd.DataFrame, metric: str) -> bytes | None:
    """Main effects and the largest interactions as points with 95% intervals around zero."""
    if eff.empty:
        return None
    parts = [p for p in (eff[eff["term"] == "main"], _largest(eff[eff["term"] == "interaction"])) if len(p)]
    labels = [_clip(f"{f}: {c}") for p in parts for f, c in zip(p["factor"], p["contrast"])]
    fig = _figure(11, 1.4 + 0.26 * len(labels) + 0.7 * len(parts), labels=max(map(len, labels)))
    heights = [len(p) + 1 for p in parts]
    grid = fig.add_gridspec(len(parts), 1, height_ratios=heights)
    for k, part in enumerate(parts):
        ax = fig.add_subplot(grid[k])
        y = np.arange(len(part))[::-1]
        err = np.vstack([part["effect"] - part["lo"], part["hi"] - part["effect"]])
        ax.errorbar(part["effect"], y, xerr=np.nan_to_num(err), fmt="o", color=MAIN, capsize=3)
        ax.axvline(0, color="k", lw=0.8)
        _rows(ax, y, [_clip(f"{f}: {c}") for f, c in zip(part["factor"], part["contrast"])], 8)
        kind = part["term"].iloc[0]
        ax.set_title(f"{'main effects' if kind == 'main' else 'two-way interactions'} on {metric} (95% CI)", fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    fig.axes[-1].set_xlabel(f"change in {metric}{_unit(metric, difference=True)}")
    return _png(fig)


DONG_COLOUR = "#2ca02c"


def halfnormal_plot(screens: list[Screen]) -> bytes | None:
    """A half-normal (Daniel) plot per family Lenth's test read: sorted |t| against the half-normal quantiles, the
    line of slope 1 inert terms follow, Lenth's ME and SME and Dong's (`ablate.reporting.halfnormal`); the terms
    past Lenth's ME are labelled."""
    if not screens:
        return None
    fig = _figure(5.5 * len(screens), 4.6, panels=len(screens))
    for k, s in enumerate(screens):
        ax = fig.add_subplot(1, len(screens), k + 1)
        order = np.argsort(np.abs(s.t), kind="stable")
        y = np.abs(s.t)[order]
        m = len(y)
        x = special.ndtri(0.5 + 0.5 * (np.arange(1, m + 1) - 0.5) / m)
        ax.plot(x, y, "o", color=MAIN, ms=4)
        ax.plot([0, x[-1]], [0, x[-1]], color="0.6", lw=0.8, label="no effect (slope 1)")
        for method, colour in ((lenth.LENTH, BASE), (lenth.DONG, DONG_COLOUR)):
            found = s.margins[method]
            ax.axhline(found.me, color=colour, ls="--", lw=0.9, label=f"{method} ME ({found.me:.2f})")
            ax.axhline(found.sme, color=colour, ls=":", lw=0.9, label=f"{method} SME ({found.sme:.2f})")
        for xi, yi, i in zip(x, y, order):
            if yi > s.margins[lenth.LENTH].me:
                ax.annotate(_clip(s.terms[i], 30), (xi, yi), fontsize=7, xytext=(-4, 0), textcoords="offset points",
                            ha="right", va="center")  # fmt: skip
        ax.set_xlabel("half-normal quantile", fontsize=8)
        ax.set_ylabel("|effect| / Lenth's PSE", fontsize=8)
        ax.set_title(_clip(f"{s.name}: {m} terms" if len(screens) > 1 else f"{m} terms, one value per cell", 60),
                     fontsize=9)  # fmt: skip
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=6, frameon=False)
    return _png(fig)


def best_plot(frame: pd.DataFrame, labels: pd.Series, metric: str) -> bytes | None:
    """`best_figure` as PNG bytes."""
    fig = best_figure(frame, labels, metric)
    return None if fig is None else _png(fig)


def best_figure(frame: pd.DataFrame, labels: pd.Series, metric: str) -> Figure | None:
    """The Best or tied table (`ablate.reporting.ties`) as a forest: per group, each variant's Δ = best - variant
    with its 95% interval around zero (a hollow point where the policy gives none), behind it the band ± its
    MDD: a tied variant whose band is wide was not compared finely enough to call the variants alike."""
    rows = frame[frame["variant"] != frame["best"]].head(MAX_ROWS)
    if rows.empty:
        return None
    several = frame["group"].nunique() > 1
    names = [_clip(f"{g}: {labels.get(v, v)}" if several else str(labels.get(v, v)))
             for g, v in zip(rows["group"], rows["variant"])]  # fmt: skip
    fig = _figure(11, 1.6 + 0.3 * len(rows), labels=max(map(len, names)))
    ax = fig.add_subplot()
    y = np.arange(len(rows))[::-1]
    mdd = rows["mdd"].to_numpy(float)
    shown = np.isfinite(mdd)
    if shown.any():
        ax.barh(y[shown], 2 * mdd[shown], left=-mdd[shown], height=0.5, color="#dddddd", label="± MDD (α/m)")
    tied = (rows["verdict"] == "tied").to_numpy()
    sure = rows["lo"].notna().to_numpy()
    for pick, color, label in ((tied, MAIN, "tied"), (~tied, "#555555", "worse than the best")):
        pts = rows[pick & sure]
        if len(pts):
            err = np.vstack([pts["delta"] - pts["lo"], pts["hi"] - pts["delta"]])
            ax.errorbar(pts["delta"], y[pick & sure], xerr=err, fmt="o", color=color, capsize=3, label=label)
        if (pick & ~sure).any():
            ax.scatter(rows["delta"][pick & ~sure], y[pick & ~sure], facecolor="none", edgecolor=color,
                       label=f"{label}, no interval")  # fmt: skip
    ax.axvline(0, color="k", lw=0.8)
    _rows(ax, y, names, 8)
    ax.set_xlabel(f"best - variant, {metric}{_unit(metric, difference=True)} (95% CI)")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    ax.set_title("each variant against its group's best mean: tied is not equivalent", fontsize=10)
    return fig


def tuning_plot(
    curves: Mapping[str, np.ndarray], found: Mapping[str, Band], metric: str, baseline: str | None
) -> bytes | None:
    """A tuned sweep's arms (`ablate.reporting.tuning`): a tuning curve (the expected or median best validation
    score, the bands' `curve`) against the number of configurations tried, one line per arm with its simultaneous
    band (`ablate.reporting.bands`; a side that is infinite, for a metric without that end, is not drawn)."""
    if not curves:
        return None
    rows = -(-len(curves) // 2)
    fig = _figure(9, 4.6 + 0.17 * rows, legend=rows + 1)
    ax = fig.add_subplot()
    colors = [f"C{i}" for i in range(10) if i != 3]  # C3 is red: the baseline's
    for i, (arm, c) in enumerate(curves.items()):
        color, n = BASE if arm == baseline else colors[i % len(colors)], np.arange(1, len(c) + 1)
        ax.plot(n, c, color=color, lw=1.4, marker="o", ms=3, label=_clip(arm))
        lo, hi = (np.where(np.isfinite(edge), edge, c) for edge in (found[arm].lo, found[arm].hi))
        ax.fill_between(n, lo, hi, color=color, alpha=0.1, lw=0)
        for edge in (lo, hi):  # overlapping bands stay told apart by their edges
            ax.plot(n, edge, color=color, lw=0.8, ls="--")
    curve = next(iter(found.values())).curve
    ax.set_xlabel("configurations tried")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(f"{curve} best {metric}{_unit(metric)}")
    ax.grid(alpha=0.3)
    fig.legend(*ax.get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=8, frameon=False)
    level, who = 1 - ALPHA, "Dodge et al." if curve == "expected" else "opda's quantile tuning curve"
    fig.suptitle(f"{curve} best validation score of n configurations ({who}), band = simultaneous {level:.0%} "
                 "over arms and n (Lourie et al.)", fontsize=10)  # fmt: skip
    return _png(fig)


def _largest(part: pd.DataFrame, limit: int = MAX_ROWS // 2) -> pd.DataFrame:
    return part.loc[part["effect"].abs().sort_values(ascending=False).index[:limit]].sort_index()


def _unit(metric: str, difference: bool = False) -> str:
    """Accuracies are stored in percent, so a difference of two is in percentage points; AUC and losses have no
    unit."""
    if metric.rsplit(".", 1)[-1] not in ("top1", "top5", "acc"):
        return ""
    return " (pp)" if difference else " (%)"


def pairing_plot(found: list[Pairs], metric: str) -> bytes | None:
    """Per variant, each replicate's difference from the same replicate of its reference (grey dots), their mean
    with the variant table's 95% interval, zero; where the replicates disagree (`Pairs.split`), the worst replicate
    (red cross) and the worse quartile (bar) beside the mean, in words at the right."""
    if not found:
        return None
    shown = found[:MAX_ROWS]
    labels = [_clip(p.label) for p in shown]
    fig = _figure(11, 1.6 + 0.45 * len(shown), labels=max(map(len, labels)))
    ax = fig.add_subplot()
    y = np.arange(len(shown))[::-1]
    dots = np.concatenate([p.differences.to_numpy() for p in shown])
    ax.scatter(dots, np.repeat(y, [len(p.differences) for p in shown]), s=9, color="0.55", zorder=2)
    mean, lo, hi = (np.array([getattr(p, k) for p in shown]) for k in ("mean", "lo", "hi"))
    ax.errorbar(mean, y, xerr=np.nan_to_num([mean - lo, hi - mean]), fmt="o", color=MAIN, ms=5, capsize=3, zorder=4)
    split = [(p, at) for p, at in zip(shown, y) if p.split]
    if split:
        rows = np.array([a for _, a in split])
        ax.scatter([p.differences[p.worst] for p, _ in split], rows, marker="x", color=BASE, s=30, zorder=5)
        ax.scatter([p.quartile for p, _ in split], rows, marker="|", color=BASE, s=120, zorder=5)
    for p, at in split:
        words = f"worst: {p.unit} {p.worst} {p.differences[p.worst]:+.3g}; worse quartile {p.quartile:+.3g}"
        ax.annotate(words, (0.995, at), xycoords=("axes fraction", "data"), xytext=(0, 4), textcoords="offset points",
                    fontsize=7, ha="right", va="bottom", color=BASE)  # fmt: skip
    ax.axvline(0, color="k", lw=0.8)
    ax.set_ylim(-0.6, len(shown) - 0.2)
    _rows(ax, y, labels, 8)
    ax.set_xlabel(f"difference from the same replicate of the baseline, {metric}{_unit(metric, difference=True)}")
    ax.grid(axis="x", alpha=0.3)
    left = f" (first {len(shown)} of {len(found)})" if len(shown) < len(found) else ""
    ax.set_title(f"paired differences per replicate, mean and 95% CI{left}; red: worst and worse quartile where "
                 "replicates disagree", fontsize=9)  # fmt: skip
    return _png(fig)
