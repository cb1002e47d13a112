"""A launcher's heartbeat: it renews the launcher's trial leases in the store from a thread of its own.

Launchers sharing a store claim each trial before running it (`Store.claim`); a lease lapses unless its
owner renews it within `Owner.seconds`, and a lapsed lease may be taken over by another launcher (a
crashed launcher's trials resume elsewhere). Renewing from a thread keeps the leases of a launcher whose
loop is busy (recording a burst of messages, a slow MLflow) alive; a launcher that is gone stops renewing.
The renewal also tells the launcher which leases it lost (it was paused past its lease and another
launcher took the trial), so it stops those trials instead of training them twice at once.
"""

from __future__ import annotations

import threading
import time

from ablate.store import Owner, Store
from ablate.store.faults import StoreUnavailable


class Heartbeat:
    """Renews `owner`'s leases every `owner.seconds / 4` until stopped."""

    def __init__(self, store: Store, owner: Owner) -> None:
        self.store, self.owner = store, owner
        self.last: tuple[float, frozenset[str]] = (0.0, frozenset())
        """When the last renewal began (time.monotonic) and the keys it found held; one tuple, swapped whole."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ablate-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def lost(self, keys: dict[str, float]) -> list[str]:
        """Of `keys` (key -> when it was claimed, time.monotonic), those missing from a renewal that began
        after the claim: another launcher holds them now."""
        at, held = self.last
        return [k for k, claimed in keys.items() if claimed < at and k not in held]

    def _run(self) -> None:
        while not self._stop.wait(self.owner.seconds / 4):
            began = time.monotonic()
            try:
                self.last = (began, frozenset(self.store.renew(self.owner)))
            except StoreUnavailable:  # the next beat tries again, well within the lease; the launch loop reports it
                continue
