"""``lopd/BFCLv3-v0``: every BFCL-v3 category as a Gymnasium env.

Single-turn tasks take one action and end: the answer is decoded as the harness decodes it and scored by
:mod:`.single_turn`. Multi-turn tasks play the user turns of the entry: each action's calls run on the
simulated APIs and their results come back as tool messages; an action without calls (or that cannot be
decoded) ends the turn and the next user turn follows; more than 20 executing steps in a turn
force-terminate the episode, as in the harness; held-out functions (miss_func) are revealed on their
turn's otherwise empty user message, in the text and in that message's ``tools`` field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, cast

from lopd_envs.actions import AssistantTurn
from lopd_envs.assets import locate
from lopd_envs.core import AgentEnv, Episode, Reaction, Score, error_message
from lopd_envs.provenance import Provenance
from lopd_envs.suites.bfcl import data
from lopd_envs.suites.bfcl.decode import (
    DecodeError,
    decode_structured,
    decode_text,
    execution_strings,
    fc_execution_strings,
)
from lopd_envs.suites.bfcl.gold import as_text, keyword_call, single_turn_gold_calls
from lopd_envs.suites.bfcl.multi_turn import MultiTurnScorer
from lopd_envs.suites.bfcl.prompts import (
    additional_functions_message,
    few_shot_messages,
    opening_messages,
    prepare_docs,
)
from lopd_envs.suites.bfcl.single_turn import score_single_turn
from lopd_envs.tasks import Task, select
from lopd_envs.tools import ToolNames, openai_tool

MAX_STEPS_PER_TURN = 20  # the harness force-quits once a turn has executed more than this many steps
_FC_SYNTAXES = ("structured", "hermes", "json")


@dataclass(eq=False)
class BFCLItem:
    """Everything one task needs, shared (read-only) by all envs of the process."""

    entry: dict[str, Any]
    answer: Any
    category: str
    functions: list[dict[str, Any]]  # as in the data, for the checker (multi-turn: every involved function)
    shown: list[dict[str, Any]]  # as shown to the model at the start
    holdout: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    _cache: dict[Any, Any] = field(default_factory=dict)

    @property
    def language(self) -> str:
        return data.language_of(self.category)

    @property
    def names(self) -> ToolNames:
        if "names" not in self._cache:
            self._cache["names"] = ToolNames(f["name"] for f in self.functions)
        return self._cache["names"]

    def turn_messages(self, turn: int) -> list[dict[str, Any]]:
        if turn in self.holdout:
            return [additional_functions_message(self.holdout[turn])]
        return [dict(m) for m in self.entry["question"][turn]]

    def opening(self) -> list[dict[str, Any]]:
        if "opening" not in self._cache:
            self._cache["opening"] = opening_messages(self.turn_messages(0), self.shown)
        return self._cache["opening"]

    def schemas(self, docs_key: Any, docs: list[dict[str, Any]], sanitize: bool) -> list[dict[str, Any]]:
        key = ("schemas", docs_key, sanitize)
        if key not in self._cache:
            self._cache[key] = [openai_tool(f, sanitize=sanitize) for f in docs]
        return self._cache[key]


def _item(category: str, entry: dict[str, Any], answer: Any, data_dir: str | None) -> BFCLItem:
    if not data.is_multi_turn(category):
        return BFCLItem(entry, answer, category, entry["function"], prepare_docs(entry["function"], category))
    functions = [doc for cls in entry["involved_classes"] for doc in data.load_api_docs(cls, data_dir)]
    shown = list(functions)
    holdout: dict[int, list[dict[str, Any]]] = {}
    for turn, names in entry.get("missed_function", {}).items():
        for name in names:
            doc = next((d for d in shown if d["name"] == name), None)
            if doc is not None:
                shown.remove(doc)
                holdout.setdefault(int(turn), []).append(doc)
    return BFCLItem(entry, answer, category, functions, prepare_docs(shown, category),
                    {t: prepare_docs(docs, category) for t, docs in holdout.items()})


@lru_cache(maxsize=64)
def _category_tasks(category: str, data_dir: str | None, source: str) -> tuple[Task, ...]:
    """Tasks of one category, built once per process and data source (``source`` keys the cache)."""
    tasks = []
    for entry, answer in data.load_rows(category, data_dir):
        item = _item(category, entry, answer, data_dir)
        first_user = next((m["content"] for m in reversed(item.turn_messages(0)) if m["role"] == "user"), "")
        tasks.append(Task(entry["id"], category, first_user, item.shown, item))
    return tuple(tasks)


# ------------------------------------------------------------------------------ decoding an action


def is_fc(turn: AssistantTurn) -> bool:
    """Calls given as structured data (a message's ``tool_calls``, ``<tool_call>`` or JSON text) are read
    as an FC model's; everything else, ``[]`` included, with the prompting decoder."""
    return turn.syntax == "structured" or (turn.syntax in _FC_SYNTAXES and bool(turn.tool_calls))


def decode_action(turn: AssistantTurn, item: BFCLItem, strict: bool) -> tuple[Any, str | None]:
    """``(decoded, None)`` or ``(None, reason)``: structured and JSON calls as an FC model's, text with the
    harness's prompting decoder for the task's language. Names are mapped back to the dataset's spelling."""
    names = item.names
    if is_fc(turn):
        if turn.parse_error:
            return None, turn.parse_error
        return decode_structured([(names.resolve(c.name), c.arguments) for c in turn.tool_calls]), None
    try:
        decoded = decode_text(turn.text, item.language, strict)
    except DecodeError as exc:
        return None, str(exc)
    except (RecursionError, MemoryError) as exc:
        return None, f"answer too deeply nested ({type(exc).__name__})"
    if isinstance(decoded, list):
        decoded = [{names.resolve(k): v for k, v in call.items()} if isinstance(call, dict) else call
                   for call in decoded]
    return decoded, None


# ------------------------------------------------------------------------------ episodes


class SingleTurnEpisode(Episode):
    env: BFCLv3Env

    def __init__(self, env: BFCLv3Env, task: Task):
        super().__init__(env, task)
        self.item: BFCLItem = task.data
        self.decoded: Any = None
        self.decode_error: str | None = "no answer was given"

    def opening(self) -> list[dict[str, Any]]:
        if self.env.demonstrations:
            return few_shot_messages(self.item.opening(), self.item.functions, self.env.demonstrations)
        return self.item.opening()

    def act(self, turn: AssistantTurn) -> Reaction:
        self.decoded, self.decode_error = decode_action(turn, self.item, self.env.scoring == "strict")
        return Reaction([], done=True, error=turn.parse_error)

    def score(self) -> Score:
        item = self.item
        details = score_single_turn(self.decoded, self.decode_error, item.functions, item.answer,
                                    item.category, item.language)
        details.setdefault("error_type", None)
        details["decoded"] = self.decoded if self.decode_error is None else None
        return Score(1.0 if details["valid"] else 0.0, details)


class MultiTurnEpisode(Episode):
    env: BFCLv3Env

    def __init__(self, env: BFCLv3Env, task: Task):
        super().__init__(env, task)
        self.item: BFCLItem = task.data
        self.strict = env.scoring == "strict"
        self.scorer = MultiTurnScorer(self.item.entry, self.item.answer, env.data_dir, self.strict)
        self.turn = 0
        self.steps = 0
        self.force_quit = False

    def opening(self) -> list[dict[str, Any]]:
        return self.item.opening()

    def _calls(self, turn: AssistantTurn) -> tuple[list[str], list[str], str | None]:
        """Call strings and names of one action, or the reason there are none."""
        decoded, error = decode_action(turn, self.item, self.strict)
        if error is not None:
            return [], [], error
        try:
            if is_fc(turn):
                pairs = [next(iter(c.items())) for c in decoded]
                strings = fc_execution_strings(pairs)
            else:
                strings = execution_strings(decoded)
        except DecodeError as exc:
            return [], [], str(exc)
        return strings, [next(iter(c)) for c in decoded], None

    def act(self, turn: AssistantTurn) -> Reaction:
        strings, names, error = self._calls(turn)
        if strings:
            results, failed = self.scorer.execute(strings)
            self.steps += 1
            observation = [{"role": "tool", "name": n, "content": r} for n, r in zip(names, results)]
            if self.steps > MAX_STEPS_PER_TURN:
                self.force_quit = True
                self.scorer.end_turn()
                return Reaction(observation, done=True, results=results, errors=failed,
                                error=f"force-terminated after {self.steps} steps in turn {self.turn}")
            return Reaction(observation, results=results, errors=failed)
        notice = []
        text = turn.text.strip("`\n ")
        attempted = bool(turn.parse_error or (error and turn.syntax != "text")
                         or (text.startswith("[") and text.replace(" ", "") != "[]"))
        if error and attempted:
            notice = [error_message(f"could not read function calls ({error}); the turn ends")]
        self.scorer.end_turn()
        self.turn += 1
        self.steps = 0
        if self.turn >= len(self.item.entry["question"]):
            return Reaction(notice, done=True, error=error if attempted else None)
        next_turn = self.item.turn_messages(self.turn)
        if self.turn in self.item.holdout:
            next_turn[0]["tools"] = self.env.tool_schemas_for(self.item, self.turn)
        return Reaction(notice + next_turn, error=error if attempted else None)

    def score(self) -> Score:
        details = self.scorer.result(self.force_quit)
        details.setdefault("error_type", None)
        details["turns_completed"] = self.scorer.turns_done
        return Score(1.0 if details["valid"] else 0.0, details)


# ------------------------------------------------------------------------------ the env


class BFCLv3Env(AgentEnv):
    """BFCL-v3 (``bfcl-eval==2025.8.6.2``), 17 categories, 4441 tasks; ``category`` is a category, a group
    (``all``, ``single_turn``, ``multi_turn``, ``live``, ``non_live``) or a list of these."""

    env_id = "lopd/BFCLv3-v0"
    default_max_turns = 200

    def __init__(self, category: str | Sequence[str] = "all", data_dir: str | None = None,
                 few_shot: str | Sequence[str] = (), **kwargs: Any):
        """``few_shot``: ids of single-turn tasks with a gold answer (``"simple_0,simple_1"``) shown as worked
        examples before every single-turn question (:func:`.prompts.few_shot_messages`); they are left out
        of the tasks served. Not BFCL's prompt: for training studies of models too small for it."""
        ids = [t.strip() for t in few_shot.split(",")] if isinstance(few_shot, str) else list(few_shot)
        self.few_shot = tuple(t for t in ids if t)
        self.demonstrations: list[tuple[list[dict[str, Any]], str, str]] = []
        super().__init__(category, data_dir, **kwargs)

    def new_episode(self, task: Task) -> Episode:
        """Single- or multi-turn, by the task's category."""
        cls = MultiTurnEpisode if data.is_multi_turn(task.category) else SingleTurnEpisode
        return cls(self, task)

    def load_tasks(self, category: str | Sequence[str], data_dir: str | None) -> Iterable[Task]:
        names = select(category, data.CATEGORIES, data.GROUPS)
        if self.few_shot:
            if any(data.is_multi_turn(n) for n in names):
                raise ValueError("few_shot is for single-turn categories; the selection includes multi-turn ones")
            self.demonstrations = [self._demonstration(t, data_dir) for t in self.few_shot]
        files = []
        for name in names:
            source = str(locate(data.BFCL_V3, data.question_file(name), data_dir))
            files.append(source)
            if name not in data.NO_ANSWER:
                files.append(locate(data.BFCL_V3, data.answer_file(name), data_dir))
            yield from (t for t in _category_tasks(name, data_dir, source) if t.task_id not in self.few_shot)
        self.provenance = Provenance("BFCL-v3", "official", data.BFCL_WHEEL.ref, str(Path(files[0]).parents[1]), files)

    def _demonstration(self, task_id: str, data_dir: str | None) -> tuple[list[dict[str, Any]], str, str]:
        """(functions, question, gold calls as text) of a few-shot example task."""
        category = task_id.rsplit("_", 1)[0]
        if category not in data.CATEGORIES or data.is_multi_turn(category):
            raise ValueError(f"few_shot: {task_id!r} is not a single-turn BFCL-v3 task id (e.g. 'simple_0')")
        source = str(locate(data.BFCL_V3, data.question_file(category), data_dir))
        task = next((t for t in _category_tasks(category, data_dir, source) if t.task_id == task_id), None)
        if task is None:
            raise ValueError(f"few_shot: no task {task_id!r} in BFCL-v3 {category}")
        if task.data.answer is None:
            raise ValueError(f"few_shot: {task_id!r} has no gold calls to show (irrelevance-type category)")
        return task.data.functions, task.instruction, self.reference_answer(task)

    def reference_answer(self, task: Task) -> str:
        """The ground truth as text, for teachers that read a reference (OPSD): the gold calls in the
        ``[f(a=1)]`` syntax of the task's language (one allowed value per parameter), per turn for multi-turn
        tasks; for the categories scored without an answer, what passes (no call / a call)."""
        item = task.data
        if data.is_multi_turn(task.category):
            turns = []
            for k, calls in enumerate(item.answer):
                gold = [keyword_call(c, item.entry["involved_classes"], self.data_dir) for c in calls]
                # multi-turn tasks are Python, whose text as_text always writes
                turns.append(f"Turn {k + 1}: " + (cast(str, as_text(gold)) if gold else "(no call)"))
            return "\n".join(turns)
        if item.answer is None:
            return ("Call one of the functions." if task.category == "live_relevance" else
                    "Call none of the functions: none of them fits the request.")
        calls = single_turn_gold_calls(item.functions, item.answer, item.language)
        return as_text(calls, item.language) or json.dumps([c.to_dict() for c in calls], ensure_ascii=False)

    def tool_schemas(self, task: Task) -> list[dict[str, Any]]:
        return list(task.data.schemas("shown", task.tools, self.sanitize_tool_names))

    def tool_schemas_for(self, item: BFCLItem, turn: int) -> list[dict[str, Any]]:
        return list(item.schemas(turn, item.holdout[turn], self.sanitize_tool_names))

    def tool_names(self, task: Task) -> ToolNames:
        return task.data.names
