"""The packages' import graph: no circles, and no arrow from the environments up to the trainer.

Every ``import`` counts, wherever it sits: at module level, inside a function (a lazy import is still a
dependency a reader must follow) or under ``TYPE_CHECKING``. A module that imports a name from a package
depends on that package's ``__init__``; importing a submodule (``from lopd_envs.sandbox import runner``) depends
on that submodule only. The environments (``lopd_envs``) install and run without the trainer, so nothing in
them may import ``lopd_train`` (the trainer adds ``lopd`` commands through the ``lopd.commands`` entry point).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("lopd_envs", "lopd_train")


def modules(root: Path = ROOT, packages=PACKAGES) -> dict[str, Path]:
    found = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def import_graph(mods: dict[str, Path], packages=PACKAGES) -> dict[str, set[str]]:
    """module -> the package modules it imports (resolved to the deepest module that exists)."""
    def owner(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            for target in targets:
                if target.split(".")[0] in packages:
                    dep = owner(target)
                    if dep and dep != mod:
                        graph[mod].add(dep)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module, or a module importing itself (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # the graph has ~200 nodes: recursion depth is bounded by it
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_circle_and_passes_a_tree():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []
    assert cycles({"a": {"a"}}) == [["a"]]


def test_the_graph_sees_lazy_relative_and_type_checking_imports(tmp_path):
    pkg = tmp_path / "lopd_envs"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from lopd_envs.sub.b import B\n")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from lopd_envs.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..a import x\n    from . import B\nB = 1\n")
    graph = import_graph(modules(tmp_path, ("lopd_envs",)), ("lopd_envs",))
    assert graph["lopd_envs.a"] == {"lopd_envs.sub.b"}
    assert graph["lopd_envs.sub.b"] == {"lopd_envs.a", "lopd_envs.sub"}
    assert cycles(graph) == [["lopd_envs.a", "lopd_envs.sub", "lopd_envs.sub.b"]]


def test_no_import_circles():
    mods = modules()
    assert len(mods) > 100  # the packages were found
    assert cycles(import_graph(mods)) == []


def test_the_environments_never_import_the_trainer():
    graph = import_graph(modules())
    upward = sorted((m, d) for m, deps in graph.items() if m.startswith("lopd_envs") for d in deps
                    if d.startswith("lopd_train"))
    assert upward == []


#: The trainer's floors, bottom up: a module imports only modules on its own floor or below. The base holds what
#: several steps share (models, configuration, sampling settings, scoring, state files, records, tracking, the
#: distributed and run-folder pieces); then one floor per pipeline step; the command line on top.
TRAINER_FLOORS = {"rollout": 1, "experience": 2, "latent": 3, "algorithms": 4, "evaluation": 5, "export": 6,
                  "training": 7, "integrations": 8, "cli": 9, "testing": 10}


def trainer_floor(module: str) -> int:
    """A ``lopd_train`` module's floor: its folder's (or, for a top-level module, its own name's), else the base."""
    parts = module.split(".")
    return TRAINER_FLOORS.get(parts[1], 0) if len(parts) > 1 else 0


def upward_arrows(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((m, d) for m, deps in graph.items() if m.startswith("lopd_train") for d in deps
                  if d.startswith("lopd_train") and trainer_floor(d) > trainer_floor(m))


def test_every_trainer_arrow_points_down():
    graph = import_graph(modules())
    assert upward_arrows(graph) == []
    # the check can fail: an arrow from the rollout floor up to the trainer is seen
    assert upward_arrows({"lopd_train.rollout.engine": {"lopd_train.training.trainer"}}) == [
        ("lopd_train.rollout.engine", "lopd_train.training.trainer")]
    assert trainer_floor("lopd_train.scoring") == 0 and trainer_floor("lopd_train.algorithms") == 4

