"""Running a function on test inputs inside the sandbox, its return values brought back as plain data.

The program sent into the sandbox is the value codec, the request reader (``harness_io.py``) and a harness
(``functest_harness.py`` here, or a suite's own, e.g. LiveCodeBench's). Verdicts are not decided here;
each suite compares outputs with its own benchmark's rules in the scorer's process.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lopd_envs.codeexec import precompiled, valuecodec
from lopd_envs.codeexec.channel import ResultChannel
from lopd_envs.sandbox import GiB, MiB, RunResult, Sandbox

_HERE = Path(__file__).resolve().parent
FUNCTEST_HARNESS = _HERE / "functest_harness.py"


@functools.cache
def harness_source(harness: Path = FUNCTEST_HARNESS) -> str:
    """A sandbox program: the value codec, the request reader, then ``harness`` (all standard library)."""
    parts = (_HERE / "valuecodec.py", _HERE / "harness_io.py", Path(harness))
    return "\n\n".join(part.read_text() for part in parts)


class Expected:
    """The value of a result the host recognised from its bytes as exactly the expected output of its
    input (see :attr:`Group.expected_json`); it is never decoded. A judge reads it as "equal to the
    expected value": same JSON bytes from the one value codec are the same value, types included."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<the expected output>"


EXPECTED = Expected()
#: Marks a record recognised from its digest (a parsed record cannot hold it): the harness awaits an answer
MATCHED = object()


@dataclass
class Group:
    """One set of inputs run against a fresh ``exec`` of the code (evalplus: ``base`` or ``plus``).

    ``expected_json(i)``, where the suite can give it cheaply, is the value codec's encoding
    (``valuecodec.dumps``) of what input ``i`` must return, or None. A result record whose value has
    exactly those bytes arrives as :data:`EXPECTED` without being parsed: decoding a candidate's
    100 MB answer only to find it equal was most of the scorer's time on the tasks with huge outputs.
    The suite leaves out values whose equality is not byte equality (NaN, opaque values, numpy).

    ``transfer[i]``: seconds the host adds to input ``i``'s time limit for encoding its result and bringing
    it back (the harness's timer covers the call alone, as the benchmarks' do; the host's clock also sees
    the serialisation, which for a 10 MB output is as long as the call)."""

    name: str
    inputs: Sequence[Any]
    time_limits: Sequence[float] | None = None
    budget: float | None = None
    encoded: str | None = None  # the inputs already encoded (see ``encode_inputs``), reused across runs
    expected_json: Callable[[int], bytes | None] | None = None
    transfer: Sequence[float] | None = None
    #: input -> :func:`valuecodec.digest` of its expected output, for the big ones (the suite's, as for
    #: ``expected_json``): the harness sends such a result's digest, and its value only if they differ
    digests: Mapping[int, str] | None = None

    def inputs_json(self) -> str:
        return self.encoded if self.encoded is not None else encode_inputs(self.inputs)


def encode_inputs(inputs: Sequence[Any]) -> str:
    """The JSON of a list of argument lists (an argument tuple is sent as a list: it is splatted anyway)."""
    return json.dumps([valuecodec.encode(list(x) if isinstance(x, tuple) else x) for x in inputs],
                      separators=(",", ":"))


@dataclass
class GroupOutcome:
    outputs: dict[int, Any] = field(default_factory=dict)  # index -> decoded return value
    as_sets: dict[int, Any] = field(default_factory=dict)  # index -> set(output) for opaque outputs
    errors: dict[int, str] = field(default_factory=dict)  # index -> exception text
    times: dict[int, float] = field(default_factory=dict)
    exec_error: str | None = None
    out_of_budget: bool = False
    ended: bool = False


@dataclass
class FunctionRun:
    groups: dict[str, GroupOutcome]
    result: RunResult
    streamed: bool = False  # records were seen live (the watcher's comparisons cover them, in order)


