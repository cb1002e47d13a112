"""The read side of the store: pandas frames for reports, and listings (`ablate.store.listing`) for `ablate
status` and `ablate runs`, which import no pandas (it is imported where a frame is built).

Every query is a Core select read with one connection (no ORM objects), so frames over many trials stay
fast. Frames and listings are plain data: timestamps are UTC, JSON lists/dicts inside cells become JSON
strings (so columns can be grouped on), nested results are flattened to dotted names (`test.top1`).

Long because `Queries` is one class, the store's whole read side, with the typed rows its listings return.
"""

from __future__ import annotations

import functools
import json
import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from numbers import Real
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, Engine, Select, Text, cast, func, select

from ablate.spec.paths import flatten, same, typed_value
from ablate.store import engine
from ablate.store.listing import Listing, missing
from ablate.store.schema import STATES, Base, Membership, Metric, PreviousResult, SweepRecord, TrialRecord

if TYPE_CHECKING:
    import pandas as pd

SWEEPS = Base.metadata.tables[SweepRecord.__tablename__]
TRIALS = Base.metadata.tables[TrialRecord.__tablename__]
MEMBERS = Base.metadata.tables[Membership.__tablename__]
METRICS = Base.metadata.tables[Metric.__tablename__]
PREVIOUS = Base.metadata.tables[PreviousResult.__tablename__]

#: Leading columns of `trials_frame`; axis, result and expanded columns follow.
TRIAL_COLUMNS = [
    "key", "sweep", "position", "variant", "state", "attempts", "seed", "params", "flops", "peak_memory",
    "diverged_epoch", "diverged_step", "resumed_from", "host", "node_id", "device", "created_at", "started_at",
    "finished_at", "duration_s", "error", "mlflow_run_id", "lease_host", "lease_expires",
]  # fmt: skip
LEADING = frozenset(TRIAL_COLUMNS)
TIMES = ["created_at", "started_at", "finished_at", "lease_expires"]
COUNTS = [
    "position",
    "attempts",
    "seed",
    "params",
    "flops",
    "peak_memory",
    "diverged_epoch",
    "diverged_step",
    "resumed_from",
]
UNFINISHED = ("pending", "running", "interrupted", "preempted")
"""States of trials still to finish: the epochs left of a sweep are theirs."""


def as_list(items: str | Iterable[str] | None) -> list[str] | None:
    """One name or many, as a list (None stays None: no filter)."""
    return None if items is None else [items] if isinstance(items, str) else list(items)


def _flag(text: Any) -> bool | None:
    """A JSON boolean as a database's JSON path reads it as text (SQLite: 1 or 0; PostgreSQL: true or false)."""
    return None if text is None else str(text).lower() in ("1", "true")


def _cell(value: Any) -> Any:
    return json.dumps(value, sort_keys=True) if isinstance(value, (list, tuple, dict)) else value


