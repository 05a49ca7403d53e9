"""``reset(options=...)`` on every registered env id: a valid choice picks that task, and anything else (not a
mapping, an unknown key, a ``task_id`` of the wrong type or not in the task list) is refused with a
``TypeError``/``ValueError`` that names the bad key or value and what is accepted, before the env changes
(issue 24, item 7). Property-tested with hypothesis over option shapes a caller might pass by mistake."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lopd_envs
from lopd_envs.registration import ENV_ENTRY_POINTS
from tests.test_fuzz_step import ENV_OPTIONS, ReplaySandbox

gym.register_envs(lopd_envs)

SCALARS = st.one_of(st.integers(), st.floats(allow_nan=True), st.binary(max_size=8), st.booleans(),
                    st.text(max_size=12))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=6), inner, max_size=3),
                                                       st.tuples(inner), st.frozensets(st.integers(), max_size=3)),
                      max_leaves=6)
#: Options that must be refused: not a mapping, a mapping with a key other than task_id, or a task_id
#: that is neither None nor a string (strings are drawn separately: most are unknown ids).
BAD_OPTIONS = st.one_of(
    VALUES.filter(lambda v: not isinstance(v, dict)),
    st.dictionaries(st.one_of(st.text(max_size=10), st.integers()), VALUES, min_size=1, max_size=3)
    .filter(lambda d: set(d) != {"task_id"}),
    VALUES.filter(lambda v: v is not None and not isinstance(v, str)).map(lambda v: {"task_id": v}),
)


@pytest.fixture(scope="module", params=sorted(ENV_OPTIONS))
def env(request: pytest.FixtureRequest):
    env_id = request.param
    if env_id == "lopd/BFCLv3-v0":
        request.getfixturevalue("bfcl_data")
    spec = ENV_OPTIONS[env_id]
    made = gym.make(env_id, **spec["kwargs"], **({"sandbox": ReplaySandbox()} if spec.get("code") else {}))
    yield made
    made.close()


def test_every_registered_env_id_is_covered():
    assert set(ENV_OPTIONS) == set(ENV_ENTRY_POINTS)


def test_bad_options_are_refused_with_a_clear_error(env):
    unwrapped = env.unwrapped
    first = unwrapped.tasks[0].task_id

    @settings(max_examples=150, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(options=BAD_OPTIONS)
    def refused(options: Any) -> None:
        before = (unwrapped._episode, unwrapped._done)
        with pytest.raises((TypeError, ValueError)) as caught:
            env.reset(options=options)
        message = str(caught.value)
        assert unwrapped.env_id in message, message
        assert ("task_id" in message) and ("accepted" in message or "got" in message), message
        assert (unwrapped._episode, unwrapped._done) == before  # nothing changed

    refused()
    # the cases of the issue, by name
    for options, error, says in [({"task_id": [1]}, TypeError, "task_id"), ({"task_id": {"a": 1}}, TypeError, "dict"),
                                 ("str", TypeError, "str"), ([1], TypeError, "list"),
                                 ({"taskid": first}, ValueError, "'taskid'"), ({"task_id": first, "x": 1}, ValueError, "'x'"),
                                 ({"task_id": "no-such-task"}, ValueError, "no-such-task")]:
        with pytest.raises(error, match=says):
            env.reset(options=options)


@settings(max_examples=20, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(text=st.text(max_size=30))
def test_unknown_string_ids_name_the_id(text):
    env = _TEXT_ENV[0]
    if text in env.unwrapped._index:
        return
    with pytest.raises(ValueError, match="unknown task_id"):
        env.reset(options={"task_id": text})


_TEXT_ENV: list[Any] = []


@pytest.fixture(autouse=True)
def _toy_env():
    """The string-id property runs on one cheap env (every env shares the check in ``AgentEnv``)."""
    if not _TEXT_ENV:
        _TEXT_ENV.append(gym.make("lopd/ACEBench-v0", category="normal_atom_bool", language="en"))
    yield


def test_valid_options_pick_the_task(env):
    unwrapped = env.unwrapped
    chosen = unwrapped.tasks[-1].task_id
    for options in ({"task_id": chosen}, {"task_id": chosen, **{}}):
        _, info = env.reset(seed=1, options=options)
        assert info["task_id"] == chosen
    _, a = env.reset(seed=5, options=None)
    _, b = env.reset(seed=5, options={})
    _, c = env.reset(seed=5, options={"task_id": None})  # None lets the seed pick, as no option does
    assert a["task_id"] == b["task_id"] == c["task_id"]
