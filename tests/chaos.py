"""Random faults for the soak (bench/soak.py): the schedule drawn from a seed, the bucket's unplugging, and what
runs inside the launchers and the trials to skew a clock, kill a trial mid-checkpoint and witness each training.

`schedule(seed, seconds, lease)` is the whole fault schedule, drawn before the run from `random.Random(seed)`, so
a seed replays it: the faults' kinds, times, lengths, targets and clock skews. Faults on one resource (PostgreSQL,
the MLflow server, the bucket, one worker node, the trials' checkpoints) never overlap each other; faults on
different resources overlap freely. Each outage is shorter than what a lease tolerates (`tolerated`): the
guarantee that each trial trains once assumes it (docs/concepts/leases.md).

`Proxy` stands between every S3 client and the S3 server: `down()` refuses connections and cuts the open ones
(the bucket unreachable), `up()` serves again on the same port.

`python tests/chaos.py FOLDER SKEW -- ablate-cli-args...` runs the `ablate` CLI with its clock `SKEW` seconds off
(the store's lease times and the launcher's looks: `ablate.store.writes.now`) and its trials run through
`witnessed`, which appends to FOLDER/attempts.jsonl when each attempt begins and ends (and the launcher when it
receives a trial's outcome: `delivered`; an attempt killed after its training ended delivers nothing), holds an
exclusive lock on FOLDER/locks/KEY while it trains (a second attempt of one key that finds it held logs
`concurrent`: two trainings at once), and dies by SIGKILL halfway through a checkpoint write (the local file or
the upload) when it claims a request the soak left in FOLDER/kill.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import random
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ablate.store import Store

KINDS = ("node", "launcher-term", "launcher-kill", "launcher-new", "postgres-restart", "postgres-down",
         "mlflow-down", "bucket-down", "checkpoint-kill")  # fmt: skip
"""Every fault the soak injects (bench/soak.py says what each does)."""
MEAN_GAP = 6.0
"""Mean seconds between the starts of two faults (exponential gaps)."""


@dataclass(frozen=True)
class Fault:
    """One fault of a schedule: at `at` seconds from the start, for `seconds` (an outage's or a node's time down;
    the wait before a stopped launcher is started again)."""

    at: float
    kind: str
    seconds: float
    pick: int
    """Which target: a worker node (1 or 2), the running launcher at this index (modulo their number), or where
    a checkpoint write dies (0: the local file, 1: the upload)."""
    skew: float = 0.0
    """The clock offset, in seconds, of the launcher this fault starts (launcher faults only)."""

    @property
    def resource(self) -> str | None:
        """What the fault takes away (two faults on one never overlap); None for a launcher's, which may."""
        if self.kind == "node":
            return f"node{self.pick}"
        return None if self.kind.startswith("launcher") else self.kind.split("-")[0]

    def __str__(self) -> str:
        skew = f", clock {self.skew:+.1f} s" if self.skew else ""
        return f"{self.at:6.1f} s  {self.kind} (pick {self.pick}, {self.seconds:.1f} s{skew})"


def tolerated(lease: float) -> float:
    """The longest outage plus clock skew a lease tolerates: a heartbeat every quarter lease renews it, so a
    store down for less than three quarters of it (less any skew between the launchers' clocks) loses no lease."""
    return 0.75 * lease


def skew_max(lease: float) -> float:
    """The largest clock offset a launcher of the soak gets: a fifth of the lease."""
    return 0.2 * lease


