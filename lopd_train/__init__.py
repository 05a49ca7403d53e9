"""lopd_train: Latent On-Policy Self-Distillation (LOPD) and its baselines for lopd envs.

    lopd-train --env lopd/BFCLv3-v0 --category simple --model smollm2-135m-instruct --algo lopd

What users import from Python, and only this (the rest are implementation modules that may move):

* training: :class:`TrainConfig` (every ``lopd-train`` option, typed) and :func:`train`;
* evaluation: :class:`EvalConfig` (every ``lopd-eval`` option) and :func:`run_eval`;
* the algorithms by name: :data:`ALGORITHMS`.

The names are loaded on first use (PEP 562), so ``import lopd_train`` stays cheap: torch and transformers come
in with the trainer, not with the package.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

#: public name -> the module that defines it
_EXPORTS = {"TrainConfig": "lopd_train.config", "train": "lopd_train.training.trainer",
            "EvalConfig": "lopd_train.evaluation", "run_eval": "lopd_train.evaluation",
            "ALGORITHMS": "lopd_train.algorithms"}

__all__ = sorted(_EXPORTS)
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'lopd_train' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
