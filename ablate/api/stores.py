"""The one rule for a results store that is only read: it is opened where its database exists and never created
where it does not (`existing`, `NoDatabase`: the CLI's commands and the API's functions alike); what only looks
before a launch gets None there (`existing_or_none`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ablate.store import Store


class NoDatabase(LookupError):
    """A store read where its database does not exist (none was created), in the one sentence for it."""

    def __init__(self, store: object) -> None:
        from ablate.store import DEFAULT_URL

        super().__init__(f"no results database at {store or DEFAULT_URL}: run `ablate launch` first (or pass --db)")


def absent(store: Store | str | None) -> bool:
    """Whether `store` is a URL (or None: the CLI's default) whose database does not exist."""
    from ablate.store import Store, database_exists

    return not isinstance(store, Store) and not database_exists(store)


@contextmanager
def open_store(store: Store | str | None, patience: float = 0.0) -> Iterator[Store]:
    """`store` itself (left open), or the store at a URL or the CLI's default (closed after), waiting up to
    `patience` seconds for a server that does not answer yet."""
    from ablate.store import Store

    with nullcontext(store) if isinstance(store, Store) else Store(store, patience) as it:
        yield it


@contextmanager
def existing_or_none(store: Store | str | None, patience: float = 0.0) -> Iterator[Store | None]:
    """The store of `open_store` where its database exists, else None: what only looks before a launch."""
    if absent(store):
        yield None
        return
    with open_store(store, patience) as it:
        yield it


def existing(store: str | None) -> Store:
    """The store at a URL (None: the CLI's default) for reading, open (close it: a Store is its own context
    manager); `NoDatabase`, creating nothing, where its database does not exist."""
    from ablate.store import Store

    if absent(store):
        raise NoDatabase(store)
    return Store(store)


@contextmanager
def reading(store: Store | str | None) -> Iterator[Store]:
    """`store` itself (left open), or the store of `existing` (closed after)."""
    from ablate.store import Store

    with nullcontext(store) if isinstance(store, Store) else existing(store) as it:
        yield it
