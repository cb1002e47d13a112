"""What `ablate plan` shows per trial, without torch when it can: parameters and forward GFLOPs per example.

`model_cost(cfg)` builds the network on the meta device (`ablate.nn.accounting.measure`) only when neither this
process nor the cost cache (`ablate.provenance.cache`, keyed by the code too) has the architecture's figures, so a plan
of thousands of trials over a few distinct models builds each model once, and a later plan with the same code
builds none and imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from ablate.config import TrialConfig
from ablate.nn.widths import model_key
from ablate.provenance.cache import remembered
from ablate.provenance.fingerprint import fingerprint
from ablate.registry import DATASETS


@dataclass(frozen=True)
class Cost:
    params: int
    gflops: float
    """Forward GFLOPs per example as FlopCounterMode counts them (2 per multiply-accumulate)."""
    attention_gflops: float = 0.0
    """Of `gflops`, the attention matmuls (q k^T and weights @ v, as dense products): many papers' tables
    leave them out, so `gflops - attention_gflops` is the other convention."""


_COSTS: dict[tuple[str, str], Cost] = {}


def data_dims(cfg: TrialConfig) -> tuple[int, int]:
    """(in_chans, num_classes) of the trial's data without loading it: its dataset component says."""
    return DATASETS.get(cfg.data.name).dims(cfg)


def model_cost(
    cfg: TrialConfig, in_chans: int | None = None, num_classes: int | None = None, code: str | None = None
) -> Cost:
    """Parameters and forward GFLOPs per example (MIL: per bag of MIL_BAG instances) of the trial's model.

    The data widths default to `data_dims(cfg)`. Built and counted on the meta device; cached by
    `model_key` and the code fingerprint, so trials that differ only in data split, recipe or seed share one
    entry, and a component edited in a long-lived process (a notebook) is counted again. `code` is the digest of
    `cfg`'s fingerprint where the caller has it (a plan's costs take each set of components' once: looking at
    their files again per architecture was most of `ablate plan`'s costs).
    """
    if in_chans is None or num_classes is None:
        in_chans, num_classes = data_dims(cfg)
    key, code = model_key(cfg, num_classes, in_chans), code or fingerprint(cfg).digest
    if (key, code) not in _COSTS:
        dims = (num_classes, in_chans)

        def measure() -> tuple[int, float, float]:
            from ablate.nn.accounting import measure

            return measure(cfg, *dims)

        _COSTS[key, code] = Cost(*remembered("cost", code, key, measure, "ablate.nn.accounting"))
    return _COSTS[key, code]
