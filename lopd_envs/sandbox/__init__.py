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
(``get_sandbox("process")``, ``LOPD_SANDBOX=process``, an env's ``sandbox="process"``) or passing
``allow_unisolated=True`` is the explicit opt-in. Every suite resolves its sandbox through
:func:`resolve_sandbox` (:func:`refusal` checks a choice without starting anything), so these mean the same
for the code suites and EnvScaler.
"""

from lopd_envs.sandbox.base import GiB, Limits, MiB, RunRequest, RunResult, Sandbox, SandboxUnavailable, default_workers
from lopd_envs.sandbox.bubblewrap import BubblewrapSandbox
from lopd_envs.sandbox.docker import DockerSandbox
from lopd_envs.sandbox.pool import SandboxPool
from lopd_envs.sandbox.process import ProcessSandbox
from lopd_envs.sandbox.select import (
                                    BACKENDS,
                                    ENV_BACKEND,
                                    ISOLATING,
                                    ORDER,
                                    SESSION_BACKENDS,
                                    available_backends,
                                    backend_choice,
                                    get_sandbox,
                                    no_isolation_message,
                                    refusal,
                                    resolve_sandbox,
)

__all__ = [
                                    "BACKENDS",
                                    "ENV_BACKEND",
                                    "ISOLATING",
                                    "ORDER",
                                    "SESSION_BACKENDS",
                                    "BubblewrapSandbox",
                                    "DockerSandbox",
                                    "GiB",
                                    "Limits",
                                    "MiB",
                                    "ProcessSandbox",
                                    "RunRequest",
                                    "RunResult",
                                    "Sandbox",
                                    "SandboxPool",
                                    "SandboxUnavailable",
                                    "available_backends",
                                    "backend_choice",
                                    "default_workers",
                                    "get_sandbox",
                                    "no_isolation_message",
                                    "refusal",
                                    "resolve_sandbox",
]
