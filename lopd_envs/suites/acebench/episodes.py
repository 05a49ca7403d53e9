"""One ACEBench task being played: single-turn rows (normal, special) and the two agent loops.

The agent loops follow the official scenes (``multi_step_scene``/``multi_turn_scene`` with their
``inference`` loops): a shared message counter of at most ``max_dialog_turns`` (40) messages, an
agent, an execution role and, for ``agent_multi_turn``, a simulated user; any message after the
second that contains ``"finish conversation"`` ends the episode. The official prompt re-sends the
whole history as text each turn; here the opening observation is exactly that first prompt and later
observations are the new messages: tool results (``name`` is the function, or ``"execution"`` for the
execution role's own replies: a message it could not decode, the multi-turn error text) and user replies. :meth:`AgentEpisode.official_prompt`
renders the official text at any point (in ``agent_multi_step`` that text never shows the agent its own
earlier messages, only the execution results, as upstream).
"""

from __future__ import annotations

import json
from typing import Any

from lopd_envs.actions import AssistantTurn, ToolCall
from lopd_envs.core import Episode, Reaction, Score, error_message
from lopd_envs.suites.acebench import prompts
from lopd_envs.suites.acebench.agent_score import end_to_end, process_accuracy
from lopd_envs.suites.acebench.data import Row
from lopd_envs.suites.acebench.decode import DecodeError, decode_agent_message
from lopd_envs.suites.acebench.executor import MULTI_TURN_ERROR, Batch, Executor
from lopd_envs.suites.acebench.normal import score_normal
from lopd_envs.suites.acebench.special import score_special
from lopd_envs.suites.acebench.users import InstructionUser
from lopd_envs.suites.acebench.verdict import Verdict
from lopd_envs.tools import ToolNames, render_python_calls
from lopd_envs.trace import compact

FINISH = prompts.FINISH
ASK_NOTHING = "Please do not ask me any questions, use the known conditions to solve the problem"


def call_like(text: str) -> bool:
    r"""Whether some line of ``text`` holds a ``[`` with a ``]`` after it: what the official ``\[.*\]``
    search asks, decided in one pass (that regex backtracks quadratically on a line of many ``[``)."""
    for line in text.split("\n"):
        opened = line.find("[")
        if opened >= 0 and line.find("]", opened + 1) >= 0:
            return True
    return False


def answer_text(turn: AssistantTurn, names: ToolNames | None = None) -> str:
    """The text ACEBench scores: the model's own text, or structured calls written as ``[f(a=1)]`` under
    their dataset names (a structured call may use the sanitised name the tool schema offered)."""
    if turn.syntax == "structured" and turn.tool_calls:
        calls = [ToolCall(names.resolve(c.name) if names else c.name, c.arguments) for c in turn.tool_calls]
        return render_python_calls(calls)
    return turn.text


def _content(result: Any) -> str:
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)


class SingleTurnEpisode(Episode):
    """A normal or special row: the first answer is scored and ends the episode."""

    def __init__(self, env: Any, task: Any):
        super().__init__(env, task)
        self.verdict: Verdict | None = None
        self.answer = ""

    @property
    def row(self) -> Row:
        return self.task.data

    def opening(self) -> list[dict[str, Any]]:
        return prompts.single_turn_messages(self.row.question, self.task.category, self.row.language)

    def act(self, turn: AssistantTurn) -> Reaction:
        text = answer_text(turn, self.env.tool_names(self.task))
        category, mode = self.task.category, self.env.scoring
        if category.startswith("special"):
            self.verdict = score_special(text, self.row.gold, category, mode)
        else:
            self.verdict = score_normal(text, self.row.question["function"], self.row.gold, mode)
        self.answer = text
        return Reaction([], done=True)

    def score(self) -> Score:
        if self.verdict is None:
            return Score(0.0, {"valid": False, "error": "no answer", "scoring": self.env.scoring})
        details = {**self.verdict.to_dict(), "answer": self.answer, "scoring": self.env.scoring}
        details.pop("calls", None)
        if self.task.category.startswith("normal_multi_turn"):
            details["conversation"] = self.task.task_id.rsplit("_", 1)[0]  # official accuracy is per conversation
        return Score(float(self.verdict.valid), details)