class Queries:
    """Frame queries over `self.engine`; `ablate.store.Store` adds the writes."""

    engine: Engine

    def sweeps_frame(self) -> pd.DataFrame:
        """One row per sweep: name, metric, description, spec_path, trials, created/updated, MLflow ids."""
        import pandas as pd

        count = select(MEMBERS.c.sweep, func.count().label("trials")).group_by(MEMBERS.c.sweep).subquery()
        cols = [c for c in SWEEPS.c if c.name not in ("spec", "baseline")]
        stmt = (
            select(*cols, func.coalesce(count.c.trials, 0).label("trials"))
            .outerjoin(count, count.c.sweep == SWEEPS.c.name)
            .order_by(SWEEPS.c.name)
        )
        with self.engine.connect() as conn:
            df = pd.read_sql(stmt, conn)
        return _utc(df, ["created_at", "updated_at"])

    def sweep_metrics(self) -> dict[str, str | None]:
        """Each sweep's headline metric, by name in name order (what `sweeps_frame` has, without counting every
        sweep's trials)."""
        with self.engine.connect() as conn:
            return {
                name: metric
                for name, metric in conn.execute(select(SWEEPS.c.name, SWEEPS.c.metric).order_by(SWEEPS.c.name))
            }

    def member_keys(self, sweeps: Iterable[str]) -> list[str]:
        """The keys of the trials the sweeps planned, each once (what a caller that needs no trial's columns
        asks instead of `trials_frame`)."""
        stmt = select(MEMBERS.c.trial_key).where(MEMBERS.c.sweep.in_(list(sweeps))).distinct()
        with self.engine.connect() as conn:
            return list(conn.execute(stmt.order_by(MEMBERS.c.trial_key)).scalars())

    def trials_frame(
        self,
        sweeps: str | Iterable[str] | None = None,
        *,
        expand: Iterable[str] = (),
        states: Iterable[str] | None = None,
        limit: int | None = None,
        planned: bool = False,
    ) -> pd.DataFrame:
        """One row per trial x sweep, in plan order: TRIAL_COLUMNS, then `axis.<path>` (the sweep's axis
        values), then the flattened final result (`test.top1`, ...; a name that clashes with a leading
        column is left out). `expand` names JSON columns to flatten as well (`config`, `environment`):
        `config.model.embed_dim`, `environment.git_sha`, ... `states`: only trials in these, `limit`: only the
        first rows (both in SQL, for a caller that shows a few rows of a large sweep; `trials_count` counts them
        all). `planned`: only the trials each sweep's current plan makes (`outside_plan` names the others)."""
        return self._trials(sweeps, expand, states, limit, planned).frame()

    def trial_rows(
        self,
        sweeps: str | Iterable[str] | None = None,
        *,
        expand: Iterable[str] = (),
        states: Iterable[str] | None = None,
        limit: int | None = None,
    ) -> Listing:
        """`trials_frame`'s rows and columns as a listing (no pandas): times UTC, counts int or None."""
        return self._trials(sweeps, expand, states, limit).listing

    def outside_plan(self, sweep: str) -> list[str]:
        """The keys of the trials of `sweep` its current plan no longer makes (`Membership.planned`), in key
        order."""
        stmt = select(MEMBERS.c.trial_key).where(MEMBERS.c.sweep == sweep, MEMBERS.c.planned.is_(False))
        with self.engine.connect() as conn:
            return list(conn.execute(stmt.order_by(MEMBERS.c.trial_key)).scalars())

    def _trials(
        self,
        sweeps: str | Iterable[str] | None,
        expand: Iterable[str],
        states: Iterable[str] | None,
        limit: int | None,
        planned: bool = False,
    ) -> TrialRead:
        expand = list(expand)
        # Only the columns the frame shows (a trial's config, of which only the seed is shown, and its code are
        # the bulk of a row), and the JSON ones as text, decoded a column at a time (`_json_column`): decoding
        # each value on its own was most of the time of a large sweep's frame.
        lead = [MEMBERS.c.sweep, MEMBERS.c.position, *(TRIALS.c[c] for c in TRIAL_COLUMNS if c in TRIALS.c)]
        texts = [TRIALS.c.config["seed"], MEMBERS.c.axes, TRIALS.c.result, *(TRIALS.c[c] for c in expand)]
        stmt = _members(select(*lead, *(cast(c, Text) for c in texts)), sweeps, states)
        if planned:
            stmt = stmt.where(MEMBERS.c.planned)
        with self.engine.connect() as conn:
            rows = conn.execute(stmt.order_by(MEMBERS.c.sweep, MEMBERS.c.position).limit(limit)).all()
        if not rows:
            return TrialRead({}, [])
        columns = list(zip(*rows))
        seeds, axes, results, *expanded = (_json_column(c) for c in columns[len(lead) :])
        records = []  # per row, what is not a leading column: axis values, results, expanded columns
        for i, (row_axes, result) in enumerate(zip(axes, results)):
            rec = {f"axis.{k}": _cell(v) for k, v in (row_axes or {}).items()}
            for name, value in flatten(result or {}).items():
                if name not in LEADING:
                    rec.setdefault(name, _cell(value))
            for col, values in zip(expand, expanded):
                rec.update({k: _cell(v) for k, v in flatten(values[i] or {}, col).items()})
            records.append(rec)
        return TrialRead({**{c.name: list(v) for c, v in zip(lead, columns)}, "seed": seeds}, records)

    def trials_count(self, sweeps: str | Iterable[str] | None = None, states: Iterable[str] | None = None) -> int:
        """How many rows `trials_frame` of `sweeps` and `states` has, counted in SQL."""
        count = _members(select(func.count()), sweeps, states)
        if states is None:  # no trial row needed: every membership row has its trial (a foreign key)
            count = select(func.count()).select_from(MEMBERS)
            if (wanted := as_list(sweeps)) is not None:
                count = count.where(MEMBERS.c.sweep.in_(wanted))
        with self.engine.connect() as conn:
            return int(conn.execute(count).scalar_one())

    def metrics_frame(
        self,
        sweeps: str | Iterable[str] | None = None,
        names: str | Iterable[str] | None = None,
        keys: Iterable[str] | None = None,
        *,
        wall_time: bool = False,
    ) -> pd.DataFrame:
        """Per-step metrics, long: key, name, step, value (+ wall_time), sorted by key, name, step.

        Filters combine: trials of `sweeps`, metric `names`, trial `keys`. key and name are categoricals.
        Read as run lengths: one query counts the rows of each (key, name), a second fetches only the
        numbers, and the repeated strings are built as categorical codes, never as millions of Python
        strings (about 3x faster than `pandas.read_sql` of the four columns).
        """
        import numpy as np
        import pandas as pd

        m = METRICS.c
        where: list[ColumnElement[bool]] = []
        if (wanted := as_list(sweeps)) is not None:
            where.append(m.trial_key.in_(select(MEMBERS.c.trial_key).where(MEMBERS.c.sweep.in_(wanted))))
        if (names_in := as_list(names)) is not None:
            where.append(m.name.in_(names_in))
        if keys is not None:
            where.append(engine.among(self.engine.dialect.name, m.trial_key, keys))
        runs = select(m.trial_key, m.name, func.count()).where(*where).group_by(m.trial_key, m.name)
        values = select(m.step, m.value, *([m.wall_time] if wall_time else [])).where(*where)
        with self.engine.connect() as conn:
            if conn.dialect.name == "postgresql":  # SQLite transactions are snapshots already
                conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():  # one snapshot for both queries
                # `.cursor`: the driver's plain tuples, without building a Row object per value
                counts = conn.execute(runs.order_by(m.trial_key, m.name)).cursor.fetchall()
                numbers = conn.execute(values.order_by(m.trial_key, m.name, m.step)).cursor.fetchall()
        table = np.array(numbers, dtype="float64").reshape(len(numbers), 3 if wall_time else 2)  # NULL -> NaN
        groups = pd.DataFrame.from_records(counts, columns=["key", "name", "n"]).astype({"n": "int64"})
        columns = {c: _repeat(groups[c], groups["n"]) for c in ("key", "name")}
        columns.update(step=table[:, 0].astype("int64"), value=table[:, 1])
        if wall_time:
            columns["wall_time"] = table[:, 2]
        return pd.DataFrame(columns)

    def status(self, sweeps: str | Iterable[str] | None = None) -> pd.DataFrame:
        """Trial counts per state: one row per sweep (index), one column per state in STATES, and `total`."""
        import pandas as pd

        counts = self.state_counts(sweeps)
        return pd.DataFrame(list(counts.values()), index=list(counts), columns=[*STATES, "total"], dtype="int64")

    def state_counts(self, sweeps: str | Iterable[str] | None = None) -> dict[str, dict[str, int]]:
        """Per sweep, in name order: its trials in each of STATES, and `total`."""
        stmt = _members(select(MEMBERS.c.sweep, TRIALS.c.state, func.count()), sweeps, STATES)
        out: dict[str, dict[str, int]] = {}
        with self.engine.connect() as conn:
            for sweep, state, n in conn.execute(stmt.group_by(MEMBERS.c.sweep, TRIALS.c.state)):
                out.setdefault(sweep, dict.fromkeys(STATES, 0))[state] += n
        for counts in out.values():
            counts["total"] = sum(counts.values())
        return dict(sorted(out.items()))

    def progress(self, sweeps: str | Iterable[str] | None = None) -> dict[str, Pace]:
        """Per sweep with trials still to finish (UNFINISHED), in name order, their epochs left and pace
        (`Pace`). A finished trial has no epochs left and says nothing of the pace now: only the unfinished
        trials' metric rows are read, not every epoch a large sweep ever recorded."""
        m = METRICS.c
        # Each trial's epochs read in SQL from its config (decoding 100,000 configs took most of `status`).
        train = TRIALS.c.config
        epochs = func.coalesce(train[("train", "epochs")].as_integer(), 0) + func.coalesce(
            train[("train", "cooldown_epochs")].as_integer(), 0
        )
        unfinished = _members(select(MEMBERS.c.sweep, TRIALS.c.key, TRIALS.c.state, epochs.label("epochs")), sweeps,
                              UNFINISHED).subquery()  # fmt: skip
        times = (
            select(m.trial_key, func.count(func.distinct(m.step)), func.min(m.wall_time), func.max(m.wall_time))
            .where(m.trial_key.in_(select(unfinished.c.key)))
            .group_by(m.trial_key)
        )
        with self.engine.connect() as conn:
            rows = conn.execute(select(unfinished)).all()
            measured = {k: (n, first, last) for k, n, first, last in conn.execute(times)}
        per_sweep: dict[str, list[Any]] = {}
        for r in rows:
            per_sweep.setdefault(r.sweep, []).append(r)
        out = {}
        for sweep, members_of in per_sweep.items():
            left = running = 0
            paces = []
            for r in members_of:
                n, first, last = measured.get(r.key, (0, None, None))
                left += max(r.epochs - n, 0)
                running += r.state == "running"
                if n >= 2 and first is not None and last is not None:
                    paces.append((last - first) / (n - 1))
            pace = float(statistics.median(paces)) if paces else math.nan
            out[sweep] = Pace(left, pace, running, left * pace / running if running else math.nan)
        return dict(sorted(out.items()))

    def code_digests(self, sweeps: str | Iterable[str] | None = None) -> dict[str, CodeDigest]:
        """The code digests (`ablate.provenance.fingerprint`) the done trials of `sweeps` (None: all) were recorded
        with,
        in order, with their trials (`CodeDigest`). A look at what is stale reads one row per digest, not one
        per trial."""
        stmt = select(TRIALS.c.code_digest.label("digest"), func.count().label("trials"),
                      func.min(TRIALS.c.key).label("sample")).where(TRIALS.c.state == "done",
                                                                    TRIALS.c.code_digest.is_not(None))  # fmt: skip
        if (wanted := as_list(sweeps)) is not None:  # a membership looked up per done trial (its primary key):
            # half the time of `key IN (the sweeps' members)` at 100,000 trials, which SQLite builds as a list
            member = select(MEMBERS.c.trial_key).where(MEMBERS.c.trial_key == TRIALS.c.key, MEMBERS.c.sweep.in_(wanted))
            stmt = stmt.where(member.exists())
        with self.engine.connect() as conn:
            rows = conn.execute(stmt.group_by(TRIALS.c.code_digest).order_by(TRIALS.c.code_digest)).all()
        return {digest: CodeDigest(trials, sample) for digest, trials, sample in rows}

    def provenance(self, keys: Iterable[str]) -> list[Provenance]:
        """What the trials `keys` were computed with, as recorded at their end: one row per distinct code digest, git
        state, device, CPU and versions (`Provenance`), with how many of them share it. Grouped in SQL, so a sweep
        of thousands of trials reads a few rows, not each trial's environment."""
        env, code = TRIALS.c.environment, TRIALS.c.code
        fields = [TRIALS.c.code_digest, code[("git", "sha")].as_string(), code[("git", "dirty")].as_string(),
                  env[("arithmetic", "device")].as_string(), env[("arithmetic", "cpu")].as_string(),
                  env["device"].as_string(), env["python"].as_string(), env[("packages", "torch")].as_string(),
                  env[("packages", "ablate")].as_string()]  # fmt: skip
        stmt = (
            select(*fields, func.count())
            .where(engine.among(self.engine.dialect.name, TRIALS.c.key, keys))
            .group_by(*fields)
        )
        with self.engine.connect() as conn:
            counts = {tuple(row): n for *row, n in conn.execute(stmt)}
        rows = sorted(counts.items(), key=lambda kv: (-kv[1], repr(kv[0])))  # the most trials first
        return [Provenance(d, sha, _flag(dirty), device, cpu, host, python, torch, ablate, n)
                for (d, sha, dirty, device, cpu, host, python, torch, ablate), n in rows]  # fmt: skip

    def with_code(
        self, digests: Iterable[str], sweeps: str | Iterable[str] | None = None, limit: int | None = None
    ) -> Listing:
        """sweep, key and digest of the done trials of `sweeps` (None: all) recorded with one of the code
        `digests`: one row per trial x sweep in plan order, the first `limit` (None: all)."""
        stmt = _members(select(MEMBERS.c.sweep, TRIALS.c.key, TRIALS.c.code_digest.label("digest")), sweeps, ["done"])
        stmt = stmt.where(TRIALS.c.code_digest.in_(list(digests))).order_by(MEMBERS.c.sweep, MEMBERS.c.position)
        with self.engine.connect() as conn:
            rows = conn.execute(stmt.limit(limit)).all()
        return Listing.of_rows(["sweep", "key", "digest"], rows)

    def runs(
        self,
        filters: Mapping[str, Any] | None = None,
        sweeps: str | Iterable[str] | None = None,
        *,
        expand: Iterable[str] = (),
        where: Sequence[Condition] = (),
    ) -> pd.DataFrame:
        """`trials_frame` rows whose columns match `filters` ({column: value or list of values}) and every
        condition of `where` (typed comparisons, `Condition`).

        Filter values match by equality or by their text, case-insensitively (`{"axis.train.lr": "0.001"}`
        matches 0.001, "true" matches True); an unknown column is a KeyError naming the columns there are.
        """
        return self.page(filters, sweeps, expand=expand, where=where).trials.frame()

    def page(
        self,
        filters: Mapping[str, Any] | None = None,
        sweeps: str | Iterable[str] | None = None,
        *,
        expand: Iterable[str] = (),
        where: Sequence[Condition] = (),
        limit: int | None = None,
    ) -> Page:
        """The first `limit` rows of `runs` (None: all) and how many there are. A `state` filter and the limit
        go into SQL, so a page of a large sweep reads only its rows; other filters and `where` are tested on
        every row in Python, and the page is cut after them."""
        rest = dict(filters or {})
        states = None
        if "state" in rest:  # states are lower-case words: equality and the case-insensitive text agree
            wanted = rest.pop("state")
            states = [str(v).lower() for v in (wanted if isinstance(wanted, (list, tuple, set)) else [wanted])]
        in_python = bool(rest or where)
        read = self._trials(sweeps, expand, states, None if in_python else limit)
        rows = read.listing
        if "config" not in expand and any(not _has(rows, c.path) for c in where):  # a config path: read configs
            read = self._trials(sweeps, [*expand, "config"], states, None)
            rows = read.listing
        keep = [True] * len(rows)
        for column, wanted in rest.items():
            if column not in rows:
                raise KeyError(f"no column {column!r}; columns: {', '.join(rows.names)}")
            values = list(wanted) if isinstance(wanted, (list, tuple, set)) else [wanted]
            texts = {str(v).lower() for v in values}
            keep = [k and (v in values or str(v).lower() in texts) for k, v in zip(keep, rows[column])]
        for condition in where:
            column = column_of(rows, condition.path)
            keep = [k and condition.holds(v) for k, v in zip(keep, rows[column])]
        chosen = [i for i, k in enumerate(keep) if k]
        total = len(chosen)
        if limit is not None and in_python:
            chosen = chosen[:limit]
        elif limit is not None and total == limit:  # there may be more than the page
            total = self.trials_count(sweeps, states)
        return Page(read if len(chosen) == len(rows) else read.take(chosen), total)

    def shown_columns(self, rows: Listing) -> list[str]:
        """What `ablate runs` shows unless told otherwise: sweep, key, state, the axis values that the rows
        have, stale (where a row is) and each of their sweeps' headline metric."""
        metrics = self.sweep_metrics()
        wanted = [m for s in dict.fromkeys(rows["sweep"]) if isinstance(m := metrics.get(s), str)]
        axes = [c for c in rows.names if c.startswith("axis.") and not all(map(missing, rows[c]))]
        stale = ["stale"] if "stale" in rows and any(rows["stale"]) else []
        leading = [c for c in ("sweep", "key", "state", *axes) if c in rows] + stale
        return leading + [m for m in dict.fromkeys(wanted) if m in rows and m not in leading]


