"""Agent categories: the official execution semantics, end-to-end and process scoring, the two loops, the
simulated user, and replaying the gold milestone paths."""

from __future__ import annotations

import gymnasium as gym
import pytest

import lopd_envs
from lopd_envs.suites.acebench import LLMUser, ScriptedUser
from lopd_envs.suites.acebench.agent_score import end_to_end, process_accuracy
from lopd_envs.suites.acebench.data import load_rows
from lopd_envs.suites.acebench.decode import DecodeError, decode_agent_message
from lopd_envs.suites.acebench.executor import MULTI_TURN_ERROR, UNBOUND, Executor
from lopd_envs.suites.acebench.prompts import FINISH

gym.register_envs(lopd_envs)

PHONE = ["BaseApi", "MessageApi", "FoodPlatform"]


def executor(config=None, classes=PHONE, language="en", multi_turn=False):
    return Executor(classes, config or {"BaseApi": {"wifi": False, "logged_in": True}}, language, stop_on_error=multi_turn)


def run(ex, text):
    return ex.execute(decode_agent_message(text))


# ------------------------------------------------------------------------------------------ executor

def test_a_device_method_runs_on_every_involved_instance():
    ex = executor()
    assert run(ex, "[turn_on_wifi()]").results == [{"status": True, "message": "Wi-Fi has been turned on"}]
    assert all(instance.wifi for instance in ex.instances.values())


def test_every_class_loads_its_config_then_the_base_config():
    ex = executor({"BaseApi": {"wifi": True, "logged_in": False}, "FoodPlatform": {"logged_in_users": ["Eve"]}})
    ex.methods()
    assert ex.instances["MessageApi"].logged_in is False and ex.instances["FoodPlatform"].wifi is True
    assert ex.instances["FoodPlatform"].logged_in_users == []  # overwritten by the BaseApi entry, as upstream


def test_unknown_function_reuses_the_previous_result_or_fails_unbound():
    ex = executor()
    assert run(ex, "[no_such_tool()]").results == ["Error during execution: " + UNBOUND]
    both = run(ex, "[turn_on_wifi(), no_such_tool()]").results
    assert both[0] == both[1]


def test_bad_arguments_become_python_error_text():
    ex = executor()
    result = run(ex, "[send_message(sender_name='Eve', receiver='Frank', message='hi')]").results[0]
    assert result == "Error during execution: MessageApi.send_message() got an unexpected keyword argument 'receiver'"


def test_multi_step_continues_after_an_error_multi_turn_stops():
    step = executor()
    batch = run(step, "[no_such_tool(), turn_on_wifi()]")
    assert batch.results[1]["status"] is True and step.instances["BaseApi"].wifi
    turn = executor(multi_turn=True)
    batch = run(turn, "[no_such_tool(), turn_on_wifi()]")
    assert batch.results == [MULTI_TURN_ERROR] and not batch.recorded and turn.state() == []
    assert turn.instances["BaseApi"].wifi is False


def test_results_go_through_json_like_upstream():
    ex = executor(classes=["BaseApi", "FoodPlatform"], config={"BaseApi": {"wifi": True}})
    assert run(ex, "[check_balance(user_name='Eve')]").results == [500.0]
    assert run(ex, "[get_products(merchant_name='Heytea')]").results[0].startswith("[{'product': 'Cheese Milk Tea'")
    times = executor(classes=["BaseApi", "MessageApi"], config={"BaseApi": {"logged_in": True}})
    assert run(times, "[get_all_message_times_with_ids()]").results[0]["1"] == "2024-06-09"


def test_english_reminders_lack_the_chinese_only_methods():
    en = executor(classes=["BaseApi", "ReminderApi"])
    assert run(en, "[search_reminders(keyword='x')]").results == ["Error during execution: " + UNBOUND]
    zh = executor(classes=["BaseApi", "ReminderApi"], language="zh")
    assert run(zh, "[search_reminders(keyword='不存在')]").results[0]["message"] == "没有找到包含该关键词的提醒"


def test_saved_state_is_the_official_attributes_after_a_json_round_trip():
    ex = executor()
    assert ex.state() == []  # nothing executed: the harness saves no classes
    run(ex, "[turn_on_wifi()]")
    state = ex.state()
    assert [next(iter(s)) for s in state] == PHONE
    assert state[0] == {"BaseApi": {"wifi": True, "logged_in": True}}
    assert set(state[1]["MessageApi"]["inbox"]) == {"1", "2", "3", "4", "5", "6"}
    assert set(state[2]["FoodPlatform"]) == {"users", "logged_in_users", "orders"}


