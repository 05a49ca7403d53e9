"""Algorithms, the update step of the pipeline (rollout → experience → latent context → **update** → training
loop): each algorithm wires a privileged context (or none) to the losses; the loop lives in
:mod:`lopd_train.training.trainer`. Beside them: ``losses.py`` (the losses, as pure functions of tensors);
below them, at the base of the package, :mod:`lopd_train.scoring` (the logits a model gives to the tokens a
student sampled, under the student or a teacher), which the rollout engine and the composer use too.
"""

from __future__ import annotations

from lopd_train.algorithms.base import Algorithm, Batch
from lopd_train.algorithms.grpo import GRPO
from lopd_train.algorithms.lopd import LOPD
from lopd_train.algorithms.opsd import OPSD
from lopd_train.algorithms.sdft import SDFT
from lopd_train.algorithms.sdpo import SDPO
from lopd_train.algorithms.skill_sd import SkillSD
from lopd_train.algorithms.vanilla import Vanilla

__all__ = [
    "ALGORITHMS",
    "GRPO",
    "LOPD",
    "OPSD",
    "SDFT",
    "SDPO",
    "Algorithm",
    "Batch",
    "SkillSD",
    "Vanilla",
    "algorithms_help",
]

ALGORITHMS: dict[str, type[Algorithm]] = {a.name: a for a in (LOPD, GRPO, OPSD, SDPO, SDFT, SkillSD, Vanilla)}


def algorithms_help() -> str:
    """One line per algorithm: what its teacher sees (``lopd-train --help``)."""
    width = max(len(n) for n in ALGORITHMS)
    return "\n".join(f"  {n:<{width}}  {a.teacher_sees}" for n, a in ALGORITHMS.items())