@dataclass(frozen=True)
class TrialRead:
    """One read of trial rows (`Queries.trials_frame`): the leading columns as the database gave them, and per
    row its other cells (axis values, results, expanded columns), from which a frame or a listing is built."""

    leading: dict[str, list[Any]]
    records: list[dict[str, Any]]

    def take(self, rows: Sequence[int]) -> TrialRead:
        return TrialRead({c: [v[i] for i in rows] for c, v in self.leading.items()}, [self.records[i] for i in rows])

    def frame(self) -> pd.DataFrame:
        import pandas as pd

        df = pd.DataFrame(columns=TRIAL_COLUMNS)
        if self.records:
            leading = pd.DataFrame(self.leading)
            df = pd.concat([leading, pd.DataFrame(self.records, index=leading.index)], axis=1)
        extra = [c for c in df.columns if c not in TRIAL_COLUMNS]
        df = _utc(df.reindex(columns=TRIAL_COLUMNS + extra), TIMES).astype(dict.fromkeys(COUNTS, "Int64"))
        df["duration_s"] = (df["finished_at"] - df["started_at"]).dt.total_seconds()
        return df

    @functools.cached_property
    def listing(self) -> Listing:
        """The frame's columns in its order and values, built without pandas."""
        n = len(self.records)
        rows = Listing.of_records(self.records)
        lead = {c: self.leading.get(c, [None] * n) for c in TRIAL_COLUMNS}
        for c in TIMES:  # stored as UTC; SQLite gives them back naive
            lead[c] = [_utc_time(t) for t in lead[c]]
        lead["duration_s"] = [(end - start).total_seconds() if start and end else None
                              for start, end in zip(lead["started_at"], lead["finished_at"])]  # fmt: skip
        return Listing({**lead, **{c: v for c, v in rows.columns.items() if c not in lead}})


