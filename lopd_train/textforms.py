"""The text forms of list and table settings, read in one place: a comma-separated string (a flag's value, an
older TOML file or a run folder's saved ``config.json``) becomes a list, JSON text becomes a dict. The
configuration calls these once when it is built, so everything downstream holds real lists and dicts."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any


def as_list(value: str | Iterable[Any] | None) -> list[str]:
    """``"a, b"`` or ``["a", "b"]`` as ``["a", "b"]`` (blank items dropped, never a list of characters);
    None as ``[]``."""
    parts = [] if value is None else [value] if isinstance(value, str) else list(value)
    # each item split too: ``--tasks a,b`` arrives from argparse as ``["a,b"]``
    return [s for part in parts for s in (x.strip() for x in str(part).split(",")) if s]


def as_table(value: str | dict[str, Any] | None, name: str) -> dict[str, Any]:
    """JSON text or a table as a dict (None: ``{}``); ``name`` (the setting) is named in a ``ValueError`` when
    the text is not JSON or not an object."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return dict(value)
    flag = f"--{name.replace('_', '-')}"
    try:
        table = json.loads(value)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{flag} {value!r} is not JSON ({exc.msg} at character {exc.pos}); give an object such "
                         "as '{\"few_shot\": \"simple_0\"}'") from None
    if not isinstance(table, dict):
        raise ValueError(f"{flag} {value!r} must be a JSON object, not {type(table).__name__}")
    return table
