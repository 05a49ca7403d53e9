"""The public API is stated once, in each package's ``__init__``: every listed name resolves, and importing the
trainer's package stays cheap (torch is loaded with the trainer, not with ``import lopd_train``)."""

from __future__ import annotations

import subprocess
import sys

import lopd_envs
import lopd_train


def test_every_listed_name_of_lopd_envs_resolves():
    # its order is ruff's (RUF022: isort-style, checked by .ci/run); here: each name once
    assert len(set(lopd_envs.__all__)) == len(lopd_envs.__all__)
    for name in lopd_envs.__all__:
        assert getattr(lopd_envs, name) is not None, name
    assert {"AgentEnv", "Episode", "Trace", "run_episode"} <= set(lopd_envs.__all__)


def test_every_listed_name_of_lopd_train_resolves_lazily():
    for name in lopd_train.__all__:
        assert getattr(lopd_train, name) is not None, name
    assert set(lopd_train.__all__) <= set(dir(lopd_train))
    try:
        lopd_train.no_such_name  # noqa: B018 - the lookup is what must raise
    except AttributeError as e:
        assert "no_such_name" in str(e)
    else:
        raise AssertionError("an unknown name must raise AttributeError")


def test_importing_lopd_train_does_not_load_torch():
    code = "import sys, lopd_train; assert 'torch' not in sys.modules, 'torch loaded'; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