@dataclass(frozen=True)
class Page:
    """Some rows of `Queries.runs`, and how many rows there are in all."""

    trials: TrialRead
    total: int

    @property
    def rows(self) -> Listing:
        return self.trials.listing


@dataclass(frozen=True)
class Pace:
    """A sweep's trials still to finish (`Queries.progress`)."""

    epochs_left: int
    epoch_s: float
    """Median seconds per epoch of those trials, measured between their first and last recorded epoch; NaN
    before any has two."""
    running: int
    eta_s: float
    """The epochs left at that pace, shared by the running trials; NaN when none runs or nothing is measured."""


@dataclass(frozen=True)
class CodeDigest:
    """The done trials recorded with one code digest (`Queries.code_digests`)."""

    trials: int
    sample: str
    """One of them: its code record is that digest's (read once, not per trial)."""


@dataclass(frozen=True)
class Provenance:
    """Trials that share what they were computed with (`Queries.provenance`); None where not recorded (a trial
    recorded before ablate kept it, or by other means)."""

    digest: str | None
    """The code fingerprint's digest (`ablate.provenance.fingerprint`)."""
    git_sha: str | None
    """The commit of the experiments file's repository."""
    git_dirty: bool | None
    """Whether that checkout had uncommitted changes."""
    device: str | None
    """`cpu` or the GPU's name (the environment's `arithmetic`)."""
    cpu: str | None
    """The processor's model name."""
    host_device: str | None
    """The environment's `device` (`cpu:x86_64`, `cuda:NAME`): what a record without `arithmetic` says."""
    python: str | None
    torch: str | None
    ablate: str | None
    trials: int = 0


