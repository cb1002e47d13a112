"""MLflow as the API's functions reach it: the tracker a function is given (`tracker_of`), MLflow brought up to
date with the store (`sync`, `ablate sync`), and the MLflow UI's page of a sweep (`sweep_page`, `ablate ui`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ablate.api.stores import existing_or_none, reading

if TYPE_CHECKING:
    from ablate.store import Store
    from ablate.tracking.mirror import Synced
    from ablate.tracking.tracker import Tracker


def tracker_of(tracker: Tracker | str | bool, lazy: bool = False) -> Tracker | None:
    """`tracker` as a Tracker: itself, the one at a tracking URI, or the CLI's db/mlflow.sqlite (True); None for
    False. `lazy`: opened where MLflow is first needed, not here (a launch)."""
    from ablate.tracking.tracker import Tracker

    if tracker is False or isinstance(tracker, Tracker):
        return tracker or None
    return Tracker(None if tracker is True else tracker, lazy=lazy)


def sync(sweeps: Sequence[str] | None, store: Store | str | None, tracker: Tracker) -> Synced:
    """MLflow brought up to date with `store` (as for `status`) for `sweeps` (default: all): the runs, params,
    metric points and states it lacks (`ablate.tracking.mirror.sync`); a LookupError where the database does not
    exist."""
    from ablate.tracking.closing import waited
    from ablate.tracking.mirror import sync as send

    waited(tracker)  # a launch's closing, still writing (`ablate.tracking.closing`)
    with reading(store) as opened:
        return send(opened, tracker, list(sweeps) if sweeps else None)


def sweep_page(base: str, sweep: str | None, store: Store | str | None = None) -> str:
    """The MLflow UI's page at `base` for `sweep` (default: the one launched last), looked up in `store` where its
    database exists (`ablate.tracking.ui.sweep_page`); a LookupError where there is no such sweep."""
    from ablate.tracking.ui import sweep_page as page

    with existing_or_none(store) as opened:
        return page(base, opened, sweep)
