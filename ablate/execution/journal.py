"""A launcher's journal: the records it could not write while the results store was unavailable.

Each failed write goes (one JSON line per trial message) to `<storage>/journal/<launcher id>.jsonl` on the
launching machine. The launcher writes its journal to the store first, before any later record, as soon as the
store takes writes again (`ablate.execution.recorder`): records keep their order, so a trial's start never lands after
its result. A journal left behind (the store stayed down until the launcher ended) is replayed by the next launch
before it starts, and removed. So a trial that finished while the disk was full or the database server was down
keeps its result.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ablate.training.messages import EpochEnd, Finished, Started

FOLDER = "journal"


@dataclass(frozen=True)
class Stopped:
    """Trials the launcher stopped mid-run (`interrupted` or `preempted`)."""

    keys: list[str]
    state: str


Record = Started | EpochEnd | Finished | Stopped
KINDS: dict[str, type[Record]] = {cls.__name__: cls for cls in (Started, EpochEnd, Finished, Stopped)}


def _plain(value: Any) -> Any:
    """JSON data with NaN and infinities spelled out (json's own NaN is not portable)."""
    if isinstance(value, float) and not math.isfinite(value):
        return {"float": repr(value)}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _value(data: Any) -> Any:
    if isinstance(data, dict):
        return float(data["float"]) if set(data) == {"float"} else {k: _value(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_value(v) for v in data]
    return data


def write(path: Path, records: list[Record]) -> None:
    """Make the journal at `path` hold exactly `records` (a whole new file renamed over the old one, so a launcher
    that dies meanwhile leaves the old journal or the new one, never a mix)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    new = path.with_name(f"{path.name}.new")
    with new.open("w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps({"kind": type(r).__name__, **_plain(asdict(r))}) + "\n")
    new.replace(path)


def read(path: Path) -> list[Record]:
    """The records of one journal, in the order they were written (a torn last line is dropped)."""
    out: list[Record] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue  # the launcher died mid-line: the records before it are whole
        out.append(KINDS[data.pop("kind")](**_value(data)))
    return out


def journals(storage: Path) -> list[Path]:
    return sorted((storage / FOLDER).glob("*.jsonl"))
