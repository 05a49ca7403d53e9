"""Experiment tracking: every metric row of ``metrics.jsonl`` and, every N steps, a table of rollouts, sent to
the trackers a run reports to (``--report-to``, several at once).

Why accelerate's tracker API (``accelerate.tracking``): accelerate is already the trainer's launcher and
collectives, and its trackers put one interface (``GeneralTracker``: ``store_init_configuration``,
``log(values, step)``, ``log_table`` where the tracker has tables, ``finish``) over nine of them, where lopd
used to hand-write three. ``--report-to`` takes accelerate's names (:data:`TRACKERS`), ``all`` (every one
installed, as accelerate and transformers read it) and ``none``. What lopd keeps on top:

* rows as ``<phase>/<key>`` scalars at their step (non-numbers skipped), :func:`scalars`;
* TensorBoard in the run folder's ``tb/``: accelerate writes to ``logging_dir/run_name``, so lopd passes the
  run folder and ``"tb"``; a resumed run's ``purge_step`` goes to ``SummaryWriter`` through accelerate's kwargs,
  so no wrapper is needed to drop the events logged after the checkpoint;
* the rollout tables: ``log_table`` where the tracker has it (wandb, clearml), a ``trackio.Table`` for trackio
  (its ``log`` takes one; accelerate's trackio tracker has no ``log_table``), the markdown table as TEXT for
  TensorBoard, and elsewhere skipped with one warning;
* wandb and swanlab keep their own step: they drop what comes at a step already logged (wandb also below it),
  and lopd's x is not monotone (cold-start steps, then training steps; held-out curves at rollout counts), so
  x goes in as the value ``"x"``.

Why a table of rollouts: scalars say that the reward moved, not what the student writes. Each row holds the
end of the prompt, the completion, the reward, the ids of the experiences the teacher was conditioned on,
the privileged margin δ and the teacher-student KL (empty where the algorithm has none).

Names and packages are checked when a config is built, without importing accelerate (it imports torch, which
``lopd[eval]`` has not): :data:`TRACKERS` is accelerate's ``LOGGER_TYPE_TO_CLASS`` (a test holds them equal), a
missing package is one line naming its install. Each tracker follows its own settings (``WANDB_MODE=offline``,
``WANDB_PROJECT``, ``TRACKIO_DIR``, ``MLFLOW_TRACKING_URI``...).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lopd_envs.options import check_choice
from lopd_train import textforms

log = logging.getLogger(__name__)

#: accelerate's tracker names -> (the modules accelerate looks for, what to pip install)
TRACKERS = {"aim": (("aim",), "aim"), "clearml": (("clearml",), "clearml"),
            "comet_ml": (("comet_ml",), "comet-ml"), "dvclive": (("dvclive",), "dvclive"),
            "mlflow": (("mlflow",), "mlflow"), "swanlab": (("swanlab",), "swanlab"),
            "tensorboard": (("tensorboard", "tensorboardX"), '"lopd[train]"'),
            "trackio": (("trackio",), '"lopd[tracking]"'), "wandb": (("wandb",), '"lopd[tracking]"')}
REPORT_TO = ("none", "all", *TRACKERS)
OWN_STEP = ("wandb", "swanlab")  # x as the value "x", not as their step (module docstring)
CONFIG_AT_INIT = ("wandb", "trackio")  # their config goes to their init (:func:`init_kwargs`)
ROLLOUT_COLUMNS = ("step", "task_id", "prompt_tail", "completion", "reward", "experience_ids", "delta",
                   "teacher_student_kl")


def _installed(modules: Sequence[str]) -> bool:
    return any(importlib.util.find_spec(m) is not None for m in modules)


def parse_report_to(value: str | Sequence[str] | None) -> list[str]:
    """``"tensorboard,wandb"``, a list, ``"none"``, ``"all"`` or None as the list of trackers (checked, no
    repeats; ``all`` is expanded by :class:`Tracker`). Raises ``ValueError``, one line, for a name accelerate
    has not or a tracker whose package is not installed."""
    items = textforms.as_list(value)
    for item in items:
        check_choice("report_to", item, REPORT_TO)
    if "none" in items and len(items) > 1:
        raise ValueError(f"report_to: 'none' cannot be combined with other trackers, got {items}")
    items = [] if items in ([], ["none"]) else list(dict.fromkeys(items))
    if items and not _installed(("accelerate",)):
        raise ValueError('report_to: the trackers are accelerate\'s, which is not installed: '
                         'pip install "lopd[tracking]"')
    for item in items:
        if item != "all" and not _installed(TRACKERS[item][0]):
            raise ValueError(f"report_to: {item!r} needs the {TRACKERS[item][0][0]} package, which is not "
                             f"installed: pip install {TRACKERS[item][1]}")
    return items


@dataclass
class RolloutRow:
    """One rollout as the table shows it; ``prompt_tail`` is the prompt's last characters (the task, not
    the long system prompt). ``experience_ids``, ``delta`` and ``teacher_student_kl`` are the algorithm's
    (``None`` where it has no such thing, e.g. GRPO)."""

    task_id: str
    prompt_tail: str
    completion: str
    reward: float
    experience_ids: list[str] = field(default_factory=list)
    delta: float | None = None
    teacher_student_kl: float | None = None

    def cells(self, step: int) -> list[Any]:
        return [step, self.task_id, self.prompt_tail, self.completion, float(self.reward),
                ", ".join(self.experience_ids), _number(self.delta), _number(self.teacher_student_kl)]


def _number(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else float(x)


def scalars(row: dict[str, Any]) -> tuple[dict[str, float], int]:
    """A ``metrics.jsonl`` row as tracker scalars ``{"<phase>/<key>": value}`` and its x (the cold-start
    step in the cold start, else the training step), as the run's TensorBoard logs have always named them."""
    phase = row.get("phase", "train")
    x = int(row.get("cold_start_step", row.get("step", 0)))
    values = {f"{phase}/{k}": float(v) for k, v in row.items()
              if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("step", "cold_start_step")}
    return values, x


