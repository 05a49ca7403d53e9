"""Run-speed choices a run warns about: the weights dtype (``auto`` is float32 on CPU; an explicit bf16 on a CPU
without bf16 hardware is run but warned about, its backward measured ~30x slower than float32 there), and more
torch threads than the machine has free cores."""

from __future__ import annotations

import os

import torch

from lopd_train import models

INTEL = "processor\t: 0\nflags\t\t: fpu sse2 avx2 fma avx512f avx512_bf16 amx_tile\n"
AMD = "processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n"


def test_native_bf16_is_read_from_the_cpu_flags():
    assert models.native_bf16_cpu(INTEL) is True
    assert models.native_bf16_cpu(AMD) is False
    assert models.native_bf16_cpu("processor : 0\n") is None  # no flags line: cannot tell


def test_auto_is_float32_on_cpu():
    assert models.parse_dtype("auto", torch.device("cpu")) == torch.float32
    assert models.parse_dtype(None, torch.device("cpu")) == torch.float32


def test_bf16_on_a_cpu_without_bf16_hardware_is_warned_about(monkeypatch, caplog):
    cpu = torch.device("cpu")
    monkeypatch.setattr(models, "native_bf16_cpu", lambda cpuinfo=None: False)
    with caplog.at_level("WARNING", logger="lopd_train.models"):
        msg = models.warn_slow_dtype(torch.bfloat16, cpu)
    assert msg and "avx512_bf16" in msg and "--dtype auto" in msg and msg in caplog.text
    assert models.warn_slow_dtype(torch.float32, cpu) is None  # float32: nothing to say
    monkeypatch.setattr(models, "native_bf16_cpu", lambda cpuinfo=None: True)
    assert models.warn_slow_dtype(torch.bfloat16, cpu) is None  # bf16 hardware: bf16 is the fast choice
    monkeypatch.setattr(models, "native_bf16_cpu", lambda cpuinfo=None: None)
    assert models.warn_slow_dtype(torch.bfloat16, cpu) is None  # cannot tell: no false alarm


def test_threads_beyond_the_free_cores_are_warned_about_and_a_free_machine_is_not(caplog):
    from lopd_train.models import warn_oversubscribed

    assert warn_oversubscribed(2, 0.3, 2) is None  # an idle 2-core machine: torch's default is right
    assert warn_oversubscribed(1, 9.0, 2) is None  # one thread: nothing to wait for
    assert warn_oversubscribed(8, 3.0, 16) is None
    with caplog.at_level("WARNING"):
        msg = warn_oversubscribed(2, 3.0, 2)  # the README main job beside the study's three processes
    assert msg and "--threads 1" in msg and "3.0 of 2 cores" in msg and msg in caplog.text
    assert warn_oversubscribed(16, 4.0, 16)  # 12 cores free for 16 threads


def test_the_trainer_checks_the_load_before_its_first_step(tmp_path, monkeypatch):
    """Wired into ``Trainer.__init__``: a busy machine and more than one thread give the warning; the busy cores
    are measured, not the load average (which still counts a ``pip install`` that has ended)."""

    from lopd_train import models
    from lopd_train.config import TrainConfig
    from lopd_train.training.trainer import Trainer

    seen = []
    monkeypatch.setattr(models, "busy_cores", lambda: 64.0)
    monkeypatch.setattr(models, "warn_oversubscribed", lambda *a: seen.append(a))
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    import tests.coin_env  # noqa: F401  (registers the coin-flip env)

    Trainer(TrainConfig(model="tiny-random", env="lopd-test/Coin-v0", category="all", output_dir=str(tmp_path / "run")))
    assert seen and seen[0][:2] == (2, 64.0)


def test_busy_cores_sees_a_process_that_holds_a_core():
    import subprocess
    import sys

    from lopd_train.models import busy_cores

    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        busy = busy_cores(1.0)
    finally:
        spin.kill()
        spin.wait()
    assert 0.6 <= busy <= (os.cpu_count() or 1) + 0.01  # most of a core, at most all of them
