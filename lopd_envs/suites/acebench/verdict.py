"""The result of one ACEBench check, shared by the normal, special and agent scorers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Verdict:
    """``valid`` is the benchmark's pass/fail; ``error_type`` uses ACEBench's own labels
    (``wrong_output_format``, ``value_error:string``, ``error_detection``, ...) so failures can be
    compared with the official score files."""

    valid: bool
    error: str = ""
    error_type: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Flat and shallow (``extra`` merged in): built once per scored episode, so no deep copy."""
        return {"valid": self.valid, "error": self.error, "error_type": self.error_type, **self.extra}


PASS = Verdict(True)


def fail(error_type: str, error: str, **extra: Any) -> Verdict:
    return Verdict(False, error, error_type, extra)
