"""The figure both privileged-information-gain scripts draw, PIG (nats / token) against cold-start steps with
its intervals: one arm's controls (``privileged_gain.py``) or several arms side by side (``decisive_test.py``).
One frame for both, so that their figures read alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def pig_axes(figsize: tuple[float, float]) -> tuple[Any, Any]:
    """A figure and its axes, drawn without a display."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=figsize)


def save_pig_figure(fig: Any, ax: Any, path: Path, ylabel: str, legend_size: int) -> None:
    """The frame (zero marked, the axes named, legend and grid) drawn around what ``ax`` holds, and the
    figure written to ``path`` and closed."""
    import matplotlib.pyplot as plt

    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xlabel("cold-start steps")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=legend_size)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
