"""The package layout of docs/design.md section 2, checked so that it cannot drift back: one folder per benchmark
under ``suites/``, code execution shared through ``codeexec/``, assets declared by the suites, a small core.

The checks read the source (``ast``), so a duplicate helper or a second category list fails here even
when every behaviour test still passes.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "lopd_envs"
SUITES = PKG / "suites"
CODE_SUITES = ("evalplus", "livecodebench")
# programs that run *inside* the sandbox, each a complete alternative to the others (each has its own
# ``_main`` and benchmark-specific guard), so their entry points are not a shared mechanism
SANDBOX_PROGRAMS = {"functest_harness.py", "harness.py"}


def _top_level_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def _python_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def test_each_package_imports_in_a_fresh_interpreter():
    modules = ["lopd_envs.suites.evalplus", "lopd_envs.suites.livecodebench", "lopd_envs.suites.bfcl",
               "lopd_envs.suites.acebench", "lopd_envs.codeexec"]
    for module in modules:  # one interpreter each: an import that only works after another one fails here
        out = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True,
                             timeout=120, cwd=PKG.parent)
        assert out.returncode == 0, f"import {module} failed:\n{out.stderr[-2000:]}"


def test_core_stays_small():
    lines = len((PKG / "core.py").read_text(encoding="utf-8").splitlines())
    assert lines < 200, f"core.py has {lines} lines; move what is not the reset/step contract elsewhere"


def test_suites_holds_one_package_per_benchmark_and_nothing_else():
    entries = {p.name: p for p in SUITES.iterdir() if p.name not in ("__init__.py", "__pycache__")}
    stray = sorted(name for name, p in entries.items() if not (p.is_dir() and (p / "__init__.py").exists()))
    assert not stray, f"suites/ must hold benchmark folders only; move these out: {stray}"
    assert {"bfcl", "acebench", "evalplus", "livecodebench"} <= set(entries)


def test_code_suites_take_the_shared_mechanisms_from_codeexec():
    shared: dict[str, str] = {}
    for path in _python_files(PKG / "codeexec"):
        if path.name not in SANDBOX_PROGRAMS:
            shared.update(dict.fromkeys(_top_level_names(path), path.name))
    assert {"extract_code", "run_function_tests", "encode", "decode", "_read_request", "CodeEnv"} <= set(shared)
    for suite in CODE_SUITES:
        imports_codeexec = False
        for path in _python_files(SUITES / suite):
            redefined = sorted(_top_level_names(path) & set(shared))
            assert not redefined, (f"{path.relative_to(PKG)} defines {redefined}, already in codeexec "
                                   f"({', '.join(sorted({shared[n] for n in redefined}))})")
            imports_codeexec |= "from lopd_envs.codeexec" in path.read_text(encoding="utf-8")
        assert imports_codeexec, f"suite {suite} does not use lopd_envs.codeexec"


def test_code_envs_share_the_sandbox_option_through_codeenv():
    from lopd_envs.codeexec import CodeEnv
    from lopd_envs.suites.evalplus import HumanEvalPlusEnv, MBPPPlusEnv
    from lopd_envs.suites.livecodebench import LiveCodeBenchEnv

    for env_class in (HumanEvalPlusEnv, MBPPPlusEnv, LiveCodeBenchEnv):
        assert issubclass(env_class, CodeEnv)
        owners = [k.__name__ for k in env_class.__mro__ if "sandbox" in vars(k)]
        assert owners == ["CodeEnv"], f"{env_class.__name__}: the sandbox property is redefined in {owners}"


@pytest.mark.parametrize("literal", ["live_parallel_multiple", "multi_turn_miss_param", "gorilla_file_system",
                                     "vehicle_control"])
def test_bfcl_category_and_api_names_are_written_once(literal):
    """BFCL's category and API lists exist once (in ``suites/bfcl/data.py``); everything else derives."""
    holders = [str(p.relative_to(PKG)) for p in _python_files(PKG)
               if any(isinstance(n, ast.Constant) and n.value == literal
                      for n in ast.walk(ast.parse(p.read_text(encoding="utf-8"))))]
    assert holders == ["suites/bfcl/data.py"], f"{literal!r} is spelled out in {holders}"


def test_assets_keeps_only_the_mechanism():
    tree = ast.parse((PKG / "assets.py").read_text(encoding="utf-8"))
    declared = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                and n.func.id in ("Source", "Benchmark")]
    assert not declared, f"assets.py declares benchmark files (lines {declared}); a suite's folder should"
    assert not list(PKG.glob("*.json")), "data manifests belong in their suite's folder"
    assert (SUITES / "acebench" / "sha256.json").exists()


def test_the_core_builds_no_episode_from_a_class_attribute():
    """The episode factory is the ``new_episode`` hook; ``episode_class`` (bent by ``staticmethod``
    factories) is gone, and the core does not read error flags from result text."""
    for path in _python_files(PKG):
        text = path.read_text(encoding="utf-8")
        assert "episode_class" not in text, f"{path.relative_to(PKG)} still uses episode_class"
    core_and_trace = (PKG / "core.py").read_text() + (PKG / "trace.py").read_text()
    assert 'startswith("Error")' not in core_and_trace
