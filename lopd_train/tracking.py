"""Experiment tracking: every metric row of ``metrics.jsonl`` and, every N steps, a table of rollouts, sent to
the trackers a run reports to (``--report-to``, the transformers convention: ``none``, ``tensorboard``,
``trackio``, ``wandb``, several at once).

Why a table of rollouts: scalars say that the reward moved, not what the student writes. Each row holds the
end of the prompt, the completion, the reward, the ids of the experiences the teacher was conditioned on,
the privileged margin δ and the teacher-student KL (empty where the algorithm has none), so a run can be
read as text in trackio's or wandb's table view (TensorBoard gets it as a markdown table under TEXT).

Each backend is imported only when chosen: ``tensorboard`` comes with ``lopd[train]``, ``trackio`` and ``wandb``
with ``lopd[tracking]``. wandb honours its own settings (``WANDB_MODE=offline`` writes locally; ``WANDB_PROJECT``);
trackio writes into its local database (``TRACKIO_DIR``) unless a Space is configured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from lopd_envs.options import check_choice

REPORT_TO = ("none", "tensorboard", "trackio", "wandb")
ROLLOUT_COLUMNS = ("step", "task_id", "prompt_tail", "completion", "reward", "experience_ids", "delta",
                   "teacher_student_kl")


def parse_report_to(value: str | Sequence[str] | None) -> list[str]:
    """``"tensorboard,wandb"``, a list, ``"none"`` or None as the list of trackers (checked, no repeats)."""
    items = [v.strip() for v in value.split(",")] if isinstance(value, str) else list(value or [])
    items = [v for v in items if v]
    for item in items:
        check_choice("report_to", item, REPORT_TO)
    if "none" in items and len(items) > 1:
        raise ValueError(f"report_to: 'none' cannot be combined with other trackers, got {items}")
    return [] if items in ([], ["none"]) else list(dict.fromkeys(items))


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


class Tracker:
    """Sends metric rows and rollout tables to every chosen backend; ``report_to=[]`` sends nothing."""

    def __init__(self, report_to: Sequence[str], out_dir: str | Path, project: str = "lopd",
                 run_name: str | None = None, config: dict[str, Any] | None = None, resume: bool = False,
                 purge_step: int | None = None):
        self.report_to = parse_report_to(list(report_to))
        self.out_dir = Path(out_dir)
        run_name = run_name or self.out_dir.name
        self._tb = self._trackio = self._wandb = None
        if "tensorboard" in self.report_to:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step: a resumed run drops the events logged after its checkpoint
            self._tb = SummaryWriter(str(self.out_dir / "tb"), purge_step=purge_step)
        if "trackio" in self.report_to:
            import trackio

            self._trackio = trackio.init(project=project, name=run_name, config=config or {},
                                         resume="allow" if resume else "never", embed=False,
                                         auto_log_cpu=False, auto_log_gpu=False)
        if "wandb" in self.report_to:
            import wandb

            self._wandb = wandb.init(project=project, name=run_name, config=config or {}, dir=str(self.out_dir),
                                     resume="allow" if resume else None, reinit="create_new")

    def log(self, row: dict[str, Any]) -> None:
        """One ``metrics.jsonl`` row."""
        self.log_scalars(*scalars(row))

    def log_scalars(self, values: dict[str, float], x: int) -> None:
        """Named numbers at ``x`` (a step, or a rollout count for the held-out curves)."""
        if not values:
            return
        if self._tb is not None:
            for tag, v in values.items():
                self._tb.add_scalar(tag, v, x)
            self._tb.flush()
        if self._trackio is not None:
            self._trackio.log(values, step=x)
        if self._wandb is not None:
            self._wandb.log({**values, "x": x})

    def log_rollouts(self, rows: Sequence[RolloutRow], step: int) -> None:
        """A table of rollouts at ``step``."""
        if not rows:
            return
        data = [r.cells(step) for r in rows]
        if self._tb is not None:
            self._tb.add_text("rollouts", markdown_table(data), step)
            self._tb.flush()
        if self._trackio is not None:
            import trackio

            self._trackio.log({"rollouts": trackio.Table(columns=list(ROLLOUT_COLUMNS), data=data,
                                                         allow_mixed_types=True)}, step=step)
        if self._wandb is not None:
            import wandb

            self._wandb.log({"rollouts": wandb.Table(columns=list(ROLLOUT_COLUMNS), data=data), "x": step})

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        if self._trackio is not None:
            self._trackio.finish()
        if self._wandb is not None:
            self._wandb.finish()
        self._tb = self._trackio = self._wandb = None


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
