"""Where trials' checkpoints live: a folder every node mounts, or an object store every node reaches.

`--storage` takes a path (local, or a network filesystem shared by the cluster's nodes) or a URL of any
filesystem fsspec knows (`s3://bucket/prefix`, `gs://bucket/prefix`, ...; its credentials and endpoint come
from that filesystem's usual environment, e.g. `AWS_*` for S3, on every node). A trial always trains against a
folder on its own machine: with a path, `<storage>/<key>` itself; with a URL, a scratch copy under
`$ABLATE_SCRATCH` (default `~/.cache/ablate/storage`) that `Sync` keeps in step with the bucket:

* **fetch**: before the trial starts, the published checkpoint is downloaded and verified (size, SHA-256);
  without a published one, no local leftover is trusted (the bucket is the truth, so any node resumes alike).
* **publish**: every new checkpoint file is uploaded as a fresh object `<key>/checkpoint-<id>.pt`, and only
  once that object is complete, a small marker `<key>/checkpoint.json` naming it, its size and its digest
  replaces the previous marker; the object the old marker named is deleted after. A reader follows the
  marker, so a partially uploaded checkpoint is never read, and a mismatch is reported, not trusted.
* **stop requests**: the launcher writes `<key>/preempt` into the bucket; `Sync` copies it into the local
  folder, where the trial's per-step check (`messages.StopRequest`) sees it.

A bucket that does not answer is waited out (`patiently`, up to `PATIENCE`) where a trial cannot go on without
it: the fetch before it starts and the last upload as it ends. The uploads in between are simply tried again at
the next look.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import threading
import uuid
from functools import cached_property
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ablate.patience import patiently
from ablate.training.checkpoints import FILE
from ablate.training.messages import PREEMPT, clear_stop, request_stop

if TYPE_CHECKING:
    from ablate.planning.keys import Trial

SCRATCH = "ABLATE_SCRATCH"
"""Environment variable: the root of the local scratch copies of trials whose storage is a URL."""
MARKER = "checkpoint.json"
"""The object that names a trial's published checkpoint (written last, so it never names a partial one)."""
SYNC_INTERVAL = 1.0
"""Seconds between a running trial's looks for a new checkpoint to upload and for a stop request."""
PATIENCE = 60.0
"""Seconds a trial waits for a bucket that does not answer, at its start and its end, before it fails (start) or
warns that its last checkpoint is not in the bucket (end): a blip of a few seconds should cost nothing."""
PERMANENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)
"""Errors that waiting does not mend."""


def _mends(error: Exception) -> bool:
    return not isinstance(error, PERMANENT)


class StorageError(RuntimeError):
    """The storage cannot be used (unknown protocol, missing driver, unreachable, no permission)."""


def is_url(location: str | Path) -> bool:
    """A URL (`scheme://...`) other than `file://` names an fsspec filesystem; anything else is a path."""
    text = str(location)
    return "://" in text and not text.startswith("file://")


