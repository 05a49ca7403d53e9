"""Test-wide setup: benchmark data comes from the shared read-only copy (or whatever LOPD_DATA_DIR says),
and nothing is downloaded during tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
if "LOPD_DATA_DIR" not in os.environ and _SHARED.is_dir():
    os.environ["LOPD_DATA_DIR"] = str(_SHARED)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", help="also run tests marked slow")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--runslow"):
        config.option.markexpr = ""


@pytest.fixture
def bubblewrap():
    """The bubblewrap sandbox; skips (fails under ``CI=true``) when it cannot run here (tests/isolation.py)."""
    from tests.isolation import require_bubblewrap

    require_bubblewrap()
    from lopd_envs.sandbox import get_sandbox
    return get_sandbox("bubblewrap")


@pytest.fixture(scope="session")
def bfcl_data() -> None:
    """BFCL-v3 ships in a PyPI wheel (not in ../shared/data): make sure it is in the user cache, fetched
    once with pip. Skips when it cannot be had (``LOPD_OFFLINE`` set, or no registry), except under CI,
    where it fails."""
    from lopd_envs import assets

    try:
        assets.fetch_all("bfcl_v3")
    except assets.AssetMissing as exc:
        if os.environ.get("CI"):  # CI can reach PyPI: a missing wheel there is a failure, not a skip
            pytest.fail(f"BFCL-v3 data unavailable in CI: {exc}")
        pytest.skip(f"BFCL-v3 data unavailable: {exc}")
