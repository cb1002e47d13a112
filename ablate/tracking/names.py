"""Names and values as MLflow takes them: a param or metric name it accepts (`mlflow_name`), values clipped to its
limits (`clip`). Shared by the MLflow tracker (`ablate.tracking.tracker`) and the saved view (`ablate.tracking.view`),
whose columns name the same params."""

from __future__ import annotations

import hashlib
import re

#: MLflow's limits: name length, param value length, tag value length.
MAX_KEY, MAX_PARAM, MAX_TAG = 250, 6000, 8000
_BAD_CHARS = re.compile(r"[^/\w.\- ]")


def mlflow_name(name: str) -> str:
    """A valid MLflow param/metric name: odd characters become `_`; a name over 250 characters keeps its
    head and gains a hash of the whole name (so long names stay apart)."""
    clean = _BAD_CHARS.sub("_", name)
    if len(clean) <= MAX_KEY:
        return clean
    return f"{clean[: MAX_KEY - 11]}-{hashlib.sha1(name.encode()).hexdigest()[:10]}"


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
