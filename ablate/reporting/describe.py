"""A variant in words, from its stored trial config: the architecture and token-mixer columns of a paper table.

    architecture({"model": {"size": "swin-min", ...}})         -> "Swin-Min"
    mixer(config)  -> "CSaN (tau, mu, private; unit readout), pure attention ♢"

The words come from the components themselves (`Mechanism.describe`, `Backbone.describe`,
`Dataset.describe`), found through the registries. Paths these words already say are `said`; any other
axis that varies in a sweep is appended as `name=value` by the caller, so two variants never read the same.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ablate.registry import BACKBONES, DATASETS, MECHANISMS

#: Config paths that `architecture`, `mixer` and `dataset` put in words, whatever the components.
SAID = {
    "model.size", "model.backbone", "model.embed_dim", "model.depths", "model.num_heads", "model.patch_size",
    "model.stack", "model.dwconv", "model.match_params", "model.pool", "data.name", "data.id", "data.path",
    "attention.kind",
}  # fmt: skip


def said(path: str, kinds: Iterable[str] | None = None) -> bool:
    """Whether the words of every variant say `path`: an attention knob is said when each mechanism among
    `kinds` (the sweep's; None: all registered) that has the knob says it, so a plugin's knob that shares a
    name with another mechanism's said knob (`tau`) is still appended where its own words leave it out."""
    if path in SAID:
        return True
    section, _, knob = path.partition(".")
    if section != "attention":
        return False
    having = [cls for name, cls in MECHANISMS.items() if (kinds is None or name in kinds) and knob in cls.model_fields]
    return bool(having) and all(knob in cls.said for cls in having)


def architecture(cfg: dict[str, Any]) -> str:
    """The named size as the papers write it (Swin-Min, ViT-Base-Slim/16), else family and widths."""
    m = cfg.get("model", {})
    name = m.get("backbone", "vit")
    if name not in BACKBONES:
        return str(name)
    backbone = BACKBONES.get(name)
    size = m.get("size")
    preset = backbone.sizes.get(size or "", {})
    if preset and all(_same(m.get(k), v) for k, v in preset.items()):
        words = "-".join("ViT" if part == "vit" else part.capitalize() for part in size.split("-"))
        return backbone.describe_size(words, m)
    return backbone.describe(m)


def attention(cfg: dict[str, Any]) -> str:
    """The token mixer's words: the mechanism's own `describe` (its kind for a config no longer valid)."""
    a = cfg.get("attention", {})
    kind = a.get("kind")
    if kind not in MECHANISMS:
        return str(kind)
    try:
        return MECHANISMS.get(kind).model_validate(a).describe()
    except ValueError:
        return str(kind)


def mixer(cfg: dict[str, Any]) -> str:
    """Token mixer and stack, the paper's second column: attention words, then attn-FFN / pure attention,
    ♢ for param-matched widths, + 7x7 DWConv for CSaN-V2."""
    m = cfg.get("model", {})
    if m.get("pool") == "mean":  # MIL with SynPooling ablated: no attention, whatever the mechanism's knobs
        return "mean pooling (no attention)"
    words = attention(cfg)
    if m.get("backbone") in BACKBONES and BACKBONES.get(m["backbone"]).task == "classify":
        words += ", pure attention" if m.get("stack") == "pure" else ", attn-FFN"
    if m.get("match_params") is not None:
        words += " ♢"
    if m.get("dwconv"):
        words += " + 7x7 DWConv"
    return words


def short(path: str) -> str:
    """An axis path's last name (attention.kappa_pub -> kappa_pub), for labels."""
    return path.rsplit(".", 1)[-1]


def dataset(cfg: dict[str, Any]) -> str:
    """The dataset's words (for a folder or file of data, the id of its contents)."""
    d = cfg.get("data", {})
    name = d.get("name") or "?"
    return DATASETS.get(name).describe(d) if name in DATASETS else str(name)


def value(v: Any) -> str:
    """An axis value as a short word: on/off for booleans, '-' for not applicable."""
    if v is None or (isinstance(v, float) and v != v):
        return "-"
    if isinstance(v, bool):
        return "on" if v else "off"
    return f"{v:g}" if isinstance(v, float) else str(v)


def _same(a: Any, b: Any) -> bool:
    return list(a) == list(b) if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) else a == b
