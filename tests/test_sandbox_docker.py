"""The docker backend: a real run when an engine is reachable; otherwise its container settings are
checked against a stand-in client (no engine runs on the CI machines)."""

from __future__ import annotations

import pytest

from lopd_envs.sandbox import DockerSandbox, Limits, MiB, available_backends

ENGINE = available_backends()["docker"] is None


@pytest.mark.skipif(not ENGINE, reason="no Docker engine reachable")
def test_real_docker_run():
    sb = DockerSandbox(Limits(timeout=20))
    r = sb.run("import sys, os\nprint(sys.stdin.read(), os.getuid())", stdin="hi")
    assert r.ok and r.stdout.split() == ["hi", "65534"] and r.backend == "docker"


class _Container:
    def __init__(self, log):
        self.log, self.attrs = log, {"State": {"OOMKilled": False}}

    def start(self):
        self.log.append("start")

    def wait(self, timeout):
        self.log.append(("wait", timeout))
        return {"StatusCode": 0}

    def logs(self, stdout, stderr):
        return b"out\n" if stdout else b""

    def reload(self):
        pass

    def kill(self):
        self.log.append("kill")

    def remove(self, force):
        self.log.append("remove")


class _Client:
    def __init__(self):
        self.log, self.kwargs = [], None
        self.containers = self

    def create(self, image, command, **kwargs):
        self.image, self.command, self.kwargs = image, command, kwargs
        return _Container(self.log)


def test_container_is_locked_down():
    pytest.importorskip("docker")
    sb = object.__new__(DockerSandbox)
    sb.limits, sb.image, sb.client = Limits(timeout=3, memory=256 * MiB), "python:3.11-slim", _Client()
    r = sb.run("print('x')", stdin="data")
    kw = sb.client.kwargs
    assert r.ok and r.stdout == "out\n" and r.backend == "docker" and r.isolating
    assert kw["network_disabled"] and kw["network_mode"] == "none" and kw["read_only"]
    assert kw["user"] == "65534:65534" and kw["cap_drop"] == ["ALL"] and "no-new-privileges" in kw["security_opt"]
    assert kw["mem_limit"] == kw["memswap_limit"] == 256 * MiB and kw["pids_limit"] > 0
    assert list(kw["volumes"].values())[0] == {"bind": "/sandbox", "mode": "ro"}
    assert sb.client.command[:3] == ["python", "-I", "-S"] and sb.client.log[-1] == "remove"
