"""The training run's env: its ``gym.make`` arguments from the run's settings, and a check that builds it once
before any model loads."""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np
import torch

from lopd_envs import provenance
from lopd_train.config import TrainConfig
from lopd_train.errors import RunSettingError
from lopd_train.rollout.engine import make_envs


def run_env_kwargs(cfg: TrainConfig) -> dict[str, Any]:
    """The ``gym.make`` keyword arguments of the run's training env."""
    kwargs = json.loads(cfg.env_kwargs) if isinstance(cfg.env_kwargs, str) else dict(cfg.env_kwargs)
    if cfg.category:
        cats = cfg.category.split(",")
        kwargs.setdefault("category", cats[0] if len(cats) == 1 else cats)
    if cfg.data_dir:
        kwargs.setdefault("data_dir", cfg.data_dir)
    if cfg.max_turns:
        kwargs.setdefault("max_turns", cfg.max_turns)
    return kwargs


def check_env(cfg: TrainConfig, kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """Build the run's env once before any model loads, so an unknown env id or keyword arguments the env
    refuses stop the run at once (not after the model has loaded); returns its data provenance. The random
    generators are left as they were: building an env here changes no number of the run."""
    import gymnasium

    saved = random.getstate(), np.random.get_state(), torch.get_rng_state()
    try:
        (env,) = make_envs(cfg.env, 1, **kwargs)
    except (gymnasium.error.Error, TypeError, ValueError, KeyError, FileNotFoundError) as exc:
        shown = f" with {json.dumps(kwargs, default=str)}" if kwargs else ""
        raise RunSettingError(f"--env {cfg.env}{shown}: {str(exc).strip().splitlines()[0] if str(exc) else type(exc).__name__}") from None
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])
        torch.set_rng_state(saved[2])
    try:
        return provenance.of(env) if getattr(env.unwrapped, "provenance", None) is not None else None
    finally:
        env.close()
