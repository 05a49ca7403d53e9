"""``lopd-eval --backend openai`` without torch (issue 52 item 3): ``pip install "lopd[eval]"`` is enough.

The fast tests run ``lopd-eval`` in a child interpreter where torch and the rest of the training stack cannot be
imported (``sys.modules[name] = None``, which ``importlib.util.find_spec`` also reports as absent, as
transformers checks), against the stand-in OpenAI server; the other backends there must say in one line which
extra they need. The slow test does it for real: a fresh venv, ``pip install "<repo>[eval]"``, no torch in it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fake_openai import FakeServer
from tests.test_install_base import install_without_torch, requirement_name, size_mib

REPO = Path(__file__).resolve().parents[1]
TRAINING_STACK = ("torch", "peft", "accelerate", "sentence_transformers", "hnswlib", "vllm", "trl", "tensorboard",
                  "httpx")  # httpx: openai 3 reads through httpx2, and a [eval] venv has no httpx
BLOCKED_RUN = f"""
import json, sys
for name in {TRAINING_STACK!r}:
    sys.modules[name] = None  # import fails, find_spec says absent
from lopd_train.cli import eval_main
try:
    code = eval_main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps({{"code": code, "torch_loaded": any(m.split(".")[0] == "torch" and sys.modules[m] is not None
                                                    for m in list(sys.modules))}}))
"""


def child_env() -> dict[str, str]:
    """Nothing of the caller's environment but HOME (lopd's cache of the BFCL-v3 wheel) and the data folder."""
    env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}/usr/bin{os.pathsep}/bin",
           "HOME": os.environ.get("HOME", str(REPO)), "HF_HUB_OFFLINE": "1", "LOPD_OFFLINE": "1",
           "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    if os.environ.get("LOPD_DATA_DIR"):  # conftest points it at the shared read-only copy
        env["LOPD_DATA_DIR"] = os.environ["LOPD_DATA_DIR"]
    return env


def blocked(args: list[str], cwd: Path) -> tuple[dict, subprocess.CompletedProcess]:
    run = subprocess.run([sys.executable, "-c", BLOCKED_RUN, *args], cwd=cwd, env={**child_env(),
                         "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=600)
    return json.loads(run.stdout.strip().splitlines()[-1]), run


def openai_args(url: str, out: Path) -> list[str]:
    return ["--model", "m", "--backend", "openai", "--base-url", url, "--env", "lopd/BFCLv3-v0", "--category",
            "simple", "--limit", "2", "--max-new-tokens", "8", "--output", str(out), "--no-progress"]


def test_openai_backend_runs_with_the_training_stack_unimportable(bfcl_data, tmp_path):
    with FakeServer() as server:
        got, run = blocked(openai_args(server.url, tmp_path / "out"), tmp_path)
    assert got == {"code": 0, "torch_loaded": False}, run.stderr[-3000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["envs"]["lopd/BFCLv3-v0"]["n_records"] == 2 and len(server.requests) >= 2
    assert (tmp_path / "out" / "results.png").stat().st_size > 0


@pytest.mark.parametrize("backend,extra", [("hf", "train"), ("vllm", "vllm")])
def test_other_backends_name_the_extra_they_need_in_one_line(backend, extra, tmp_path):
    got, run = blocked(["--model", "m", "--backend", backend, "--env", "lopd/BFCLv3-v0"], tmp_path)
    assert got["code"] == 2 and not got["torch_loaded"]
    lines = [line for line in run.stderr.splitlines() if line.startswith("lopd-eval")]
    assert len(lines) == 1 and f'pip install "lopd[{extra}]"' in lines[0], run.stderr
    assert "Traceback" not in run.stderr


def test_the_eval_extra_names_no_training_package():
    import tomllib

    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["eval"]
    names = {requirement_name(r) for r in extra}
    assert "openai" in names and not names & {"torch", "peft", "accelerate", "vllm", "trl"}


@pytest.mark.slow
def test_eval_extra_in_a_fresh_venv_runs_lopd_eval_openai_without_torch(bfcl_data, tmp_path):
    venv, seconds = install_without_torch(tmp_path, f"{REPO}[eval]")
    with FakeServer() as server:
        run = subprocess.run([str(venv / "bin" / "lopd-eval"), *openai_args(server.url, tmp_path / "out")],
                             cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads((tmp_path / "out" / "results.json").read_text())["envs"]["lopd/BFCLv3-v0"]["n_records"] == 2
    hf = subprocess.run([str(venv / "bin" / "lopd-eval"), "--model", "m", "--env", "lopd/BFCLv3-v0"], cwd=tmp_path,
                        env=child_env(), capture_output=True, text=True, timeout=300)
    assert hf.returncode == 2 and 'pip install "lopd[train]"' in hf.stderr.splitlines()[-1]
    print(f"lopd[eval] install: {seconds:.0f} s, {size_mib(venv):.0f} MiB")


def test_the_model_aliases_spelled_in_spec_are_the_models_modules():
    from lopd_train import models
    from lopd_train.evaluation import spec

    assert spec.ALIASES == (models.DEFAULT_MODEL, models.TINY_MODEL)
