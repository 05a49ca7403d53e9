"""A coin-flip env for trainer tests: two turns, a tool result in between, and an outcome that a random
policy reaches about half of the time (so the experience bank fills). ``gym.make("tests.coin_env:lopd-test/Coin-v0")``."""

from __future__ import annotations

import gymnasium as gym

from lopd_envs.actions import AssistantTurn
from lopd_envs.core import AgentEnv, Episode, Reaction, Score, Task
from lopd_envs.tasks import select

TOOLS = [{"name": "note", "description": "Write a note.",
          "parameters": {"type": "dict", "properties": {"text": {"type": "string"}}, "required": ["text"]}}]


class CoinEpisode(Episode):
    def __init__(self, env, task):
        super().__init__(env, task)
        self.lengths: list[int] = []

    def opening(self):
        return [{"role": "system", "content": "You are a test agent."},
                {"role": "user", "content": self.task.instruction}]

    def act(self, turn: AssistantTurn) -> Reaction:
        self.lengths.append(len(turn.text))
        if len(self.lengths) >= 2:
            return Reaction([], done=True)
        return Reaction([{"role": "tool", "name": "note", "content": f"noted {len(turn.text)} chars"}])

    def score(self) -> Score:
        ok = sum(self.lengths) % 2 == 0
        return Score(float(ok), {"lengths": self.lengths})


class CoinEnv(AgentEnv):
    env_id = "lopd-test/Coin-v0"
    default_max_turns = 2

    def new_episode(self, task):
        return CoinEpisode(self, task)

    def reference_answer(self, task):
        """A fixed reference per task (tests of teachers that read one); none for the ``tails`` tasks."""
        return f"Reference note for {task.task_id}." if task.category == "heads" else None

    def load_tasks(self, category, data_dir):
        for c in select(category, ["heads", "tails"]):
            for i in range(4):
                yield Task(f"{c}_{i}", c, f"Write a short note number {i} about {c}.", TOOLS, None)


if "lopd-test/Coin-v0" not in gym.registry:
    gym.register(id="lopd-test/Coin-v0", entry_point=CoinEnv, disable_env_checker=True)
