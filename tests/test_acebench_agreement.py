"""Agreement with ACEBench's own code, on generated outputs (docs/design.md: a release criterion).

Runs only where a checkout of github.com/ACEBench/ACEBench (commit e6db74b) is named by
``ACEBENCH_OFFICIAL_DIR``; its optional dependencies (openpyxl, pandas, wcwidth) are stubbed when
missing. The official code runs in this process: only on strings these tests generate.

    ACEBENCH_OFFICIAL_DIR=/path/to/ACEBench pytest tests/test_acebench_agreement.py

Checked: the normal checker on the gold and ~30 perturbations of every normal row; the scenario classes
and executor on random call sequences (results and end states); the agent loops (end states, milestones,
prompt text) on scripted agents; the agent scores (end-to-end, process accuracy) on varied trajectories.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import random
import re
import sys
import types
from pathlib import Path

import gymnasium as gym
import pytest

import lopd_envs
from lopd_envs.actions import ToolCall
from lopd_envs.suites.acebench.data import NORMAL, load_rows
from lopd_envs.suites.acebench.executor import Executor
from lopd_envs.suites.acebench.normal import score_normal
from lopd_envs.tools import render_python_calls

OFFICIAL = os.environ.get("ACEBENCH_OFFICIAL_DIR")
pytestmark = pytest.mark.skipif(not OFFICIAL or not (Path(OFFICIAL) / "eval_main.py").exists(),
                                reason="set ACEBENCH_OFFICIAL_DIR to an ACEBench checkout to compare with the official code")
gym.register_envs(lopd_envs)
SAVED = {"BaseApi": ["wifi", "logged_in"], "MessageApi": ["inbox"], "ReminderApi": ["reminder_list"],
         "FoodPlatform": ["users", "logged_in_users", "orders"], "Travel": ["users", "reservations"]}
FINISH = "finish conversation"


@pytest.fixture(scope="module")
def official():
    for name in ("openpyxl", "openpyxl.styles", "pandas", "wcwidth"):
        try:
            __import__(name)
        except ImportError:
            stub = types.ModuleType(name)
            stub.Workbook = stub.Alignment = object
            stub.wcswidth = len
            sys.modules[name] = stub
    sys.path.insert(0, OFFICIAL)
    # the modules are handed out through locals() below
    import eval_main  # noqa: F401
    from model_eval import checker  # noqa: F401
    from model_inference import utils  # noqa: F401
    from model_inference.multi_step import common_agent_step, execution_role_step, multi_step_scene, multi_step_utils  # noqa: F401
    from model_inference.multi_turn import common_agent, execution_role, multi_turn_scene, multi_turn_utils  # noqa: F401
    return types.SimpleNamespace(**locals())


def _norm(value):
    return json.loads(json.dumps(value, ensure_ascii=False, default=str))


# ------------------------------------------------------------------------------------ normal checker

def _mutations(value):
    if isinstance(value, bool):
        return [not value, "true" if value else "false", int(value)]
    if isinstance(value, int):
        return [value + 1, value * 10, float(value), str(value)]
    if isinstance(value, float):
        return [value + 1.5, int(value), str(value)]
    if isinstance(value, str):
        return [value + "x", "zz", value[: max(1, len(value) // 2)], value.upper(), value + " extra", 5]
    if isinstance(value, list):
        return [value[::-1], value[:-1], value + value[:1], []]
    if isinstance(value, dict):
        out = [{}]
        for key in list(value)[:3]:
            out.append({k: v for k, v in value.items() if k != key})
            out += [{**value, key: m} for m in _mutations(value[key])[:2]]
        return [*out, {**value, "extra_key": 1}]
    return [None]


def _variants(calls):
    yield calls
    for i, (name, params) in enumerate(calls):
        for key in params:
            for mutated in _mutations(params[key]):
                yield [*calls[:i], (name, {**params, key: mutated}), *calls[i + 1:]]
            yield [*calls[:i], (name, {k: v for k, v in params.items() if k != key}), *calls[i + 1:]]
        yield [*calls[:i], (name, {**params, "bogus": "x"}), *calls[i + 1:]]
        yield [*calls[:i], (name + "_v2", params), *calls[i + 1:]]
    yield calls[::-1]
    yield calls + calls[:1]


def test_normal_checker_agrees_with_the_official_one(official):
    def verdict(text, row, category):
        try:
            decoded = official.utils.decode_ast("model", "".join(text.split()))
        except Exception:  # noqa: BLE001 - the official decoder raises on what it cannot read: no calls
            return False
        alternatives = row.gold if isinstance(row.gold, list) else [row.gold]
        try:
            return any(official.checker.normal_checker(row.question["function"], decoded, copy.deepcopy(a),
                                                       row.question["question"], category)["valid"] for a in alternatives)
        except Exception:  # noqa: BLE001 - the official checker crashing is a verdict of its own, compared
            return "crash"

    disagreements, checked = [], 0
    for language in ("en", "zh"):
        for category in NORMAL:
            for row in load_rows(category, language):
                gold = row.gold[0] if isinstance(row.gold, list) else row.gold
                known = {f["name"] for f in row.question["function"]}
                calls = [(k if k in known else re.sub(r"_\d+$", "", k), v) for k, v in gold.items()]
                texts = [render_python_calls([ToolCall(n, p) for n, p in c]) for c in _variants(calls)]
                texts += [texts[0].replace("(", "( ").replace(",", " ,\n"), texts[0][1:-1], f"```python\n{texts[0]}\n```"]
                for text in texts:
                    expected = verdict(text, row, category)
                    mine = score_normal(text, row.question["function"], row.gold, "official")
                    same = mine.error_type == "checker_crash" if expected == "crash" else mine.valid == expected
                    checked += 1
                    if not same:
                        disagreements.append((row.question["id"], text[:120], expected, mine.error_type))
    assert checked > 40_000 and not disagreements, disagreements[:5]


# ---------------------------------------------------------------------------- scenarios and executor

NAMES = ["Eve", "Frank", "Grace", "Helen", "Isaac", "Jack", "Zoe"]
WORDS = {"en": {"merchants": ["Domino's", "Heytea", "Hema Fresh", "KFC"], "products": ["Margherita Pizza", "Cheese Milk Tea", "Fresh Gift Pack", "Calzone"],
                "cities": ["Beijing", "Shanghai", "Nanjing", "Shenzhen", "Tokyo"], "cabins": ["Economy Class", "Business Class", "First"],
                "reasons": ["The airline has canceled the flight.", "change of plans"]},
         "zh": {"merchants": ["达美乐", "喜茶", "盒马生鲜", "肯德基"], "products": ["玛格丽特披萨", "芝士奶茶", "生鲜大礼包", "x"],
                "cities": ["北京", "上海", "南京", "深圳", "东京"], "cabins": ["经济舱", "商务舱", "头等舱"], "reasons": ["航空公司取消航班", "计划变更"]}}
PASSWORDS = ["password123", "password456", "password789", "password654", "wrong"]


def _arguments(rng, method, language):
    w, c = WORDS[language], rng.choice
    table = {
        "send_message": {"sender_name": c(NAMES), "receiver_name": c(NAMES), "message": "hi"},
        "view_messages_between_users": {"sender_name": c(NAMES), "receiver_name": c(NAMES)},
        "delete_message": {"message_id": c([1, 3, 4, 7, "3"])},
        "search_messages": {"user_name": c(NAMES), "keyword": c(["pizza", "milk", "外卖", "zzz"])},
        "add_reminder": {"title": c(["A", "To-do list"]), "description": "d", "time": "2024-06-11 16:00"},
        "view_reminder_by_title": {"title": c(["To-do list", "nope"])}, "delete_reminder": {"reminder_id": c([1, 4, 9])},
        "search_reminders": {"keyword": c(["Meeting", "zzz"])}, "mark_as_notified": {"reminder_id": c([1, 5])},
        "login_food_platform": {"username": c(NAMES), "password": c(PASSWORDS)}, "check_balance": {"user_name": c(NAMES)},
        "add_food_delivery_order": {"username": c(NAMES), "merchant_name": c(w["merchants"]),
                                    "items": [{"product": c(w["products"]), "quantity": c([1, 2, 0, "2", 8])}]},
        "get_products": {"merchant_name": c(w["merchants"])}, "view_orders": {"user_name": c(NAMES)},
        "search_orders": {"keyword": c(["pizza", "Heytea", "达美乐"])},
        "get_flight_details": {"origin": c(w["cities"]), "destination": c(w["cities"])},
        "get_user_details": {"user_id": c(["user1", "user2", "user9"]), "password": c(PASSWORDS)},
        "get_reservation_details": c([{"reservation_id": c(["res_1", "res_9"])}, {"user_id": "user2"}, {}]),
        "find_transfer_flights": {"origin_city": c(w["cities"]), "transfer_city": c(w["cities"]), "destination_city": c(w["cities"])},
        "reserve_flight": {"user_id": c(["user1", "user3"]), "password": c(PASSWORDS), "flight_no": c(["CA1234", "CZ4321", "XX1"]),
                           "cabin": c(w["cabins"]), "payment_method": c(["cash", "bank", "card"]), "baggage_count": c([0, 3])},
        "modify_flight": {"user_id": c(["user1", "user2"]), "reservation_id": c(["res_1", "res_2", "res_5"]),
                          "new_flight_no": c([None, "CZ4321", "CA1234"]), "new_cabin": c([None] + w["cabins"]),
                          "add_baggage": c([0, 1, 3]), "new_payment_method": c([None, "cash"])},
        "cancel_reservation": {"user_id": c(["user1", "user2"]), "reservation_id": c(["res_1", "res_4"]), "reason": c(w["reasons"])},
    }
    arguments = dict(table.get(method, {}))
    if rng.random() < 0.05:
        arguments["bogus"] = 1
    return arguments


def test_scenarios_and_executor_agree_with_the_official_classes(official):
    rng, differences, batches = random.Random(0), [], 0
    setups = [["BaseApi", "MessageApi"], ["BaseApi", "ReminderApi", "FoodPlatform"],
              ["BaseApi", "MessageApi", "ReminderApi", "FoodPlatform"], ["Travel"]]
    for trial in range(300):
        language, classes, multi_turn = rng.choice(["en", "zh"]), rng.choice(setups), rng.random() < 0.5
        config = {"BaseApi": {"wifi": rng.random() < .5, "logged_in": rng.random() < .6}} if "BaseApi" in classes else {}
        utils = official.multi_turn_utils if multi_turn else official.multi_step_utils
        mine = Executor(classes, config, language, stop_on_error=multi_turn)
        methods = [*mine.methods(), "no_such_method", "search_reminders"]
        instances = None
        for _ in range(rng.randint(1, 10)):
            calls = [{m: _arguments(rng, m, language)} for m in rng.sample(methods, rng.choice([1, 1, 2]))]
            texts = [f"{n}({', '.join(f'{k}={v!r}' for k, v in a.items())})" for c in calls for n, a in c.items()]
            with contextlib.redirect_stdout(io.StringIO()):
                results, found = utils.execute_agent_func_call(texts, copy.deepcopy(config), classes, "lopd",
                                                               f"agreement_{trial}_{language}_{multi_turn}", language)
            if isinstance(found, dict):
                instances = found
            expected = [results] if isinstance(results, str) else [_loads(r) for r in results]
            batches += 1
            if _norm(mine.execute(calls).results) != _norm(expected):
                differences.append((texts, expected))
        if instances and mine.recorded:
            state = [{n: {k: v for k, v in i.__dict__.items() if k in SAVED[n]}} for n, i in instances.items()]
            if _norm(state) != mine.state():
                differences.append(("state", trial))
    assert batches > 1000 and not differences, differences[:3]


def _loads(text):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


# ------------------------------------------------------------------------------ agent loops and scores

class _Scripted:
    def __init__(self, lines):
        self.lines, self.i = list(lines), 0

    def _next(self):
        self.i += 1
        return self.lines[self.i - 1] if self.i <= len(self.lines) else FINISH

    def inference(self, system, user):  # the agent model
        return self._next()

    def get_init_prompt(self, question):  # the user
        return self._next()

    def step(self, message):
        pass

    def respond(self):
        return {"sender": "user", "recipient": "agent", "message": self._next()}


def _official_episode(official, row, language, category, messages, user_lines, test_id):
    q, ril, stones = row.question, [], []
    if category == "agent_multi_step":
        agent = official.common_agent_step.CommonAgent_Step(model=_Scripted(messages), language=language, functions=q["function"])
        execution = official.execution_role_step.EXECUTION_STEP("lopd", q["initial_config"], q["involved_classes"], test_id, language)
        scene = official.multi_step_scene.Mulit_Step_Scene(q["question"], q["initial_config"], q["function"], agent, language)
    else:
        agent = official.common_agent.CommonAgent(model=_Scripted(messages), time="", functions=q["function"],
                                                  involved_class=q["involved_classes"], language=language)
        user = _Scripted(user_lines)
        execution = official.execution_role.EXECUTION("lopd", q["initial_config"], q["involved_classes"], test_id, language)
        scene = official.multi_turn_scene.Scene(q["initial_config"], q["function"], agent, user, user.get_init_prompt(q["question"]), language)
    history = scene.dialogue_history
    for index in range(40):
        if category == "agent_multi_step":
            if index == 0 or history[-1]["sender"] == "execution":
                current = agent.respond(scene.get_inference_message())
            else:
                current, found = execution.respond(history)
                stones.append(history[-1]["message"])
                if found not in ril:
                    ril.append(found)
        else:
            last = history[-1]["recipient"]
            scene.get_inference_message()
            if last == "user":
                current = user.respond()
            elif last == "agent":
                current = agent.respond(scene.inference_data)
            else:
                stones.append(history[-1]["message"])
                current, found = execution.respond(history)
                if isinstance(found, dict) and found not in ril:
                    ril.append(found)
        scene.add_dialogue(current)
        if index > 1 and FINISH in current["message"]:
            break
    state = [{n: {k: v for k, v in i.__dict__.items() if k in SAVED[n]}} for r in ril for n, i in r.items()]
    return _norm(state), stones, scene.inference_data


CHATTER = ["Sure, let me check.", FINISH, "[not a call", "[x]", "What is your password?", "[turn_on_wifi(), 5]",
           "Done! finish conversation", "[no_such_tool()]"]


@pytest.mark.parametrize("category", ["agent_multi_step", "agent_multi_turn"])
def test_agent_loops_and_scores_agree_with_the_official_harness(official, category, tmp_path, monkeypatch):
    rng, differences = random.Random(1), []
    monkeypatch.chdir(tmp_path)
    for language in ("en", "zh"):
        (tmp_path / f"score_all/score_{language}/lopd").mkdir(parents=True)
        official.eval_main.language, official.eval_main.OUTPUT_PATH = language, f"./score_all/score_{language}/"
        for row in load_rows(category, language):
            stones = row.milestones[0] if isinstance(row.milestones[0], list) else row.milestones
            for variant in range(4):
                messages = [s.strip() if rng.random() < .7 else s for s in stones]
                for _ in range(rng.randint(0, 3)):
                    messages.insert(rng.randint(0, len(messages)), rng.choice(CHATTER))
                messages = messages * (4 if variant == 3 else 1)
                user_lines = [rng.choice(["ok", "Yes.", FINISH]) for _ in range(rng.randint(0, 5))]
                with contextlib.redirect_stdout(io.StringIO()):
                    state, milestones, text = _official_episode(official, row, language, category, messages, user_lines,
                                                                f"agreement_{category}_{language}_{row.question['id']}_{variant}")
                env = gym.make("lopd/ACEBench-v0", category=category, language=language, user=user_lines).unwrapped
                env.reset(options={"task_id": row.question["id"]})
                for message in messages + [FINISH] * 45:
                    *_, terminated, truncated, info = env.step(message)
                    if terminated or truncated:
                        break
                score = info["score"]
                with contextlib.redirect_stdout(io.StringIO()):
                    accuracy, process = official.eval_main.agent_eval(
                        [{"id": row.question["id"], "result": state, "process": milestones}], [row.question],
                        [copy.deepcopy(row.answer)], category, "lopd")
                same = (score["state"] == state and score["milestones"] == milestones and text in env.official_prompt()[1]
                        and accuracy == float(score["end_to_end"]) and process == score["process_accuracy"])
                if not same:
                    differences.append((language, row.question["id"], variant))
    assert not differences, differences[:5]
