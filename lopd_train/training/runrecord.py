"""What a run folder is: ``run.json``, written once when the run starts (env, algorithm, model, the settings
that define the run, the hashes of the data files its env read), and checked on ``--resume``.

Why: ``--resume`` with another ``--env``, ``--algo``, model or data was accepted silently and mixed two runs'
metrics in one folder. A resume now refuses any difference, naming the setting (or the data file), except in
the settings of :data:`MAY_CHANGE`, which change how long the run goes, what it writes beside its numbers or
how fast it computes them, never what it trains.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lopd_train.config import TrainConfig, normalised_settings
from lopd_train.errors import RunMismatchError

RUN_FILE = "run.json"
#: settings a resumed run may change: its length, where and what it reports, and its resources
MAY_CHANGE = ("steps", "rollout_budget", "save_every", "keep_checkpoints", "export", "push_to_hub", "progress",
              "tensorboard", "report_to", "rollout_table_every", "pig_every", "probe_every", "output_dir",
              "init_from", "eval_start_from", "threads", "env_workers", "device", "eval_batch_size",
              "cold_start_save_every", "score_batch", "share_prompt", "gradient_checkpointing",
              "vllm_gpu_memory_utilization", "vllm_sleep_mode")


def defining(settings: dict[str, Any]) -> dict[str, Any]:
    """The settings that define a run: all but :data:`MAY_CHANGE`."""
    return {k: v for k, v in settings.items() if k not in MAY_CHANGE}


def data_files(provenance: dict[str, Any] | None) -> dict[str, str]:
    """``{file name: sha256}`` of the data an env read (its provenance record), by name: a copy of the same
    data in another folder is the same data."""
    files = (provenance or {}).get("files") or []
    return {Path(f["path"]).name: f.get("sha256", "") for f in files if isinstance(f, dict) and "path" in f}


def record(settings: dict[str, Any], provenance: dict[str, Any] | None) -> dict[str, Any]:
    return {"env": settings.get("env"), "algo": settings.get("algo"), "model": settings.get("model"),
            "settings": defining(settings), "data": data_files(provenance)}


def saved(out: Path) -> dict[str, Any] | None:
    """The folder's record: ``run.json``, else (a folder of an earlier lopd) its ``config.json`` and
    ``provenance.json`` as the last start left them; None when there is neither."""
    def read(path: Path) -> Any:
        try:
            return json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise RunMismatchError(f"--resume: {path} is not readable JSON ({exc}); the folder cannot be "
                                   "checked against these settings") from None

    if (out / RUN_FILE).is_file():
        rec = read(out / RUN_FILE)
        if not isinstance(rec, dict) or not isinstance(rec.get("settings"), dict):
            raise RunMismatchError(f"--resume: {out / RUN_FILE} is not a run record")
        return rec
    if not (out / "config.json").is_file():
        return None
    settings = read(out / "config.json")
    prov = read(out / "provenance.json") if (out / "provenance.json").is_file() else None
    return {**record(settings if isinstance(settings, dict) else {}, prov if isinstance(prov, dict) else None),
            **({} if isinstance(prov, dict) else {"data": None})}


def check_settings(rec: dict[str, Any], settings: dict[str, Any], out: Path) -> None:
    """Refuse a resume whose settings differ from the run's in a defining setting, naming each (an older run's
    comma strings and JSON text read as today's lists and tables)."""
    was, now = normalised_settings(TrainConfig, rec["settings"]), normalised_settings(TrainConfig, defining(settings))
    differ = [k for k in sorted(set(was) | set(now)) if k in now and k in was and was[k] != now[k]]
    if differ:
        shown = "; ".join(f"{k}: the run has {was[k]!r}, now {now[k]!r}" for k in differ[:6])
        raise RunMismatchError(
            f"--resume of {out} with other settings ({shown}){' ...' if len(differ) > 6 else ''}. A resumed run "
            f"keeps its settings except {', '.join(MAY_CHANGE)}; start a new run (another --output-dir) to "
            "change the others")


def check_data(rec: dict[str, Any], provenance: dict[str, Any] | None, out: Path) -> None:
    """Refuse a resume whose env reads other data than the run's (a file added, gone or changed)."""
    was = rec.get("data")
    if was is None:
        return  # a folder of an earlier lopd that recorded no data: nothing to compare
    now = data_files(provenance)
    for name in sorted(set(was) | set(now)):
        if was.get(name) != now.get(name):
            state = ("is not read now" if name not in now else "was not read by the run" if name not in was
                     else f"has changed (sha256 {was[name][:12]}..., now {now[name][:12]}...)")
            raise RunMismatchError(f"--resume of {out}: data file {name} {state}; resume with the run's data or "
                                   "start a new run")


def write(out: Path, rec: dict[str, Any]) -> None:
    from lopd_train.training.checkpoints import atomic_write

    atomic_write(out / RUN_FILE, json.dumps(rec, indent=2))


def write_run_files(out: Path, settings: dict[str, Any], rec: dict[str, Any] | None,
                    data_provenance: dict[str, Any] | None, env, step: int, rollouts: int) -> None:
    """A start's files: ``run.json`` (once, at the run's start), ``config.json``, this start's software
    versions (a resume may run others), the data's provenance (source, version, file hashes: for the model card
    and whoever reads the run)."""
    from lopd_envs import provenance
    from lopd_train import software
    from lopd_train.training.checkpoints import atomic_write

    if rec is None or not (out / RUN_FILE).is_file():
        write(out, record(settings, data_provenance))
    atomic_write(out / "config.json", json.dumps(settings, indent=2))
    software.record(out, step, rollouts)
    if getattr(env.unwrapped, "provenance", None) is not None:  # every lopd env has one
        atomic_write(out / "provenance.json", json.dumps(provenance.of(env), indent=2))
