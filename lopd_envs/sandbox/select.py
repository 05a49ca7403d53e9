"""Which sandbox backend runs here: the registry of backends, their probes and the shared instances that
:func:`get_sandbox` hands out (the package's public entry point, re-exported by ``lopd_envs.sandbox``).

A module of its own so that the pool (which falls back to :func:`get_sandbox`) and the backends never import
the package that imports them."""

from __future__ import annotations

import os
import threading

from lopd_envs.sandbox.base import Sandbox, SandboxUnavailable
from lopd_envs.sandbox.bubblewrap import BubblewrapSandbox
from lopd_envs.sandbox.docker import DockerSandbox
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
