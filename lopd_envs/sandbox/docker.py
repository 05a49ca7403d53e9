"""Docker backend (the ``docker`` SDK), for machines where an engine is reachable but bubblewrap is not.

Each run is a fresh container of a Python image: no network, read-only root file system, a size-capped
``/tmp`` tmpfs, uid 65534, all capabilities dropped, ``no-new-privileges``, a memory cgroup (swap
included), a pids limit and the same rlimits as the other backends (applied by the bootstrap). The
program folder is bind-mounted read-only, so the engine must share this host's file system (a local
engine). Starting a container costs hundreds of milliseconds: prefer bubblewrap when both work.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from lopd_envs.sandbox.base import BOOTSTRAP, Interact, Limits, RunResult, Sandbox, SandboxUnavailable

DEFAULT_IMAGE = os.environ.get("LOPD_SANDBOX_IMAGE", "python:3.11-slim")
STDIN_FILE = ".stdin"


class DockerSandbox(Sandbox):
    name = "docker"
    isolating = True

    def __init__(self, limits: Limits | None = None, image: str = DEFAULT_IMAGE):
        super().__init__(limits)
        problem = self.probe(image)
        if problem:
            raise SandboxUnavailable(problem)
        import docker

        self.image = image
        self.client = docker.from_env(timeout=30)

    def _run(self, wd: Path, stdin: bytes, limits: Limits, interact: Interact | None = None) -> RunResult:
        import time

        import docker
        from requests.exceptions import ConnectionError as ReqConnectionError
        from requests.exceptions import ReadTimeout

        (wd / STDIN_FILE).write_bytes(stdin)
        os.chmod(wd / STDIN_FILE, 0o644)
        # the bootstrap reads stdin from the mounted file: the SDK's attach protocol is not needed
        boot = f"import os; os.dup2(os.open('/sandbox/{STDIN_FILE}', os.O_RDONLY), 0)\n" + BOOTSTRAP
        start = time.monotonic()
        container = self.client.containers.create(
            self.image, ["python", "-I", "-S", "-c", boot, *limits.rlimit_args(), "/sandbox/main.py"],
            user="65534:65534", working_dir="/sandbox", network_disabled=True, network_mode="none",
            read_only=True, tmpfs={"/tmp": f"size={max(limits.file_size, 1 << 20)},mode=1777"},
            volumes={str(wd): {"bind": "/sandbox", "mode": "ro"}}, mem_limit=limits.memory,
            memswap_limit=limits.memory, pids_limit=limits.processes + 4, nano_cpus=1_000_000_000,
            cap_drop=["ALL"], security_opt=["no-new-privileges"], environment={"HOME": "/tmp", "LANG": "C.UTF-8"},
            log_config={"type": "json-file", "config": {"max-size": str(limits.output * 2)}}, detach=True)
        timed_out = False
        try:
            container.start()
            try:
                exit_code = container.wait(timeout=limits.timeout)["StatusCode"]
            except (ReadTimeout, ReqConnectionError):
                timed_out, exit_code = True, None
                container.kill()
            stdout = container.logs(stdout=True, stderr=False)
            stderr = container.logs(stdout=False, stderr=True)
            container.reload()
            oom = bool(container.attrs.get("State", {}).get("OOMKilled"))
        finally:
            try:
                container.remove(force=True)
            except docker.errors.APIError:
                pass
        truncated = len(stdout) + len(stderr) > limits.output
        out = stdout[: limits.output].decode("utf-8", "replace")
        err = stderr[: max(0, limits.output - len(stdout))].decode("utf-8", "replace")
        if interact is not None:  # no streaming here: the program already ran to its end
            interact(stdout[: limits.output])
        oom = oom or (not timed_out and exit_code not in (0, None) and err.rstrip().endswith("MemoryError"))
        return RunResult(out, err, exit_code, timed_out, oom, time.monotonic() - start, self.name, True,
                         truncated=truncated)

    @classmethod
    def probe(cls, image: str = DEFAULT_IMAGE) -> str | None:
        return _probe(image)


@functools.lru_cache(maxsize=None)
def _probe(image: str) -> str | None:
    try:
        import docker
    except ImportError:
        return "the docker SDK is not installed (pip install 'lopd[docker]')"
    try:
        client = docker.from_env(timeout=5)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure means no engine
        return f"no Docker engine reachable: {type(exc).__name__}"
    try:
        client.images.get(image)
    except Exception:  # noqa: BLE001
        return f"docker image {image} is not present (docker pull {image})"
    return None
