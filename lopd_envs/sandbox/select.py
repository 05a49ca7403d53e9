"""Which sandbox backend runs here: the registry of backends, their probes, the one resolver every suite
uses (:func:`resolve_sandbox`, and :func:`get_sandbox` for a name) and the shared instances it hands out.

One resolver, so that ``sandbox="process"``, ``LOPD_SANDBOX`` and ``allow_unisolated`` mean the same in every
suite: naming a backend (as the argument, else in ``LOPD_SANDBOX``) picks it, and naming ``process`` is the
explicit opt-in to running untrusted code unisolated; "auto" takes the best isolating backend that works
here and falls back to ``process`` only with ``allow_unisolated=True``. A suite that needs more of a backend
than one-shot runs (EnvScaler's long-lived worker) passes the backends that can serve it as ``usable``.

A module of its own so that the pool (which falls back to :func:`get_sandbox`) and the backends never import
the package that imports them."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

from lopd_envs.options import check_choice
from lopd_envs.sandbox.base import Sandbox, SandboxUnavailable
from lopd_envs.sandbox.bubblewrap import BubblewrapSandbox
from lopd_envs.sandbox.docker import DockerSandbox
from lopd_envs.sandbox.process import ProcessSandbox

BACKENDS: dict[str, type[Sandbox]] = {"bubblewrap": BubblewrapSandbox, "docker": DockerSandbox,
                                      "process": ProcessSandbox}
ORDER = ("bubblewrap", "docker", "process")
ENV_BACKEND = "LOPD_SANDBOX"
ISOLATING = ("bubblewrap", "docker")
#: The backends that can host a long-lived worker (:class:`~lopd_envs.sandbox.session.SandboxSession`); a
#: Docker container serves one-shot runs only.
SESSION_BACKENDS = ("bubblewrap", "process")
CODE = "model-written code"  # what the sandbox runs, for the error messages

_lock = threading.Lock()
_instances: dict[str, Sandbox] = {}


def available_backends() -> dict[str, str | None]:
    """Each backend with ``None`` when it works here, else why not."""
    return {name: BACKENDS[name].probe() for name in ORDER}


def no_isolation_message(reasons: dict[str, str | None], purpose: str = CODE,
                         usable: Sequence[str] = ORDER) -> str:
    """The one error a user without an isolating backend sees: why each failed and the ways out (Docker
    only where it could serve)."""
    why = "; ".join(f"{k}: {v}" for k, v in reasons.items() if v)
    docker = ("or make a Docker engine reachable (a running dockerd and DOCKER_HOST or /var/run/docker.sock; "
              "build the local image with `lopd sandbox build-image`), " if "docker" in usable else "")
    return (f"no isolating sandbox backend works here, so {purpose} will not be run (" + why + "). "
            "Install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap), "
            + docker +
            "or opt in to running it UNISOLATED in plain processes with LOPD_SANDBOX=process "
            "(or sandbox=\"process\" / allow_unisolated=True).")


def backend_choice(backend: str | None = None) -> str:
    """The backend asked for: ``backend``, else ``LOPD_SANDBOX``, else ``"auto"``. An unknown name is a
    ``ValueError`` naming where it came from, the accepted names and a close match."""
    name, source = (backend, "sandbox") if backend else (os.environ.get(ENV_BACKEND) or "auto", ENV_BACKEND)
    try:
        check_choice(source, name, ("auto", *ORDER))
    except ValueError as exc:
        raise ValueError(f"unknown sandbox backend: {exc}") from None
    return name


def _unusable(name: str, usable: Sequence[str], purpose: str) -> str | None:
    """Why our backend ``name`` cannot serve this suite (None: it can, or it is a backend of the caller's own
    making, taken as given: an instance's name need not be one of ours)."""
    if name in usable or name not in BACKENDS:
        return None
    return (f"the {name} backend cannot run {purpose}; choose " + " or ".join(usable)
            + (" (process runs it UNISOLATED)" if "process" in usable else ""))


def _auto_order(usable: Sequence[str], allow_unisolated: bool) -> tuple[str, ...]:
    return tuple(n for n in ORDER if n in usable and (allow_unisolated or n in ISOLATING))


def refusal(sandbox: str | Sandbox | None = None, allow_unisolated: bool = False, *,
            usable: Sequence[str] = ORDER, purpose: str = CODE) -> str | None:
    """Why :func:`resolve_sandbox` would refuse this choice here (None: it would not), by probing only: a
    constructor can refuse at ``make`` time without starting a sandbox. An unknown name raises
    ``ValueError``."""
    if isinstance(sandbox, Sandbox):
        return _unusable(sandbox.name, usable, purpose)
    name = backend_choice(sandbox)
    if name != "auto":
        return _unusable(name, usable, purpose)
    if any(n not in ISOLATING for n in _auto_order(usable, allow_unisolated)):
        return None  # the unisolated fallback always works
    reasons = {n: BACKENDS[n].probe() if n in usable else _unusable(n, usable, purpose) for n in ISOLATING}
    return None if any(r is None for r in reasons.values()) else no_isolation_message(reasons, purpose, usable)


def resolve_sandbox(sandbox: str | Sandbox | None = None, allow_unisolated: bool = False, *,
                    usable: Sequence[str] = ORDER, purpose: str = CODE) -> Sandbox:
    """The sandbox a suite runs ``purpose`` in: an instance as given (the caller chose it; one of our own
    backends that cannot serve this suite is refused, a backend of the caller's own making is taken as it is),
    else :func:`get_sandbox` of the name. ``usable``: the backends that can serve this suite; another one named
    is :class:`SandboxUnavailable` saying which can."""
    if isinstance(sandbox, Sandbox):
        why = _unusable(sandbox.name, usable, purpose)
        if why:
            raise SandboxUnavailable(why)
        return sandbox
    return get_sandbox(sandbox, allow_unisolated, usable=usable, purpose=purpose)


def get_sandbox(backend: str | None = None, allow_unisolated: bool = False, *,
                usable: Sequence[str] = ORDER, purpose: str = CODE) -> Sandbox:
    """A shared instance of ``backend`` (None: ``LOPD_SANDBOX``, else "auto"; "auto": the best isolating
    backend of ``usable`` that works here, the process backend only by name or with
    ``allow_unisolated=True``)."""
    backend = backend_choice(backend)
    why = _unusable(backend, usable, purpose) if backend != "auto" else None
    if why:
        raise SandboxUnavailable(why)
    with _lock:
        order = _auto_order(usable, allow_unisolated)
        key = backend if backend != "auto" else "auto:" + "+".join(order)
        if key in _instances:
            return _instances[key]
        if backend == "auto":
            reasons: dict[str, str | None] = {n: _unusable(n, usable, purpose) for n in ISOLATING if n not in usable}
            for name in order:
                reasons[name] = BACKENDS[name].probe()
                if reasons[name] is None:
                    _instances[key] = _instances.get(name) or BACKENDS[name]()
                    _instances[name] = _instances[key]
                    return _instances[key]
            raise SandboxUnavailable(no_isolation_message(reasons, purpose, usable))
        _instances[backend] = BACKENDS[backend]()
        return _instances[backend]
