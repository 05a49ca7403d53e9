"""One sandbox resolver for every suite (lopd_envs.sandbox.resolve_sandbox): ``sandbox="process"``,
``LOPD_SANDBOX`` and ``allow_unisolated`` mean the same for the code suites and EnvScaler, and a bad choice
is the same clear error in both."""

from __future__ import annotations

import gymnasium as gym
import pytest

import lopd_envs
from lopd_envs.sandbox import (
    SESSION_BACKENDS,
    BubblewrapSandbox,
    DockerSandbox,
    ProcessSandbox,
    SandboxUnavailable,
    refusal,
    resolve_sandbox,
)
from lopd_envs.sandbox import select as sandbox_select

gym.register_envs(lopd_envs)

ENVSCALER = {"source": "ours", "category": "non_conversation", "prestart": False}


def envscaler(**kw):
    return gym.make("lopd/EnvScaler-v0", **{**ENVSCALER, **kw}).unwrapped


def humaneval(**kw):
    return gym.make("lopd/HumanEvalPlus-v0", **kw).unwrapped


@pytest.fixture
def no_isolation(monkeypatch):
    """A machine where neither bubblewrap nor Docker works (and no instance was handed out yet)."""
    monkeypatch.delenv("LOPD_SANDBOX", raising=False)
    monkeypatch.setattr(BubblewrapSandbox, "probe", classmethod(lambda cls: "bwrap not found"))
    monkeypatch.setattr(DockerSandbox, "probe", classmethod(lambda cls: "no engine"))
    monkeypatch.setattr(sandbox_select, "_instances", {})


def test_envscaler_accepts_process_by_name_without_another_flag(monkeypatch):
    monkeypatch.delenv("LOPD_SANDBOX", raising=False)
    env = envscaler(sandbox="process")
    assert env.sandbox.name == "process" and not env.sandbox.isolating and env.allow_unisolated
    env.close()


def test_envscaler_honours_lopd_sandbox_process(monkeypatch):
    monkeypatch.setenv("LOPD_SANDBOX", "process")
    env = envscaler()
    assert env.sandbox.name == "process" and env.allow_unisolated
    env.reset(options={"task_id": env.tasks[0].task_id})  # the unisolated worker really runs the environment
    env.close()


@pytest.mark.parametrize("where", ["argument", "LOPD_SANDBOX"])
def test_an_unknown_backend_is_the_same_clear_error_in_every_suite(where, monkeypatch):
    monkeypatch.delenv("LOPD_SANDBOX", raising=False)
    kw = {"sandbox": "bwrapp"} if where == "argument" else {}
    if where == "LOPD_SANDBOX":
        monkeypatch.setenv("LOPD_SANDBOX", "bwrapp")
    messages = []
    for make in (envscaler, humaneval):
        with pytest.raises(ValueError) as err:
            make(**kw)
        messages.append(str(err.value))
    assert messages[0] == messages[1]
    source = "sandbox" if where == "argument" else "LOPD_SANDBOX"
    assert messages[0] == (f"unknown sandbox backend: {source} must be one of 'auto', 'bubblewrap', 'docker', "
                           "'process'; got 'bwrapp' (did you mean 'bubblewrap'?)")


def test_without_an_isolating_backend_both_refuse_with_the_same_ways_out(no_isolation):
    texts = {}
    for make, what in ((envscaler, "EnvScaler's generated environment code"), (humaneval, "model-written code")):
        with pytest.raises(SandboxUnavailable) as err:
            make()
        texts[make] = text = str(err.value)
        assert text.startswith(f"no isolating sandbox backend works here, so {what} will not be run")
        assert "apt-get install bubblewrap" in text and "allow_unisolated=True" in text
        assert 'opt in to running it UNISOLATED in plain processes with LOPD_SANDBOX=process' in text
    # Docker is a way out only where it could serve
    assert "Docker engine reachable" in texts[humaneval] and "Docker engine reachable" not in texts[envscaler]


def test_without_an_isolating_backend_the_opt_ins_work_alike(no_isolation, monkeypatch):
    for kw in ({"sandbox": "process"}, {"allow_unisolated": True}):
        for env in (envscaler(**kw), humaneval(**kw)):
            assert env.sandbox.name == "process"
            env.close()
    monkeypatch.setenv("LOPD_SANDBOX", "process")
    for env in (envscaler(), humaneval()):
        assert env.sandbox.name == "process"
        env.close()


def test_docker_cannot_host_the_envscaler_worker_and_says_what_can(monkeypatch):
    monkeypatch.delenv("LOPD_SANDBOX", raising=False)
    with pytest.raises(SandboxUnavailable, match="docker backend cannot run EnvScaler's generated environment code; "
                                                 r"choose bubblewrap or process \(process runs it UNISOLATED\)"):
        envscaler(sandbox="docker")
    monkeypatch.setenv("LOPD_SANDBOX", "docker")
    with pytest.raises(SandboxUnavailable, match="docker backend cannot run"):
        envscaler()


def test_an_instance_is_the_callers_choice():
    sandbox = ProcessSandbox()
    assert resolve_sandbox(sandbox) is sandbox and refusal(sandbox) is None
    assert refusal("docker", usable=SESSION_BACKENDS).startswith("the docker backend cannot run")