OPERATORS = ("!=", "<=", ">=", "==", "=", "<", ">", " in ")
"""Comparisons of `Condition`, in the order a text is searched for them (`!=` before `=`); `==` is `=`."""


@dataclass(frozen=True)
class Condition:
    """A typed test on one column of `runs` or a config path (`--where`): `attention.steps=1`, `train.lr<1e-3`,
    `test.top1>=90`, `attention.kind in [csan, syn]`, `train.epochs=4` where no axis varies the epochs. The
    value is read as YAML and compared by type, so an integer matches the same number stored as a float (an axis
    column that mixes sweeps), a boolean only a boolean (or its YAML word), text case-insensitively. A missing
    value (an axis that does not apply) matches only `!=`."""

    path: str
    """An axis path (`attention.kind`), a result (`test.top1`), any column of `runs` or a path of the trials'
    configs (`train.epochs`)."""
    op: str
    value: Any
    text: str

    @classmethod
    def parse(cls, text: str) -> Condition:
        """Read `PATH OP VALUE`; ValueError saying what was expected and what was found."""
        expected = "expected PATH=VALUE, PATH!=VALUE, PATH<VALUE, PATH>VALUE (or <=, >=) or 'PATH in [A, B]'"
        at = [(i, op) for op in OPERATORS if (i := text.find(op)) > 0]
        if not at:
            raise ValueError(f"--where {text!r}: {expected}")
        i, op = min(at, key=lambda a: (a[0], -len(a[1])))  # the first operator; at one place the longer (<=)
        path, raw = text[:i].strip(), text[i + len(op) :].strip()
        try:
            value = typed_value(raw)
        except Exception as e:
            raise ValueError(f"--where {text!r}: the value is not YAML ({e})") from None
        op = "=" if op == "==" else op.strip()
        if op == "in":
            value = value if isinstance(value, list) else [typed_value(v) for v in raw.split(",")]
        elif op in ("<", ">", "<=", ">=") and not _number(value):
            raise ValueError(f"--where {text!r}: {op} compares numbers, found {value!r}")
        if not path or re.search(r"\s", path):
            raise ValueError(f"--where {text!r}: {expected}")
        return cls(path, op, value, text)

    def holds(self, cell: Any) -> bool:
        if self.op == "in":
            return any(_equal(cell, v) for v in self.value)
        if self.op in ("=", "!="):
            return _equal(cell, self.value) == (self.op == "=")
        if not _number(cell):
            return False
        x, y = float(cell), float(self.value)
        return {"<": x < y, ">": x > y, "<=": x <= y, ">=": x >= y}[self.op]


