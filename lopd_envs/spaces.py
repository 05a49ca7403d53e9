"""Gymnasium spaces for chat environments.

Observations are lists of OpenAI-style messages and actions are free text or an assistant message; no
built-in space describes either honestly (``Text`` restricts the charset, which would exclude Chinese
prompts and code). These spaces check exactly the structure the env contract promises, and sample
arbitrary text, which is the most adversarial action a model can produce.

Vectorised use: ``gym.make_vec(id, n, vectorization_mode="async")`` passes observations through shared
memory by default, which gymnasium only knows how to do for its own fixed-shape spaces. For
:class:`ChatMessages` this module registers the three shared-memory functions gymnasium dispatches on: each
env gets a slot of ``ChatMessages.shared_bytes`` bytes (4 MiB by default; set the class attribute before
``make_vec`` to change it) holding its latest observation as JSON, so the default settings work and the
batch reads back as a tuple of message lists, exactly what ``shared_memory=False`` gives.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import string
from collections.abc import Sequence as _Sequence
from types import ModuleType
from typing import Any, ClassVar

import numpy as np
from gymnasium.spaces import Space
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

ROLES = ("system", "user", "assistant", "tool")
_SAMPLE_ALPHABET = string.printable + "中文工具调用{}[]()\"'=,"


def _sample_text(rng: np.random.Generator, max_length: int) -> str:
    length = int(rng.integers(0, max_length + 1))
    return "".join(rng.choice(list(_SAMPLE_ALPHABET), size=length))


def is_message(x: Any) -> bool:
    role = x.get("role") if isinstance(x, dict) else None
    return (isinstance(role, str) and role in ROLES and isinstance(x.get("content"), str)
            and all(isinstance(k, str) for k in x))


class ChatMessages(Space[list]):
    """A list of chat messages: each a dict with a ``role`` and string ``content`` (plus extras such as a
    tool result's ``name``)."""

    shared_bytes: ClassVar[int] = 4 << 20  # one env's slot for async vector envs' shared memory

    def __init__(self, seed: int | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> list[dict[str, str]]:
        n = int(self.np_random.integers(1, 4))
        return [{"role": str(self.np_random.choice(ROLES)), "content": _sample_text(self.np_random, 64)}
                for _ in range(n)]

    def contains(self, x: Any) -> bool:
        return isinstance(x, list) and all(is_message(m) for m in x)

    def __repr__(self) -> str:
        return "ChatMessages()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ChatMessages)


class AgentAction(Space[Any]):
    """Raw model text, or a structured assistant message ``{"role": "assistant", "content", "tool_calls"}``."""

    def __init__(self, seed: int | None = None, max_length: int = 256):
        super().__init__(shape=None, dtype=None, seed=seed)
        self.max_length = max_length

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        return _sample_text(self.np_random, self.max_length)

    def contains(self, x: Any) -> bool:
        if isinstance(x, str):
            return True
        role = x.get("role", "assistant") if isinstance(x, dict) else None
        return (isinstance(role, str) and role == "assistant"
                and isinstance(x.get("content", ""), (str, type(None)))
                and isinstance(x.get("tool_calls", []), (list, type(None))))

    def __repr__(self) -> str:
        return "AgentAction()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AgentAction)


# ------------------------------------------------------------------ shared memory for async vector envs

_HEADER = 8  # the buffer starts with the slot size, so a worker (which has its own space) finds its slot


@create_shared_memory.register(ChatMessages)
def _create_chat_shared_memory(space: ChatMessages, n: int = 1, ctx: ModuleType = mp) -> Any:
    buffer = ctx.Array("B", _HEADER + n * (_HEADER + space.shared_bytes), lock=False)
    np.frombuffer(buffer, dtype=np.uint8)[:_HEADER] = np.frombuffer(
        (_HEADER + space.shared_bytes).to_bytes(_HEADER, "little"), dtype=np.uint8)
    return buffer


def _slot(shared_memory: Any, index: int) -> np.ndarray:
    view = np.frombuffer(shared_memory, dtype=np.uint8)
    size = int.from_bytes(view[:_HEADER].tobytes(), "little")
    return view[_HEADER + index * size: _HEADER + (index + 1) * size]


@write_to_shared_memory.register(ChatMessages)
def _write_chat_to_shared_memory(space: ChatMessages, index: int, value: list, shared_memory: Any) -> None:
    slot = _slot(shared_memory, index)
    data = json.dumps(value).encode("ascii")  # ASCII escapes keep any string, lone surrogates included
    if len(data) > len(slot) - _HEADER:
        raise ValueError(f"observation of {len(data)} bytes exceeds the shared-memory slot of {len(slot) - _HEADER} "
                         "bytes: raise lopd_envs.spaces.ChatMessages.shared_bytes before make_vec, or pass "
                         "vector_kwargs={'shared_memory': False}")
    slot[_HEADER: _HEADER + len(data)] = np.frombuffer(data, dtype=np.uint8)
    slot[:_HEADER] = np.frombuffer(len(data).to_bytes(_HEADER, "little"), dtype=np.uint8)


# gymnasium declares a tuple; a live view that it indexes and copies serves it the same
@read_from_shared_memory.register(ChatMessages)  # pyright: ignore[reportArgumentType]
def _read_chat_from_shared_memory(space: ChatMessages, shared_memory: Any, n: int = 1) -> SharedChatBatch:
    return SharedChatBatch(shared_memory, n)


class SharedChatBatch(_Sequence):
    """The live view gymnasium keeps of the shared buffer (as it keeps numpy views for its own spaces):
    indexing decodes an env's latest observation. Copying it (``AsyncVectorEnv(copy=True)``, the default)
    gives a plain tuple of message lists."""

    def __init__(self, shared_memory: Any, n: int):
        self.shared_memory, self.n = shared_memory, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(self.n)))
        if not -self.n <= index < self.n:
            raise IndexError(index)
        slot = _slot(self.shared_memory, index % self.n)
        length = int.from_bytes(slot[:_HEADER].tobytes(), "little")
        return json.loads(slot[_HEADER: _HEADER + length].tobytes()) if length else []

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple:
        return tuple(self)

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, (tuple, list, SharedChatBatch)) else other)

    def __repr__(self) -> str:
        return f"SharedChatBatch({tuple(self)!r})"
