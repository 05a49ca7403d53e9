"""The weights dtype: ``auto`` is float32 on CPU, and an explicit bf16 on a CPU without bf16 hardware is run
but warned about (on such a CPU its backward was measured ~30x slower than float32)."""

from __future__ import annotations

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
