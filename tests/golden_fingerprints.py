"""Golden code fingerprints of the built-in components, kept in tests/golden_fingerprints.json.

A trial's recorded fingerprint is how a store knows its result came from today's code: a component whose digest
changes makes every stored result that used it stale (relaunches retrain it, reports mark it). So the digests of
the built-ins are pinned here, and `test_fingerprint.py::test_built_in_components_keep_their_golden_fingerprints`
fails when a change moves one: a refactor (a move, a rename, a reformat) must keep them; an edit that changes
what a component computes changes its digest on purpose. Regenerate, only then, with:

    .venv/bin/python tests/golden_fingerprints.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).with_name("golden_fingerprints.json")
REGENERATE = ".venv/bin/python tests/golden_fingerprints.py"


def current_digests() -> dict:
    """{"algorithm": ALGORITHM, "components": {"mechanism csan": digest, ..., "loop": digest}} of every built-in
    mechanism, backbone, dataset and task and of the training loop (package versions left out: they are the
    environment's, not the code's)."""
    from ablate.plugins import load_builtins
    from ablate.provenance.fingerprint import ALGORITHM, _now
    from ablate.registry import BACKBONES, DATASETS, MECHANISMS, TASKS

    load_builtins()
    base = ("softmax", "vit", "digits", "classify")
    components: dict[str, str] = {}
    for i, registry in enumerate((MECHANISMS, BACKBONES, DATASETS, TASKS)):
        for entry in registry.entries():
            if entry.source.startswith("ablate."):  # a built-in (a plugin's source is its module or file)
                names = (*base[:i], entry.name, *base[i + 1 :])
                components.update(_now(names).components)
    return {"algorithm": ALGORITHM, "components": dict(sorted(components.items()))}


def main() -> None:
    sys.path.insert(0, str(ROOT))
    digests = current_digests()
    GOLDEN.write_text(json.dumps(digests, indent=1) + "\n")
    print(f"wrote {GOLDEN}: {len(digests['components'])} component digests (algorithm {digests['algorithm']})")


if __name__ == "__main__":
    main()
