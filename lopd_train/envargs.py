"""The ``gym.make`` arguments of an env, assembled in one place for ``lopd-train``, ``lopd bank build``, the
held-out evaluation and ``lopd-eval``, so that the same settings build the same env whichever command reads
them."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any


def gym_kwargs(env_id: str, table: Mapping[str, Any] | None = None, *, category: Sequence[str] = (),
               data_dir: str | None = None, max_turns: int | None = None, language: str | None = None,
               over: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``table``'s arguments for every env, then those it holds under ``env_id`` (``{"lopd/EnvScaler-v0":
    {"source": "ours"}}``: a key that is a registered env id is that env's own); then, where the table does not
    set them, ``category`` (one name, or the list), ``data_dir``, ``max_turns`` and ``language`` (only where
    the env takes one: envs refuse arguments they do not take); last ``over`` (the held-out env's arguments
    over the training env's) on top of all."""
    import gymnasium as gym

    import lopd_envs

    gym.register_envs(lopd_envs)
    table = dict(table or {})
    kwargs = {k: v for k, v in table.items() if k not in gym.registry}
    if env_id in gym.registry:
        kwargs.update(table.get(env_id) or {})
    cats = list(category)
    if cats:
        kwargs.setdefault("category", cats[0] if len(cats) == 1 else cats)
    if data_dir:
        kwargs.setdefault("data_dir", data_dir)
    if max_turns:
        kwargs.setdefault("max_turns", max_turns)
    if language and takes(env_id, "language"):
        kwargs.setdefault("language", language)
    kwargs.update(over or {})
    return kwargs


def takes(env_id: str, name: str) -> bool:
    """Whether the env's constructor has the keyword argument ``name``."""
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    entry = gym.spec(env_id).entry_point
    if entry is None:  # gymnasium allows registering one; gym.make then refuses it too
        raise ValueError(f"{env_id} is registered without an entry point")
    creator = load_env_creator(entry) if isinstance(entry, str) else entry
    return name in inspect.signature(creator).parameters
