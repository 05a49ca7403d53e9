"""Sandboxed code execution behind one interface (DESIGN.md section 5).

    from lopd_envs.sandbox import get_sandbox
    sandbox = get_sandbox()                 # best backend that works here: bubblewrap > docker > process
    result = sandbox.run("print(input())", stdin="hi", timeout=2)
    result.stdout, result.backend, result.isolating

``LOPD_SANDBOX`` (``bubblewrap``, ``docker``, ``process``) forces a backend.
"""

from __future__ import annotations

import os
import threading

from lopd_envs.sandbox.base import GiB, Limits, MiB, RunRequest, RunResult, Sandbox, SandboxUnavailable
from lopd_envs.sandbox.bubblewrap import BubblewrapSandbox
from lopd_envs.sandbox.docker import DockerSandbox
from lopd_envs.sandbox.pool import SandboxPool, default_workers
from lopd_envs.sandbox.process import ProcessSandbox

BACKENDS: dict[str, type[Sandbox]] = {"bubblewrap": BubblewrapSandbox, "docker": DockerSandbox,
                                      "process": ProcessSandbox}
ORDER = ("bubblewrap", "docker", "process")
ENV_BACKEND = "LOPD_SANDBOX"

_lock = threading.Lock()
_instances: dict[str, Sandbox] = {}


def available_backends() -> dict[str, str | None]:
    """Each backend with ``None`` when it works here, else why not."""
    return {name: BACKENDS[name].probe() for name in ORDER}


def get_sandbox(backend: str | None = None) -> Sandbox:
    """A shared instance of ``backend`` ("auto" or None: the best that works here)."""
    backend = backend or os.environ.get(ENV_BACKEND) or "auto"
    with _lock:
        if backend in _instances:
            return _instances[backend]
        if backend == "auto":
            reasons = {}
            for name in ORDER:
                reasons[name] = BACKENDS[name].probe()
                if reasons[name] is None:
                    _instances["auto"] = _instances.get(name) or BACKENDS[name]()
                    _instances[name] = _instances["auto"]
                    return _instances["auto"]
            raise SandboxUnavailable("no sandbox backend works here: " + "; ".join(f"{k}: {v}" for k, v in reasons.items()))
        if backend not in BACKENDS:
            raise ValueError(f"unknown sandbox backend {backend!r}; choose from auto, {', '.join(ORDER)}")
        _instances[backend] = BACKENDS[backend]()
        return _instances[backend]


__all__ = ["BACKENDS", "BubblewrapSandbox", "DockerSandbox", "GiB", "Limits", "MiB", "ProcessSandbox",
           "RunRequest", "RunResult", "Sandbox", "SandboxPool", "SandboxUnavailable", "available_backends",
           "default_workers", "get_sandbox"]
