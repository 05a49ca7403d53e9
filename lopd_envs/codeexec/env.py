"""The code suites' env base and one-answer episode: what HumanEval+/MBPP+ and LiveCodeBench share.

:class:`CodeEnv` owns the sandbox choice (a backend name, an instance, or ``None`` for the best available
one) and creates the sandbox on first use, so an env that is only listed or inspected never starts one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lopd_envs.actions import AssistantTurn
from lopd_envs.core import AgentEnv, Episode, Reaction, Score, Task
from lopd_envs.sandbox import Sandbox, SandboxUnavailable, refusal, resolve_sandbox
from lopd_envs.trace import compact


class CodeEnv(AgentEnv):
    """Base of the code suites: one answer per episode (``max_turns=1``), judged in ``sandbox``.

    ``sandbox=``: a backend name (``"bubblewrap"``, ``"docker"``, ``"process"``), a :class:`Sandbox`
    instance (shared between envs, e.g. a pool), or ``None`` for the best isolating backend available.
    Without one, construction fails with :class:`SandboxUnavailable` saying how to install bubblewrap,
    reach Docker or opt in: model-written code never runs unisolated unless the user asked for it by
    name (``sandbox="process"``, ``LOPD_SANDBOX=process``) or with ``allow_unisolated=True``. The check
    (:func:`lopd_envs.sandbox.refusal`, the rules every suite shares) happens here, at ``make`` time, and
    only probes, so that ``step`` never raises for it and an env that is never stepped starts no sandbox.
    """

    default_max_turns = 1

    def __init__(self, category: str | Sequence[str] = "all", *, sandbox: str | Sandbox | None = None,
                 allow_unisolated: bool = False, **options: Any):
        self._sandbox_choice, self.allow_unisolated = sandbox, allow_unisolated
        why = refusal(sandbox, allow_unisolated)
        if why:
            raise SandboxUnavailable(why)
        super().__init__(category=category, **options)

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox that runs candidates, created from the choice on first use."""
        if not isinstance(self._sandbox_choice, Sandbox):
            self._sandbox_choice = resolve_sandbox(self._sandbox_choice, self.allow_unisolated)
        return self._sandbox_choice

    def close(self) -> None:
        """Also kill the warm spares of the sandbox this env ran code in: each holds a run folder in
        ``/dev/shm`` (and a uid slot, a cgroup) that would otherwise stay until the process exits. The
        sandbox stays usable (an env sharing it starts new spares on its next run)."""
        if isinstance(self._sandbox_choice, Sandbox):
            self._sandbox_choice.close()
        super().close()


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
        broken = self.details.get("sandbox_error")
        if broken:  # the sandbox failed, not the answer: say so, never a verdict on code that did not run
            self.details["passed"] = False
            summary = f"not scored: the sandbox failed ({compact(str(broken), 300)})"
            error = error or summary
        return Reaction([{"role": "user", "content": f"[evaluation] {summary}"}], done=True, results=[summary],
                        errors=[error is not None], error=error)

    def score(self) -> Score:
        details = self.details or {"passed": False, "error_message": "no answer"}
        return Score(1.0 if details.get("passed") else 0.0, details)
