"""What libraries print on their own that a command's console must not show (issue 51): Ray's token-authentication
banner, MLflow's INFO lines (its store's set-up, the UI server's uvicorn), its registry-store echo and Starlette's
deprecation warnings."""

from __future__ import annotations

import re

NOISE = re.compile(
    r"Token authentication is (?:enabled|disabled) for this Ray cluster"
    r"|^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d INFO"  # MLflow's log format, and its uvicorn's
    r"|Registry store URI not provided"
    r"|StarletteDeprecationWarning|starlette\.middleware\.wsgi is deprecated",
    re.MULTILINE,
)


def noise(output: str) -> list[str]:
    """The lines of `output` that are a library's noise."""
    return [line for line in output.splitlines() if NOISE.search(line)]
