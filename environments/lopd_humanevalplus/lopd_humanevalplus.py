"""HumanEval+ (evalplus) from lopd (``lopd/HumanEvalPlus-v0``) as a verifiers environment (verifiers' Environments
Hub layout: ``vf-install lopd-humanevalplus -p environments`` from lopd's checkout): the real lopd env (its prompts,
parsing, simulators or sandbox, and official scoring) played by verifiers' own rollout loop, the env's outcome score
as the reward (``lopd_train.integrations.verifiers``)."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any

if importlib.util.find_spec("lopd_train") is None:  # a prerequisite (not on PyPI), not a dependency: pyproject.toml
    raise ModuleNotFoundError(
        "lopd-humanevalplus runs lopd's environments: install lopd into this environment first (from lopd's checkout: "
        "uv pip install -e . 'verifiers>=0.1.9,<0.4' --override <(echo 'protobuf>=6.31.1'))")

LOPD_ENV = "lopd/HumanEvalPlus-v0"


def load_environment(tasks: Sequence[str] | str | None = None, tool_mode: str = "native",
                     tool_syntax: str = "hermes", max_turns: int = -1, **env_kwargs: Any):
    """``lopd/HumanEvalPlus-v0`` as a ``vf.MultiTurnEnv``, one dataset row per task. ``tasks``: task ids to keep (a
    list or one comma-separated string); ``tool_mode``: ``"native"`` (the task's functions as tool definitions) or
    ``"text"`` (listed in the prompt, for servers without tool calling); ``tool_syntax``: the text protocol's call
    syntax; ``max_turns``: verifiers' turn limit (-1: the env's own rules); ``env_kwargs``: the env's own keywords
    (category="plus", sandbox settings, ...), checked strictly by the env."""
    from lopd_train.integrations.verifiers import benchmark_environment  # verifiers' classic API

    return benchmark_environment(__name__, LOPD_ENV, tasks=tasks, tool_mode=tool_mode, tool_syntax=tool_syntax,
                                 max_turns=max_turns, **env_kwargs)


__all__ = ["LOPD_ENV", "load_environment"]

if importlib.util.find_spec("verifiers.v1") is not None:  # verifiers.v1 (0.4; 0.3 ships it too): vf-eval lopd-humanevalplus
    from lopd_train.integrations.verifiers_v1 import benchmark_classes

    LopdHumanevalplusTasksetConfig, LopdHumanevalplusTaskset, LopdHumanevalplusEnv = benchmark_classes(LOPD_ENV, "LopdHumanevalplus")
    __all__ += ["LopdHumanevalplusEnv", "LopdHumanevalplusTaskset", "LopdHumanevalplusTasksetConfig"]
