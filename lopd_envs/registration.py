"""The gymnasium ids of lopd. Gymnasium 1.x does not load plugins from entry points, so importing
``lopd_envs`` registers them (``gym.register_envs(lopd_envs)`` makes that import explicit), and
``gym.make("lopd_envs:lopd/<Name>-v0")`` imports it on demand."""

from __future__ import annotations

import gymnasium as gym

# id -> "module:Class"; the module is imported only when the env is made.
ENV_ENTRY_POINTS: dict[str, str] = {
    "lopd/BFCLv3-v0": "lopd_envs.suites.bfcl:BFCLv3Env",
    "lopd/ACEBench-v0": "lopd_envs.suites.acebench:ACEBenchEnv",
    "lopd/EnvScaler-v0": "lopd_envs.suites.envscaler:EnvScalerEnv",
    "lopd/HumanEvalPlus-v0": "lopd_envs.suites.evalplus:HumanEvalPlusEnv",
    "lopd/MBPPPlus-v0": "lopd_envs.suites.evalplus:MBPPPlusEnv",
    "lopd/LiveCodeBench-v0": "lopd_envs.suites.livecodebench:LiveCodeBenchEnv",
}


def register_all() -> None:
    for env_id, entry_point in ENV_ENTRY_POINTS.items():
        if env_id not in gym.registry:
            # No TimeLimit wrapper: turn limits are part of each benchmark's rules (max_turns=).
            gym.register(id=env_id, entry_point=entry_point, disable_env_checker=True,
                         order_enforce=True)
