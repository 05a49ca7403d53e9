"""Reading the program out of a model's answer (fenced blocks, the longest parseable stretch, pruning to
what the entry point needs): shared by the code suites, so that HumanEval+/MBPP+ and LiveCodeBench read
answers by one set of rules and a fix lands in both."""

from __future__ import annotations

import ast
import re

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+\-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)
MAX_SCAN_LINES = 400

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
