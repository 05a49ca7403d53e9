"""How the training process's C heap hands memory back to the kernel (glibc only; a no-op elsewhere).

Why: glibc maps a large block (above ``M_MMAP_THRESHOLD``, which it raises on its own up to 32 MiB as large
blocks are freed) fresh from the kernel and unmaps it when freed, and it trims the top of the heap once more
than ``M_TRIM_THRESHOLD`` lies free there. A training step allocates and frees the same few gigabytes of
activations every step, and every page it gets fresh costs a page fault on first touch. In LOPD's update the
composer's encoder graph and the teacher's graph are alive while the student runs its forward, so the heap has
no room left from the last step and the student's activations come fresh: measured with
``benchmarks/trainer_step.py`` on the study's shape (SmolLM2-135M, float32, 4 tasks x 2 rollouts), LOPD's
student forward took 26.3 s against GRPO's 11.8 s for the same pass, with 781 thousand minor page faults
against none.

:func:`configure` with ``LOPD_MALLOC=keep`` makes every block come from the heap (``M_MMAP_MAX`` 0) and the
heap never shrink (``M_TRIM_THRESHOLD`` -1), so freed memory stays in the process for the next step: LOPD's
update then took 70.4 s instead of 86.8 s (student forward 14.0 s, no faults), at the same peak. A first
version that only raised the mmap threshold to its maximum (32 MiB) and the trim threshold to 2 GiB (mallopt
takes a C int) removed less than half of the faults (445 thousand left): an 8 GB update frees more than 2 GiB at
the heap's top, which was trimmed before the next step.

``LOPD_MALLOC=lean`` does the opposite: every block of ``LEAN_MMAP_BYTES`` (1 MiB) or more is mapped fresh and
unmapped when freed (``M_MMAP_THRESHOLD`` fixed, which also stops glibc raising it), so the resident set follows
what is alive. With glibc's defaults an update's activations of up to 32 MiB come from the heap, whose freed
middle stays resident: measured with ``benchmarks/trainer_step.py`` on the README main job's shape (2 tasks x 3
rollouts of an 850-token prompt, 48 sampled tokens, J = 1, float32, the teacher's pass checkpointed), LOPD's
update held at most 2.07 GB and peaked at 5.46 GB resident; with ``lean`` the same update peaked at 3.37 GB.
Its cost is a page fault on every first touch of those blocks, every step: 9.96 million minor faults
against 1.39 million, and 27.9 s of system CPU time against 5.0 s, for the process (set-up and one update).

**Both are off by default** (``LOPD_MALLOC=system``: glibc's own settings). The same setting made the README main
job's composer cold start ~3x slower on the same machine and load (62-77 s a step against 20 s with glibc's
defaults, 2026-12-04; the cause is not found yet), which costs a LOPD run more than its update gains. glibc's
own ``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_TRIM_THRESHOLD_`` in the environment win over ``keep``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
M_MMAP_MAX = -4
LEAN_MMAP_BYTES = 1 << 20  # LOPD_MALLOC=lean: blocks this size or larger are mapped, and unmapped when freed
NO_TRIM = -1  # M_TRIM_THRESHOLD -1: never trim (glibc's manual: "disables trimming completely")
NO_MMAP = 0  # M_MMAP_MAX 0: never serve a block by mmap

_configured: str | None = None


def _glibc():
    """The C library when it is glibc (it has ``mallopt`` and ``gnu_get_libc_version``), else None."""
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    if not (hasattr(libc, "mallopt") and hasattr(libc, "gnu_get_libc_version")):
        return None
    return libc


def configure() -> str:
    """Apply ``LOPD_MALLOC`` once per process; returns what was done: ``"keep"`` or ``"lean"`` (the settings
    above applied), ``"system"`` (the default, or glibc's own variables in the environment), or
    ``"unavailable"`` (``keep`` or ``lean`` asked, but not glibc, or ``mallopt`` refused)."""
    global _configured
    if _configured is not None:
        return _configured
    choice = os.environ.get("LOPD_MALLOC", "system").strip().lower()
    if choice not in ("keep", "lean", "system"):
        raise ValueError(f"LOPD_MALLOC={choice!r}: expected 'system' (the default), 'keep' or 'lean'")
    if choice == "system" or any(k in os.environ for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")):
        _configured = "system"
        return _configured
    libc = _glibc()
    if choice == "keep":
        ok = bool(libc) and bool(libc.mallopt(M_MMAP_MAX, NO_MMAP)) and bool(libc.mallopt(M_TRIM_THRESHOLD, NO_TRIM))
    else:
        ok = bool(libc) and bool(libc.mallopt(M_MMAP_THRESHOLD, LEAN_MMAP_BYTES))
    _configured = choice if ok else "unavailable"
    if not ok:
        log.info("allocator settings not applied (not glibc, or mallopt refused them)")
    return _configured


def trim() -> bool:
    """Hand the heap's free pages back to the kernel (glibc's ``malloc_trim(0)``), between phases whose working
    sets differ (bank, cold start, held-out evaluation, update): glibc keeps what a phase once held, so the
    resident size after an 8 GB update stays near 8 GB with 0.4 GB in use (measured on the README main job:
    7.7 GB resident, 1.4 GB after a trim). Skipped under ``LOPD_MALLOC=keep``, whose point is to keep it.
    Returns whether memory was released."""
    if configure() == "keep":
        return False
    libc = _glibc()
    if libc is None or not hasattr(libc, "malloc_trim"):
        return False
    return bool(libc.malloc_trim(0))
