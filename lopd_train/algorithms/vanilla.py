"""Vanilla: the base model, never updated. The trainer still samples, scores and logs rollouts and saves
checkpoints at the same budgets as every other algorithm, so its curve (and a held-out evaluation of its
checkpoints) is the no-training reference line of a comparison."""

from __future__ import annotations

from lopd_train.algorithms.base import Algorithm


class Vanilla(Algorithm):
    name = "vanilla"
    teacher_sees = "no teacher: the student is never updated (the no-training reference)"

    def update(self, trajectories):
        return {"grad_norm": 0.0, "updated": 0.0}
