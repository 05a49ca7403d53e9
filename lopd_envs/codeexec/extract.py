"""Reading the program out of a model's answer (fenced blocks, the longest parseable stretch, pruning to
what the entry point needs): shared by the code suites, so that HumanEval+/MBPP+ and LiveCodeBench read
answers by one set of rules and a fix lands in both."""

from __future__ import annotations

import ast
import io
import keyword
import re
import tokenize
from typing import cast

_FENCE_LANGUAGE = re.compile(r"[ \t]*([A-Za-z0-9_+\-]*)")
MAX_SCAN_LINES = 400


def syntax_ok(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError):
        return False
    return True


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """``(language, body)`` of every fenced block (an unterminated last fence runs to the end): a fence, an
    optional language tag on its line, the body from the next line to the next fence. The same matches as
    the regex this replaces, found with ``str.find``: searched, that regex rescanned the rest of a line from
    every later fence when the line never ended (quadratic: a line of 50,000 backticks took seconds)."""
    blocks, at = [], 0
    while (start := text.find("```", at)) >= 0:
        newline = text.find("\n", start + 3)
        if newline < 0:  # no line ends after this fence, nor after any later one
            break
        language = cast(re.Match, _FENCE_LANGUAGE.match(text, start + 3, newline)).group(1)  # it matches ""
        close = text.find("```", newline + 1)
        blocks.append((language.lower(), text[newline + 1:close if close >= 0 else len(text)]))
        if close < 0:
            break
        at = close + 3
    return blocks


def _error_line(code: str) -> int | None:
    """None when ``code`` parses, else a line that every prefix of ``code`` reaching it fails at: where
    its syntax error is reported, or for a bracket never closed the line of the outermost such bracket
    (the parser names the innermost; 0: unknown)."""
    try:
        ast.parse(code)
    except SyntaxError as exc:
        line = exc.lineno or 0
        if "never closed" in str(exc.msg) or "too many nested" in str(exc.msg):
            line = min(line, _first_unclosed_line(code) or line)
        return line
    except (ValueError, MemoryError, RecursionError, OverflowError):
        return 0
    return None


def _first_unclosed_line(code: str) -> int | None:
    """The line of the outermost bracket still open at the end of ``code`` (by the tokenizer), or None."""
    stack: list[int] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type == tokenize.OP and tok.string in "([{":
                stack.append(tok.start[0])
            elif tok.type == tokenize.OP and tok.string in ")]}" and stack:
                stack.pop()
    except (tokenize.TokenError, SyntaxError):
        pass
    except Exception:  # noqa: BLE001 - the tokenizer's view is only a shortcut
        return None
    return stack[0] if stack else None


def longest_valid_span(text: str) -> str:
    """evalplus's ``code_extract`` rule (evalplus 0.3.1, ``sanitize.py``): among runs of two or more
    consecutive lines that parse, the one with the most non-blank lines, the earliest (then the shortest)
    on ties; the first line when no run parses. evalplus tries every pair of lines (cubic); here each start
    line scans from the end and stops once it cannot beat the best, trailing blank lines are trimmed (the
    same run), and a run whose syntax error is reported at line L skips every shorter run that still
    holds L (the error lies in what they share: checked on 365,000 generated pairs, and against evalplus's
    own ``sanitize`` in the tests). Texts over ``MAX_SCAN_LINES`` lines are only tried whole (a bound a
    hostile answer cannot turn into minutes of parsing; a documented deviation)."""
    lines = text.split("\n")
    if len(lines) > MAX_SCAN_LINES:
        return text if syntax_ok(text) else ""
    counts = [0]
    for line in lines:
        counts.append(counts[-1] + (1 if line.strip() else 0))
    best, best_len = (0, 0), 0
    for i in range(len(lines) - 1):
        j = len(lines) - 1
        while j > i and counts[j + 1] - counts[i] > best_len:
            error = _error_line("\n".join(lines[i:j + 1]))
            if error is None:
                size = counts[j + 1] - counts[i]
                while j > i + 1 and not lines[j].strip():
                    j -= 1
                best, best_len = (i, j), size
                break
            j = min(j, i + error - 1) - 1 if error >= 1 else j - 1
    return "\n".join(lines[best[0]:best[1] + 1])


