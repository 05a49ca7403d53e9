"""Training state on disk without pickle: tensors in a safetensors file, everything else as JSON.

Why: a pickle (``torch.save``/``torch.load``) runs whatever code its file names, so a tampered checkpoint
handed to ``--resume`` or ``--init-from`` would run code. Here a state is split in two files written side by
side, ``<name>.safetensors`` (the tensors, by a path-like name) and ``<name>.json`` (the structure: plain
numbers, text, lists and dicts, each tensor as ``{"__tensor__": name}``); reading either cannot run code.

What a state may hold: tensors, ``None``, bools, ints, floats (NaN and infinities included), text, lists,
tuples and dicts (any JSON-able keys: an optimiser's integer keys come back as integers). Anything else is
refused when written, naming where it sits, so an algorithm cannot slip an object into a checkpoint.

The JSON file is written last and records the safetensors file's size and sha256: a torn or swapped tensor
file is refused when read (:class:`StateFileError`), never half-used.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

import torch

from lopd_envs.assets import sha256_of

FORMAT = "lopd-state/1"
_TENSOR, _TUPLE, _DICT, _FLOAT = "__tensor__", "__tuple__", "__dict__", "__float__"
_MARKERS = (_TENSOR, _TUPLE, _DICT, _FLOAT)


class StateFileError(ValueError):
    """A state file that cannot be read back: missing, torn, of another format, or not lopd's."""


def _encode(value: Any, where: str, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        name = f"t{len(tensors)}"
        # a CPU copy of its own: safetensors refuses tensors that share memory, and needs them contiguous
        tensors[name] = value.detach().to("cpu", copy=True).contiguous()
        return {_TENSOR: name}
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else {_FLOAT: repr(value)}
    if isinstance(value, tuple):
        return {_TUPLE: [_encode(v, f"{where}[{i}]", tensors) for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [_encode(v, f"{where}[{i}]", tensors) for i, v in enumerate(value)]
    if isinstance(value, dict):
        if all(isinstance(k, str) and k not in _MARKERS for k in value):
            return {k: _encode(v, f"{where}.{k}", tensors) for k, v in value.items()}
        items = []
        for k, v in value.items():
            if isinstance(k, (torch.Tensor, dict, list)):
                raise TypeError(f"{where}: a dict key of type {type(k).__name__} cannot go into a state file")
            items.append([_encode(k, f"{where} key", tensors), _encode(v, f"{where}[{k!r}]", tensors)])
        return {_DICT: items}
    raise TypeError(f"{where}: a {type(value).__module__}.{type(value).__qualname__} cannot go into a state file "
                    "(tensors and plain data only: numbers, text, lists, tuples, dicts)")


def _decode(value: Any, tensors: dict[str, torch.Tensor], where: str) -> Any:
    if isinstance(value, list):
        return [_decode(v, tensors, where) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        (key, inner), = value.items()
        if key == _TENSOR:
            if inner not in tensors:
                raise StateFileError(f"{where}: names a tensor {inner!r} its tensor file does not hold")
            return tensors[inner]
        if key == _TUPLE and isinstance(inner, list):
            return tuple(_decode(v, tensors, where) for v in inner)
        if key == _FLOAT and inner in ("nan", "inf", "-inf"):
            return float(inner)
        if key == _DICT and isinstance(inner, list) and all(isinstance(p, list) and len(p) == 2 for p in inner):
            return {_key(_decode(k, tensors, where), where): _decode(v, tensors, where) for k, v in inner}
    return {k: _decode(v, tensors, where) for k, v in value.items()}


def _key(k: Any, where: str) -> Any:
    try:
        hash(k)
    except TypeError:
        raise StateFileError(f"{where}: a dict key is not hashable") from None
    return k


def write_atomic(path: Path, data: bytes) -> None:
    """``data`` into ``path`` through a temporary file, fsynced, then renamed (never a torn ``path``)."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


def paths(base: Path) -> tuple[Path, Path]:
    """The two files of the state ``base`` (a path without suffix): its tensors and its JSON."""
    base = Path(base)
    return base.with_name(base.name + ".safetensors"), base.with_name(base.name + ".json")


def exists(base: Path) -> bool:
    return paths(base)[1].is_file()


def save(base: Path, state: dict[str, Any]) -> None:
    """Write ``state`` as ``<base>.safetensors`` and ``<base>.json`` (each through a temporary file, fsynced;
    the JSON last, with the tensor file's size and digest)."""
    from safetensors.torch import save as to_bytes

    tensor_path, json_path = paths(base)
    tensors: dict[str, torch.Tensor] = {}
    tree = _encode(state, "state", tensors)
    data = to_bytes(tensors, metadata={"format": FORMAT})
    write_atomic(tensor_path, data)
    record = {"format": FORMAT, "tensors": {"file": tensor_path.name, "bytes": len(data),
                                            "sha256": hashlib.sha256(data).hexdigest()}, "state": tree}
    del data
    write_atomic(json_path, json.dumps(record, allow_nan=False).encode())


def size_of(state: dict[str, Any]) -> int:
    """About how many bytes :func:`save` writes for ``state`` (its tensors; the JSON is small beside them)."""
    total = 0

    def walk(v: Any) -> None:
        nonlocal total
        if isinstance(v, torch.Tensor):
            total += v.numel() * v.element_size()
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)
    walk(state)
    return total


def load(base: Path, device: str | torch.device = "cpu") -> dict[str, Any]:
    """The state written by :func:`save`, its tensors on ``device``; a missing, torn or foreign file is a
    :class:`StateFileError` naming it."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    tensor_path, json_path = paths(base)
    if not json_path.is_file():
        raise StateFileError(f"{json_path}: no such state file")
    try:
        record = json.loads(json_path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise StateFileError(f"{json_path}: not a readable state file ({exc})") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT or not isinstance(record.get("tensors"), dict):
        raise StateFileError(f"{json_path}: not a lopd state file (format {FORMAT})")
    meta = record["tensors"]
    if meta.get("file") != tensor_path.name or not tensor_path.is_file():
        raise StateFileError(f"{json_path}: its tensor file {tensor_path.name} is missing")
    size = tensor_path.stat().st_size
    if size != meta.get("bytes") or sha256_of(tensor_path) != meta.get("sha256"):
        raise StateFileError(f"{tensor_path}: torn or altered ({size} bytes, its record says {meta.get('bytes')}, "
                             "or the sha256 differs); use another checkpoint")
    try:
        tensors = load_file(str(tensor_path), device=str(device))
    except (SafetensorError, OSError, ValueError) as exc:
        raise StateFileError(f"{tensor_path}: cannot be read ({exc})") from None
    state = _decode(record.get("state"), tensors, str(json_path))
    if not isinstance(state, dict):
        raise StateFileError(f"{json_path}: its state is not an object")
    return state


def write_text_atomic(path: Path, text: str) -> None:
    """``text`` into ``path`` whole or not at all (a full disk leaves no half-written temporary behind)."""
    write_atomic(Path(path), text.encode())
