"""Trial leases: which launcher holds which trials, so two never run one (`Leases`, a part of `ablate.store.Store`:
claim, renew, release, each one transaction); `Owner` is a launcher as their holder."""

from __future__ import annotations

import getpass
import os
import socket
import uuid
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import or_, select, update

from ablate.store.database import CHUNK, Database, now
from ablate.store.queries import TRIALS
from ablate.store.schema import ENDED


@dataclass(frozen=True)
class Owner:
    """A launcher as the holder of trial leases."""

    id: str
    host: str
    """user@host:pid, shown by `ablate status`."""
    seconds: float
    """Lease length: a lease its owner has not renewed for this long may be taken over."""

    @classmethod
    def new(cls, seconds: float) -> Owner:
        return cls(uuid.uuid4().hex, f"{getpass.getuser()}@{socket.gethostname()}:{os.getpid()}", seconds)


class Leases(Database):
    """The store's leases on trials, each lasting its owner's `seconds` unless renewed (the heartbeat)."""

    def claim(
        self,
        keys: Iterable[str],
        owner: Owner,
        limit: int | None = None,
        chosen_at: datetime | None = None,
        retry: Collection[str] = (),
    ) -> set[str]:
        """Lease to `owner`, for `owner.seconds`, the unfinished trials of `keys` that are free, already its,
        or whose lease lapsed: the first `limit` of them in the order of `keys` (all when None). Returns the
        keys of those it now holds. One transaction (SQLite's write lock; on PostgreSQL the update re-checks
        each row under its lock), so two launchers never both win a trial.

        `chosen_at`: when the launch read the states it chose `keys` by. A failed or diverged trial is then
        claimed only if it is one of `retry` (chosen in that state, to train again) and ended before that
        moment: one that ended since, another launcher ran after this launch chose it, and training it again
        would repeat that launcher's work (by the recording launcher's clock, as leases assume clocks agree)."""
        order = list(keys)
        t = now()
        lease = {
            "lease_owner": owner.id,
            "lease_host": owner.host,
            "lease_expires": t + timedelta(seconds=owner.seconds),
        }
        claimable = (
            TRIALS.c.state != "done",
            or_(TRIALS.c.lease_owner.is_(None), TRIALS.c.lease_owner == owner.id, TRIALS.c.lease_expires < t),
        )

        def unchanged(part: list[str]) -> tuple[Any, ...]:
            """Of `part`, those that did not fail or diverge since the launch chose them (no test without
            `chosen_at`)."""
            if chosen_at is None:
                return ()
            again = TRIALS.c.key.in_([k for k in part if k in retry]) & (TRIALS.c.finished_at < chosen_at)
            return (or_(TRIALS.c.state.not_in([s for s in ENDED if s != "done"]), again),)

        held = set[str]()
        with self._write() as conn:
            chosen: list[str] = []
            # In queue order, reading no further than `limit` needs: chunks of twice the limit, doubling up to
            # CHUNK past trials others hold (a chunk of CHUNK keys per wave of a few was most of a claim's cost).
            i, size = 0, CHUNK if limit is None else min(CHUNK, 2 * max(limit, 1))
            while i < len(order):
                part = order[i : i + size]
                where = (TRIALS.c.key.in_(part), *unchanged(part), *claimable)
                found = set(conn.execute(select(TRIALS.c.key).where(*where)).scalars())
                chosen += [k for k in part if k in found]
                if limit is not None and len(chosen) >= limit:
                    break
                i, size = i + size, min(CHUNK, 2 * size)
            chosen = chosen[:limit]
            for i in range(0, len(chosen), CHUNK):
                part = chosen[i : i + CHUNK]
                conn.execute(update(TRIALS).where(TRIALS.c.key.in_(part), *unchanged(part), *claimable).values(**lease))
                mine = select(TRIALS.c.key).where(TRIALS.c.key.in_(part), TRIALS.c.lease_owner == owner.id)
                held.update(conn.execute(mine).scalars())
        return held

    def renew(self, owner: Owner) -> set[str]:
        """Extend every lease `owner` holds by `owner.seconds` from now (its heartbeat); return their keys
        (a lease that lapsed and was taken over is gone from them)."""
        expires = now() + timedelta(seconds=owner.seconds)
        with self._write() as conn:
            conn.execute(update(TRIALS).where(TRIALS.c.lease_owner == owner.id).values(lease_expires=expires))
            return set(conn.execute(select(TRIALS.c.key).where(TRIALS.c.lease_owner == owner.id)).scalars())

    def release(self, owner: Owner, keys: Iterable[str] | None = None) -> None:
        """Give up `owner`'s leases (on `keys`, or all): another launcher may claim them at once."""
        stmt = update(TRIALS).where(self._keyed(keys), TRIALS.c.lease_owner == owner.id)
        with self._write() as conn:
            conn.execute(stmt.values(lease_owner=None, lease_host=None, lease_expires=None))