class Storage:
    """A checkpoint root: `<root>/<trial key>/` per trial, on a shared filesystem or in an object store."""

    def __init__(self, location: str | Path) -> None:
        text = str(location)
        self.remote = is_url(text)
        self.url = text.rstrip("/") if self.remote else str(Path(text.removeprefix("file://")).resolve())

    def __repr__(self) -> str:
        return f"Storage({self.url!r})"

    @property
    def root(self) -> Path:
        """This machine's folder for the storage: the storage itself, or for a URL its scratch copy."""
        if not self.remote:
            return Path(self.url)
        base = Path(os.environ.get(SCRATCH) or Path.home() / ".cache" / "ablate" / "storage")
        return base / hashlib.sha256(self.url.encode()).hexdigest()[:16]

    def folder(self, key: str) -> Path:
        """The local folder a trial trains against (its checkpoint file and stop request)."""
        return self.root / key

    @cached_property
    def _fs(self) -> tuple[Any, str]:
        import fsspec

        try:
            fs, path = fsspec.core.url_to_fs(self.url, use_listings_cache=False)
        except (ImportError, ValueError) as e:
            raise StorageError(f"storage {self.url}: {e}") from e
        return fs, path.rstrip("/")

    def _object(self, key: str, name: str) -> str:
        return f"{self._fs[1]}/{key}/{name}"

    def check(self) -> None:
        """Fail early (before Ray starts) when the storage cannot be written: a marker object round trip."""
        if not self.remote:
            return
        fs, base = self._fs
        probe = f"{base}/.ablate-{uuid.uuid4().hex}"
        try:
            fs.pipe_file(probe, b"")
            fs.rm_file(probe)
        except Exception as e:
            raise StorageError(
                f"storage {self.url} cannot be written ({type(e).__name__}: {e}); check that the bucket exists and"
                " that this machine's credentials and endpoint for it are set (for S3: AWS_ACCESS_KEY_ID,"
                " AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL for a non-AWS server)"
            ) from e

    def request_stop(self, key: str) -> None:
        """Ask the running trial `key` to checkpoint at its next step and stop (SIGTERM, preemption)."""
        if self.remote:
            self._fs[0].pipe_file(self._object(key, PREEMPT), b"")
        else:
            request_stop(self.folder(key))

    def clear_stop(self, key: str) -> None:
        """Withdraw a stop request that a preempted attempt already answered."""
        clear_stop(self.folder(key))
        if self.remote:
            with contextlib.suppress(FileNotFoundError):
                self._fs[0].rm_file(self._object(key, PREEMPT))

    def discard(self, key: str) -> None:
        """Forget the trial's checkpoint (it trains again from scratch): the local file, and for a bucket the
        marker and the object it names."""
        (self.folder(key) / FILE).unlink(missing_ok=True)
        if self.remote and (marker := self.published(key)):
            fs = self._fs[0]
            fs.rm_file(self._object(key, MARKER))
            with contextlib.suppress(FileNotFoundError):
                fs.rm_file(self._object(key, str(marker["object"])))

    def forget(self, key: str) -> None:
        """Delete everything of the trial here: its local folder, and for a bucket its objects."""
        shutil.rmtree(self.folder(key), ignore_errors=True)
        if self.remote:
            with contextlib.suppress(FileNotFoundError):
                self._fs[0].rm(f"{self._fs[1]}/{key}", recursive=True)

    def stop_requested(self, key: str) -> bool:
        fs = self._fs[0]
        fs.invalidate_cache()
        return bool(fs.exists(self._object(key, PREEMPT)))

    def published(self, key: str) -> dict[str, Any] | None:
        """The marker of the trial's published checkpoint (object, size, sha256), or None."""
        try:
            data = self._fs[0].cat_file(self._object(key, MARKER))
        except FileNotFoundError:
            return None
        marker = json.loads(data)
        return marker if isinstance(marker, dict) else None

    def publish(self, key: str, source: IO[bytes]) -> dict[str, Any]:
        """Upload an open checkpoint file as a new object, then point the marker at it, then remove every other
        checkpoint object of the trial: the one the marker named before, and any an attempt killed mid-upload
        left behind (one attempt of a trial writes at a time: its lease); returns the marker."""
        fs = self._fs[0]
        name = f"checkpoint-{uuid.uuid4().hex}.pt"
        digest, size = hashlib.sha256(), 0
        with fs.open(self._object(key, name), "wb") as out:
            while block := source.read(1 << 20):
                digest.update(block)
                out.write(block)
                size += len(block)
        marker = {"object": name, "size": size, "sha256": digest.hexdigest()}
        fs.pipe_file(self._object(key, MARKER), json.dumps(marker).encode())
        fs.invalidate_cache()
        for path in fs.ls(self._object(key, "").rstrip("/"), detail=False):
            if path.endswith(".pt") and path.rsplit("/", 1)[-1] != name:
                with contextlib.suppress(FileNotFoundError):
                    fs.rm_file(path)
        return marker

    def fetch(self, key: str) -> str | None:
        """Make the local folder hold exactly the published checkpoint (or none) and no stop request (one an earlier
        attempt here answered stays on this machine; the launcher withdrew it from the bucket before this attempt,
        and a new one reaches it through the bucket); returns a problem, if any."""
        folder = self.folder(key)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / FILE).unlink(missing_ok=True)
        clear_stop(folder)
        marker = self.published(key)
        if marker is None:
            return None
        tmp = folder / f"{FILE}.{uuid.uuid4().hex[:8]}.fetch"
        try:
            data = self._fs[0].cat_file(self._object(key, str(marker["object"])))
        except FileNotFoundError:
            return f"published checkpoint {self.url}/{key} names a missing object; restarting from scratch"
        if len(data) != marker["size"] or hashlib.sha256(data).hexdigest() != marker["sha256"]:
            return (f"published checkpoint {self.url}/{key} does not match its marker (size or SHA-256); "
                    "restarting from scratch")  # fmt: skip
        tmp.write_bytes(data)
        tmp.replace(folder / FILE)
        return None

    def sync(self, key: str) -> Sync:
        return Sync(self, key)

    def refuse_gangs(self, trials: list[Trial]) -> None:
        """Multi-worker trials meet through a file in their folder, which needs a folder every node mounts."""
        if self.remote and (multi := [t for t in trials if t.config.resources.workers > 1]):
            raise StorageError(
                f"{len(multi)} trials have resources.workers > 1, whose workers meet through a file in a folder"
                f" every node sees; --storage {self.url} is a URL: give a shared folder for these trials"
            )


