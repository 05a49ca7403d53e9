"""What the code environments share: reading code out of a model's answer, and running a function on
test inputs inside the sandbox with its return values brought back as plain data.

Verdicts are not decided here; each suite compares outputs with its own benchmark's rules (evalplus's
differential testing, LiveCodeBench's output checks) in the scorer's process.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from lopd_envs.core import Episode, Reaction, Score, Task
from lopd_envs.sandbox import GiB, MiB, RunResult, Sandbox
from lopd_envs.tools import AssistantTurn
from lopd_envs.suites import valuecodec

_HERE = Path(__file__).resolve().parent
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+\-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)
MAX_SCAN_LINES = 400


# ------------------------------------------------------------------------------ code extraction

def syntax_ok(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError):
        return False
    return True


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """``(language, body)`` of every fenced block (an unterminated last fence runs to the end)."""
    return [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(text)]


def longest_valid_span(text: str) -> str:
    """The longest run of consecutive lines that parses as Python, counted in non-blank lines (evalplus's
    ``code_extract`` rule). Quadratic, so long texts are only tried whole."""
    lines = text.split("\n")
    if len(lines) > MAX_SCAN_LINES:
        return text if syntax_ok(text) else ""
    best, best_len = (0, -1), 0
    for i in range(len(lines)):
        for j in range(len(lines) - 1, i - 1, -1):
            size = sum(1 for line in lines[i:j + 1] if line.strip())
            if size <= best_len:
                break
            if syntax_ok("\n".join(lines[i:j + 1])):
                best, best_len = (i, j), size
                break
    return "\n".join(lines[best[0]:best[1] + 1]) if best[1] >= 0 else ""


def _defined_names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | \
        {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}


def prune_to_entry_point(code: str, entry_point: str | None) -> str:
    """Keep imports, and the top-level classes, functions (with a ``return``) and assignments the entry
    point reaches, first definition of each name winning: the rules of evalplus's sanitiser, so test code,
    prints and demo calls around the solution do not run."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return ""
    lines = code.split("\n")

    def source(node: ast.AST) -> str:
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        return "\n".join(lines[start - 1:node.end_lineno])

    imports, defs, names = [], [], set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append(source(node))
            continue
        name = None
        if isinstance(node, ast.ClassDef):
            name = node.name
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if any(isinstance(n, ast.Return) for n in ast.walk(node)):
                name = node.name
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            name = node.target.id
        if name and name not in names:
            names.add(name)
            defs.append((name, node))
    keep = {n for n, _ in defs}
    if entry_point:
        deps = {n: _defined_names(node) for n, node in defs}
        keep, queue = {entry_point}, [entry_point]
        while queue:
            for dep in deps.get(queue.pop(), ()):
                if dep not in keep:
                    keep.add(dep)
                    queue.append(dep)
    parts = imports + [source(node) for n, node in defs if n in keep]
    return "\n".join(parts).strip()


def extract_code(text: str, entry_point: str | None = None) -> str:
    """The program in a model's answer: the fenced Python block (the one defining ``entry_point`` when
    several do), otherwise the longest parseable stretch of the text; then pruned to what the entry point
    needs. Returns "" when nothing parses."""
    if not isinstance(text, str) or not text.strip():
        return ""
    blocks = [body for lang, body in fenced_blocks(text) if lang in ("", "python", "py", "python3")]
    if blocks:
        defining = [b for b in blocks if entry_point and re.search(rf"def\s+{re.escape(entry_point)}\s*\(", b)]
        pool = defining or blocks
        code = max(pool, key=lambda b: len(b.strip()) if syntax_ok(b) else -1)
        if not syntax_ok(code):
            code = longest_valid_span(code)
    else:
        code = text if syntax_ok(text) else longest_valid_span(text)
    if not code.strip():
        return ""
    pruned = prune_to_entry_point(code, entry_point)
    return pruned or code.strip()


def defines(code: str, name: str) -> bool:
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name
               for n in tree.body)


# ----------------------------------------------------------------------- running function tests

@functools.lru_cache(maxsize=None)
def harness_source(harness: str = "functest_harness.py") -> str:
    """A sandbox program: the value codec, the request reader, then the harness (all standard library)."""
    parts = ("valuecodec.py", "harness_io.py", harness)
    return "\n\n".join((_HERE / part).read_text() for part in parts)


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


# ----------------------------------------------------------------------- the one-answer episode

class CodeAnswerEpisode(Episode):
    """One problem, one answer: the first action's code is judged in the sandbox and the episode ends.
    Subclasses say how an answer is judged (:meth:`judge`) and which system prompt opens the dialogue."""

    system_prompt: str = ""

    def __init__(self, env: Any, task: Task):
        super().__init__(env, task)
        self.details: dict[str, Any] | None = None

    def opening(self) -> list[dict[str, Any]]:
        return [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": self.task.instruction}]

    def judge(self, text: str) -> tuple[dict[str, Any], str]:
        """The scorer's details for the answer ``text`` and a one-line summary for the agent."""
        raise NotImplementedError

    def act(self, turn: AssistantTurn) -> Reaction:
        self.details, summary = self.judge(turn.text if isinstance(turn.text, str) else "")
        return Reaction([{"role": "user", "content": f"[evaluation] {summary}"}], done=True, results=[summary],
                        error=self.details.get("error"))

    def score(self) -> Score:
        details = self.details or {"passed": False, "error_message": "no answer"}
        return Score(1.0 if details.get("passed") else 0.0, details)
