"""Algorithms, the update step of the pipeline (rollout → experience → latent context → **update** → training
loop): each algorithm wires a privileged context (or none) to the losses; the loop lives in
:mod:`lopd_train.training.trainer`. Under the algorithms: ``scoring.py`` (the logits a model gives to the
tokens a student sampled, under the student or a teacher) and ``losses.py`` (the losses, as pure functions of
tensors).

The names below are loaded on first use (PEP 562): ``scoring`` is imported by the rollout engine and the
latent composer, which the algorithms import in turn, so loading every algorithm whenever a module of this
package is imported would be a circle at run time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lopd_train.algorithms.base import Algorithm

__all__ = ["ALGORITHMS", "Algorithm", "Batch", "GRPO", "LOPD", "OPSD", "SDFT", "SDPO", "SkillSD", "Vanilla",
           "algorithms_help"]


def _load() -> dict[str, Any]:
    from lopd_train.algorithms.base import Algorithm, Batch
    from lopd_train.algorithms.grpo import GRPO
    from lopd_train.algorithms.lopd import LOPD
    from lopd_train.algorithms.opsd import OPSD
    from lopd_train.algorithms.sdft import SDFT
    from lopd_train.algorithms.sdpo import SDPO
    from lopd_train.algorithms.skill_sd import SkillSD
    from lopd_train.algorithms.vanilla import Vanilla

    registry: dict[str, type[Algorithm]] = {a.name: a for a in (LOPD, GRPO, OPSD, SDPO, SDFT, SkillSD, Vanilla)}
    return {"ALGORITHMS": registry, "Algorithm": Algorithm, "Batch": Batch, "GRPO": GRPO, "LOPD": LOPD,
            "OPSD": OPSD, "SDFT": SDFT, "SDPO": SDPO, "SkillSD": SkillSD, "Vanilla": Vanilla}


def __getattr__(name: str) -> Any:
    if name in __all__:
        if "ALGORITHMS" not in globals():  # once: afterwards the names are ordinary module attributes
            globals().update(_load())
        return globals()[name]
    raise AttributeError(f"module 'lopd_train.algorithms' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def algorithms_help() -> str:
    """One line per algorithm: what its teacher sees (``lopd-train --help``)."""
    algorithms = __getattr__("ALGORITHMS")
    width = max(len(n) for n in algorithms)
    return "\n".join(f"  {n:<{width}}  {a.teacher_sees}" for n, a in algorithms.items())
