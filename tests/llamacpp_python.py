"""The real llama.cpp server's Python for the slow real-server tests (tests/test_eval_llamacpp.py,
tests/test_verifiers_cli.py): ``$LOPD_LLAMACPP_PYTHON``, a venv with ``llama-cpp-python[server]``; without one
that can import ``llama_cpp.server`` the test is skipped, saying why."""

from __future__ import annotations

import os
import subprocess

import pytest

from lopd_train.evaluation.llamacpp_server import PYTHON_ENV


def server_python() -> str:
    python = os.environ.get(PYTHON_ENV)
    if not python:
        pytest.skip(f"SKIPPED LOUDLY: set {PYTHON_ENV} to a Python with llama-cpp-python[server] installed "
                    "(its own venv) to run the real llama.cpp server tests")
    probe = subprocess.run([python, "-c", "import llama_cpp.server.app"], capture_output=True, text=True)
    if probe.returncode:
        pytest.skip(f"SKIPPED LOUDLY: {PYTHON_ENV}={python} cannot import llama_cpp.server: {probe.stderr[-300:]}")
    return python
