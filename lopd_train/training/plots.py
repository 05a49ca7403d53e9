"""The run folder's reward curve (``reward_curve.png``): mean reward against rollouts, with a moving average."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def plot_curve(metrics_path: Path, out: Path, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lopd_train.records import read_records

    rows = [r for r in read_records(metrics_path) if "reward_mean" in r and r.get("phase") == "train"]
    if not rows:
        return
    x = [r["rollouts"] for r in rows]
    y = [r["reward_mean"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(x, y, marker="o", lw=1, label="mean reward per step")
    if len(y) >= 3:
        w = max(2, len(y) // 5)
        smooth = np.convolve(y, np.ones(w) / w, mode="valid")
        ax.plot(x[w - 1:], smooth, lw=2, label=f"moving average ({w})")
    ax.set_xlabel("rollouts")
    ax.set_ylabel("reward")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    tmp = out.with_name(f".{out.stem}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, out)