class Sync:
    """Keeps one running trial's bucket folder in step with its local copy (a no-op for a path storage).

    On entry the published checkpoint is fetched; while the trial runs a thread uploads each new checkpoint
    and copies stop requests down; on exit the last checkpoint is uploaded before the task returns, whatever its
    outcome: a preempted or failed attempt's successor may start on another node, and a done trial's last
    checkpoint, the one the store records with its result, must outlive the machine that trained it.
    """

    def __init__(self, storage: Storage, key: str) -> None:
        self.storage, self.key = storage, key
        self.problems: list[str] = []
        """What the trial should be told: a published checkpoint refused, an upload that failed."""
        self.waits: list[str] = []
        """Each time the fetch or the last upload found the bucket unreachable and waited (also on stderr)."""
        self._seen: tuple[int, int, int] | None = None
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Sync:
        if self.storage.remote:
            if problem := patiently(lambda: self.storage.fetch(self.key), _mends, self._waiting, PATIENCE):
                self.problems.append(problem)
            self._seen = self._stat()
            self._thread = threading.Thread(target=self._loop, name=f"ablate-sync-{self.key[:8]}", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop the thread, then publish a checkpoint it has not published yet."""
        if self._thread is None:
            return
        self._done.set()
        self._thread.join()
        self._thread = None
        self._upload(final=True)

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            s = (self.storage.folder(self.key) / FILE).stat()
        except FileNotFoundError:
            return None
        return s.st_ino, s.st_mtime_ns, s.st_size

    def _upload(self, final: bool = False) -> None:
        now = self._stat()
        if now is None or now == self._seen:
            return

        def publish() -> None:
            with (self.storage.folder(self.key) / FILE).open("rb") as source:  # a rename later leaves this file whole
                self.storage.publish(self.key, source)

        try:
            patiently(publish, _mends, self._waiting, PATIENCE if final else 0.0)
            self._seen = now
        except Exception as e:  # the store is unreachable: the next look retries; the last one reports it
            if final:
                self.problems.append(f"checkpoint upload to {self.storage.url}/{self.key} failed: {e}")

    def _waiting(self, error: Exception, pause: float) -> None:
        self.waits.append(f"{self.storage.url} does not answer ({type(error).__name__}: {error}); "
                          f"trying again in {pause:.1f} s")  # fmt: skip
        print(f"ablate: trial {self.key}: {self.waits[-1]}", file=sys.stderr, flush=True)

    def _loop(self) -> None:
        local = self.storage.folder(self.key)
        while not self._done.wait(SYNC_INTERVAL):
            with contextlib.suppress(Exception):  # a store that is down is asked again at the next look
                if not (local / PREEMPT).exists() and self.storage.stop_requested(self.key):
                    request_stop(local)
            self._upload()