def schedule(seed: int, seconds: float, lease: float) -> list[Fault]:
    """The faults of a soak of `seconds`, drawn from `seed` (see the module docstring). Skews stay within
    `skew_max` and outages within what the lease tolerates beside two such skews."""
    rng, out, busy = random.Random(seed), list[Fault](), dict[str, float]()
    most = skew_max(lease)
    outage = max(1.0, tolerated(lease) - 2 * most - 1.0)
    t = rng.uniform(3.0, 8.0)
    while t < seconds:
        kind = rng.choice(KINDS)
        pick = {"node": rng.choice((1, 2)), "checkpoint-kill": rng.choice((0, 1))}.get(kind, rng.randrange(8))
        length = {"node": rng.uniform(2.0, 15.0), "postgres-restart": 0.0, "checkpoint-kill": 0.0,
                  "launcher-new": 0.0}.get(kind, rng.uniform(1.0, outage))  # fmt: skip
        skew = rng.uniform(-most, most) if kind.startswith("launcher") else 0.0
        fault = Fault(round(t, 1), kind, round(length, 1), pick, round(skew, 1))
        if fault.resource is None or busy.get(fault.resource, -1.0) < t:
            out.append(fault)
            busy[fault.resource or ""] = t + length + 2.0
        t += rng.expovariate(1 / MEAN_GAP)
    return out


def overlapping(faults: list[Fault]) -> int:
    """How many faults were under way while another was (an outage or a node down overlaps what starts within
    it)."""
    spans = [(f.at, f.at + f.seconds) for f in faults]
    return sum(any(i != j and a <= d and c <= b for j, (c, d) in enumerate(spans)) for i, (a, b) in enumerate(spans))


@dataclass
class Watch:
    """The soak's watch on done results, which must never change once done: each done trial's finish time and
    result as first seen, and the trials seen to change since. A look reads only the trials that ended since the
    last look began, less `back` seconds: a result changes only through `Store.finish`, which stamps the trial's
    finish time anew by its launcher's clock (reading every done trial each look made the watch's cost grow with
    the store)."""

    back: float
    """How far before the last look a finish stamp may lie and still be new to this one: the largest offset of a
    launcher's clock (`skew_max`) and the longest a finish may take from its stamp to its commit (the soak keeps
    outages under a lease)."""
    done: dict[str, tuple[Any, str]] = field(default_factory=dict)
    changed: list[str] = field(default_factory=list)
    looked: datetime | None = None
    """When the last look that read the store began (by this machine's clock, UTC)."""

    def look(self, store: Store) -> list[str]:
        """Note the done trials that ended since the last look; return a line for each seen to change (each
        trial once). A store that is down is looked at again from the same moment next time."""
        began = datetime.now(timezone.utc)
        since = self.looked - timedelta(seconds=self.back) if self.looked else datetime.min
        try:
            ended = [k for k, state in store.finished_since(since).items() if state == "done"]
            records = [(key, store.trial(key)) for key in ended]
        except Exception:  # the store is down: the next look
            return []
        self.looked, lines = began, []
        for key, trial in records:
            if trial is None or trial.state != "done":
                continue  # archived (retrained, its result kept as a previous one) or forgotten since
            now = (trial.finished_at, json.dumps(trial.result, sort_keys=True))
            first = self.done.setdefault(key, now)
            if first != now and key not in self.changed:
                self.changed.append(key)
                lines.append(f"{key[:10]} changed after it was done: finished {first[0]} -> {now[0]}, result "
                             f"{'unchanged' if first[1] == now[1] else f'{first[1]} -> {now[1]}'}")  # fmt: skip
        return lines


