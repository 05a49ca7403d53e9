"""The code suites' env base and one-answer episode: what HumanEval+/MBPP+ and LiveCodeBench share.

:class:`CodeEnv` owns the sandbox choice (a backend name, an instance, or ``None`` for the best available
one) and creates the sandbox on first use, so an env that is only listed or inspected never starts one.
"""

from __future__ import annotations

from typing import Any, Sequence

from lopd_envs.core import AgentEnv, Episode, Reaction, Score, Task
from lopd_envs.sandbox import Sandbox, get_sandbox
from lopd_envs.tools import AssistantTurn


class CodeEnv(AgentEnv):
    """Base of the code suites: one answer per episode (``max_turns=1``), judged in ``sandbox``.

    ``sandbox=``: a backend name (``"bubblewrap"``, ``"docker"``, ``"process"``), a :class:`Sandbox`
    instance (shared between envs, e.g. a pool), or ``None`` for the best isolating backend available.
    """

    default_max_turns = 1

    def __init__(self, category: str | Sequence[str] = "all", *, sandbox: str | Sandbox | None = None,
                 **options: Any):
        self._sandbox_choice = sandbox
        super().__init__(category=category, **options)

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox that runs candidates, created from the choice on first use."""
        if not isinstance(self._sandbox_choice, Sandbox):
            self._sandbox_choice = get_sandbox(self._sandbox_choice)
        return self._sandbox_choice


class CodeAnswerEpisode(Episode):
    """One problem, one answer: the first action's code is judged in the sandbox and the episode ends.
    Subclasses say how an answer is judged (:meth:`judge`) and which system prompt opens the dialogue."""

    system_prompt: str = ""

    def __init__(self, env: Any, task: Task):
        super().__init__(env, task)
        self.details: dict[str, Any] | None = None

    def opening(self) -> list[dict[str, Any]]:
        return [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": self.task.instruction}]

    def judge(self, text: str) -> tuple[dict[str, Any], str]:
        """The scorer's details for the answer ``text`` and a one-line summary for the agent."""
        raise NotImplementedError

    def act(self, turn: AssistantTurn) -> Reaction:
        self.details, summary = self.judge(turn.text if isinstance(turn.text, str) else "")
        error = self.details.get("error")
        return Reaction([{"role": "user", "content": f"[evaluation] {summary}"}], done=True, results=[summary],
                        errors=[error is not None], error=error)

    def score(self) -> Score:
        details = self.details or {"passed": False, "error_message": "no answer"}
        return Score(1.0 if details.get("passed") else 0.0, details)
