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
from lopd_train.envargs import gym_kwargs
from lopd_train.errors import RunSettingError
from lopd_train.rollout.engine import make_envs


def run_env_kwargs(cfg: TrainConfig, heldout: bool = False) -> dict[str, Any]:
    """The ``gym.make`` keyword arguments of the run's training env, or (``heldout``) of its held-out env:
    ``--eval-env-kwargs`` over the training env's."""
    return gym_kwargs(cfg.env, cfg.env_kwargs, category=cfg.category, data_dir=cfg.data_dir,
                      max_turns=cfg.max_turns, over=cfg.eval_env_kwargs if heldout else None)


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