def _identifiers(source: str, node: ast.AST) -> set[str]:
    """Every identifier in a definition, as tree-sitter (evalplus's parser) sees them: names, attributes,
    parameters, keyword arguments, nested definitions (the tokens), plus names inside f-strings (the AST)."""
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | \
        {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.NAME and not keyword.iskeyword(tok.string):
                names.add(tok.string)
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass
    return names


def _definition(node: ast.AST, keep_decorated: bool) -> str | None:
    """The name a top-level statement defines for the sanitiser, or None. evalplus (tree-sitter node types)
    keeps classes, functions holding a ``return`` and assignments whose first target is a plain name (also
    ``x: T`` without a value); a decorated definition is another node type there, so it is dropped unless
    ``keep_decorated``."""
    if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
        if node.decorator_list and not keep_decorated:
            return None
        if isinstance(node, ast.ClassDef) or any(isinstance(n, ast.Return) for n in ast.walk(node)):
            return node.name
        return None
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id
    return None


def _block_end(lines: list[bytes], starts: list[int], node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef,
               end: int) -> int:
    """Where tree-sitter ends a class or function: comments belong to its block, the one after its last
    statement and the comment lines that follow at the body's indentation or deeper (blank lines between)."""
    body_indent = node.body[0].col_offset
    last = cast(int, node.end_lineno) - 1  # parsed trees carry end positions
    if lines[last][cast(int, node.end_col_offset):].strip().startswith(b"#"):
        end = starts[last] + len(lines[last])
    for k in range(last + 1, len(lines)):
        stripped = lines[k].strip()
        if not stripped:
            continue
        if not stripped.startswith(b"#") or len(lines[k]) - len(lines[k].lstrip()) < body_indent:
            break
        end = starts[k] + len(lines[k])
    return end


def prune_to_entry_point(code: str, entry_point: str | None, keep_decorated: bool = True) -> str:
    """Keep imports, then the top-level classes, functions (with a ``return``) and assignments the entry
    point reaches, first definition of each name winning, each cut out of the text exactly (so
    ``a = 1; b = 2`` yields ``b = 2`` alone): evalplus's sanitiser rules, so test code, prints and demo
    calls around the solution do not run. Returns "" when ``code`` does not parse."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return ""
    data = code.encode("utf-8")
    starts = [0]
    for line in data.split(b"\n"):
        starts.append(starts[-1] + len(line) + 1)

    lines = data.split(b"\n")

    def source(node: ast.stmt) -> str:
        first: list[ast.stmt | ast.expr] = getattr(node, "decorator_list", None) or [node]
        begin = starts[first[0].lineno - 1] + first[0].col_offset - (1 if first[0] is not node else 0)
        end = starts[cast(int, node.end_lineno) - 1] + cast(int, node.end_col_offset)  # parsed trees carry them
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            end = _block_end(lines, starts, node, end)
        return data[begin:end].decode("utf-8", "replace")

    imports, defs, names = [], [], set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append(source(node))
            continue
        name = _definition(node, keep_decorated)
        if name and name not in names:
            names.add(name)
            defs.append((name, node, source(node)))
    keep = {n for n, _, _ in defs}
    if entry_point:
        deps = {n: _identifiers(text, node) for n, node, text in defs}
        keep, queue = {entry_point}, [entry_point]
        while queue:
            for dep in deps.get(queue.pop(), ()):
                if dep not in keep:
                    keep.add(dep)
                    queue.append(dep)
    parts = imports + [text for n, _, text in defs if n in keep]
    return "\n".join(parts).strip()


def sanitize(text: str, entry_point: str | None) -> str:
    """evalplus's ``sanitize`` for a chat model's answer (its pipeline passes the answer alone; the prompt
    is prepended only for completion models): the longest parseable run of lines of the whole text (fence
    lines never parse, so several blocks and the prose between compete as lines), pruned to what the entry
    point reaches without decorated definitions; the run itself when pruning leaves nothing."""
    if not isinstance(text, str):
        return ""
    code = longest_valid_span(text)
    return prune_to_entry_point(code, entry_point, keep_decorated=False) or code


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
    if not code.strip() or not syntax_ok(code):
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
