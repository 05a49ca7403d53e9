"""Running a function on test inputs inside the sandbox, its return values brought back as plain data.

The program sent into the sandbox is the value codec, the request reader (``harness_io.py``) and a harness
(``functest_harness.py`` here, or a suite's own, e.g. LiveCodeBench's). Verdicts are not decided here;
each suite compares outputs with its own benchmark's rules in the scorer's process.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from lopd_envs.codeexec import valuecodec
from lopd_envs.sandbox import GiB, MiB, RunResult, Sandbox

_HERE = Path(__file__).resolve().parent
FUNCTEST_HARNESS = _HERE / "functest_harness.py"


@functools.lru_cache(maxsize=None)
def harness_source(harness: Path = FUNCTEST_HARNESS) -> str:
    """A sandbox program: the value codec, the request reader, then ``harness`` (all standard library)."""
    parts = (_HERE / "valuecodec.py", _HERE / "harness_io.py", Path(harness))
    return "\n\n".join(part.read_text() for part in parts)


@dataclass
class Group:
    """One set of inputs run against a fresh ``exec`` of the code (evalplus: ``base`` or ``plus``)."""

    name: str
    inputs: Sequence[Any]
    time_limits: Sequence[float] | None = None
    budget: float | None = None
    encoded: str | None = None  # the inputs already encoded (see ``encode_inputs``), reused across runs

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
    record as it arrives and may return a group name: the harness then skips the rest of that group."""
    request = {"code": code, "entry_point": entry_point, "guard": guard, "reference": reference,
               "output_not_none": output_not_none, "set_eq": set_eq, "memory": memory,
               "groups": [{"name": g.name, "inputs": "@INPUTS%d@" % k,
                           "time_limits": list(g.time_limits) if g.time_limits is not None else None,
                           "budget": g.budget} for k, g in enumerate(groups)]}
    payload = json.dumps(request, separators=(",", ":"))
    for k, g in enumerate(groups):  # splice in the (cached) encoded inputs without re-encoding them
        payload = payload.replace(f'"@INPUTS{k}@"', g.inputs_json(), 1)
    data = payload.encode("utf-8", "surrogatepass")
    reader = RecordReader(watch)
    result = sandbox.run(harness_source(), stdin=b"%d\n" % len(data) + data, timeout=timeout,
                         memory_limit=memory, output=256 * MiB, stack=memory if guard else None, processes=64,
                         interact=reader.feed)
    return FunctionRun(collect(reader.finish(result.stdout), [g.name for g in groups]), result, reader.streamed)


class RecordReader:
    """Splits the harness's stream into records as it arrives, so a watcher can act on them early."""

    def __init__(self, watch: Callable[[dict], str | None] | None):
        self.watch, self.records, self.parts, self.skipped = watch, [], [], set()
        self.streamed = False

    @property
    def partial(self) -> bytes:
        return b"".join(self.parts)

    def feed(self, chunk: bytes) -> bytes | None:
        self.streamed = True
        if b"\n" not in chunk:  # a long record arriving in pieces: join once, when its line ends
            self.parts.append(chunk)
            return None
        lines = (b"".join(self.parts) + chunk).split(b"\n")
        self.parts = [lines.pop()]
        answer = b""
        for rec in _parse_many(lines):
            self.records.append(rec)
            group = self.watch(rec) if self.watch else None
            if group and group not in self.skipped:
                self.skipped.add(group)
                answer += f"skip:{group}\n".encode()
        return answer or None

    def finish(self, stdout: str) -> list[dict]:
        """All records (re-read from the captured output when the backend did not stream)."""
        if not self.streamed:
            return [r for r in map(_parse, stdout.encode("utf-8", "surrogatepass").split(b"\n")) if r is not None]
        tail = _parse(self.partial)
        return self.records + ([tail] if tail is not None else [])


def _parse_many(lines: list[bytes]) -> list[dict]:
    """Parse a batch of record lines in one ``json`` call; on any malformed line, fall back to one by one
    (dropping what does not parse)."""
    lines = [line for line in lines if line.strip()]
    if not lines:
        return []
    try:
        recs = valuecodec.loads(b"[" + b",".join(lines) + b"]")
        if all(isinstance(r, dict) for r in recs):
            return recs
    except (ValueError, RecursionError, TypeError):
        pass
    return [r for r in map(_parse, lines) if r is not None]


def _parse(line: bytes) -> dict | None:
    try:
        rec = valuecodec.loads(line)
    except (ValueError, RecursionError, TypeError):
        return None
    return rec if isinstance(rec, dict) else None


def parse_records(stdout: str, names: Sequence[str]) -> dict[str, GroupOutcome]:
    """Read the harness's JSON lines (see :func:`collect`)."""
    return collect([r for r in map(_parse, stdout.encode("utf-8", "surrogatepass").split(b"\n")) if r], names)


def collect(records: Sequence[dict], names: Sequence[str]) -> dict[str, GroupOutcome]:
    """Sort the harness's records into groups; anything malformed is ignored (a program can write garbage
    into the channel, but then its real records are all it gets credit for). First record per input wins."""
    groups = {n: GroupOutcome() for n in names}
    for rec in records:
        try:
            g = groups.get(rec.get("g"))
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
