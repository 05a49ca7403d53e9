"""TRL's two documented routes besides ``rollout_func``: ``environment_factory``
(lopd_train.integrations.trl_env) and plain ``reward_funcs`` for single-turn envs
(lopd_train.integrations.trl_reward). The adapters are checked on real lopd envs (BFCL-v3 single- and multi-turn,
HumanEval+): a correct answer scores 1, a wrong one 0, malformed output never raises; then TRL's own
``GRPOTrainer`` drives each route with scripted model output (the tools run, the env's score is the reward) and
each example runs end to end with a tiny random model on the CPU."""

from __future__ import annotations

import importlib.util
import inspect
import os
from pathlib import Path

import gymnasium as gym
import pytest
import torch

from lopd_envs.suites.bfcl.gold import keyword_call
from lopd_envs.tasks import Task
from lopd_train import models
from lopd_train.integrations.trl_env import (
    ENDED,
    GATEWAY,
    HINT,
    REPLY,
    LopdEnvironment,
    LopdEnvironmentFactory,
    LopdToolEnvironment,
    lopd_env_reward,
    lopd_environment_dataset,
    lopd_environment_inputs,
    tool_chat_template,
)
from lopd_train.integrations.trl_reward import lopd_prompts, lopd_reward
from tests.coin_env import TOOLS, CoinEnv

ROOT = Path(__file__).resolve().parents[1]
BFCL = "lopd/BFCLv3-v0"
HUMANEVAL = "lopd/HumanEvalPlus-v0"
CODE = {"allow_unisolated": True}  # the verdicts, not the sandbox, are under test
BFCL_CATEGORIES = {"category": ["simple", "parallel", "multi_turn_base"]}
RIGHT_ARGS, WRONG_ARGS = {"base": 10, "height": 5}, {"base": 11, "height": 5}
PARALLEL = [("spotify.play", {"artist": "Taylor Swift", "duration": 20}),
            ("spotify.play", {"artist": "Maroon 5", "duration": 15})]