def test_agent_decoder_adds_brackets_and_strips_like_upstream():
    assert decode_agent_message(" turn_on_wifi()") == [{"turn_on_wifi": {}}]
    assert decode_agent_message("[f(a=g())]") == [{"f": {"a": "g()"}}]
    with pytest.raises(DecodeError):
        decode_agent_message("[send_message(message='Don't')]")
    with pytest.raises(DecodeError):
        decode_agent_message("[f(a=1)] ")  # a trailing space defeats the bracket handling upstream


# --------------------------------------------------------------------------------------------- scoring

GOLD = [{"BaseApi": {"wifi": True, "logged_in": True}}, {"ReminderAPI": {"reminder_list": {"1": {"x": 1}}}}]


def test_official_end_to_end_skips_misspelled_classes_and_extra_dict_keys_strict_does_not():
    saved = [{"BaseApi": {"wifi": True, "logged_in": True}}, {"ReminderApi": {"reminder_list": {"1": {"x": 2}}}}]
    assert end_to_end(saved, GOLD, "official").valid
    assert not end_to_end(saved, GOLD, "strict").valid
    extra = [{"BaseApi": {"wifi": True, "logged_in": True}}, {"ReminderAPI": {"reminder_list": {"1": {"x": 1}, "2": {}}}}]
    assert end_to_end(extra, GOLD, "official").valid and not end_to_end(extra, GOLD, "strict").valid
    exact = [{"BaseApi": {"wifi": True, "logged_in": True}}, {"ReminderApi": {"reminder_list": {"1": {"x": 1}}}}]
    assert end_to_end(exact, GOLD, "strict").valid


def test_end_to_end_fails_on_a_wrong_value_or_class_count():
    wrong = [{"BaseApi": {"wifi": False, "logged_in": True}}, {"ReminderApi": {"reminder_list": {}}}]
    verdict = end_to_end(wrong, GOLD, "official")
    assert not verdict.valid and "wifi" in verdict.error
    assert end_to_end([], GOLD).error_type == "wrong number of class"


def test_process_accuracy_counts_milestones_in_order():
    stones = ["[a()]", "[b()]", "[c()]"]
    assert process_accuracy(["[a()]", "[b()]", "[x()]"], stones) == 0.667
    # upstream's scan for a missing milestone consumes the remaining messages
    assert process_accuracy(["[a()]", "[x()]", "[c()]"], stones) == 0.333
    assert process_accuracy(["[c()]", "[b()]", "[a()]"], stones) == 0.333
    assert process_accuracy([" [a()] ", "[b()]", "[c()]"], stones) == 1.0
    assert process_accuracy([], stones, end_to_end_valid=True) == 1.0
    assert process_accuracy(["[b()]"], [["[a()]"], ["[b()]", "[z()]"]]) == 0.5


# ------------------------------------------------------------------------------------------- episodes

def test_multi_step_episode_reaches_the_gold_state():
    env = gym.make("lopd/ACEBench-v0", category="agent_multi_step", language="zh")
    obs, info = env.reset(options={"task_id": "agent_multi_step_2"})
    assert obs[1]["content"].startswith("以下是你可以调用的API列表") and "对话历史：user:" in obs[1]["content"]
    row = env.unwrapped.task.data
    for stone in row.milestones:
        obs, reward, terminated, _, info = env.step(stone.strip())
        assert not terminated and obs[0]["role"] == "tool"
    obs, reward, terminated, _, info = env.step(FINISH)
    assert terminated and reward == 1.0 and info["score"]["process_accuracy"] == 1.0
    assert info["trace"].steps[0].action["name"] == row.milestones[0].strip("[]").split("(")[0]


def test_multi_step_answers_chatter_with_the_official_complaint_and_respects_the_budget():
    env = gym.make("lopd/ACEBench-v0", category="agent_multi_step", max_dialog_turns=6)
    env.reset(options={"task_id": "agent_multi_step_0"})
    obs, _, terminated, _, _ = env.step(FINISH)  # ignored as the first message, like upstream
    assert not terminated and "Please do not ask me any questions" in obs[0]["content"]
    obs, _, terminated, _, _ = env.step("Let me think.")
    assert not terminated
    _, reward, terminated, _, info = env.step("[turn_on_wifi()]")
    assert terminated and reward == 0.0 and info["score"]["messages"] == 6