def hparams(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with what is not a bool, number, string or None as JSON text (TensorBoard's hparams take
    no lists or dicts)."""
    return {k: v if v is None or isinstance(v, (bool, int, float, str)) else json.dumps(v, default=str)
            for k, v in config.items()}


def init_kwargs(name: str, out_dir: Path, run_name: str, config: dict[str, Any], resume: bool,
                purge_step: int | None) -> dict[str, Any]:
    """The keyword arguments of accelerate's tracker ``name`` (its ``init_kwargs``): the run's name, a resume,
    where a local tracker writes in the run folder. wandb's and trackio's config go in here: accelerate's
    ``store_init_configuration`` updates their module's ``config``, which wandb's ``reinit="create_new"`` runs
    leave unset and which is a plain dict in trackio (``allow_val_change`` would become a key)."""
    return {"tensorboard": {"purge_step": purge_step},
            "wandb": {"name": run_name, "dir": str(out_dir), "resume": "allow" if resume else None,
                      "reinit": "create_new", "config": config},
            "trackio": {"name": run_name, "config": config, "resume": "allow" if resume else "never",
                        "embed": False, "auto_log_cpu": False, "auto_log_gpu": False},
            "mlflow": {"run_name": run_name}, "swanlab": {"experiment_name": run_name},
            "dvclive": {"dir": str(out_dir / "dvclive"), "resume": resume}}.get(name, {})


class Tracker:
    """Sends metric rows and rollout tables to accelerate's trackers for ``report_to``; ``[]`` sends nothing.
    Built where ``Accelerator.init_trackers`` would be: on the main process (the trainer's rank 0)."""

    def __init__(self, report_to: Sequence[str], out_dir: str | Path, project: str = "lopd",
                 run_name: str | None = None, config: dict[str, Any] | None = None, resume: bool = False,
                 purge_step: int | None = None, exclude: Sequence[str] = ()):
        chosen = [n for n in parse_report_to(list(report_to)) if n not in exclude]
        self.out_dir = Path(out_dir)
        self.trackers: list[Any] = []
        self.names: list[str] = []
        self._untabled: set[str] = set()
        if not chosen:
            return
        from accelerate import PartialState
        from accelerate.tracking import LOGGER_TYPE_TO_CLASS, filter_trackers

        PartialState()  # accelerate's trackers log through its logger, which needs its state (a no-op if set)
        too_old = [n for n in chosen if n != "all" and n not in LOGGER_TYPE_TO_CLASS]
        if too_old:  # the names are accelerate 1.9's
            raise ValueError(f"report_to: this accelerate has no {too_old} tracker: pip install 'accelerate>=1.9'")
        found = filter_trackers([*chosen], logging_dir=str(self.out_dir))  # a list of accelerate's element type
        self.names = [getattr(t, "value", str(t)) for t in found
                      if getattr(t, "value", str(t)) not in exclude]  # ``all`` expanded, then ``exclude`` applied
        missing = [n for n in chosen if n != "all" and n not in self.names]
        if missing:  # importlib found the package, accelerate's check did not (e.g. no distribution metadata)
            raise ValueError(f"report_to: accelerate finds no installed package for {missing}: pip install "
                             + " ".join(TRACKERS[n][1] for n in missing))
        run_name = run_name or self.out_dir.name
        try:
            for name in self.names:
                cls = LOGGER_TYPE_TO_CLASS[name]
                where = [str(self.out_dir)] if cls.requires_logging_directory else []
                tracker = cls("tb" if name == "tensorboard" else project, *where,
                              **init_kwargs(name, self.out_dir, run_name, config or {}, resume, purge_step))
                tracker.start()
                self.trackers.append(tracker)
                if config and name not in CONFIG_AT_INIT:
                    tracker.store_init_configuration(hparams(config) if name == "tensorboard" else config)
        except BaseException:
            self.close()
            raise

    def log(self, row: dict[str, Any]) -> None:
        """One ``metrics.jsonl`` row."""
        self.log_scalars(*scalars(row))

    def log_scalars(self, values: dict[str, float], x: int) -> None:
        """Named numbers at ``x`` (a step, or a rollout count for the held-out curves)."""
        if not values:
            return
        for tracker in self.trackers:
            if tracker.name in OWN_STEP:
                tracker.log({**values, "x": x})
            else:
                tracker.log(values, step=x)

    def log_rollouts(self, rows: Sequence[RolloutRow], step: int) -> None:
        """A table of rollouts at ``step``: ``log_table`` where the tracker has it, TensorBoard's markdown
        text, trackio's ``Table``; one warning per tracker that has none."""
        if not rows:
            return
        data = [r.cells(step) for r in rows]
        for tracker in self.trackers:
            if hasattr(tracker, "log_table"):
                tracker.log_table("rollouts", columns=list(ROLLOUT_COLUMNS), data=data,
                                  step=None if tracker.name in OWN_STEP else step)
            elif tracker.name == "tensorboard":
                tracker.log({"rollouts": markdown_table(data)}, step=step)  # a string: accelerate's add_text
            elif tracker.name == "trackio":
                import trackio

                tracker.log({"rollouts": trackio.Table(columns=list(ROLLOUT_COLUMNS), data=data,
                                                       allow_mixed_types=True)}, step=step)
            elif tracker.name not in self._untabled:
                self._untabled.add(tracker.name)
                log.warning("report_to: accelerate's %s tracker takes no tables; the rollout tables are not "
                            "sent to it", tracker.name)

    def close(self) -> None:
        for tracker in self.trackers:
            tracker.finish()
        self.trackers = []


def markdown_table(data: Sequence[Sequence[Any]]) -> str:
    """Rows as a markdown table (TensorBoard renders it), pipes and newlines escaped."""
    def cell(v: Any) -> str:
        return "" if v is None else str(v).replace("|", "\\|").replace("\n", "<br>")
    head = "| " + " | ".join(ROLLOUT_COLUMNS) + " |\n|" + "---|" * len(ROLLOUT_COLUMNS) + "\n"
    return head + "\n".join("| " + " | ".join(cell(v) for v in r) + " |" for r in data)


def rollout_rows(trajectories: Sequence[Any], tokenizer, tail_chars: int = 400,
                 extras: Sequence[dict[str, Any]] | None = None) -> list[RolloutRow]:
    """Table rows from :class:`lopd_train.rollout.engine.Trajectory` objects (ids decoded with ``tokenizer``);
    ``extras[i]`` may give rollout ``i``'s ``experience_ids``, ``delta`` and ``teacher_student_kl``."""
    rows = []
    for i, t in enumerate(trajectories):
        extra = extras[i] if extras is not None and i < len(extras) else {}
        prompt = tokenizer.decode(t.input_ids[:t.prompt_len], skip_special_tokens=True)
        rows.append(RolloutRow(str(t.task_id), prompt[-tail_chars:],
                               tokenizer.decode(t.input_ids[t.prompt_len:], skip_special_tokens=True),
                               float(t.reward), [str(e) for e in extra.get("experience_ids", [])],
                               extra.get("delta"), extra.get("teacher_student_kl")))
    return rows