def run_function_tests(sandbox: Sandbox, code: str, entry_point: str, groups: Sequence[Group], *,
                       guard: bool = True, reference: bool = False, output_not_none: bool = False,
                       set_eq: bool = False, memory: int = 4 * GiB, timeout: float = 60.0,
                       watch: Callable[[dict], str | None] | None = None) -> FunctionRun:
    """Run ``code``'s ``entry_point`` on every group's inputs in one sandboxed process. ``watch`` sees each
    record as it arrives and may return a group name: the harness then skips the rest of that group.

    Each input's time limit is enforced by the host (see :mod:`.channel`): a return value that arrives
    after its limit, or none by then (the run is killed), reads as a ``TimeoutException`` for that input,
    whatever the sandbox reported; a record over the channel's budget or one the watcher fails on reads as
    an error for the input it was due for."""
    groups = capped_digests(groups, 0 if reference else MAX_DIGESTS)
    request = {"code": code, "entry_point": entry_point, "guard": guard, "reference": reference,
               "output_not_none": output_not_none, "set_eq": set_eq, "memory": memory,
               "groups": [{"name": g.name, "inputs": f"@INPUTS{k}@",
                           "time_limits": list(g.time_limits) if g.time_limits is not None else None,
                           "budget": g.budget, "digests": sorted(g.digests) if g.digests else None}
                          for k, g in enumerate(groups)]}
    payload = json.dumps(request, separators=(",", ":"))
    for k, g in enumerate(groups):  # splice in the (cached) encoded inputs without re-encoding them
        payload = payload.replace(f'"@INPUTS{k}@"', g.inputs_json(), 1)
    data = payload.encode("utf-8", "surrogatepass")
    schedule = FunctestSchedule(groups, watch, timed=not reference)
    channel = ResultChannel(schedule)
    program, head = precompiled.program(sandbox, harness_source())
    result = sandbox.run(program, stdin=head + b"%d\n" % len(data) + data, timeout=timeout,
                         memory_limit=memory, output=256 * MiB, stack=memory if guard else None, processes=64,
                         interact=channel)
    channel.finish()
    records = host_verdicts(channel, schedule, result)
    return FunctionRun(collect(records, [g.name for g in groups]), result, channel.streamed)


#: Digest inputs per run. The scorer answers each digest record (``ok``, or ``send`` once), and a harness that
#: never reads its control channel must not be able to fill that pipe: the host's write would block it.
#: 48 inputs, two answers of under 20 bytes each, two ``skip`` besides: under the 4 KiB a pipe holds at
#: the least. (HumanEval+ keeps 29 at most for a task.) The rest go back as values, as without digests.
MAX_DIGESTS = 48


def capped_digests(groups: Sequence[Group], budget: int) -> list[Group]:
    """``groups`` with at most ``budget`` digest inputs among them, the first ones, group by group."""
    out = []
    for g in groups:
        kept = dict(sorted(g.digests.items())[:max(budget, 0)]) if g.digests else None
        budget -= len(kept or ())
        out.append(g if kept == g.digests else dataclasses.replace(g, digests=kept or None))
    return out


class FunctestSchedule:
    """``functest_harness``'s record sequence: per group ``ready`` (or ``exec_error``), then one result
    per input in order (``v`` or ``err``), then ``end`` (also after ``budget`` or a skip)."""

    def __init__(self, groups: Sequence[Group], watch: Callable[[dict], str | None] | None, timed: bool = True):
        self.groups, self.user_watch, self.timed = list(groups), watch, timed
        self.k, self.i, self.ready = 0, 0, False
        self.group: Group | None = self.groups[0] if self.groups else None  # the group due (None: all done)
        self.skipped: set[str] = set()
        self.asked: set[tuple[str, int]] = set()  # digest records answered with "send"

    def _next_group(self) -> None:
        self.k, self.ready, self.i = self.k + 1, False, 0
        self.group = self.groups[self.k] if self.k < len(self.groups) else None

    def limit(self) -> float | None:
        g, i = self.group, self.i
        if not self.timed or g is None or not self.ready or g.time_limits is None or i >= len(g.time_limits):
            return None
        extra = float(g.transfer[i]) if g.transfer is not None and i < len(g.transfer) else 0.0
        return float(g.time_limits[i]) + extra

    def accept(self, rec: dict) -> bool:
        g = self.group
        if g is None or rec.get("g") != g.name:
            return False
        if not self.ready:
            if "ready" in rec:
                self.ready = True
            elif "exec_error" in rec:
                self._next_group()
            else:
                return False
            return True
        if "end" in rec:
            self._next_group()
            return True
        if "budget" in rec:
            return True
        if rec.get("i") == self.i and ("v" in rec or "err" in rec):
            self.i += 1
            return True
        return False

    def recognise(self, line: bytes) -> dict | None:
        """The next result record, as ``{..., "v": EXPECTED}``, when ``line`` is exactly what the harness
        writes for the expected output (``{"g":…,"i":…,"v":<expected bytes>,"t":<seconds>}``), or its digest
        record with the expected output's digest (``{"g":…,"i":…,"h":"<digest>","t":…}``, marked ``"h"``:
        the harness waits for an answer, see :meth:`watch`); else None."""
        g = self.group
        if g is None or not self.ready or not self.timed or (g.expected_json is None and not g.digests):
            return None
        prefix = b'{"g":%s,"i":%d,' % (_json_name(g.name), self.i)
        if not line.startswith(prefix):
            return None
        at = len(prefix)
        if line.startswith(b'"h":"', at) and g.digests:
            expected = g.digests.get(self.i)
            at += 5
            if expected is None or not line.startswith(b'%s"' % expected.encode(), at):
                return None
            tail = _TIME_TAIL.fullmatch(line, at + len(expected) + 1)
            return None if tail is None else {"g": g.name, "i": self.i, "v": EXPECTED, "t": float(tail.group(1)),
                                              "h": MATCHED}
        if g.expected_json is None or not line.startswith(b'"v":', at):
            return None
        expected = g.expected_json(self.i)
        if expected is None or not line.startswith(expected, at + 4):
            return None
        tail = _TIME_TAIL.fullmatch(line, at + 4 + len(expected))
        if tail is None:
            return None
        return {"g": g.name, "i": self.i, "v": EXPECTED, "t": float(tail.group(1))}

    def watch(self, rec: dict) -> bytes | None:
        answer = b"ok:%s:%d\n" % (rec["g"].encode(), rec["i"]) if rec.get("h") is MATCHED else b""
        if self.user_watch is None or "i" not in rec:
            return answer or None
        group = self.user_watch(rec)
        if group and group not in self.skipped:
            self.skipped.add(group)
            answer += f"skip:{group}\n".encode()
        return answer or None

    def refused(self, rec: dict) -> bytes | None:
        """The answer to a record that did not advance the sequence: a digest record of the input due that
        is not the expected output's (or has none to compare with) asks the harness for the value, once."""
        g = self.group
        if g is None or not self.ready or "h" not in rec or rec.get("g") != g.name or rec.get("i") != self.i \
                or not g.digests or self.i not in g.digests or (g.name, self.i) in self.asked:
            return None  # (so the answers a run gets are bounded by the suite's big outputs, whatever it sends)
        self.asked.add((g.name, self.i))
        return b"send:%s:%d\n" % (g.name.encode(), self.i)

    def pending(self) -> dict | None:
        """Where the sequence stopped: the record it was waiting for (group and input, or the load)."""
        g = self.group
        if g is None:
            return None
        return {"g": g.name, "i": self.i} if self.ready else {"g": g.name}


