"""The training allocator settings (``lopd_train/training/allocator.py``): with ``LOPD_MALLOC=keep`` a freed block of an
activation's size is reused by the next step without page faults, where glibc's own settings map it fresh;
the default and glibc's own variables leave glibc alone; a bad value is an error."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lopd_train.training import allocator

ROOT = Path(__file__).resolve().parents[1]

PROBE = textwrap.dedent("""
    import ctypes, ctypes.util, json, resource
    from lopd_train.training import allocator
    done = allocator.configure()
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
    n, faults = 20 << 20, []  # a block of the size of a step's activation, allocated, touched and freed 3 times
    for _ in range(3):
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        p = libc.malloc(n); ctypes.memset(p, 1, n); libc.free(p)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    print(json.dumps([done, faults]))
""")


def probe(**env_overrides) -> tuple[str, list[int]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "LOPD_MALLOC"))}
    env.update(env_overrides, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    import json

    done, faults = json.loads(out.stdout.strip().splitlines()[-1])
    return done, faults


@pytest.mark.skipif(allocator._glibc() is None, reason="glibc only")
def test_freed_block_is_reused_without_page_faults():
    pages = (20 << 20) // 4096
    done, faults = probe(LOPD_MALLOC="keep")
    assert done == "keep"
    assert faults[0] > pages * 0.5  # the first touch faults (the measurement sees faults)
    assert faults[1] < pages * 0.05 and faults[2] < pages * 0.05, faults
    # glibc's own settings: the same second block comes fresh from the kernel (what the settings avoid)
    done, faults = probe()  # the default
    assert done == "system"
    assert faults[1] > pages * 0.5, faults


def test_explicit_choices_are_left_alone(monkeypatch):
    for env in ({}, {"LOPD_MALLOC": "system"}, {"LOPD_MALLOC": "keep", "MALLOC_MMAP_THRESHOLD_": "1048576"},
                {"LOPD_MALLOC": "keep", "MALLOC_TRIM_THRESHOLD_": "0"}):
        monkeypatch.setattr(allocator, "_configured", None)
        for k in ("LOPD_MALLOC", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"):
            monkeypatch.delenv(k, raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        assert allocator.configure() == "system", env


def test_bad_value_is_an_error(monkeypatch):
    monkeypatch.setattr(allocator, "_configured", None)
    monkeypatch.setenv("LOPD_MALLOC", "jemalloc")
    with pytest.raises(ValueError, match="LOPD_MALLOC"):
        allocator.configure()


TRIM_PROBE = textwrap.dedent("""
    import ctypes, ctypes.util, json
    from lopd_train.training import allocator
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
    def rss():
        return int(open("/proc/self/statm").read().split()[1]) * 4096
    blocks = [libc.malloc(64 << 10) for _ in range(4000)]  # 250 MiB of small heap blocks (below the mmap threshold)
    for p in blocks:
        ctypes.memset(p, 1, 64 << 10)
    keep = libc.malloc(64)  # a live block above them: the heap's top cannot shrink by itself
    for p in blocks:
        libc.free(p)
    before = rss()
    released = allocator.trim()
    print(json.dumps([released, before, rss()]))
""")


@pytest.mark.skipif(allocator._glibc() is None, reason="glibc only")
def test_trim_hands_a_freed_heap_back_and_keep_leaves_it():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "LOPD_MALLOC"))}
    env["PYTHONPATH"] = str(ROOT)
    import json

    out = subprocess.run([sys.executable, "-c", TRIM_PROBE], env=env, capture_output=True, text=True, check=True)
    released, before, after = json.loads(out.stdout.strip().splitlines()[-1])
    assert released and before - after > 150 << 20, (before, after)  # most of the 250 MiB went back
    out = subprocess.run([sys.executable, "-c", TRIM_PROBE], env={**env, "LOPD_MALLOC": "keep"}, capture_output=True,
                         text=True, check=True)
    released, before, after = json.loads(out.stdout.strip().splitlines()[-1])
    assert not released and before - after < 10 << 20


LEAN_PROBE = textwrap.dedent("""
    import ctypes, ctypes.util, json
    from lopd_train.training import allocator
    done = allocator.configure()
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
    def rss():
        return int(open("/proc/self/statm").read().split()[1]) * 4096
    first = libc.malloc(8 << 20); ctypes.memset(first, 1, 8 << 20); libc.free(first)  # glibc raises its threshold
    blocks = [libc.malloc(2 << 20) for _ in range(100)]  # 200 MiB of activation-sized blocks
    for p in blocks:
        ctypes.memset(p, 1, 2 << 20)
    before = rss()
    for p in blocks[:-1]:  # all but the last one, which holds the heap's top
        libc.free(p)
    print(json.dumps([done, before - rss()]))
""")


@pytest.mark.skipif(allocator._glibc() is None, reason="glibc only")
def test_lean_hands_freed_activations_back_at_once_where_glibc_keeps_them():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "LOPD_MALLOC"))}
    env["PYTHONPATH"] = str(ROOT)
    import json

    runs = {}
    for choice in ("lean", "system"):
        out = subprocess.run([sys.executable, "-c", LEAN_PROBE], env={**env, "LOPD_MALLOC": choice},
                             capture_output=True, text=True, check=True)
        runs[choice] = json.loads(out.stdout.strip().splitlines()[-1])
    assert runs["lean"][0] == "lean" and runs["lean"][1] > 150 << 20, runs  # the freed 198 MiB left the process
    assert runs["system"][0] == "system" and runs["system"][1] < 20 << 20, runs  # glibc's heap kept them
