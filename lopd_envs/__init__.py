"""lopd_envs: Gymnasium environments for LLM agents on public tool-use and code benchmarks.

    import gymnasium as gym, lopd_envs
    gym.register_envs(lopd_envs)
    env = gym.make("lopd/BFCLv3-v0", category="simple")
"""

from lopd_envs.core import AgentEnv, Episode, Reaction
from lopd_envs.tasks import Score, Task
from lopd_envs.registration import ENV_ENTRY_POINTS, register_all
from lopd_envs.trace import Trace, TraceStep

register_all()

__all__ = ["AgentEnv", "Episode", "Reaction", "Score", "Task", "Trace", "TraceStep", "ENV_ENTRY_POINTS"]
__version__ = "0.1.0"
