"""Which planned trials a launch runs, and what it does with results computed by other code.

By default a launch runs every planned trial that is not done, and reuses done ones. A done trial whose
code fingerprint (`ablate.provenance.fingerprint`) differs from the current code's is *stale*; each sweep's `stale:`
(or `launch --stale`) says what to do with it: `warn` reuses it and lists it with the components that
changed, `rerun` trains it again, `reuse` reuses it silently. `--rerun failed|diverged|stale|all` runs only
the trials in that state (`all`: every planned trial, done ones again), `--only KEY...` only those trials.
A done trial that is trained again keeps its old result in the store as a previous result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ablate.planning.keys import Trial
from ablate.planning.plan import Plan
from ablate.provenance.fingerprint import Fingerprint, comparable, fingerprints, record
from ablate.provenance.stale import LISTED
from ablate.store import ENDED, Store

Rerun = Literal["failed", "diverged", "stale", "all"]
Policy = Literal["warn", "rerun", "reuse"]
RESUMABLE = ("running", "interrupted", "preempted")
"""States whose trial continues from its checkpoint on the next launch."""


class SelectionError(ValueError):
    """`--only` names a trial the plans do not have (or a prefix that matches several)."""


@dataclass(frozen=True)
class Select:
    """What a launch runs beyond the default (every planned trial not done)."""

    rerun: Rerun | None = None
    """Run only the trials in this state: failed, diverged, stale (done with other code) or all (done too)."""
    only: tuple[str, ...] = ()
    """Run only these trials: keys or unique key prefixes."""
    stale: Policy | None = None
    """What to do with stale done trials, for every sweep (None: each sweep's `stale:`)."""


@dataclass
class Selection:
    """The outcome of `select`."""

    run: dict[str, Trial]
    """Trials to run, in plan order."""
    done: set[str]
    """Planned trials that are done and reused."""
    again: dict[str, str] = field(default_factory=dict)
    """Finished trials to train again, with the reason (their results are kept as previous results first)."""
    stale: dict[str, list[str]] = field(default_factory=dict)
    """Done trials whose code changed since they ran, with what changed (components, versions)."""
    codes: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The current code record of every trial to run (stored with its result)."""
    warned: list[str] = field(default_factory=list)
    """The stale trials a `warn` policy reuses: listed to the user."""
    policy: dict[str, str] = field(default_factory=dict)
    """Each trial's staleness policy (also what a checkpoint written by other code gets)."""
    states: dict[str, str] = field(default_factory=dict)
    """The stored state of each planned trial the store knows."""

    def action(self, key: str) -> str:
        """What the launch does with planned trial `key` (what `launch --dry-run` lists): run, resume, rerun
        (and why: failed, diverged, stale, all), keep (a stale trial its policy reuses) or skip."""
        if key in self.again:
            return f"rerun ({self.again[key]})"
        if key in self.run:
            return "resume" if self.states.get(key) in RESUMABLE else "run"
        return f"keep (stale: {self.policy[key]})" if key in self.stale else "skip"

    def lines(self, trials: dict[str, Trial]) -> list[str]:
        """What to tell the user about stale trials (empty when nothing is stale or every policy is silent)."""
        out = []
        if self.warned:
            out.append(f"{len(self.warned)} done trials ran with other code than now (stale) and are reused; "
                       "`--stale rerun` trains them again:")  # fmt: skip
            for key in self.warned[:LISTED]:
                axes = " ".join(f"{k}={v}" for k, v in trials[key].axes.items())
                out.append(f"  stale {key[:10]} {axes}: changed {', '.join(self.stale[key])}")
            if len(self.warned) > LISTED:
                out.append(f"  ... and {len(self.warned) - LISTED} more (`ablate runs` marks them)")
        if rerun := [k for k, why in self.again.items() if why == "stale"]:
            out.append(f"{len(rerun)} done trials ran with other code than now (stale): training them again")
        return out


def select(plans: list[Plan], store: Store | None, choice: Select) -> Selection:
    """Decide what a launch of `plans` runs (reads the store, None where there is none yet; writes nothing)."""
    trials: dict[str, Trial] = {}
    policy: dict[str, str] = {}
    files: dict[str, str] = {}
    for plan in plans:
        for t in plan.trials:
            trials.setdefault(t.key, t)
            policy.setdefault(t.key, choice.stale or plan.stale)
            files.setdefault(t.key, plan.file)
    if choice.only:
        trials = {k: trials[k] for k in _resolve(choice.only, list(trials))}
    fps = dict(zip(trials, fingerprints([t.config for t in trials.values()])))
    states = store.states(trials) if store is not None else {}
    done = {k for k, s in states.items() if s == "done"}
    stale = _stale(store.codes(done) if store is not None else {}, fps)
    again: dict[str, str]
    if choice.rerun in ("failed", "diverged"):
        again = {k: str(choice.rerun) for k in trials if states.get(k) == choice.rerun}
        run = list(again)
    elif choice.rerun == "stale":
        again = dict.fromkeys(stale, "stale")
        run = list(again)
    elif choice.rerun == "all":
        again = {k: "all" for k in trials if states.get(k) in ENDED}
        run = list(trials)
    else:
        again = {k: "stale" for k in stale if policy[k] == "rerun"}
        run = [k for k in trials if k not in done or k in again]
    wanted = set(run)
    chosen = {k: trials[k] for k in trials if k in wanted}
    warned = [k for k in stale if k not in again and policy[k] == "warn" and choice.rerun is None]
    return Selection(chosen, done - set(again), again, stale,
                     {k: record(fps[k], files[k]) for k in chosen}, warned, policy, states)  # fmt: skip


def _stale(recorded: dict[str, dict[str, Any]], now: dict[str, Fingerprint]) -> dict[str, list[str]]:
    """The trials whose recorded code differs from their current fingerprint, with what changed (a recorded
    fingerprint is read once per digest: a relaunch compares every done trial)."""
    olds: dict[str, tuple[Fingerprint, Fingerprint]] = {}  # digest -> the record, what it is compared with
    out = {}
    for key, code in recorded.items():
        digest = code.get("digest")
        old, today = olds[digest] if digest in olds else (old := Fingerprint.from_json(code), comparable(old, now[key]))
        if digest is not None:
            olds[digest] = old, today
        if old.digest != today.digest:
            out[key] = today.changed(old)
    return out


def _resolve(wanted: tuple[str, ...], keys: list[str]) -> list[str]:
    """Full keys for keys or unique prefixes; an unknown or ambiguous one is a SelectionError."""
    out = []
    for prefix in wanted:
        hits = [k for k in keys if k.startswith(prefix)]
        if len(hits) != 1:
            why = "matches no planned trial" if not hits else f"matches {len(hits)} planned trials"
            raise SelectionError(f"--only {prefix}: {why}")
        out.append(hits[0])
    return out
