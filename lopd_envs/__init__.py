"""lopd_envs: Gymnasium environments for LLM agents on public tool-use and code benchmarks.

    import gymnasium as gym, lopd_envs
    gym.register_envs(lopd_envs)
    env = gym.make("lopd/BFCLv3-v0", category="simple")

What users import, and only this (everything else is an implementation module that may move):

* the env contract, to write a benchmark env: :class:`AgentEnv`, :class:`Episode`, :class:`Reaction`,
  :class:`Task`, :class:`Score`, and one turn's data, :class:`AssistantTurn` and :class:`ToolCall`;
* the action-result trace every episode emits (``info["trace"]``): :class:`Trace`, :class:`TraceStep`;
* an agent loop for frameworks that bring their own model: :func:`run_episode`, :func:`run_episodes`,
  :func:`arun_episode`, :func:`arun_episodes`, and from the wire format (:mod:`lopd_envs.wire`) :func:`openai_tools`;
* :data:`ENV_ENTRY_POINTS`, the registered ids (registered on import).

docs/design.md describes the layers these sit on.
"""

from lopd_envs.actions import AssistantTurn, Reaction, ToolCall
from lopd_envs.core import AgentEnv, Episode
from lopd_envs.loop import arun_episode, arun_episodes, run_episode, run_episodes
from lopd_envs.registration import ENV_ENTRY_POINTS, register_all
from lopd_envs.tasks import Score, Task
from lopd_envs.trace import Trace, TraceStep
from lopd_envs.wire import openai_tools

register_all()

__all__ = [
           "ENV_ENTRY_POINTS",
           "AgentEnv",
           "AssistantTurn",
           "Episode",
           "Reaction",
           "Score",
           "Task",
           "ToolCall",
           "Trace",
           "TraceStep",
           "arun_episode",
           "arun_episodes",
           "openai_tools",
           "run_episode",
           "run_episodes",
]
__version__ = "0.1.0"