MALFORMED = [None, 42, "", "\x00" * 50, "<tool_call>{not json", [], [None], [{"role": "user", "content": "hi"}],
             {"weird": object()}, [{"role": "assistant", "content": None, "tool_calls": "not a list"}],
             [{"role": "assistant", "content": 7, "tool_calls": [{"type": "function", "function": {"name": None}}]}],
             [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": GATEWAY, "arguments": 3}}]}]]


class QuietCoinEnv(CoinEnv):
    """The coin env with a prompt that does not name its tool."""

    env_id = "lopd-test/QuietCoin-v0"

    def load_tasks(self, category, data_dir):
        yield Task("quiet_0", "heads", "Flip a coin.", TOOLS, None)


QUIET = "lopd-test/QuietCoin-v0"
if QUIET not in gym.registry:
    gym.register(id=QUIET, entry_point=QuietCoinEnv, disable_env_checker=True)


def trl_or_skip():
    try:
        import trl  # noqa: F401
    except ImportError as exc:  # loud: the TRL routes were NOT tested
        pytest.skip(f"trl is not installed (pip install 'lopd[trl]'): the TRL routes were NOT tested ({exc})")


def gateway(name, arguments):
    """A tool call as TRL parses it, to the gateway tool."""
    return {"type": "function", "function": {"name": GATEWAY, "arguments": {"name": name, "arguments": arguments}}}


def assistant(text="", calls=()):
    return {"role": "assistant", "content": text, **({"tool_calls": list(calls)} if calls else {})}


def tool(content, name=GATEWAY):
    return {"role": "tool", "name": name, "content": content}


@pytest.fixture(scope="module")
def bfcl(bfcl_data):
    factory = LopdEnvironmentFactory(BFCL, **BFCL_CATEGORIES)
    yield factory
    factory.close()


@pytest.fixture(scope="module")
def humaneval_solution():
    env = LopdEnvironmentFactory(HUMANEVAL, **CODE)
    task = env._spare[0].unwrapped.tasks[0]
    env.close()
    return task.task_id, "```python\n" + task.data["prompt"] + task.data["canonical_solution"] + "\n```"


# ----------------------------------------------------------------------------- reward_funcs (single turn)

def test_the_prompt_dataset_holds_each_task_its_opening_and_its_functions():
    ds = lopd_prompts(HUMANEVAL, tasks=["HumanEval/0", "HumanEval/2"], **CODE)
    assert ds.column_names == ["prompt", "task_id"] and ds["task_id"] == ["HumanEval/0", "HumanEval/2"]
    assert [m["role"] for m in ds[0]["prompt"]] == ["system", "user"]
    assert "def has_close_elements" in ds[0]["prompt"][1]["content"]
    quiet = lopd_prompts(QUIET)[0]["prompt"]  # its prompt does not list its tool: lopd's text protocol does
    assert '"name": "note"' in quiet[0]["content"] and "<tool_call>" in quiet[0]["content"]
    assert quiet[1] == {"role": "user", "content": "Flip a coin."}


def test_the_reward_function_is_the_envs_score_of_one_answer(bfcl_data, humaneval_solution):
    task_id, solution = humaneval_solution
    code = lopd_reward(HUMANEVAL, **CODE)
    assert code.__name__ == "lopd_reward"
    rewards = code(prompts=[[], [], []], task_id=[task_id] * 3,
                   completions=[[assistant(solution)], [assistant("```python\ndef f():\n    pass\n```")], solution])
    assert rewards == [1.0, 0.0, 1.0]  # conversational right, wrong; standard-format text right
    bfcl = lopd_reward(BFCL, category=["simple", "parallel"])
    completions = [[assistant("[calculate_triangle_area(base=10, height=5)]")],
                   [assistant("[calculate_triangle_area(base=11, height=5)]")],
                   # tool calls TRL parsed with a response template: OpenAI's wire format
                   [assistant(calls=[{"type": "function", "function": {"name": n, "arguments": a}}
                                     for n, a in PARALLEL])],
                   [assistant(calls=[{"type": "function", "function": {"name": n, "arguments": a}}
                                     for n, a in PARALLEL[:1]])]]
    assert bfcl(completions=completions, task_id=["simple_0", "simple_0", "parallel_0", "parallel_0"]) == \
        [1.0, 0.0, 1.0, 0.0]
    code.close()
    bfcl.close()


def test_malformed_completions_score_zero_and_never_raise(bfcl_data):
    reward = lopd_reward(BFCL, category="simple")
    assert reward(completions=MALFORMED, task_id=["simple_0"] * len(MALFORMED)) == [0.0] * len(MALFORMED)
    with pytest.raises(ValueError, match="task_id"):  # the dataset's mistake, not the model's: loud
        reward(completions=["x"], other=["simple_0"])
    with pytest.raises(ValueError, match="unknown task_id"):
        reward(completions=["x"], task_id=["no_such_task"])
    reward.close()


def test_a_task_one_answer_does_not_finish_scores_zero_and_says_so(bfcl_data, caplog):
    reward = lopd_reward(BFCL, category="multi_turn_base")
    metrics = {}
    assert reward(completions=[[assistant("[cd(folder='document')]")]], task_id=["multi_turn_base_0"],
                  log_metric=metrics.__setitem__) == [0.0]
    assert metrics == {"lopd_reward/unfinished": 1.0}
    assert "multi-turn task" in caplog.text and "environment_factory" in caplog.text
    reward.close()


# ----------------------------------------------------------------------------- environment_factory

def test_the_factory_offers_the_two_tools_only_where_tasks_have_functions(bfcl, humaneval_solution):
    from transformers.utils import get_json_schema

    def tools(instance):  # what TRL 1.16 offers the model: public methods of the class but reset/get_reward
        return {n for n, _ in inspect.getmembers(type(instance), inspect.isfunction)
                if not n.startswith("_") and n not in ("reset", "get_reward")}

    instance = bfcl()
    assert isinstance(instance, LopdToolEnvironment) and tools(instance) == {GATEWAY, REPLY}
    schema = get_json_schema(instance.call_function)["function"]  # TRL renders it through the chat template
    assert set(schema["parameters"]["required"]) == {"name", "arguments"}
    code = LopdEnvironmentFactory(HUMANEVAL, **CODE)
    assert type(code()) is LopdEnvironment and tools(code()) == set()
    code.close()


def test_the_route_dataset_lists_the_functions_and_how_to_reach_them(bfcl_data):
    ds = lopd_environment_dataset(QUIET)
    system = ds[0]["prompt"][0]["content"]
    assert ds["task_id"] == ["quiet_0"] and '"name": "note"' in system and f"`{GATEWAY}`" in system
    assert "<tool_call>" not in system  # TRL intercepts <tool_call> blocks: the gateway is the way in
    assert ds[0]["prompt"][1] == {"role": "user", "content": "Flip a coin."}
    listed = lopd_environment_dataset(BFCL, tasks=["simple_0"], category="simple")[0]["prompt"][0]["content"]
    assert listed.count("calculate_triangle_area") == 1 and listed.endswith(HINT)  # BFCL's own listing, once
    code = lopd_environment_dataset(HUMANEVAL, tasks=["HumanEval/0"], **CODE)[0]["prompt"]
    assert GATEWAY not in code[0]["content"]  # no functions, no tools


def test_a_correct_call_scores_one_and_a_wrong_one_zero(bfcl):
    env = bfcl()
    for args, expected in ((RIGHT_ARGS, 1.0), (WRONG_ARGS, 0.0)):
        assert env.reset(task_id="simple_0", prompt=[]) is None  # the row's prompt holds the opening
        result = env.call_function("calculate_triangle_area", args)
        assert result == ENDED  # a single-turn task ends with its first action
        rollout = [assistant(calls=[gateway("calculate_triangle_area", args)]), tool(result), assistant("Done.")]
        assert lopd_env_reward([rollout], [env]) == [expected]


def test_several_calls_of_a_one_answer_task_are_scored_together(bfcl):
    env = bfcl()
    for calls, expected in ((PARALLEL, 1.0), (PARALLEL[:1], 0.0)):
        env.reset(task_id="parallel_0")
        results = [env.call_function(n, a) for n, a in calls]  # TRL runs them one at a time
        assert results[-1] == ENDED
        rollout = [assistant(calls=[gateway(n, a) for n, a in calls])] + [tool(r) for r in results] + [assistant("ok")]
        assert lopd_env_reward([rollout], [env]) == [expected]


def test_an_answer_that_reached_no_tool_is_the_first_action(bfcl):
    env = bfcl()
    env.reset(task_id="simple_0")
    assert lopd_env_reward([[assistant("[calculate_triangle_area(base=10, height=5)]")]], [env]) == [1.0]
    env.reset(task_id="simple_0")  # called by the function's own name: TRL answered "Tool ... not found"
    direct = {"type": "function", "function": {"name": "calculate_triangle_area", "arguments": RIGHT_ARGS}}
    rollout = [assistant(calls=[direct]), tool({"error": "Tool calculate_triangle_area not found."}), assistant("x")]
    assert lopd_env_reward([rollout], [env]) == [1.0]


def play_multi_turn(env, turns, finish=True):
    """The gold of multi_turn_base_0 through the two tools: each call by call_function, reply between turns."""
    item = env._env.unwrapped.tasks[env._env.unwrapped._index["multi_turn_base_0"]].data
    env.reset(task_id="multi_turn_base_0")
    rollout, replies = [], []
    for i, turn in enumerate(turns):
        for call in (keyword_call(c, item.entry["involved_classes"]) for c in turn):
            rollout += [assistant(calls=[gateway(call.name, call.arguments)]),
                        tool(env.call_function(call.name, call.arguments))]
        if i < len(turns) - 1:
            replies.append(env.reply("Done."))
            rollout += [assistant(calls=[{"type": "function", "function": {"name": REPLY, "arguments": {
                "message": "Done."}}}]), tool(replies[-1], REPLY)]
    if finish:
        rollout.append(assistant("All done."))
    return rollout, replies, item


def test_a_multi_turn_task_plays_through_the_tools_and_scores_as_lopd(bfcl):
    env = bfcl()
    item = env._env.unwrapped.tasks[env._env.unwrapped._index["multi_turn_base_0"]].data
    rollout, replies, _ = play_multi_turn(env, item.answer)
    assert "[user]" in replies[0] and "budget analysis" in replies[0]  # the next user turn comes back
    assert lopd_env_reward([rollout], [env]) == [1.0]
    rollout, _, _ = play_multi_turn(env, [*item.answer[:-1], []])  # the last turn's calls left out
    assert lopd_env_reward([rollout], [env]) == [0.0]
    rollout, _, _ = play_multi_turn(env, item.answer[:2], finish=False)  # stopped mid-way: unfinished
    metrics = {}
    assert lopd_env_reward([rollout], [env], log_metric=metrics.__setitem__) == [0.0]
    assert metrics == {"lopd_env_reward/unfinished": 1.0}


def test_malformed_model_output_is_an_error_observation_never_an_exception(bfcl):
    env = bfcl()
    assert "no episode has started" in env.call_function("calculate_triangle_area", RIGHT_ARGS)
    env.reset(task_id="multi_turn_base_0")
    for name, args in ((None, "garbage"), ("no_such_function", {"x": 1}), ("cd", [1, 2]), (7, None),
                       ("cd", {"folder": object()}), ("cd", "{not json")):
        assert isinstance(env.call_function(name, args), str)
    for message in (None, {"a": 1}, "", "\x00" * 100, "[cd(folder=" + "(" * 500 + ")]"):
        assert isinstance(env.reply(message), str)
    for completion in MALFORMED:
        env.reset(task_id="simple_0")
        assert lopd_env_reward([completion], [env]) == [0.0]
    with pytest.raises(ValueError, match="environments"):
        lopd_env_reward([[]])


def test_a_code_env_is_answered_in_one_message(humaneval_solution):
    task_id, solution = humaneval_solution
    factory = LopdEnvironmentFactory(HUMANEVAL, **CODE)
    env = factory()
    for answer, expected in ((solution, 1.0), ("```python\ndef f():\n    pass\n```", 0.0)):
        env.reset(task_id=task_id)
        assert lopd_env_reward([[assistant(answer)]], [env]) == [expected]
    factory.close()


def test_without_a_dataset_the_env_draws_the_task_and_returns_its_opening(bfcl_data):
    draws = []
    for _ in range(2):
        factory = LopdEnvironmentFactory(BFCL, seed=3, category="simple")
        env = factory()
        texts = [env.reset(prompt=[{"role": "user", "content": ""}]) for _ in range(3)]
        draws.append([env._task_id for _ in texts])
        assert all(f"`{GATEWAY}`" in t and "You are an expert in composing functions" in t for t in texts)
        factory.close()
    assert draws[0] == draws[1]  # seeded


def test_tool_chat_template_gives_trls_qwen_template_where_trl_cannot_parse_calls():
    trl_or_skip()
    from trl.chat_template_utils import qwen2_5_chat_template, supports_tool_calling

    tok = models.byte_tokenizer()
    assert not supports_tool_calling(tok)
    tool_chat_template(tok)
    assert tok.chat_template == qwen2_5_chat_template and tok.response_template is not None
    kept = models.byte_tokenizer()
    kept.chat_template = qwen2_5_chat_template
    assert tool_chat_template(kept).chat_template == qwen2_5_chat_template and kept.response_template is not None


# ----------------------------------------------------------------------------- TRL's GRPOTrainer, scripted

def scripted_trainer(script):
    """GRPOTrainer whose sampler is ``script(i, prompt text) -> completion text``: TRL's own parsing, tool loop,
    reward calls and optimiser step run on what a model could have written."""
    from trl import GRPOTrainer

    class Scripted(GRPOTrainer):
        def _generate_single_turn(self, prompt_ids, *args, **kwargs):
            tok = self.processing_class
            return [tok(script(i, tok.decode(ids)), add_special_tokens=False)["input_ids"]
                    for i, ids in enumerate(prompt_ids)], None

    return Scripted


def grpo_args(tmp_path, steps=2, **kw):
    from trl import GRPOConfig

    return GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=2, num_generations=2, max_steps=steps,
                      learning_rate=1e-2, logging_steps=1, report_to="none", use_cpu=True, save_strategy="no",
                      bf16=False, beta=0.0, seed=0, **kw)


class Recorder:
    """A reward function wrapper that keeps every reward TRL got."""

    def __init__(self, func):
        self.func, self.seen, self.__name__ = func, [], func.__name__

    def __call__(self, *args, **kwargs):
        out = self.func(*args, **kwargs)
        self.seen.append(list(out))
        return out


def test_trl_runs_the_tools_of_the_environment_and_rewards_with_lopds_score(bfcl_data, tmp_path):
    trl_or_skip()
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    call = '<tool_call>\n{{"name": "{}", "arguments": {{"name": "calculate_triangle_area", "arguments": {}}}}}\n' \
           '</tool_call><|im_end|>'
    right, wrong = call.format(GATEWAY, '{"base": 10, "height": 5}'), call.format(GATEWAY, '{"base": 3, "height": 5}')

    def script(i, prompt):  # the first rollout of each group calls right, the second wrong; then a final word
        return "Done.<|im_end|>" if "</tool_response>" in prompt else (right if i % 2 == 0 else wrong)

    torch.manual_seed(0)
    model, tok = models.load_backbone("tiny-random", torch.device("cpu"), "float32")
    inputs = lopd_environment_inputs(BFCL, tasks=["simple_0"], category="simple")
    recorder = inputs["reward_funcs"][0] = Recorder(inputs["reward_funcs"][0])
    trainer = scripted_trainer(script)(model=model, processing_class=tool_chat_template(tok),
                                       args=grpo_args(tmp_path, max_completion_length=256), **inputs)
    trainer.train()
    assert recorder.seen == [[1.0, 0.0], [1.0, 0.0]]
    steps = [h for h in trainer.state.log_history if "reward" in h]
    assert [h["tools/call_frequency"] for h in steps] == [1.0, 1.0] and steps[0]["tools/failure_frequency"] == 0
    assert all(h["rewards/lopd_env_reward/mean"] == 0.5 and h["grad_norm"] > 0 for h in steps)
    assert all(e._steps == 1 for e in inputs["environment_factory"].made)  # each rollout's call reached its env
    inputs["environment_factory"].close()


def test_trl_plays_a_multi_step_episode_through_both_tools_and_the_final_message(tmp_path):
    trl_or_skip()
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    # The coin env scores 1 when its two actions' texts have an even total length: call_function's action
    # has no text (0), reply's has its message's; the final message is the second action (4 characters).
    first = ['<tool_call>\n{"name": "call_function", "arguments": {"name": "note", "arguments": {"text": "x"}}}\n'
             '</tool_call><|im_end|>',
             '<tool_call>\n{"name": "reply", "arguments": {"message": "abc"}}\n</tool_call><|im_end|>']

    def script(i, prompt):
        return "abcd<|im_end|>" if "</tool_response>" in prompt else first[i % 2]

    torch.manual_seed(0)
    model, tok = models.load_backbone("tiny-random", torch.device("cpu"), "float32")
    inputs = lopd_environment_inputs("tests.coin_env:lopd-test/Coin-v0", tasks=["heads_0"], category="all")
    recorder = inputs["reward_funcs"][0] = Recorder(inputs["reward_funcs"][0])
    trainer = scripted_trainer(script)(model=model, processing_class=tool_chat_template(tok),
                                       args=grpo_args(tmp_path, steps=1, max_completion_length=512), **inputs)
    trainer.train()
    assert recorder.seen == [[1.0, 0.0]]  # 0 + 4 is even, 3 + 4 is odd
    made = inputs["environment_factory"].made
    assert [e._env.unwrapped.messages[-1] for e in made] == [{"role": "assistant", "content": "abcd"}] * 2
    assert all(e._steps == 2 and e._done for e in made)
    inputs["environment_factory"].close()


def test_trl_rewards_single_turn_answers_with_lopds_score(humaneval_solution, tmp_path):
    trl_or_skip()
    task_id, solution = humaneval_solution

    def script(i, prompt):
        return (solution if i % 2 == 0 else "```python\nreturn None\n```") + "<|im_end|>"

    torch.manual_seed(0)
    model, tok = models.load_backbone("tiny-random", torch.device("cpu"), "float32")
    reward = Recorder(lopd_reward(HUMANEVAL, **CODE))
    trainer = scripted_trainer(script)(model=model, processing_class=tok, reward_funcs=reward,
                                       train_dataset=lopd_prompts(HUMANEVAL, tasks=[task_id], **CODE),
                                       args=grpo_args(tmp_path, max_completion_length=512))
    trainer.train()
    assert reward.seen == [[1.0, 0.0], [1.0, 0.0]]
    assert all(h["rewards/lopd_reward/mean"] == 0.5 for h in trainer.state.log_history if "reward" in h)
    reward.func.close()


# ----------------------------------------------------------------------------- the examples, end to end

def run_example(name, argv):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main(argv)


@pytest.mark.parametrize("name,argv,reward", [
    ("trl_environment_factory", [], "rewards/lopd_env_reward/mean"),
    ("trl_reward_funcs", ["--env-kwargs", '{"allow_unisolated": true}'], "rewards/lopd_reward/mean"),
])
def test_each_example_trains_a_tiny_model_for_a_few_steps(bfcl_data, tmp_path, name, argv, reward):
    trl_or_skip()
    steps = run_example(name, [*argv, "--output-dir", str(tmp_path), "--steps", "2"])
    assert len(steps) == 2 and all(0.0 <= h[reward] <= 1.0 for h in steps)
