"""What every benchmark package (``environments/lopd_<name>/``, verifiers' Environments Hub layout) holds but
its lopd id, so that each package is only that id and the names verifiers looks for. Importable whichever
verifiers is installed: each API's adapter is imported only where that API exists (verifiers 0.4 has no
classic API, 0.1.x and 0.2.x no ``verifiers.v1``)."""

from __future__ import annotations

import importlib.util
from typing import Any


def load_benchmark(module: str, lopd_env: str, **arguments: Any) -> Any:
    """A package's classic ``load_environment``: ``lopd_env`` as a ``vf.MultiTurnEnv`` recorded as made by the
    package ``module`` (:func:`lopd_train.integrations.verifiers.benchmark_environment`); ``arguments``: those
    of :func:`lopd_train.integrations.verifiers.load_environment` but ``env``."""
    from lopd_train.integrations.verifiers import benchmark_environment

    return benchmark_environment(module, lopd_env, **arguments)


def v1_classes(lopd_env: str, prefix: str) -> tuple[type | None, type | None, type | None]:
    """A package's ``verifiers.v1`` taskset config, taskset and env for ``lopd_env``
    (:func:`lopd_train.integrations.verifiers_v1.benchmark_classes`), or three ``None`` where verifiers has no
    ``verifiers.v1`` (what verifiers 0.4 loads ignores them: only classes count)."""
    if importlib.util.find_spec("verifiers.v1") is None:
        return None, None, None
    from lopd_train.integrations.verifiers_v1 import benchmark_classes

    return benchmark_classes(lopd_env, prefix)
