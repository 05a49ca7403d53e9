"""The host side of an episode's isolated worker: one sandboxed interpreter holding one environment instance.

EnvScaler's environment classes and check functions are LLM-written Python. They run only inside
:mod:`.worker_program`, in a :class:`~lopd_envs.sandbox.session.SandboxSession` (bubblewrap; the plain
process backend only on the explicit opt-in every suite shares: ``sandbox="process"``, ``LOPD_SANDBOX=process``
or ``allow_unisolated=True``). This module turns the RPC into typed outcomes and
never raises for anything the worker does: a deadline, a crash, or a malformed reply become an outcome
with ``status="dead"`` and the worker is gone (killed and reaped). Replies are validated field by field;
a verdict counts as passed only when the reply says exactly ``true``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lopd_envs.sandbox import SESSION_BACKENDS, GiB, Limits, MiB, Sandbox
from lopd_envs.sandbox import resolve_sandbox as resolve
from lopd_envs.sandbox.session import CHANNEL, SandboxSession, SessionError

CALL_TIMEOUT = 5.0  # seconds per tool call, enforced from the host
CHECK_TIMEOUT = 5.0  # seconds per check function (the worker's own deadline; the host adds its own)
CHECK_SLACK = 0.5  # seconds per check for the worker's fork, collection and clearing of the sandbox
CREATE_CALLS, CREATE_TIMEOUT_FLOOR = 3, 2.0  # building the instance may take three calls' time (at least 2 s)
MAX_RESULT_CHARS = 100_000
#: The worker's limits: the address space of the interpreter and its forked checks, a CPU budget for the
#: whole episode (RLIMIT_CPU is cumulative), the private /tmp size, processes per sandbox uid.
WORKER_LIMITS = Limits(timeout=600.0, memory=1 * GiB, cpu_time=600.0, processes=16, file_size=8 * MiB)


@functools.lru_cache(maxsize=1)
def worker_source() -> str:
    return CHANNEL + Path(__file__).with_name("worker_program.py").read_text(encoding="utf-8")


@dataclass(frozen=True)
class CallOutcome:
    """``ok``: ``text`` is the result's string form. ``invalid``: no such method (official: "Invalid
    action"). ``exception``: the method raised; ``text`` is the traceback. ``dead``: the worker was killed
    or crashed (deadline, memory, a broken reply); the episode cannot go on."""

    status: str
    text: str
    failed: bool = True  # for the trace: False only for a result that does not report a failure


@dataclass(frozen=True)
class Verdict:
    passed: bool
    error: str | None = None


#: What the worker runs, for the sandbox's error messages.
PURPOSE = "EnvScaler's generated environment code"


def resolve_sandbox(sandbox: str | Sandbox | None, allow_unisolated: bool) -> Sandbox:
    """The backend for workers, by the rules every suite shares (:func:`lopd_envs.sandbox.resolve_sandbox`:
    ``sandbox="process"`` or ``LOPD_SANDBOX=process`` is the opt-in to running unisolated, "auto" takes the best
    isolating backend), among those that can host a long-lived worker (bubblewrap, process)."""
    return resolve(sandbox, allow_unisolated, usable=SESSION_BACKENDS, purpose=PURPOSE)


class EnvWorker:
    """One environment instance in one sandboxed worker, for one episode."""

    def __init__(self, sandbox: Sandbox, allow_unisolated: bool = False, call_timeout: float = CALL_TIMEOUT,
                 check_timeout: float = CHECK_TIMEOUT, limits: Limits = WORKER_LIMITS):
        self.call_timeout, self.check_timeout = call_timeout, check_timeout
        self.session = SandboxSession(worker_source(), sandbox, limits, allow_unisolated=allow_unisolated)
        self.error: str | None = None  # why the worker died, once it has

    @property
    def alive(self) -> bool:
        return self.error is None and self.session.alive

    def _request(self, message: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        if self.error is not None:
            return None
        try:
            reply = self.session.request(message, timeout)
        except SessionError as exc:
            self.error = f"{exc.kind}: {exc}"
            return None
        if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
            self.error = "bad_reply: the worker's reply is not an object with a boolean 'ok'"
            self.session.close()
            return None
        return reply

    def create(self, code: str, class_name: str, init_config: Any) -> str | None:
        """Build the instance; ``None`` on success, else why not."""
        reply = self._request({"op": "create", "code": code, "class_name": class_name, "init_config": init_config},
                              max(CREATE_TIMEOUT_FLOOR, CREATE_CALLS * self.call_timeout))
        if reply is None:
            return f"the environment worker failed while building the environment ({self.error})"
        if not reply["ok"]:
            return str(reply.get("error", "unknown error"))[:4000]
        return None

    def call(self, name: str, arguments: dict[str, Any], names: Sequence[str] | None = None) -> CallOutcome:
        message = {"op": "call", "name": name, "arguments": arguments, "max_chars": MAX_RESULT_CHARS,
                   "names": list(names) if names is not None else None}
        reply = self._request(message, self.call_timeout)
        if reply is None:
            return CallOutcome("dead", f"Error: <Exception>\nthe environment worker was stopped: {self.error}")
        if reply["ok"] and isinstance(reply.get("result"), str):
            return CallOutcome("ok", reply["result"], reply.get("failed") is not False)
        if reply.get("invalid") is True:
            return CallOutcome("invalid", "Error: Invalid action")
        return CallOutcome("exception", str(reply.get("error", "Error: <Exception>"))[:MAX_RESULT_CHARS])

    def snapshot(self, which: str = "final") -> dict[str, Any] | None:
        reply = self._request({"op": "snapshot", "which": which}, self.call_timeout)
        if reply is None or not reply["ok"] or not isinstance(reply.get("state"), dict):
            return None
        return reply["state"]

    def check(self, funcs: Sequence[str], states: Sequence[str] = ("final",), shared: bool = False
              ) -> list[list[Verdict]]:
        """One verdict per check function, in order, for each of ``states`` (``"final"``, ``"initial"``).
        ``shared``: the checks of a state see one state object, as the reference's (official grading);
        otherwise each check gets its own copy. A dead worker or a malformed reply fails every check (it
        never passes one)."""
        funcs, states = list(funcs), list(states)
        message = {"op": "check", "funcs": funcs, "states": states, "timeout": self.check_timeout, "shared": shared}
        # The checks run one after another, each under the worker's own deadline, and the sandbox is cleared
        # after each: removing what a check wrote takes no longer than the check took to write it, hence twice
        # the deadline per check. This host deadline is only the net under a wedged worker.
        budget = (2 * self.check_timeout + CHECK_SLACK) * len(funcs) * len(states) + self.call_timeout
        reply = self._request(message, budget)
        results = reply.get("results") if reply is not None and reply["ok"] else None
        if not (isinstance(results, list) and len(results) == len(states)
                and all(isinstance(r, list) and len(r) == len(funcs) for r in results)):
            why = self.error or "the worker returned no verdicts"
            return [[Verdict(False, f"not run: {why}") for _ in funcs] for _ in states]
        return [[self._verdict(item) for item in per_state] for per_state in results]

    @staticmethod
    def _verdict(item: Any) -> Verdict:
        if not isinstance(item, dict):
            return Verdict(False, "malformed verdict")
        error = item.get("error")
        return Verdict(item.get("passed") is True, str(error)[:1000] if error is not None else None)

    def close(self) -> None:
        self.session.close()
