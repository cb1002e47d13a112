"""A variant in words, from its trial config: the architecture and token-mixer columns of a paper table.

    architecture({"model": {"size": "swin-min", ...}})         -> "Swin-Min"
    mixer(config)  -> "CSaN (tau, mu, private; unit readout), pure attention ♢"

Paths these words already say are `SAID`; any other axis that varies in a sweep is appended as
`name=value` by the caller, so two variants never read the same.
"""

from __future__ import annotations

from typing import Any

from ablate.config import SIZES

FAMILY = {"swin": "Swin", "vit": "ViT", "hiera": "Hiera", "synpool": "SynPool MIL"}
#: Config paths that `architecture`, `mixer` and `dataset` put in words.
SAID = {
    "model.size", "model.backbone", "model.embed_dim", "model.depths", "model.num_heads", "model.patch_size",
    "model.stack", "model.dwconv", "model.match_params", "data.name", "data.id", "data.path",
    *(f"attention.{k}" for k in ("kind", "tau", "mu", "kappa_pub", "kappa_priv", "bounded", "steps", "gamma",
                                 "bypass", "sigma", "threshold", "signed", "zero_diag")),
}  # fmt: skip


def said(path: str) -> bool:
    return path in SAID


def architecture(cfg: dict[str, Any]) -> str:
    """The named size as the papers write it (Swin-Min, ViT-Base-Slim/16), else family and widths."""
    m = cfg.get("model", {})
    family = m.get("backbone", "vit")
    size = m.get("size")
    preset = SIZES.get(size or "", {})
    if preset and all(_same(m.get(k), v) for k, v in preset.items()):
        if family == "synpool":
            return f"SynPool MIL (D={m.get('embed_dim')})"
        name = "-".join("ViT" if part == "vit" else part.capitalize() for part in size.split("-"))
        return f"{name}/{m.get('patch_size')}" if family == "vit" else name
    if family == "synpool":
        return f"SynPool MIL (D={m.get('embed_dim')}, L={_n(m.get('depths'))})"
    blocks = sum(m.get("depths") or ())
    heads = (m.get("num_heads") or [None])[0]
    return f"{FAMILY.get(family, family)} ({m.get('embed_dim')}-d, {blocks} blocks, {heads} heads)"


def attention(cfg: dict[str, Any]) -> str:
    """The token mixer's words: kind and its switches."""
    a = cfg.get("attention", {})
    kind = a.get("kind", "softmax")
    if kind == "csan":
        parts = [name for name, on in (("tau", a.get("tau")), ("mu", a.get("mu")), ("private", a.get("kappa_priv"))) if on]
        readout = {"unit": "unit readout", "head": "head-wise readout", "off": "no public gain"}[a.get("kappa_pub", "unit")]
        extra = "; bounded" if a.get("bounded") else ""
        return f"CSaN ({', '.join(parts) or 'no calibration'}; {readout}{extra})"
    if kind == "syn":
        steps = int(a.get("steps", 0))
        mode = "concentrate" if steps > 0 else "distract" if steps < 0 else "no steps"
        bypass = "" if a.get("bypass", True) else ", no bypass"
        return f"Syn (I={steps}: {mode}; gamma={a.get('gamma')}{bypass})"
    if kind in ("gaussian", "laplace"):
        return f"{kind.capitalize()} kernel (sigma0={a.get('sigma')})"
    if kind == "ista":
        flags = "".join(f", {f.replace('_', ' ')}" for f in ("signed", "zero_diag") if a.get(f))
        return f"unrolled ISTA (T={a.get('steps')}, thr={a.get('threshold')}{flags})"
    return {"softmax": "Softmax", "entmax15": "1.5-entmax"}.get(kind, kind)


def mixer(cfg: dict[str, Any]) -> str:
    """Token mixer and stack, the paper's second column: attention words, then attn-FFN / pure attention,
    ♢ for param-matched widths, + 7x7 DWConv for CSaN-V2."""
    m = cfg.get("model", {})
    words = attention(cfg)
    if m.get("backbone") != "synpool":
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
    """The dataset's name; for a folder or file of data (imagefolder, mil_csv) the id of its contents."""
    d = cfg.get("data", {})
    name = d.get("name") or "?"
    return (d.get("id") or name) if name in ("imagefolder", "mil_csv") else name


def value(v: Any) -> str:
    """An axis value as a short word: on/off for booleans, '-' for not applicable."""
    if v is None or (isinstance(v, float) and v != v):
        return "-"
    if isinstance(v, bool):
        return "on" if v else "off"
    return f"{v:g}" if isinstance(v, float) else str(v)


def _n(x: Any) -> Any:
    return x[0] if isinstance(x, (list, tuple)) and len(x) == 1 else x


def _same(a: Any, b: Any) -> bool:
    return list(a) == list(b) if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) else a == b