@functools.lru_cache(maxsize=256)
def _json_name(name: str) -> bytes:
    return json.dumps(name).encode()


_TIME_TAIL = re.compile(rb',"t":(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)}')


def host_verdicts(channel: ResultChannel, schedule: FunctestSchedule, result: RunResult) -> list[dict]:
    """The accepted records with the host's verdicts applied: late results become timeouts, and the record
    the run was stopped waiting for (deadline or violation) becomes a timeout or an error."""
    records = []
    for arrival in channel.arrivals:
        rec = arrival.record
        if arrival.late and "i" in rec:
            rec = {"g": rec["g"], "i": rec["i"], "err": f"TimeoutException: took {arrival.elapsed:.2f}s by the "
                                                         "host's clock"}
        records.append(rec)
        if arrival.late:
            return records
    pending = schedule.pending() if result.stopped else None
    if pending is not None:
        why = (f"ScorerBudget: {channel.violation}" if channel.violation is not None
               else "TimeoutException: no result by the host's deadline")
        records.append({**pending, "err": why} if "i" in pending else {**pending, "exec_error": why})
    return records


def parse_records(stdout: str, names: Sequence[str]) -> dict[str, GroupOutcome]:
    """Read the harness's JSON lines (see :func:`collect`), e.g. from a backend that could not stream."""
    records = []
    for line in stdout.encode("utf-8", "surrogatepass").split(b"\n"):
        try:
            rec = valuecodec.loads(line)
        except (ValueError, RecursionError, TypeError):
            continue
        if isinstance(rec, dict):
            records.append(rec)
    return collect(records, names)


def collect(records: Sequence[dict], names: Sequence[str]) -> dict[str, GroupOutcome]:
    """Sort the harness's records into groups; anything malformed is ignored (a program can write garbage
    into the channel, but then its real records are all it gets credit for). First record per input wins."""
    groups = {n: GroupOutcome() for n in names}
    for rec in records:
        try:
            key: Any = rec.get("g")  # whatever the program wrote: a key that is no group's name finds None
            g = groups.get(key)
        except (AttributeError, TypeError):
            continue
        if g is None:
            continue
        try:
            if "exec_error" in rec and g.exec_error is None:
                g.exec_error = str(rec["exec_error"])
            elif "budget" in rec:
                g.out_of_budget = True
            elif "end" in rec:
                g.ended = True
            elif isinstance(rec.get("i"), int):
                i = rec["i"]
                if i in g.outputs or i in g.errors:
                    continue
                if "err" in rec:
                    g.errors[i] = str(rec["err"])
                elif "v" in rec:
                    g.outputs[i] = rec["v"]
                    if "s" in rec:
                        g.as_sets[i] = rec["s"]
                    if isinstance(rec.get("t"), (int, float)):
                        g.times[i] = float(rec["t"])
        except (ValueError, TypeError, KeyError, RecursionError, IndexError):
            continue
    return groups
