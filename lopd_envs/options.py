"""Strict construction: every env refuses keyword arguments it does not take and values it does not know,
naming the accepted ones. ``gym.make`` forwards any keyword to the env, so without this a misspelt option
(``categroy="simple"``) is swallowed and the default (all categories) runs without a word."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Iterable
from typing import Any


def accepted_options(cls: type, stop: type | None = None) -> list[str]:
    """The keyword arguments an env class takes: the named parameters of every ``__init__`` from ``cls``
    up to ``stop`` (subclass first), since a suite's ``**kwargs`` forwards the rest to its base."""
    names: list[str] = []
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is not None:
            names += [p.name for p in list(inspect.signature(init).parameters.values())[1:]
                      if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in names]
        if klass is stop:
            break
    return names


def unknown_options(cls: type, kwargs: dict[str, Any], stop: type | None = None) -> None:
    """Raise ``TypeError`` for keyword arguments ``cls`` does not take: each one with a close match when
    there is one, and the accepted names."""
    accepted = accepted_options(cls, stop)
    unknown = [k for k in kwargs if k not in accepted]
    if not unknown:
        return
    parts = []
    for name in unknown:
        close = difflib.get_close_matches(name, accepted, n=1)
        parts.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    label = getattr(cls, "env_id", "") or cls.__name__
    raise TypeError(f"{label}: unexpected keyword argument{'s' if len(parts) > 1 else ''} {', '.join(parts)}; "
                    f"accepted: {', '.join(accepted)}")


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> None:
    """Raise ``ValueError`` naming the accepted values (and a close match) when ``value`` is not one."""
    choices = list(choices)
    if value in choices:
        return
    close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1) if isinstance(value, str) else []
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ValueError(f"{name} must be one of {', '.join(repr(c) for c in choices)}; got {value!r}{hint}")


def check_turn_limit(max_turns: Any) -> None:
    """``max_turns``: a positive integer, or None for the benchmark's own limit."""
    if max_turns is not None and (type(max_turns) is not int or max_turns < 1):
        raise ValueError(f"max_turns must be a positive integer, or None for the benchmark's limit; got {max_turns!r}")
