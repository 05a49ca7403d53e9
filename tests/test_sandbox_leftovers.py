"""Leftovers and small gaps of the code sandbox (issue 24, item 10): ``env.close()`` removes the warm spares'
run folders, a malformed record on the result channel is the candidate's failure (never an exception out
of the scorer), a run keeps at most ``Limits.output`` bytes of stdout and stderr together, and the
sandbox's root holds what the interpreter loads, not the host's library folders nor OpenSSL."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lopd_envs
from lopd_envs.codeexec import valuecodec
from lopd_envs.codeexec.channel import ResultChannel
from lopd_envs.sandbox import BubblewrapSandbox, Limits, MiB, spares
from lopd_envs.sandbox.base import OutputBudget

gym.register_envs(lopd_envs)
bubblewrap = pytest.mark.skipif(BubblewrapSandbox.probe() is not None,
                                reason=f"bubblewrap unavailable here: {BubblewrapSandbox.probe()}")


class Accepting:
    """A schedule that takes every record (what matters here is that parsing one never raises)."""

    def limit(self):
        return None

    def accept(self, record):
        return True

    def watch(self, record):
        return None


TAGS = ["int", "tuple", "set", "frozenset", "dict", "complex", "bytes", "bytearray", "ndarray", "npscalar", "x"]


@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(tag=st.sampled_from(TAGS), value=st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=5)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=2)),
    max_leaves=5), unfinished=st.booleans())
def test_a_malformed_tagged_record_is_never_an_exception(tag, value, unfinished):
    """``{"$": "complex", "v": []}`` used to raise IndexError out of ``ResultChannel.finish`` (an internal
    environment error) instead of being a record that is not one (the candidate's failure)."""
    line = json.dumps({"$": tag, "v": value}).encode()
    try:
        valuecodec.loads(line)
    except (ValueError, RecursionError, MemoryError):
        pass
    channel = ResultChannel(Accepting())
    channel(line if unfinished else line + b"\n")
    channel.finish()


def test_the_unfinished_complex_record_of_the_issue():
    channel = ResultChannel(Accepting())
    channel(b'{"$": "complex", "v": []}')
    channel.finish()
    assert channel.records == [] and channel.violation is None
    with pytest.raises(ValueError, match="malformed encoded 'complex'"):
        valuecodec.loads('{"$": "complex", "v": []}')


def test_the_output_budget_counts_both_streams():
    budget = OutputBudget(100, kept_stdout=80)
    assert budget.add(OutputBudget.STDOUT, b"o" * 90) and budget.add(OutputBudget.STDERR, b"e" * 10)
    assert not budget.add(OutputBudget.STDERR, b"e" * 64)
    assert len(budget.text(1)) == 80 and len(budget.text(1)) + len(budget.text(2)) <= 100 and budget.truncated


@bubblewrap
def test_a_run_keeps_at_most_its_output_limit_in_all():
    """4 MiB - 10 bytes of stdout, then 64 KiB of stderr: 4 MiB + 64 KiB used to come back."""
    sandbox = BubblewrapSandbox(spares=0)
    code = ("import sys\nsys.stdout.write('o' * ((4 << 20) - 10))\nsys.stdout.flush()\n"
            "sys.stderr.write('e' * (64 << 10))\nsys.stderr.flush()")
    result = sandbox.run(code, timeout=20)
    assert result.truncated and len(result.stdout) + len(result.stderr) <= Limits().output


@bubblewrap
def test_closing_a_code_env_removes_its_spares_folders():
    sandbox = BubblewrapSandbox(spares=2)
    env = gym.make("lopd/HumanEvalPlus-v0", category="base", sandbox=sandbox)
    env.reset(seed=0)
    env.step("```python\ndef f():\n    return 1\n```")
    spares.drain()
    sandbox.spares.settle()
    folders = [spare.folder for ready in sandbox.spares._ready.values() for spare in ready]
    assert folders and all(folder.exists() for folder in folders)
    env.close()
    spares.drain()
    assert not any(folder.exists() for folder in folders)


@bubblewrap
def test_the_root_holds_the_interpreters_libraries_not_the_hosts():
    sandbox = BubblewrapSandbox(spares=0)
    probe = '''
import ctypes, hashlib, json, os, sqlite3, lzma, bz2, zlib
out = {"sha256": hashlib.sha256(b"x").hexdigest()[:8], "md5": hashlib.md5(b"x").hexdigest()[:8], "loaded": []}
for name in ("libssl.so.3", "libcrypto.so.3", "libssl.so.1.1", "libcrypto.so.1.1"):
    try:
        ctypes.CDLL(name)
        out["loaded"].append(name)
    except OSError:
        pass
folders = [f for f in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64") if os.path.isdir(f)]
out["libraries"] = sum(len(os.listdir(f)) for f in folders)
print(json.dumps(out))
'''
    result = sandbox.run(probe, timeout=20, memory_limit=512 * MiB)
    assert result.ok, result.stderr[-2000:]
    seen = json.loads(result.stdout)
    assert seen["loaded"] == [] and seen["sha256"] == "2d711642" and seen["md5"] == "9dd4e461"
    mounted_files = [p for p in sandbox.python.paths if not p.endswith("/") and "." in p.rsplit("/", 1)[-1]]
    assert seen["libraries"] <= len(mounted_files)
