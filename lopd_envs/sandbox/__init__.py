"""Sandboxed code execution behind one interface (docs/design.md section 5).

    from lopd_envs.sandbox import get_sandbox
    sandbox = get_sandbox()                 # best backend that works here: bubblewrap > docker > process
    result = sandbox.run("print(input())", stdin="hi", timeout=2)
    result.stdout, result.backend, result.isolating

``LOPD_SANDBOX`` (``bubblewrap``, ``docker``, ``process``) forces a backend. Bubblewrap and process runs start
on warm spares, sandboxes started ahead of need that each serve exactly one run (:mod:`.spares`);
``LOPD_SANDBOX_SPARES`` fixes how many wait per kind of run (``0``: every run starts cold), and
``sandbox.close()`` kills and reaps them (they also go with the process).

The plain process backend does not isolate, so "auto" never falls back to it by itself: without an
isolating backend it raises :class:`SandboxUnavailable` with what to install. Asking for it by name
(``get_sandbox("process")``, ``LOPD_SANDBOX=process``, a code env's ``sandbox="process"``) or passing
``allow_unisolated=True`` is the explicit opt-in.
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


ISOLATING = ("bubblewrap", "docker")


def no_isolation_message(reasons: dict[str, str | None]) -> str:
    """The one error a user without an isolating backend sees: why each failed and the three ways out."""
    why = "; ".join(f"{k}: {v}" for k, v in reasons.items() if v)
    return ("no isolating sandbox backend works here, so model-written code will not be run (" + why + "). "
            "Install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap), "
            "or make a Docker engine reachable (a running dockerd and DOCKER_HOST or /var/run/docker.sock; "
            "build the local image with `lopd sandbox build-image`), "
            "or opt in to running it UNISOLATED in plain processes with LOPD_SANDBOX=process "
            "(or sandbox=\"process\" / allow_unisolated=True).")


def get_sandbox(backend: str | None = None, allow_unisolated: bool = False) -> Sandbox:
    """A shared instance of ``backend`` ("auto" or None: the best isolating backend that works here; the
    process backend only by name or with ``allow_unisolated=True``)."""
    backend = backend or os.environ.get(ENV_BACKEND) or "auto"
    with _lock:
        key = "auto+process" if backend == "auto" and allow_unisolated else backend
        if key in _instances:
            return _instances[key]
        if backend == "auto":
            reasons: dict[str, str | None] = {}
            for name in ORDER if allow_unisolated else ISOLATING:
                reasons[name] = BACKENDS[name].probe()
                if reasons[name] is None:
                    _instances[key] = _instances.get(name) or BACKENDS[name]()
                    _instances[name] = _instances[key]
                    return _instances[key]
            raise SandboxUnavailable(no_isolation_message(reasons))
        if backend not in BACKENDS:
            raise ValueError(f"unknown sandbox backend {backend!r}; choose from auto, {', '.join(ORDER)}")
        _instances[backend] = BACKENDS[backend]()
        return _instances[backend]


__all__ = ["ISOLATING", "no_isolation_message", "BACKENDS", "BubblewrapSandbox", "DockerSandbox", "GiB", "Limits", "MiB", "ProcessSandbox",
           "RunRequest", "RunResult", "Sandbox", "SandboxPool", "SandboxUnavailable", "available_backends",
           "default_workers", "get_sandbox"]