class AgentEpisode(Episode):
    """What both agent loops share: the executor, the message counter, milestones and the score."""

    def __init__(self, env: Any, task: Any):
        super().__init__(env, task)
        question = self.row.question
        self.executor = Executor(question["involved_classes"], question["initial_config"], self.row.language,
                                 stop_on_error=task.category == "agent_multi_turn")
        self.index = 0
        self.limit = int(getattr(env, "max_dialog_turns", 40))
        self.milestones: list[str] = []  # agent messages that reached the execution role
        self.history: list[tuple[str, Any]] = []  # (sender, message) as the official scene keeps them

    @property
    def row(self) -> Row:
        return self.task.data

    def official_prompt(self) -> tuple[str, str]:
        """The (system, user) prompt ACEBench's agent would receive now."""
        q = self.row.question
        # the official multi-step scene adds a message to the prompt text only when the agent is next to
        # speak, i.e. only the user's question and execution results: the agent never sees its own calls
        shown = [(s, m) for s, m in self.history if not (self.task.category == "agent_multi_step" and s == "agent")]
        history = "".join(prompts.history_line(s, m, self.task.category) for s, m in shown)
        return (prompts.agent_system_prompt(self.task.category, q["involved_classes"], self.row.language),
                prompts.agent_user_prompt(self.task.category, q["function"], history, self.row.language))

    def opening(self) -> list[dict[str, Any]]:
        system, user = self.official_prompt()
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def _tick(self, sender: str, message: Any) -> bool:
        """Append a message to the history, advance the counter; True when the episode is over."""
        self.history.append((sender, message))
        finished = self.index > 1 and FINISH in message
        self.index += 1
        return finished or self.index >= self.limit

    def _execute(self, text: str, calls: list) -> tuple[list[dict[str, Any]], list[str], list[bool], bool]:
        """Run a message's calls: the observation, one result and failure flag per call, and whether the
        episode is over."""
        self.milestones.append(text)
        batch: Batch = self.executor.execute(calls)
        done = self._tick("execution", list(batch.results[0]) if batch.error and not batch.recorded else batch.results)
        if not batch.recorded:
            observation = [{"role": "tool", "name": "execution", "content": batch.results[0]}]
            return observation, [batch.results[0]] * len(calls), [True] * len(calls), done
        names = [next(iter(c)) for c in calls]
        observation = [{"role": "tool", "name": n, "content": _content(r)} for n, r in zip(names, batch.results)]
        if not observation:
            observation = [{"role": "tool", "name": "execution", "content": "[]"}]
        return observation, [compact(_content(r)) for r in batch.results], list(batch.failed), done

    def score(self) -> Score:
        mode = self.env.scoring
        state = self.executor.state()
        verdict = end_to_end(state, self.row.gold, mode)
        process = process_accuracy(self.milestones, self.row.milestones, verdict.valid)
        details = {**verdict.to_dict(), "end_to_end": verdict.valid, "process_accuracy": process,
                   "state": state, "milestones": list(self.milestones), "messages": self.index, "scoring": mode}
        return Score(float(verdict.valid), details)

    @staticmethod
    def _per_call(turn: AssistantTurn, results: list[str], failed: list[bool]) -> dict[str, Any]:
        """``results``/``errors`` for the reaction when they pair with the action's tool calls."""
        return {"results": results, "errors": failed} if len(results) == len(turn.tool_calls) else {}


class MultiStepEpisode(AgentEpisode):
    """``agent_multi_step``: no user; every agent message goes to the execution role."""

    def __init__(self, env: Any, task: Any):
        super().__init__(env, task)
        self.history.append(("user", self.row.question["question"]))

    def act(self, turn: AssistantTurn) -> Reaction:
        text = answer_text(turn, self.env.tool_names(self.task))
        if self._tick("agent", text):
            return Reaction([], done=True)
        try:
            calls = decode_agent_message(text, non_calls="error")
        except DecodeError:
            self.milestones.append(text)
            done = self._tick("execution", ASK_NOTHING)
            return Reaction([{"role": "tool", "name": "execution", "content": ASK_NOTHING}], done=done)
        observation, results, failed, done = self._execute(text, calls)
        return Reaction(observation, done=done, **self._per_call(turn, results, failed))


class MultiTurnEpisode(AgentEpisode):
    """``agent_multi_turn``: a message that holds a decodable ``[...]`` goes to execution, anything else
    to the simulated user, whose reply comes back as a user message."""

    def __init__(self, env: Any, task: Any):
        super().__init__(env, task)
        q = self.row.question
        self.user = getattr(env, "user", None) or InstructionUser()
        self.conversation = [
            {"role": "system", "content": prompts.user_simulator_system(q["question"], q["involved_classes"], self.row.language)},
            {"role": "user", "content": prompts.user_simulator_opener(self.row.language)},
        ]
        first = str(self.user(list(self.conversation)))
        self.conversation.append({"role": "assistant", "content": first})
        self.history.append(("user", first))

    @staticmethod
    def _for_execution(text: str) -> list | None:
        if not call_like(text):
            return None
        try:
            decode_agent_message(text, non_calls="error")
        except DecodeError:
            return None
        return decode_agent_message(text, non_calls="skip")

    def act(self, turn: AssistantTurn) -> Reaction:
        text = answer_text(turn, self.env.tool_names(self.task))
        calls = self._for_execution(text)
        if self._tick("agent", text):
            return Reaction([], done=True)
        if calls is not None:
            observation, results, failed, done = self._execute(text, calls)
            return Reaction(observation, done=done, **self._per_call(turn, results, failed))
        spoken = text[5:] if text.startswith("user:") else text.removeprefix("agent:")
        self.conversation.append({"role": "user", "content": spoken})
        try:
            reply = str(self.user(list(self.conversation)))
        except Exception as exc:  # noqa: BLE001 - a failing simulator ends the episode; it is scored as it stands
            return Reaction([error_message(f"user simulator failed: {type(exc).__name__}: {exc}")], done=True,
                            error=f"user simulator: {exc!r}")
        self.conversation.append({"role": "assistant", "content": reply})
        done = self._tick("user", reply)
        return Reaction([{"role": "user", "content": reply}], done=done)


def episode_for(env: Any, task: Any) -> Episode:
    """The episode class a task's category needs."""
    if task.category == "agent_multi_step":
        return MultiStepEpisode(env, task)
    if task.category == "agent_multi_turn":
        return MultiTurnEpisode(env, task)
    return SingleTurnEpisode(env, task)


__all__ = ["MULTI_TURN_ERROR", "MultiStepEpisode", "MultiTurnEpisode", "SingleTurnEpisode", "answer_text", "episode_for"]
