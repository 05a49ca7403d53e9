"""Algorithms: each wires a privileged context (or none) to the losses; the loop lives in the trainer."""

from __future__ import annotations

from lopd_train.algorithms.base import Algorithm, Batch
from lopd_train.algorithms.grpo import GRPO
from lopd_train.algorithms.lopd import LOPD
from lopd_train.algorithms.sdpo import SDPO

ALGORITHMS: dict[str, type[Algorithm]] = {"lopd": LOPD, "grpo": GRPO, "sdpo": SDPO}

__all__ = ["ALGORITHMS", "Algorithm", "Batch", "GRPO", "LOPD", "SDPO"]
