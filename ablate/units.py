"""Numbers as every table prints them: costs in significant digits, so a tiny model's 42,000 params read 0.042M,
not 0.00M, and a large one's 87.8M keep no false decimals (`ablate plan`, `ablate check` and reports alike)."""

from __future__ import annotations

import math

DIGITS = 3


def significant(x: float | None, digits: int = DIGITS, sign: bool = False) -> str:
    """`x` to `digits` significant digits, in fixed notation (never 1.2e+03); "-" for a missing number."""
    if x is None or math.isnan(x):
        return "-"
    rounded = float(f"{x:.{digits}g}")  # 999,999 to 3 digits is 1.00e6: its magnitude is the rounded one's
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(rounded)))) if rounded else 0
    return f"{x:+.{decimals}f}" if sign else f"{x:.{decimals}f}"


def params(n: float | None, sign: bool = False) -> str:
    """A parameter count in millions, as papers give it: 0.0421M, 11.8M, 87.8M."""
    return "-" if n is None or math.isnan(n) else significant(n / 1e6, sign=sign) + "M"


def gflops(g: float | None, sign: bool = False) -> str:
    """GFLOPs (multiply-accumulates per example, the papers' count) in significant digits: 0.000312, 4.38."""
    return significant(g, sign=sign)
