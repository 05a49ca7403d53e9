"""What ``--model`` (and ``--adapter``) name, resolved to a base model and an optional LoRA adapter.

Accepted: a Hugging Face id or folder, a ``.gguf`` file, the ``smollm2-135m-instruct`` alias (all through
:func:`lopd_train.models.resolve`), a LoRA adapter folder (its ``adapter_config.json`` names the base), or a
``lopd-train`` run folder: its exported ``student/`` when the run finished, else the student adapter of its
latest checkpoint on the run's base model. Hashes of what was loaded go into ``results.json`` so a score can
be traced to exact weights.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: Files whose bytes define a model or adapter (weights, configs, tokenizer); logs and optimiser state are not.
#: the model aliases of :mod:`lopd_train.models` (``DEFAULT_MODEL``, ``TINY_MODEL``), spelled here so that
#: ``lopd-eval --backend openai`` never imports torch (a test keeps the two equal)
ALIASES = ("smollm2-135m-instruct", "tiny-random")
_HASHED = (".safetensors", ".bin", ".json", ".model", ".txt", ".gguf", ".jinja")


@dataclass
class ModelSpec:
    spec: str  # what the user wrote
    kind: str  # hub-or-folder | gguf | alias | adapter | run-student | run-checkpoint
    base: str  # what models.load_backbone gets
    adapter: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def is_adapter_dir(path: Path) -> bool:
    return (path / "adapter_config.json").is_file()


def is_run_dir(path: Path) -> bool:
    return (path / "checkpoints").is_dir() or ((path / "config.json").is_file() and (path / "student").is_dir())


def _run_base(run: Path) -> str:
    try:
        return json.loads((run / "config.json").read_text())["model"]
    except (OSError, ValueError, KeyError) as exc:
        raise ValueError(f"{run}: a lopd-train run folder without a readable config.json 'model' ({exc})") from exc


def latest_checkpoint(run: Path) -> Path:
    ckpts = run / "checkpoints"
    latest = ckpts / "latest"
    if latest.is_file():
        named = ckpts / latest.read_text().strip()
        if named.is_dir():
            return named
    done = sorted(p for p in ckpts.glob("step-*") if (p / "student_adapter").is_dir())
    if not done:
        raise ValueError(f"{run}: a lopd-train run folder with neither student/ nor a complete checkpoint")
    return done[-1]


def resolve_model(model: str, adapter: str | None = None) -> ModelSpec:
    """Turn ``--model``/``--adapter`` into a base to load and an adapter to apply (clear errors otherwise)."""
    path = Path(model)
    if path.is_dir() and is_run_dir(path):
        if (path / "student" / "config.json").is_file():
            spec = ModelSpec(model, "run-student", str(path / "student"))
        else:
            spec = ModelSpec(model, "run-checkpoint", _run_base(path),
                             str(latest_checkpoint(path) / "student_adapter"))
    elif path.is_dir() and is_adapter_dir(path):
        base = json.loads((path / "adapter_config.json").read_text()).get("base_model_name_or_path")
        if not base:
            raise ValueError(f"{path}/adapter_config.json names no base_model_name_or_path; pass the base as "
                             "--model and this folder as --adapter")
        spec = ModelSpec(model, "adapter", base, str(path))
    elif model.endswith(".gguf"):
        if not path.is_file():
            raise ValueError(f"--model {model}: no such GGUF file")
        spec = ModelSpec(model, "gguf", model)
    elif model in ALIASES:
        spec = ModelSpec(model, "alias", model)
    else:
        spec = ModelSpec(model, "hub-or-folder", model)
    if adapter:
        if spec.adapter:
            raise ValueError(f"--model {model} already brings an adapter ({spec.adapter}); drop --adapter")
        if not is_adapter_dir(Path(adapter)):
            raise ValueError(f"--adapter {adapter}: not a LoRA adapter folder (no adapter_config.json)")
        spec.adapter = adapter
    return spec


def folder_sha256(path: str | Path) -> str | None:
    """sha256 over the defining files of a local folder (or one file), names included; ``None`` for a hub id
    not on disk."""
    path = Path(path)
    if path.is_file():
        files = [path]
        root = path.parent
    elif path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in _HASHED)
        root = path
    else:
        return None
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(root)).encode() + b"\0")
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()
