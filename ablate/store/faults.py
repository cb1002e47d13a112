"""Database faults as one-paragraph errors: which results store, what went wrong, what to do.

A full disk, a read-only or corrupt file, a lock held past the busy timeout or a server that does not
answer reach the user as `StoreUnavailable` (exit code 3 from the CLI), never as a traceback, from reads and
writes alike (`Store._unavailable`). Nothing is lost meanwhile: the recorder journals what it could not write
(`ablate.execution.journal`) and writes it to the store once it answers again, or the next launch replays it.
"""

from __future__ import annotations

from sqlalchemy import make_url

from ablate.store.engine import BUSY_TIMEOUT_MS, sqlite_file

EXIT_CODE = 3
"""The CLI's exit code when the results store is unavailable."""

#: (text in the database's error, what it means and what to do), first match wins.
CAUSES = [
    ("disk is full", "is on a full disk: free space there (or move the database with --db), then launch again"),
    ("disk i/o error", "could not be written to its disk (full, failing, or past a file-size limit): free space or "
                       "check the disk (or move the database with --db), then launch again"),
    ("readonly", "is read-only: make the file and its folder writable (or pass a writable --db)"),
    ("read-only", "is read-only: make the file and its folder writable (or pass a writable --db)"),
    ("not a database", "is not a readable database (a corrupt or foreign file): restore it from a backup or "
                       "move it aside; checkpoints keep the trials' training progress"),
    ("malformed", "is corrupt: restore it from a backup or move it aside (`sqlite3 FILE .recover` may save "
                  "its rows); checkpoints keep the trials' training progress"),
    ("locked", f"stayed locked by another process for more than {BUSY_TIMEOUT_MS // 1000} s: find the process "
               "holding it (a stuck launcher or an open sqlite3 shell) and stop it"),
    ("unable to open", "cannot be opened: check that its folder exists and is writable"),
    ("connection refused", "does not answer: start the database server or check the URL's host and port"),
    ("starting up", "is starting up: launch again in a moment"),
    ("shutting down", "is shutting down: start it again, then launch again"),
    ("could not connect", "does not answer: start the database server or check the URL's host and port"),
    ("could not translate host", "names a host that does not resolve: check the URL"),
    ("failed to resolve host", "names a host that does not resolve: check the URL"),
    ("timeout", "did not answer in time: check the server and the network"),
]  # fmt: skip


#: Texts of a database server that is down or restarting, which may answer in a moment (what `Store`'s patience waits
#: out): a wrong host name, a full disk or a refused password is not among them.
RESTARTING = ("connection refused", "could not connect", "starting up", "shutting down", "server closed the connection")


class StoreUnavailable(RuntimeError):
    """The results store cannot be read or written; the message says which store, why, and what to do."""

    def __init__(self, message: str, restarting: bool = False) -> None:
        super().__init__(message)
        self.restarting = restarting
        """Whether the database's server may be restarting (RESTARTING), so waiting may mend it."""


def describe(url: str) -> str:
    """The store as the user named it: its file for SQLite, else the URL without its password."""
    path = sqlite_file(url)
    return str(path) if path is not None else make_url(url).render_as_string(hide_password=True)


def explain(url: str, error: BaseException) -> StoreUnavailable:
    """The one-paragraph error for `error` raised by the store at `url`."""
    original = getattr(error, "orig", None) or error
    text = str(original).strip().splitlines()[0] if str(original).strip() else type(original).__name__
    what = next((advice for needle, advice in CAUSES if needle in text.lower()), f"failed ({text})")
    message = f"the results store {describe(url)} {what}. [{type(original).__name__}: {text}]"
    return StoreUnavailable(message, any(needle in text.lower() for needle in RESTARTING))


def restarting(error: Exception) -> bool:
    """Whether `error` is a database server that may answer in a moment (`StoreUnavailable.restarting`)."""
    return isinstance(error, StoreUnavailable) and error.restarting
