"""The core contract, checked on a toy env so it holds independently of any benchmark."""

from __future__ import annotations

import gymnasium as gym
import pytest

from tests.conformance import Conformance
from tests.toy_env import ToyEnv

if "lopd-test/Toy-v0" not in gym.registry:
    gym.register("lopd-test/Toy-v0", entry_point=ToyEnv)


class TestToyConformance(Conformance):
    env_id = "lopd-test/Toy-v0"

    def structured_action(self, info):
        return {"role": "assistant", "content": "", "tool_calls": [{"name": "math.add", "arguments": {"a": 1, "b": 2}}]}


def test_solving_the_toy_task_scores_one_and_traces_each_call():
    env = gym.make("lopd-test/Toy-v0", category="easy")
    _, info = env.reset(options={"task_id": "easy_2"})
    obs, r, term, _, _ = env.step('<tool_call>{"name": "math_add", "arguments": {"a": 2, "b": 3}}</tool_call>')
    assert obs == [{"role": "tool", "name": "math_add", "content": "5"}] and r == 0 and not term
    obs, r, term, _trunc, info = env.step("[finish(answer=5)]")
    assert term and r == 1.0 and info["score"]["valid"]
    steps = info["trace"].steps
    assert [s.action["name"] for s in steps] == ["math_add", "finish"] and steps[0].result == "5"
    assert info["trace"].success


def test_turn_limit_truncates_and_still_scores():
    env = gym.make("lopd-test/Toy-v0", max_turns=2)
    env.reset(seed=0)
    env.step("[math.add(a=1, b=1)]")
    _, r, term, trunc, info = env.step("[math.add(a=1, b=1)]")
    assert trunc and not term and r == 0.0 and "score" in info


def test_step_after_the_end_is_an_error_observation():
    env = ToyEnv()
    env.reset(seed=0)
    env.step("done")
    obs, r, term, _, _info = env.step("again")
    assert term and r == 0.0 and "ended" in obs[0]["content"]


def test_unknown_category_names_the_choices():
    with pytest.raises(ValueError, match="easy"):
        ToyEnv(category="medium")


def test_unknown_scoring_mode_is_rejected():
    with pytest.raises(ValueError, match="official"):
        ToyEnv(scoring="lenient")


def test_render_ansi_shows_the_conversation():
    env = ToyEnv(render_mode="ansi")
    env.reset(seed=0)
    env.step("[math.add(a=1, b=1)]")
    text = env.render()
    assert "[user]" in text and "[tool:math.add] 2" in text


def test_reaction_requires_one_error_flag_per_result():
    from lopd_envs.core import Reaction

    with pytest.raises(ValueError, match="errors"):
        Reaction([], results=["ok"])
    with pytest.raises(ValueError, match="errors"):
        Reaction([], results=["ok", "Error: x"], errors=[False])
    with pytest.raises(ValueError, match="errors"):
        Reaction([], errors=[True])


def test_trace_takes_error_flags_from_the_reaction_not_from_the_text():
    from lopd_envs.core import Reaction
    from lopd_envs.tools import parse_action
    from lopd_envs.trace import Trace

    turn = parse_action("[f(a=1), g(b=2)]")
    trace = Trace("id", "t", "task")
    # a result that merely reads like an error is not one; a failed call with a plain text is
    trace.record(turn, Reaction([], results=["Error-free output", "no such file"], errors=[False, True]))
    assert [(s.action["name"], s.result, s.error) for s in trace.steps] == [
        ("f", "Error-free output", False), ("g", "no such file", True)]


def test_a_suite_that_forgets_the_flags_is_reported_not_silently_recorded(monkeypatch):
    """An episode returning results without flags breaks the contract: the core turns it into the internal
    error observation (and a log line) instead of guessing the flags."""
    from tests import toy_env

    original = toy_env.ToyEpisode.act
    monkeypatch.setattr(toy_env.ToyEpisode, "act", lambda self, turn: toy_env.Reaction(
        original(self, turn).observation, results=["5"]))
    env = ToyEnv()
    env.reset(options={"task_id": "easy_0"})
    obs, _, term, _, info = env.step("[math.add(a=1, b=2)]")
    assert term and "internal" in info["error"] and "errors" in obs[0]["content"]


def test_async_make_vec_works_with_the_default_shared_memory():
    """``gym.make_vec(..., vectorization_mode="async")`` with default settings: the chat observations go
    through shared memory and read back as they were sent, the same as ``shared_memory=False`` gives."""
    from lopd_envs.spaces import SharedChatBatch

    envs = gym.make_vec("lopd-test/Toy-v0", num_envs=2, vectorization_mode="async")
    plain = gym.make_vec("lopd-test/Toy-v0", num_envs=2, vectorization_mode="async",
                         vector_kwargs={"shared_memory": False})
    try:
        assert envs.shared_memory
        obs, _info = envs.reset(seed=[0, 1])
        assert obs == plain.reset(seed=[0, 1])[0] and isinstance(obs, tuple)
        assert obs[0][0] == {"role": "system", "content": "Use the tools."} and len(obs) == 2
        actions = ['<tool_call>{"name": "math_add", "arguments": {"a": 2, "b": 3}}</tool_call>', "中文 \ud800"]
        obs, _reward, _term, _trunc, _info = envs.step(actions)
        assert obs == plain.step(actions)[0]
        assert obs[0] == [{"role": "tool", "name": "math_add", "content": "5"}]
        live = envs.observations  # gymnasium's live view of the buffer
        assert isinstance(live, SharedChatBatch) and live[0] == obs[0] and live[-1] == obs[1]
    finally:
        envs.close()
        plain.close()


def test_an_observation_larger_than_its_shared_memory_slot_fails_loudly_not_truncated():
    import multiprocessing as mp

    from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

    from lopd_envs.spaces import ChatMessages

    space = ChatMessages()
    space.shared_bytes = 64  # an instance override of the class default
    memory = create_shared_memory(space, n=2, ctx=mp)
    write_to_shared_memory(space, 1, [{"role": "user", "content": "hi"}], memory)
    with pytest.raises(ValueError, match="shared_memory"):
        write_to_shared_memory(space, 0, [{"role": "user", "content": "x" * 100}], memory)
    assert tuple(read_from_shared_memory(space, memory, n=2)) == ([], [{"role": "user", "content": "hi"}])


def test_async_make_vec_of_a_benchmark_env_with_default_settings():
    """The same on a real id (ACEBench needs no fixture): long system prompts, Chinese text, tool results."""
    kwargs = {"category": "normal_atom_bool", "language": "zh"}
    envs = gym.make_vec("lopd/ACEBench-v0", num_envs=2, vectorization_mode="async", **kwargs)
    single = gym.make("lopd/ACEBench-v0", **kwargs)
    try:
        obs, _info = envs.reset(seed=[3, 4])
        assert obs[1] == single.reset(seed=4)[0] and obs[0] != obs[1]
        obs, _reward, term, _trunc, _info = envs.step(["[f(a=1)]", "中文"])
        assert len(obs) == 2 and all(isinstance(o, list) for o in obs) and term.all()
    finally:
        envs.close()
