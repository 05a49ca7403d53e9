"""A two-tool toy env used to test the core contract without benchmark data."""

from __future__ import annotations

from lopd_envs.actions import AssistantTurn
from lopd_envs.core import AgentEnv, Episode, Reaction, Score, Task, error_message
from lopd_envs.tasks import select

TOOLS = [
    {"name": "math.add", "description": "Add two integers.",
     "parameters": {"type": "dict", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                    "required": ["a", "b"]}},
    {"name": "finish", "description": "Report the answer.",
     "parameters": {"type": "dict", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}},
]


class ToyEpisode(Episode):
    def __init__(self, env, task):
        super().__init__(env, task)
        self.answer = None

    def opening(self):
        return [{"role": "system", "content": "Use the tools."}, {"role": "user", "content": self.task.instruction}]

    def act(self, turn: AssistantTurn) -> Reaction:
        if turn.parse_error:
            return Reaction([error_message(turn.parse_error)], error=turn.parse_error)
        if not turn.tool_calls:
            return Reaction([], done=True)
        names = self.env.tool_names(self.task)
        obs, results, failed = [], [], []
        for call in turn.tool_calls:
            name = names.resolve(call.name)
            args = call.arguments
            bad = False
            if name == "math.add" and isinstance(args.get("a"), int) and isinstance(args.get("b"), int):
                out = str(args["a"] + args["b"])
            elif name == "finish" and isinstance(args.get("answer"), int):
                self.answer = args["answer"]
                out = "recorded"
            else:
                out, bad = f"Error: bad call {call.name}", True
            failed.append(bad)
            obs.append({"role": "tool", "name": call.name, "content": out})
            results.append(out)
        return Reaction(obs, done=self.answer is not None, results=results, errors=failed)

    def score(self) -> Score:
        ok = self.answer == self.task.data
        return Score(float(ok), {"valid": ok, "expected": self.task.data, "got": self.answer})


class ToyEnv(AgentEnv):
    env_id = "lopd-test/Toy-v0"
    default_max_turns = 4

    def new_episode(self, task):
        return ToyEpisode(self, task)

    def load_tasks(self, category, data_dir):
        cats = select(category, ["easy", "hard"])
        for c in cats:
            for i in range(5):
                a, b = (i, i + 1) if c == "easy" else (i * 100, i * 37)
                yield Task(f"{c}_{i}", c, f"Add {a} and {b}, then finish with the sum.", TOOLS, a + b)
