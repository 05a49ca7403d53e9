"""The machine's load average, as every benchmark prints it beside its figures: on a shared machine a figure
means little without the load it was measured under, so each script prints the load before and after."""

from __future__ import annotations

import os


def load_average() -> list[float]:
    """The 1-, 5- and 15-minute load averages, rounded to 2 decimals (what the JSON results keep)."""
    return [round(x, 2) for x in os.getloadavg()]


def _shown(loads: list[float]) -> str:
    return " ".join(f"{x:.2f}" for x in loads)


def describe(before: list[float], after: list[float] | None = None) -> str:
    """``load average 1.20 1.10 0.90 -> 1.50 1.20 0.95`` (``after`` defaults to now)."""
    after = load_average() if after is None else after
    return f"load average {_shown(before)} -> {_shown(after)}"


def describe_now() -> str:
    """``load average 1.20 1.10 0.90``: the load now, for a line that reports one measurement."""
    return f"load average {_shown(load_average())}"
