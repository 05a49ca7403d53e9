"""Many sandboxed runs at once. Each run is a child process, so threads are enough to keep every core
busy: the pool only waits on pipes. Results come back in submission order."""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Self

from lopd_envs.sandbox.base import RunRequest, RunResult, Sandbox, default_workers


class SandboxPool:
    def __init__(self, sandbox: Sandbox | None = None, workers: int | None = None):
        if sandbox is None:
            from lopd_envs.sandbox.select import get_sandbox  # the backends' registry: not at import time
            sandbox = get_sandbox()
        self.sandbox = sandbox
        self.workers = workers or default_workers()
        self._executor = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="lopd-sandbox")

    def submit(self, request: RunRequest) -> Future[RunResult]:
        return self._executor.submit(self.sandbox.run, request.code, request.stdin, request.files,
                                     request.timeout, request.memory_limit)

    def map(self, requests: Iterable[RunRequest]) -> list[RunResult]:
        return [f.result() for f in [self.submit(r) for r in requests]]

    def call(self, fn, items: Iterable) -> list:
        """Apply ``fn(item)`` (which itself runs sandboxes) over items with the pool's parallelism."""
        return list(self._executor.map(fn, items))

    def close(self) -> None:
        self._executor.shutdown(wait=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
