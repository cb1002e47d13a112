"""From the store to the frames every table and plot reads: trials with their headline value and
replicate, variants in words, per-variant statistics against the baseline, curves averaged over seeds.

A variant is a grid cell without its replicates (seed, and the CV fold for MIL); replicate r of a variant
is paired with replicate r of its reference (only replicates both have: cells may hold different seeds).
The independent replicates are seeds (and CV repeats, seed x split seed); the folds of one repeat are not
independent, which the sweep's `stats.Replicates` tells the tests. The reference is the sweep's baseline
variant, moved to the variant's own dataset when a sweep spans several (comparing musk2 with musk1 is no
ablation).
Reads only through the store's query API.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import yaml

from ablate.config import REPLICATES, TrialConfig
from ablate.planning.designs import DesignPlan
from ablate.plugins import Plugins
from ablate.probe import steptime
from ablate.provenance.stale import stale_in_store
from ablate.registry import TASKS
from ablate.reporting import describe, stats
from ablate.spec.metrics import DIRECTIONS, higher_is_better
from ablate.spec.paths import beyond, get_path, matches, set_path
from ablate.store import TRIAL_COLUMNS, Store
from ablate.training.devices import hardware

STRATA = ("data.name", "data.id")
#: Diagnostics plotted per epoch when recorded (means over layers), with their axis labels.
DIAGNOSTICS = {
    "diag.entropy": "row entropy (nats)",
    "diag.gini": "column load (Gini of column sums)",
    "diag.col_gini": "column load (Gini of column sums)",
    "diag.winner_transfer": "winner transfer rate",
}
LOSSES = ("train.loss", "val.loss")
THROUGHPUT_TRIALS = 3
SPEED = ("samples_s", "epoch_s", "timed", "device")
"""What `throughput` measures per variant (and `step_rel`, `step_batch` when timed side by side)."""
NA = "n/a"
"""An axis value that does not apply to a variant (a knob of another attention kind)."""
BCA = ("b_lo", "b_hi", "b_why")
"""The variant table's columns of the paired bootstrap's interval (`stats.paired`'s, with `resampled`)."""


class ReportError(ValueError):
    """A report cannot be written as asked: unknown sweep, baseline or metric."""


@dataclass
class SweepData:
    """One sweep as the report reads it."""

    name: str
    description: str
    metric: str
    higher: bool
    """Whether a larger metric is better (not for losses and errors)."""
    axes: list[str]
    """Axes that make variants (the sweep's grid paths without replicates)."""
    trials: pd.DataFrame
    """The store's trials frame plus `value` (the metric; NaN unless done) and `rep` (replicate label)."""
    variants: pd.DataFrame
    """One row per variant in plan order: `axis.*` values, config, architecture, mixer, group, label, ref."""
    baseline: str | None
    updated: str
    """When the sweep last changed (latest trial event, UTC): the report's date, stable across re-runs."""
    stale: dict[str, list[str]] = field(default_factory=dict)
    """Done trials computed by other code than now, with what changed (`ablate.provenance.stale.stale_in_store`)."""
    replicates: stats.Replicates = field(default_factory=stats.Replicates)
    """Independent seeds, or folds of k-fold cross-validation (which test the comparisons use)."""
    design: DesignPlan | None = None
    """The cells the sweep's `design:` chose and their factors' levels (`ablate.planning.designs`); None: the
    full grid, analysed by `ablate.reporting.effects`."""
    outside: Outside = field(default_factory=lambda: Outside(0, False, []))
    """The sweep's trials its current plan no longer makes: left out, or reported and labelled."""
    pivoted: dict[str, pd.DataFrame] = field(default_factory=dict, init=False, repr=False, compare=False)
    """`replicates` by its `by`, made once: a report asks for them a dozen times. Not copied by
    `dataclasses.replace`, whose new trials make their own."""
    cells: dict[str, tuple[Any, ...]] = field(default_factory=dict, init=False, repr=False, compare=False)
    """Each variant's config and axis values (`own_config`'s), read from `variants` once: a cell lookup per axis and
    variant was most of the time of the sections that read every variant's config. Not copied by
    `dataclasses.replace` either."""


@dataclass(frozen=True)
class Outside:
    """Trials a sweep holds that its current plan no longer makes (launched before under other settings)."""

    trials: int
    shown: bool
    """Whether the report includes them (`--all-trials`), labelled by `paths`."""
    paths: list[str]
    """Config paths they differ in from the plan, reported as axes (empty: other seeds of its variants)."""

    def words(self, sweep: str) -> str | None:
        """The report's line on them; None when the sweep has none."""
        if not self.trials:
            return None
        if not self.shown:
            return (f"Left out: {self.trials} trials of this sweep that its current plan no longer makes (launched "
                    f"before under other settings); `ablate report {sweep} --all-trials` includes them.")  # fmt: skip
        differ = f"labelled by what they differ in: {', '.join(self.paths)}" if self.paths else "other seeds"
        return f"Includes {self.trials} trials outside the sweep's current plan, {differ}."


def load(
    store: Store, name: str, metric: str | None = None, baseline: str | None = None, all_trials: bool = False
) -> SweepData:
    """Read one sweep: the trials its current plan makes, or with `all_trials` every trial it holds, those outside
    its plan labelled by the config paths they differ in (`Membership.planned`); ReportError when the sweep, the
    metric or the baseline is unknown."""
    record = store.sweep(name)
    if record is None:
        known = ", ".join(store.sweeps_frame()["name"]) or "none"
        raise ReportError(f"no sweep {name!r} in the store (sweeps there: {known})")
    trials = store.trials_frame(name, planned=not all_trials)
    outside = store.outside_plan(name)
    if trials.empty:
        also = f" in its current plan ({len(outside)} outside it: --all-trials reports them)" if outside else ""
        raise ReportError(f"sweep {name!r} has no trials{also}")
    # its components label the variants; one that fails to load is a PluginWarning, the report is written
    Plugins.from_json((record.spec or {}).get("plugins")).load(strict=False)
    spec_axes = (record.spec or {}).get("axes") or [c[5:] for c in trials if c.startswith("axis.")]
    axes = [a for a in spec_axes if a not in REPLICATES and f"axis.{a}" in trials]
    differ = _beyond_plan(store, trials, outside, axes) if all_trials and outside else {}
    trials = trials.assign(**{f"axis.{p}": trials["variant"].map(v) for p, v in differ.items()})
    axes += list(differ)
    variants = _variants(store, trials, axes)
    metric = metric or record.metric or _default_metric(variants)
    results = [c for c in trials.columns if c not in TRIAL_COLUMNS and not c.startswith("axis.")]
    done = trials["state"] == "done"
    if metric not in trials and done.any():
        raise ReportError(
            f"metric {metric!r} is not among the results of sweep {name!r}: {', '.join(results) or 'none'}"
        )
    value = pd.to_numeric(trials[metric], errors="coerce") if metric in trials else np.nan
    trials = trials.assign(value=np.where(done, value, np.nan), rep=_replicates(trials), repeat=_repeats(trials))
    ref = resolve_baseline(baseline, variants, axes, name) if baseline else record.baseline
    if ref is not None and ref not in variants.index:
        ref = None
    variants["ref"] = _references(variants, axes, ref, [*STRATA, *differ])  # a recipe of its own: its own baseline
    recorded = (record.spec or {}).get("design")
    chosen = DesignPlan.from_json(recorded).around(ref) if recorded else None  # effects read from the baseline
    latest = trials[["created_at", "started_at", "finished_at"]].max().max()
    updated = latest.strftime("%Y-%m-%d %H:%M UTC") if pd.notna(latest) else ""
    higher = higher_is_better(metric, (record.spec or {}).get(DIRECTIONS))
    return SweepData(name, record.description or "", metric, higher, axes, trials, variants, ref,
                     updated, stale_in_store(store, [name]), how_replicated(trials, variants), chosen,
                     Outside(len(outside), all_trials, list(differ)))  # fmt: skip


def _beyond_plan(store: Store, trials: pd.DataFrame, outside: list[str], axes: list[str]) -> dict[str, dict[str, Any]]:
    """The config paths (not axes nor replicates) on which the variants outside the sweep's plan take values its
    planned variants never take (`spec.paths.beyond`: `train.epochs`, a knob since renamed), with each variant's
    value there (as a cell: lists as JSON text)."""
    first = trials.drop_duplicates("variant").set_index("variant")["key"]
    configs = store.configs(first.tolist())
    planned = set(trials.loc[~trials["key"].isin(outside), "variant"])
    inside = [configs[k] for v, k in first.items() if v in planned]
    paths = beyond(inside, [configs[k] for v, k in first.items() if v not in planned])
    said = [p for p in paths if p not in axes and p not in REPLICATES]
    return {p: {v: _cell(get_path(configs[k], p)) for v, k in first.items()} for p in said}


def _cell(value: Any) -> Any:
    return json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else value


def how_replicated(trials: pd.DataFrame, variants: pd.DataFrame) -> stats.Replicates:
    """Cross-validation when the sweep varies the test fold (`data.fold`), with k = the config's `data.folds`;
    otherwise independent seeds."""
    if "axis.data.fold" not in trials or trials["axis.data.fold"].nunique() < 2:
        return stats.Replicates()
    folds = {int(c.get("data", {}).get("folds", 0)) for c in variants["config"]}
    return stats.Replicates(max(folds)) if max(folds) > 1 else stats.Replicates()


def _default_metric(variants: pd.DataFrame) -> str:
    """The metric of a sweep recorded without one: its task's (`Task.default_metric`, as plans choose it)."""
    task = next((c["task"] for c in variants["config"] if c.get("task") in TASKS), "classify")
    return TASKS.get(task).default_metric()


def _replicates(trials: pd.DataFrame) -> pd.Series:
    """A label per trial that is the same for matching replicates of different variants: seed[/split/fold]."""
    rep = trials["seed"].astype(str)
    for path in REPLICATES[1:]:
        if f"axis.{path}" in trials:
            rep = rep + "/" + trials[f"axis.{path}"].astype(str)
    return rep


def _repeats(trials: pd.DataFrame) -> pd.Series:
    """The independent replicate a trial belongs to: seed[/split seed] (its folds are one repeat)."""
    rep = trials["seed"].astype(str)
    if "axis.data.split_seed" in trials:
        rep = rep + "/" + trials["axis.data.split_seed"].astype(str)
    return rep


def _variants(store: Store, trials: pd.DataFrame, axes: list[str]) -> pd.DataFrame:
    """One row per variant, in plan order within groups (backbone and dataset), described in words.
    Variants that differ only in axes the words do not say (lr, beta, ...) share the words, so one trial
    config is read per distinct set of said axes (`config`: a config with the variant's words, not
    necessarily its own)."""
    first = trials.drop_duplicates("variant").set_index("variant")
    out = first[[f"axis.{a}" for a in axes]].copy()
    kinds = (set(out["axis.attention.kind"].dropna()) if "axis.attention.kind" in out
             else {_config(store, first["key"].iloc[0]).get("attention", {}).get("kind")})  # fmt: skip
    said = [a for a in axes if describe.said(a, kinds)]
    words = list(axis_cells(out, said).itertuples(index=False, name=None))
    keys: dict[tuple[str, ...], str] = {}
    for w, key in zip(words, first["key"]):
        keys.setdefault(w, key)
    configs = {w: _config(store, key) for w, key in keys.items()}
    out["config"] = [configs[w] for w in words]
    # described once per set of said axes (the config stands for all of them), not once per variant
    described = {w: (describe.architecture(c), describe.dataset(c), describe.mixer(c)) for w, c in configs.items()}
    varying = [a for a in axes if axis_cells(out, [a])[a].nunique() > 1 and a not in said]
    out["architecture"] = [described[w][0] for w in words]
    out["dataset"] = [described[w][1] for w in words]
    extras = [", ".join(f"{describe.short(a)}={describe.value(v)}" for a, v in zip(varying, r))
              for r in out[[f"axis.{a}" for a in varying]].itertuples(index=False, name=None)]  # fmt: skip
    out["mixer"] = [f"{described[w][2]}; {e}" if e else described[w][2] for w, e in zip(words, extras)]
    out["group"] = out["architecture"] + " · " + out["dataset"]
    several = out["group"].nunique() > 1
    out["label"] = [f"{g}: {m}" if several else m for g, m in zip(out["group"], out["mixer"])]
    out.index.name = "variant"
    first_seen = {g: i for i, g in reversed(list(enumerate(out["group"])))}
    return out.iloc[np.argsort(out["group"].map(first_seen).to_numpy(), kind="stable")]


def own_config(data: SweepData, variant: str) -> dict[str, Any]:
    """The variant's config: the one read for its words (`_variants`) with the variant's own axis values set,
    so what the words do not say (a recipe axis such as train.epochs) is the variant's too. Only the mappings
    on the axes' paths are copied: the rest is the shared config's, to read, not to change (a deep copy per
    variant was a third of the published section's time on a large sweep)."""
    if not data.cells:
        columns = [data.variants[c] for c in ("config", *(f"axis.{a}" for a in data.axes))]
        data.cells.update(zip(map(str, data.variants.index), zip(*columns)))
    config, *values = data.cells[variant]
    cfg: dict[str, Any] = dict(config)
    for axis, value in zip(data.axes, values, strict=True):
        value = value.item() if isinstance(value, np.generic) else value  # the frame's numbers, as the config's
        if value is not None and not (isinstance(value, float) and math.isnan(value)):
            *parents, leaf = axis.split(".")
            node = cfg
            for part in parents:
                node[part] = node = dict(node[part]) if isinstance(node.get(part), dict) else {}
            set_path(node, leaf, value)
    return cfg


def _config(store: Store, key: str) -> dict[str, Any]:
    record = store.trial(key)
    if record is None:  # the trials frame came from the same store
        raise ReportError(f"trial {key} is in the sweep but not in the store")
    return record.config


def resolve_baseline(spec: str, variants: pd.DataFrame, axes: list[str], sweep: str) -> str:
    """A baseline given by the user: `PATH=VALUE[,PATH=VALUE]` on axis values, or a variant key (prefix)."""
    if "=" in spec:
        rule = {}
        for item in spec.split(","):
            path, _, text = item.partition("=")
            path = path.strip()
            if path not in axes:
                raise ReportError(
                    f"baseline: {path!r} is not an axis of sweep {sweep!r} (axes: {', '.join(axes) or 'none'})"
                )
            rule[path] = yaml.safe_load(text.strip())
        for key, row in variants.iterrows():
            values = {a: _json_value(row[f"axis.{a}"]) for a in axes}
            if matches(rule, values, flat=True):
                return str(key)
        raise ReportError(f"baseline {spec!r} matches no variant of sweep {sweep!r}")
    hits = [str(k) for k in variants.index if str(k).startswith(spec)]
    if len(hits) == 1:
        return hits[0]
    sample = "; ".join(f"{k[:10]} = {m}" for k, m in variants["mixer"].head(5).items())
    what = "is ambiguous" if hits else "is not a variant"
    raise ReportError(
        f"baseline {spec!r} {what} of sweep {sweep!r}; give PATH=VALUE on axes or a variant key ({sample})"
    )


def _json_value(v: Any) -> Any:
    if isinstance(v, str) and v[:1] in "[{":
        return yaml.safe_load(v)
    return v


def axis_cells(variants: pd.DataFrame, axes: list[str]) -> pd.DataFrame:
    """The variants' axis values as comparable text, one column per axis path: None = "-", and NA for a
    knob of another attention kind (attention.tau of a softmax variant; needs the `config` column)."""
    configs = variants["config"] if "config" in variants else [None] * len(variants)
    cells = pd.DataFrame(index=variants.index)
    for a in axes:
        knob = a.split(".", 1)[1] if a.startswith("attention.") else None
        cells[a] = [NA if knob and cfg is not None and knob not in cfg.get("attention", {})
                    else "-" if v is None or v != v else str(v)
                    for v, cfg in zip(variants[f"axis.{a}"], configs)]  # fmt: skip
    return cells


def _references(variants: pd.DataFrame, axes: list[str], baseline: str | None, strata: list[str]) -> pd.Series:
    """Each variant's reference: the baseline with the variant's own values on the `strata` axes (its dataset,
    the settings trials outside the sweep's plan ran with), None if absent."""
    if baseline is None:
        return pd.Series(None, index=variants.index, dtype=object)
    cells = axis_cells(variants, axes)
    rows = list(cells.itertuples(index=False, name=None))
    index = dict(zip(rows, cells.index))
    own = [a in strata for a in axes]
    base = rows[cells.index.get_loc(baseline)]
    refs = [index.get(tuple(v if o else b for v, o, b in zip(row, own, base))) for row in rows]
    return pd.Series(refs, index=variants.index, dtype=object)


def metrics(store: Store, names: list[str], keys: list[str]) -> pd.DataFrame:
    """Per-epoch metrics of `keys` (selecting by key uses the metrics table's primary key); key and name are
    categoricals over `keys` and `names`, so the frame keeps them as codes (as text, they were a fifth of the
    read)."""
    dtypes = {"key": pd.CategoricalDtype(list(dict.fromkeys(keys))), "name": pd.CategoricalDtype(names)}
    return store.metrics_frame(names=names, keys=keys).astype(dtypes)


def throughput(store: Store, data: SweepData, side_by_side: bool = False) -> pd.DataFrame:
    """Per variant, what its training costs, as measured: `samples_s` and `epoch_s` in steady state (each trial's
    median over its epochs but the first one of a process: epoch 1, and the epoch a resumed trial restarted in,
    where the worker warms up), the median over `timed` finished trials (up to THROUGHPUT_TRIALS: reading every
    trial's epochs would dominate a large sweep's report) on `device`. These still carry the machine's load when
    they ran; `side_by_side` adds `step_rel`, every architecture's training step timed in turn in this process
    (`ablate.probe.steptime`), a ratio the load cannot tilt, at `step_batch` examples (the trials' own)."""
    done = data.trials[data.trials["state"] == "done"]
    trials = done.groupby("variant", sort=False).head(THROUGHPUT_TRIALS).set_index("key")
    m = metrics(store, ["samples_per_s", "epoch_s"], trials.index.tolist())
    key, name, step = m["key"].cat, m["name"].cat, m["step"].to_numpy()
    restarted = (trials["resumed_from"].fillna(0).astype(int) + 1).reindex(key.categories).to_numpy()
    steady = (step > 1) & (step != restarted[key.codes.to_numpy()])  # through the codes: no text per row
    per_trial = m["value"][steady].groupby([key.codes[steady], name.codes[steady]]).median().unstack()
    per_trial.index, per_trial.columns = key.categories[per_trial.index], name.categories[per_trial.columns]
    per_trial = per_trial.reindex(columns=["samples_per_s", "epoch_s"]).dropna(how="all")
    by = per_trial.groupby(trials["variant"].reindex(per_trial.index))
    out = pd.DataFrame({"samples_s": by["samples_per_s"].median(), "epoch_s": by["epoch_s"].median(),
                        "timed": by["samples_per_s"].count()}).reindex(data.variants.index)  # fmt: skip
    out["device"] = _kinds(trials)
    if side_by_side:
        times = step_times(data)
        out["step_rel"], out["step_batch"] = pd.Series(times.relative()), times.batch
    return out


def _kinds(trials: pd.DataFrame) -> pd.Series:
    """Per variant of `trials`, the kinds of device its trials ran on (`hardware`), sorted and joined; "" where
    none was recorded. Collected in one pass (a pandas aggregation per variant was a large sweep's cost)."""
    seen: dict[str, set[str]] = {}
    for variant, device in zip(trials["variant"], trials["device"]):
        kinds = seen.setdefault(variant, set())
        if pd.notna(device):
            kinds.add(device)
    named = {device: hardware(device) for kinds in seen.values() for device in kinds}
    return pd.Series({v: ", ".join(sorted({named[d] for d in kinds})) for v, kinds in seen.items()}, dtype="str")


def step_times(data: SweepData) -> steptime.StepTimes:
    """Every variant's architecture timed side by side in this process (`ablate.probe.steptime.side_by_side`)."""
    configs = {str(v): TrialConfig.model_validate(own_config(data, str(v))) for v in data.variants.index}
    return steptime.side_by_side(configs)


def replicates(data: SweepData, by: str = "rep") -> pd.DataFrame:
    """The metric per variant (rows, in table order) and replicate (columns), NaN where not done; `by`
    "repeat" averages the folds of each independent replicate. Pivoted once per `by` (`SweepData.pivoted`)."""
    if by not in data.pivoted:
        values = data.trials.pivot_table(index="variant", columns=by, values="value", aggfunc="mean", dropna=False)
        data.pivoted[by] = values.reindex(index=data.variants.index)
    return data.pivoted[by].copy()  # the caller's to change


def variant_table(
    data: SweepData, speed: pd.DataFrame | None = None, correction: str = "holm", resampled: bool = False
) -> pd.DataFrame:
    """Per variant: cost, measured speed (`speed`: `throughput`'s columns; None: not read), the metric's
    mean/std over every finished trial, `n` independent replicates (seeds or CV repeats) and their std
    (`seed_std`), the paired delta against its reference with a 95% interval, the test and its p-value
    (stats.paired under the sweep's design), the standardised effect `d` with its interval, `p_adj` (adjusted
    over every comparison of the table, `correction`), the reference's seed std (`floor`) and whether |delta| is
    below it, trials per state; what the pairing bought (`stats.pairing`: rho, removed, better) and, with
    `resampled`, the paired bootstrap's BCa interval (b_lo, b_hi, b_why)."""
    t, v = data.trials, data.variants
    by = t.groupby("variant", sort=False)
    out = v[["group", "architecture", "dataset", "mixer", "label", "ref", *(f"axis.{a}" for a in data.axes)]].copy()
    out["params"] = by["params"].median().astype(float)
    out["gflops"] = by["flops"].median().astype(float) / 2e9
    seconds = (t["finished_at"] - t["started_at"]).dt.total_seconds().round()  # whole seconds: no clock jitter
    out["hours"] = seconds.groupby(t["variant"]).median().reindex(v.index) / 3600
    speed = pd.DataFrame(columns=list(SPEED)) if speed is None else speed
    for col in speed.columns:
        out[col] = speed[col].reindex(v.index)
    out["timed"] = out["timed"].fillna(0).astype(int)
    values = replicates(data)
    summary = stats.interval(values.to_numpy())
    out["values"], out["mean"], out["std"] = (summary[c].to_numpy() for c in ("n", "mean", "std"))
    seeds = stats.interval(replicates(data, "repeat").to_numpy())
    out["n"], out["seed_std"] = seeds["n"].to_numpy(), seeds["std"].to_numpy()
    refs = values.reindex(index=out["ref"].fillna("")).to_numpy()
    test = stats.paired(values.to_numpy() - refs, replicates=data.replicates, resampled=resampled)
    test = test.rename(columns={"n": "pairs", "mean": "delta"})
    for col in ("pairs", "delta", "lo", "hi", "p", "why", "test", "d", "d_lo", "d_hi", *(BCA if resampled else ())):
        out[col] = test[col].to_numpy()
    compared = out["ref"].notna() & (out.index != out["ref"]) & (out["pairs"] > 1)
    out["p_adj"] = stats.adjust(out["p"].where(compared), correction)
    out["floor"] = out["ref"].map(out["seed_std"]).astype(float)
    out["below_floor"] = compared & (out["delta"].abs() < out["floor"])
    states = t.groupby(["variant", "state"]).size().unstack(fill_value=0).reindex(index=v.index, fill_value=0)
    out["trials"] = states.sum(axis=1)
    out["done"] = states.get("done", 0)
    other = states.drop(columns=["done"], errors="ignore")
    out["unfinished"] = [", ".join(f"{n} {s}" for s, n in zip(other.columns, row) if n) for row in other.to_numpy()]
    stale = t[t["key"].isin(data.stale) & (t["state"] == "done")]
    out["stale"] = stale.groupby("variant").size().reindex(v.index, fill_value=0)
    out["is_baseline"] = out.index == data.baseline
    out["is_reference"] = out.index == out["ref"]  # the baseline, or its cell on another dataset: compared with none
    pairs = stats.pairing(values.to_numpy(), refs, data.higher)
    for col, column in pairs.items():  # last: the earlier columns keep their places
        out[col] = column.to_numpy()
    return out


def variant_metrics(store: Store, data: SweepData, names: list[str], variants: list[str] | None = None) -> pd.DataFrame:
    """Per-epoch metrics `names` of the trials of `variants` (None: every variant), long: key, name, step, value
    and each trial's variant."""
    trials = data.trials if variants is None else data.trials[data.trials["variant"].isin(variants)]
    keys = trials[["key", "variant"]].drop_duplicates("key")
    m = metrics(store, names, keys["key"].tolist())
    return m.assign(variant=m["key"].map(dict(zip(keys["key"], keys["variant"]))))


def curves(store: Store, data: SweepData, variants: list[str]) -> pd.DataFrame:
    """Per-epoch mean and std over replicates of the losses, the validation twin of the metric and the
    diagnostics, for `variants`: variant, name, step, mean, std, n."""
    names = list(dict.fromkeys([*LOSSES, val_metric(data.metric), *DIAGNOSTICS]))
    m = variant_metrics(store, data, names, variants)
    agg = m.groupby(["variant", "name", "step"], sort=False, observed=True)["value"].agg(["mean", "std", "count"])
    return agg.rename(columns={"count": "n"}).reset_index().astype({"variant": str, "name": str})


def val_metric(metric: str) -> str:
    """The per-epoch twin of a final metric: test.top1 -> val.top1."""
    return "val." + metric.split(".", 1)[-1]
