"""HumanEval+ (``lopd/HumanEvalPlus-v0``) for verifiers: README.md says how to install, run and call it."""

from __future__ import annotations

# lopd is a prerequisite, not a dependency (pyproject.toml): install it first (lopd's README, "Use from verifiers")
from lopd_train.integrations.verifiers_package import load_benchmark, v1_classes

LOPD_ENV = "lopd/HumanEvalPlus-v0"
__all__ = ["LOPD_ENV", "LopdHumanevalplusEnv", "LopdHumanevalplusTaskset", "LopdHumanevalplusTasksetConfig", "load_environment"]


def load_environment(**arguments):
    return load_benchmark(__name__, LOPD_ENV, **arguments)


# verifiers.v1's taskset and env (vf-eval lopd-humanevalplus under verifiers 0.4): None where there is no verifiers.v1
LopdHumanevalplusTasksetConfig, LopdHumanevalplusTaskset, LopdHumanevalplusEnv = v1_classes(LOPD_ENV, "LopdHumanevalplus")