class Proxy:
    """A TCP forwarder on 127.0.0.1 to `port` there; `down()` closes its listener and cuts every open connection
    (clients see refused connections), `up()` listens on the same port again."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.port = 0
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()

    def up(self) -> Proxy:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(64)
        self.port, self._listener = s.getsockname()[1], s
        threading.Thread(target=self._accept, args=(s,), daemon=True).start()
        return self

    def down(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._open = self._open, set()
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)  # wakes the accept that holds it; close alone would not
            listener.close()
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            c.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # closed by down()
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    server.close()
                    return
                self._open |= {client, server}
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, a: socket.socket, b: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := a.recv(1 << 16):
                b.sendall(data)
        with contextlib.suppress(OSError):
            b.shutdown(socket.SHUT_WR)
        with self._lock:
            self._open.discard(a)


def request_kill(folder: Path, n: int, where: int) -> None:
    """Ask the next trial that writes a checkpoint (`where` 0: its local file, 1: its upload) to die halfway."""
    (folder / "kill").mkdir(parents=True, exist_ok=True)
    (folder / "kill" / f"{n}.{('save', 'upload')[where]}").touch()


def _claim(folder: str, where: str, key: str) -> bool:
    """Whether this process took a kill request for `where`: a rename, so one process takes each."""
    for request in sorted(Path(folder, "kill").glob(f"*.{where}")):
        with contextlib.suppress(FileNotFoundError):
            request.rename(request.with_name(f"{request.name}.taken-by-{os.getpid()}"))
            _log(folder, "killed", key, where=where)
            return True
    return False


def _log(folder: str, event: str, key: str, **extra: Any) -> None:
    line = json.dumps({"event": event, "key": key, "pid": os.getpid(), "t": time.time(), **extra}) + "\n"
    fd = os.open(Path(folder, "attempts.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line.encode())  # one write of a short line: appends from many processes never interleave
    finally:
        os.close(fd)


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def arm(folder: str) -> None:
    """Make this process's checkpoint writes (`torch.save` of the local file, `Storage.publish` of the upload) die
    halfway through when they claim a kill request of `folder` (once per process)."""
    import torch

    from ablate.training.checkpoint_storage import Storage

    if getattr(torch.save, "armed", False):
        return
    save, publish = torch.save, Storage.publish

    def cut_save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        if isinstance(f, (str, Path)) and _claim(folder, "save", Path(f).parent.name):
            buf = io.BytesIO()
            save(obj, buf, *args, **kwargs)
            Path(f).write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
            _die()
        save(obj, f, *args, **kwargs)

    def cut_publish(self: Storage, key: str, source: Any) -> dict[str, Any]:
        if _claim(folder, "upload", key):
            data = source.read()
            self._fs[0].pipe_file(self._object(key, "checkpoint-cut.pt"), data[: len(data) // 2])
            _die()
        return publish(self, key, source)

    cut_save.armed = True  # type: ignore[attr-defined]
    torch.save, Storage.publish = cut_save, cut_publish  # type: ignore[method-assign]


def witnessed(folder: str) -> Callable[..., Any]:
    """The real trial body, witnessed (see the module docstring); picklable by value for Ray."""

    def run(cfg: Any, report: Callable[..., None], checkpoint_dir: Path) -> Any:
        from ablate.training.loop import run_trial as real

        key = Path(checkpoint_dir).name
        arm(folder)
        locks = Path(folder, "locks")
        locks.mkdir(parents=True, exist_ok=True)
        with (locks / key).open("a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                _log(folder, "concurrent", key)
            _log(folder, "begin", key)
            result = real(cfg, report, checkpoint_dir)
            trained = result.outcome == "done" and result.resumed_from < result.epochs
            _log(folder, "end", key, outcome=result.outcome, resumed_from=result.resumed_from, trained=trained)
            return result

    return run


def main(argv: list[str]) -> None:
    """Run the ablate CLI with a skewed clock and witnessed trials (see the module docstring)."""
    import ray.cloudpickle

    import ablate.execution.trial_task
    import ablate.store.writes
    from ablate import cli
    from ablate.execution.recorder import Recorder
    from ablate.training.messages import Finished, Message

    split = argv.index("--")
    folder, skew = argv[:split]
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ablate.execution.trial_task.run_trial = witnessed(folder)  # the launcher's default runner, before fanout binds it
    import ablate.execution.fanout

    real_now, offset = ablate.store.writes.now, timedelta(seconds=float(skew))
    ablate.store.writes.now = ablate.execution.fanout.now = lambda: real_now() + offset  # type: ignore[assignment]
    record = Recorder.record

    def delivered(self: Recorder, messages: list[Message], outcomes: list[Finished] | None = None) -> None:
        for done in outcomes or []:  # a wave's outcomes reach the store here (`Fanout.wave`)
            _log(folder, "delivered", done.key, state=done.state, resumed_from=done.resumed_from)
        record(self, messages, outcomes)

    Recorder.record = delivered  # type: ignore[method-assign]
    sys.argv = ["ablate", *argv[split + 1 :]]
    cli.main()  # the `ablate` command itself: an unavailable store exits 3 with its one paragraph


if __name__ == "__main__":
    main(sys.argv[1:])
