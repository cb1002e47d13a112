"""Golden trial keys of the shipped experiments.yaml, kept in tests/golden_keys.json.

A trial key is where a result lives in every store: a change to any key orphans the stored results of
that trial (a relaunch runs it again under the new key, the old rows stay unmatched). So the keys of the
shipped sweeps are pinned here, and `test_plan.py::test_shipped_sweeps_keep_their_golden_keys` fails
when any of them moves. Regenerate, only after bumping `ablate.planning.keys.KEY_VERSION` on purpose (or after
changing experiments.yaml itself), with:

    .venv/bin/python tests/golden_keys.py
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments.yaml"
GOLDEN = Path(__file__).with_name("golden_keys.json")
REGENERATE = ".venv/bin/python tests/golden_keys.py"
#: The csan-paper sweep reads its data path from the environment; the path is not part of the key.
IMAGENET_DIR = "/imagenet"


def current_keys() -> dict:
    """{"key_version": KEY_VERSION, "sweeps": {sweep: [trial key, in plan order]}} of experiments.yaml (a tuned
    sweep: its arms' keys).
    Needs IMAGENET_DIR set (to anything)."""
    from ablate.planning.keys import KEY_VERSION
    from ablate.planning.plan import plan_all

    plans = plan_all(EXPERIMENTS)  # a tuned sweep's grid is its arms (`Plan.arms`): its searches start from them
    return {"key_version": KEY_VERSION, "sweeps": {p.sweep: [t.key for t in [*p.trials, *p.arms]] for p in plans}}


def main() -> None:
    os.environ.setdefault("IMAGENET_DIR", IMAGENET_DIR)
    sys.path.insert(0, str(ROOT))
    keys = current_keys()
    GOLDEN.write_text(json.dumps(keys, indent=1) + "\n")
    print(f"wrote {GOLDEN}: {sum(len(v) for v in keys['sweeps'].values())} keys of {len(keys['sweeps'])} sweeps")


if __name__ == "__main__":
    main()
