"""One EnvScaler scenario being played: its environment instance lives in one sandboxed worker throughout.

Flow (``EnvScalerBaseEnv.step`` and the runner's agent loop): a tool call is a method call whose
observation is the result's string form; an unknown name is "Error: Invalid action"; a parse failure an
error observation; none of these ends the episode. A message to the user ends a non-conversational
episode (graded at once) and, in a conversational one, goes to the simulated user, whose ``###STOP###``
ends and grades it. In ``official`` mode a method that raises ends the episode ungraded (reward 0.0, as
upstream, where ``calculate_reward`` is never reached) and reaching the step limit scores 0.0 (the
runner stops without a reward); ``strict`` mode shows the exception and goes on, and grades a truncated
episode. A worker that hangs, crashes or breaks its reply budget ends the episode in both modes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from lopd_envs.actions import AssistantTurn
from lopd_envs.core import AgentEnv, Episode, Reaction
from lopd_envs.suites.acebench.users import UserSimulator
from lopd_envs.suites.envscaler import prompts, scoring
from lopd_envs.suites.envscaler.actions import Action, read_action
from lopd_envs.suites.envscaler.data import Environment, Scenario
from lopd_envs.suites.envscaler.isolation import EnvWorker
from lopd_envs.suites.envscaler.users import make_user, opening_conversation, parse_reply
from lopd_envs.tasks import Score, Task
from lopd_envs.trace import compact

log = logging.getLogger(__name__)
NOT_RUN = "not executed: EnvScaler's runner executes only the first tool call of an action"


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _check_items(sc: Scenario) -> list[str]:
    items = sc.raw.get("checklist_with_func") or []
    return [str(i.get("check_item", "")) for i in items] if len(items) == len(sc.check_funcs) else [""] * len(sc.check_funcs)


class ScenarioHost(AgentEnv):
    """What an episode asks of its env, declared here because ``EnvScalerEnv`` (env.py) imports this module and
    the import graph has no circles: the scoring mode, the user simulator and a fresh worker."""

    scoring: str
    user: UserSimulator | Sequence[str] | None

    def start_worker(self) -> EnvWorker:
        raise NotImplementedError


class EnvScalerEpisode(Episode):
    env: ScenarioHost

    def __init__(self, env: ScenarioHost, task: Task):
        super().__init__(env, task)
        self.scenario: Scenario = task.data["scenario"]
        self.environment: Environment = task.data["environment"]
        self.conversational: bool = task.data["conversational"]
        self.strict = env.scoring == "strict"
        self.ending: str | None = None  # why the episode ended: answered | user_stop | exception | worker | setup
        self.detail: str | None = None
        self.worker: EnvWorker | None = None
        self.conversation: list[dict[str, str]] = []

    # -- opening ---------------------------------------------------------------------------------------
    def opening(self) -> list[dict[str, Any]]:
        intro = prompts.environment_introduction(self.environment.introduction, self.environment.rules)
        system = {"role": "system", "content": prompts.agent_system(self.conversational, intro, self.environment.tools)}
        self.worker = worker = self.env.start_worker()
        problem = worker.create(self.environment.class_code, self.scenario.class_name or self.environment.class_name,
                                     self.scenario.init_config)
        if problem is not None:
            self.ending, self.detail = "setup", problem
            log.warning("%s: environment setup failed for %s: %s", self.env.env_id, self.task.task_id, problem[:300])
        if not self.conversational:
            return [system, _user(self.scenario.task)]
        self.user = make_user(self.env.user, self.scenario.task)
        self.conversation = opening_conversation(self.scenario.task)
        first = self._ask_user()
        return [system, _user(first if first is not None else "")]

    def _ask_user(self) -> str | None:
        try:
            raw = str(self.user(list(self.conversation)))
        except Exception as exc:  # noqa: BLE001 - a failing simulator ends the episode; it is scored as it stands
            self.ending, self.detail = "user_failed", f"{type(exc).__name__}: {exc}"
            return None
        self.conversation.append({"role": "assistant", "content": raw})
        return parse_reply(raw)

    # -- acting ----------------------------------------------------------------------------------------
    def act(self, turn: AssistantTurn) -> Reaction:
        if self.ending is not None:
            return Reaction([_user(f"Error: the environment is unavailable ({self.detail})")], done=True,
                            error=f"environment unavailable: {self.ending}")
        action = read_action(turn, self.strict)
        if action.error is not None:
            return self._error_reaction(turn, action.error)
        if action.final:  # official: a chat_with_user without a string content ends and grades the episode
            self.ending = "answered"
            return self._paired(Reaction([_user("Task finished")], done=True), turn, "(ends the episode)")
        if action.message is not None:
            return self._say(action.message, turn)
        return self._run_calls(turn, action)

    @staticmethod
    def _paired(reaction: Reaction, turn: AssistantTurn, result: str) -> Reaction:
        """``reaction`` with one trace result per call lopd's parser read from the turn."""
        n = len(turn.tool_calls)
        if n:
            reaction.results, reaction.errors = [result] * n, [False] * n
        return reaction

    def _error_reaction(self, turn: AssistantTurn, text: str) -> Reaction:
        n = len(turn.tool_calls)
        return Reaction([_user(text)], error=text, results=[text] * n if n else None, errors=[True] * n if n else None)

    def _say(self, message: str, turn: AssistantTurn) -> Reaction:
        paired = {"results": ["(message to the user)"] * len(turn.tool_calls), "errors": [False] * len(turn.tool_calls)} \
            if turn.tool_calls else {}
        if not self.conversational:
            self.ending = "answered"
            return Reaction([_user("Task finished")], done=True, **paired)
        self.conversation.append({"role": "user", "content": prompts.AGENT_PREFIX + message})
        reply = self._ask_user()
        if reply is None:
            return Reaction([_user(f"Error: user simulator failed: {self.detail}")], done=True,
                            error=f"user simulator: {self.detail}", **paired)
        done = prompts.STOP in reply
        if done:
            self.ending = "user_stop"
        return Reaction([_user(reply)], done=done, **paired)

    def _run_calls(self, turn: AssistantTurn, action: Action) -> Reaction:
        observation: list[dict[str, Any]] = []
        results, errors = [], []
        names = None if not self.strict else [t.get("function", t).get("name") for t in self.environment.tools]
        worker = self.worker
        assert worker is not None  # opening() started it
        for call in action.calls:
            outcome = worker.call(call.name, call.arguments, names)
            if outcome.status == "ok":
                observation.append({"role": "tool", "name": call.name, "content": outcome.text})
            elif outcome.status == "invalid":
                observation.append(_user(outcome.text))
            elif outcome.status == "exception" and self.strict:
                observation.append({"role": "tool", "name": call.name, "content": outcome.text})
            else:  # an official exception, or a dead worker: the episode ends here
                observation.append(_user(outcome.text))
                self.ending = "exception" if outcome.status == "exception" else "worker"
                self.detail = outcome.text if outcome.status == "exception" else worker.error
            results.append(compact(outcome.text))
            errors.append(outcome.status != "ok" or outcome.failed)
            if self.ending is not None:
                break
        n = len(turn.tool_calls)  # the trace pairs results with the calls lopd's parser read from the turn
        skipped = n - len(results)
        results += [NOT_RUN] * skipped
        errors += [True] * skipped
        results, errors = (results[:n], errors[:n]) if n else (None, None)
        done = self.ending is not None
        return Reaction(observation, done=done, results=results, errors=errors,
                        error=f"episode ended: {self.ending}" if done else None)

    # -- scoring ---------------------------------------------------------------------------------------
    def score(self) -> Score:
        try:
            return self._score()
        finally:
            self.close()

    def _score(self) -> Score:
        sc = self.scenario
        details: dict[str, Any] = {"scoring": self.env.scoring, "task_id": sc.task_id, "env_id": sc.env_id,
                                   "ending": self.ending or "truncated", "mode": self.task.category}
        if self.detail:
            details["error"] = self.detail[:2000]
        if not sc.graded:
            return Score(0.0, {**details, "graded": False, "note": "SFT scenarios have no check functions"})
        if self.ending in ("setup", "worker") or self.worker is None or not self.worker.alive:
            return Score(0.0, {**details, "graded": False, "valid": False})
        if not self.strict and self.ending in (None, "exception"):
            why = "the step limit was reached" if self.ending is None else "a tool raised an exception"
            return Score(0.0, {**details, "graded": False, "note": f"official runner gives no reward when {why}"})
        if self.strict:  # the checks also run against the initial state, to know which held at reset
            final, at_reset = self.worker.check(sc.check_funcs, ("final", "initial"))
        else:
            final, at_reset = self.worker.check(sc.check_funcs, ("final",), shared=True)[0], None
        passed = [v.passed for v in final]
        reward = scoring.official_reward(passed)
        details.update(graded=True, passed=sum(passed), total=len(passed), official_reward=reward,
                       checks=[{"check_item": item, "passed": v.passed, "error": v.error}
                               for item, v in zip(_check_items(sc), final)])
        if at_reset is not None:
            details["true_at_reset"] = sum(r.passed for r in at_reset)
            for entry, r in zip(details["checks"], at_reset):
                entry["at_reset"] = r.passed
            over_false = scoring.reward_over_initially_false(passed, [r.passed for r in at_reset])
            details["reward_over_initially_false"] = over_false
            reward = over_false if over_false is not None else reward
        state = self.worker.snapshot()
        if state is not None:
            details["final_state"] = state
        return Score(reward, details)

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