def column_of(rows: Listing, path: str) -> str:
    """The column `path` names: `axis.<path>` where the sweep varies it, else the column itself (a result,
    state, ...), else the config's value at `path` where the rows hold the configs (`config.<path>`); KeyError
    naming the columns there are."""
    for name in (f"axis.{path}", path, f"config.{path}"):
        if name in rows:
            return name
    shown = [c.removeprefix("axis.") for c in rows.names if not c.startswith("config.")]
    raise KeyError(f"no column or config path {path!r}; columns: {', '.join(shown)}; config paths: those of "
                   "`ablate show KEY` (train.epochs, model.depth, ...)")  # fmt: skip


def _has(rows: Listing, path: str) -> bool:
    return f"axis.{path}" in rows or path in rows


def _number(v: Any) -> bool:
    return isinstance(v, Real) and not isinstance(v, bool)


def _equal(cell: Any, value: Any) -> bool:
    """Equality by type: numbers as numbers, booleans as booleans (or their YAML words in text), lists and
    mappings as their JSON (as cells hold them), text case-insensitively."""
    if missing(cell) or value is None:
        return missing(cell) and value is None
    if isinstance(cell, bool) or isinstance(value, bool):
        if isinstance(cell, str):
            return same(value, cell)
        return isinstance(cell, bool) and isinstance(value, bool) and cell == value
    if _number(cell) and _number(value):
        return float(cell) == float(value)
    if isinstance(value, (list, dict)):
        return isinstance(cell, str) and cell == json.dumps(value, sort_keys=True)
    return str(cell).lower() == str(value).lower()