def test_multi_turn_with_a_scripted_user():
    user = ScriptedUser(["I want to send a message to Frank.", "Yes, please."])
    env = gym.make("lopd/ACEBench-v0", category="agent_multi_turn", language="en", user=user)
    obs, info = env.reset(options={"task_id": "agent_multi_turn_0"})
    assert obs[1]["content"].endswith("user:I want to send a message to Frank.\n")
    assert "Sending Text Messages" in obs[0]["content"]  # the phone rules follow the agent prompt
    obs, _, terminated, _, _ = env.step("What should the message say?")
    assert obs == [{"role": "user", "content": "Yes, please."}] and not terminated
    for call in ("[turn_on_wifi()]", "[get_earliest_message_id()]", "[delete_message(message_id=3)]",
                 "[send_message(sender_name='Grace', receiver_name='Frank', message='Are you free tomorrow to have lunch with me?')]"):
        obs, _, terminated, _, _ = env.step(call)
        assert obs[0]["role"] == "tool" and not terminated
    obs, reward, terminated, _, info = env.step("Done. Anything else?")
    assert terminated and obs == [{"role": "user", "content": FINISH}]
    assert reward == 1.0 and info["score"]["end_to_end"] and info["score"]["process_accuracy"] == 1.0
    _system, prompt = env.unwrapped.official_prompt()
    assert "agent:[turn_on_wifi()]\nexecution:[{'status': True" in prompt


def test_llm_user_adapter_wraps_a_text_policy():
    prompts = []

    def policy(text: str) -> str:
        prompts.append(text)
        return ["user: Book a flight, please.", "user1", "user: finish conversation"][len(prompts) - 1]

    env = gym.make("lopd/ACEBench-v0", category="agent_multi_turn", user=LLMUser(policy))
    obs, _ = env.reset(options={"task_id": "agent_multi_turn_20"})
    assert obs[1]["content"].endswith("user:Book a flight, please.\n")
    assert "Instruction:" in prompts[0] and prompts[0].rstrip().endswith("user:")
    obs, _, terminated, _, _ = env.step("Your user id?")
    assert obs == [{"role": "user", "content": "user1"}] and "agent: Your user id?" in prompts[1]
    assert not terminated  # a finish signal in the first two messages does not count upstream; none given here
    _, _, terminated, _, info = env.step("And your password?")
    assert terminated and info["score"]["end_to_end"] is False


def test_a_failing_user_simulator_ends_the_episode_without_raising():
    def flaky(conversation):
        if len(conversation) > 3:
            raise RuntimeError("model server down")
        return "hello"

    env = gym.make("lopd/ACEBench-v0", category="agent_multi_turn", user=flaky)
    env.reset(options={"task_id": "agent_multi_turn_1"})
    obs, _reward, terminated, _, info = env.step("How can I help?")
    assert terminated and "model server down" in obs[0]["content"] and "score" in info


# ---------------------------------------------------------------------------------------- gold paths

# Rows whose gold milestones, executed in order (each stripped of surrounding whitespace), reach the gold
# end state. The others cannot: milestones with unescaped quotes ('Domino's', 'Don't') are not Python,
# some omit a login the gold state needs, a few disagree with the gold (which message to delete, a final
# period). The counts differ between modes where the gold names a class ReminderAPI, which official skips.
GOLD_PATH_PASSES = {
    ("en", "agent_multi_step", "official"): 10, ("en", "agent_multi_step", "strict"): 10,
    ("en", "agent_multi_turn", "official"): 21, ("en", "agent_multi_turn", "strict"): 21,
    ("zh", "agent_multi_step", "official"): 14, ("zh", "agent_multi_step", "strict"): 12,
    ("zh", "agent_multi_turn", "official"): 29, ("zh", "agent_multi_turn", "strict"): 29,
}


def replay_gold_path(env, row) -> dict:
    """Send each milestone as the agent's message (best of the alternatives), then finish."""
    paths = row.milestones if row.milestones and isinstance(row.milestones[0], list) else [row.milestones]
    best = None
    for path in paths:
        env.reset(options={"task_id": row.question["id"]})
        done = False
        for stone in path:
            *_, terminated, truncated, info = env.step(stone.strip())
            if terminated or truncated:
                done = True
                break
        if not done:
            *_, info = env.step(FINISH)
        if best is None or info["score"]["end_to_end"] > best["end_to_end"]:
            best = info["score"]
    return best


@pytest.mark.parametrize("language", ["en", "zh"])
@pytest.mark.parametrize("category", ["agent_multi_step", "agent_multi_turn"])
@pytest.mark.parametrize("mode", ["official", "strict"])
def test_gold_paths_reach_the_gold_state_where_the_data_allows(language, category, mode):
    env = gym.make("lopd/ACEBench-v0", category=category, language=language, scoring=mode, user=["ok"] * 30)
    scores = [replay_gold_path(env.unwrapped, row) for row in load_rows(category, language)]
    assert sum(s["end_to_end"] for s in scores) == GOLD_PATH_PASSES[(language, category, mode)]
    for score in scores:  # process accuracy is computed for every row, and is 1 whenever the state is right
        assert 0.0 <= score["process_accuracy"] <= 1.0
        assert score["process_accuracy"] == 1.0 or not score["end_to_end"]