def _repeat(labels: pd.Series, counts: pd.Series) -> pd.Categorical:
    """Each label repeated its count of times, as a categorical (codes only: no per-row strings)."""
    import numpy as np
    import pandas as pd

    cat = pd.Categorical(labels)
    return pd.Categorical.from_codes(np.repeat(cat.codes, counts.to_numpy()), cat.categories)


def _json_column(texts: Sequence[str | None]) -> list[Any]:
    """JSON texts (None: SQL NULL) decoded in one call, as one JSON array: the same values as decoding each."""
    values: list[Any] = json.loads("[" + ",".join("null" if t is None else t for t in texts) + "]")
    return values


def _members(stmt: Select[Any], sweeps: str | Iterable[str] | None, states: Iterable[str] | None) -> Select[Any]:
    """`stmt` over the membership rows of `sweeps` (None: all) joined to their trials, in `states` (None: any).

    With states, the trials are found by state in ix_trials_state_digest_key and the sweep is tested on the
    membership rows they lead to: its condition is written (`sweep || ''`) so that no index can serve it, or
    SQLite's planner (which has no statistics) would walk the sweep's members and read each trial's whole row
    (config, code, result) for its state: seconds for 100,000 trials."""
    stmt = stmt.select_from(MEMBERS).join(TRIALS, TRIALS.c.key == MEMBERS.c.trial_key)
    if states is not None:
        stmt = stmt.where(TRIALS.c.state.in_(list(states)))
    if (wanted := as_list(sweeps)) is not None:
        stmt = stmt.where((MEMBERS.c.sweep if states is None else MEMBERS.c.sweep + "").in_(wanted))
    return stmt


def _utc_time(t: Any) -> Any:
    return t.replace(tzinfo=timezone.utc) if isinstance(t, datetime) and t.tzinfo is None else t


def _utc(df: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    import pandas as pd

    for col in columns:
        df[col] = pd.to_datetime(df[col], utc=True)
    return df
