"""Where a run's experiences come from: one object per ``--bank-mode``, each answering the trainer's four
questions the same way whatever the mode, so the training loop has no branch per mode:

1. ``open``: the run's bank file (created, or seeded from ``--init-bank`` / copied from ``--bank``);
2. ``before_training``: fill it before the first update (reference mode builds or counts its fixed bank);
3. ``after_rollouts``: what a batch's successes do to it (dynamic mode adds them);
4. ``cold_start_data``: the successful trajectories the composer's cold start fits.

:class:`ReferenceBank` is the authors' recipe: a fixed bank sampled from the base model before training
(``utils/build_memory_bank.py``), queried by the task instruction. :class:`DynamicBank` grows with the run's own
successes and is queried by the trace. Both hand the trainer a :class:`~lopd_train.experience.retriever.Retriever`.

The trainer object is passed in (not imported): these need its student, envs, run folder and counters, and
the arrow stays pointing down.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lopd_train.errors import RunInputMissing, RunSettingError
from lopd_train.experience.bank import ExperienceBank, trace_key
from lopd_train.experience.build import HELD_BACK


def keep_tokens(t, tokenizer) -> None:
    """Before a rollout goes into the bank: its full chat transcript (the encoder's ``chat`` rendering) and its
    exact token ids (what a cold start replays) travel with its trace."""
    from lopd_train.rollout.replay import attach_sequence, attach_transcript

    attach_transcript(t.trace, tokenizer.decode(t.input_ids))
    attach_sequence(t)


def copy_bank(bank, source: str, held_back_path: Path | None = None, vocab: int | None = None) -> int:
    """Copy a built reference bank (``lopd bank build``) into the run's bank; refuse a file that is not one.
    The successes it held back (``--hold-back``) are written to ``held_back_path`` for the PIG metric."""
    from lopd_train.experience.bank import BankFileError, read_bank_file
    from lopd_train.statefile import write_text_atomic as atomic_write

    path = Path(source)
    if not path.is_file():
        raise RunInputMissing(f"--bank {source}: no such file (build one with `lopd bank build`)")
    rows, meta = read_bank_file(path, vocab)  # read-only and checked row by row (token ids against ``vocab``)
    info = dict(meta)
    if "provenance" not in info:
        raise BankFileError(f"--bank {source} has no provenance: it was not written by `lopd bank build` (a "
                            "run's dynamic bank.sqlite goes to --init-bank with --bank-mode dynamic)")
    if held_back_path is not None and info.get("held_back"):
        atomic_write(Path(held_back_path), info["held_back"])
    return bank.insert(rows, meta)


def seed_bank(bank, source: str, vocab: int | None = None) -> int:
    """Add the experiences of another bank file, or of a JSONL of traces, to ``bank`` (their token ids checked
    against a tokenizer of ``vocab`` tokens)."""
    from lopd_envs.trace import read_traces
    from lopd_train.experience.bank import check_token_ids

    if str(source).endswith((".sqlite", ".db")):
        return bank.merge_from(source, vocab)
    if not Path(source).is_file():
        raise RunInputMissing(f"--init-bank {source}: no such file (a bank .sqlite or a JSONL of traces)")
    traces = list(read_traces(source))
    if vocab is not None:
        for i, t in enumerate(traces):
            check_token_ids(t, vocab, f"{source}, trace {i + 1}")
    return len(bank.add(traces))


class BankMode:
    """The interface (see the module docstring); ``retriever_key`` is what the retriever matches on."""

    name = ""
    retriever_key = "trace"

    def __init__(self, cfg):
        self.cfg = cfg

    def open(self, trainer, fresh: bool) -> ExperienceBank:
        """The run's bank file. ``fresh``: no checkpoint exists, so a bank left by a run that died before its
        first checkpoint is removed and the new one seeded; rank 0 does it, the other ranks open the file."""
        out = Path(trainer.out)
        with trainer.dist.main_first():
            if fresh and trainer.dist.is_main:
                for stale in out.glob("bank.sqlite*"):
                    stale.unlink()
            bank = ExperienceBank(out / "bank.sqlite")
            if fresh and trainer.dist.is_main:
                self.seed(trainer, bank)
        return bank

    def seed(self, trainer, bank: ExperienceBank) -> None:
        """What a new run's bank starts with."""

    def before_training(self, trainer) -> dict[str, Any] | None:
        """Fill the bank before training; the metrics row to log, or None when nothing was done."""
        return None

    def after_rollouts(self, trainer, trajectories: list) -> int:
        """A rollout batch's effect on the bank: the number of experiences added."""
        return 0

    def cold_start_data(self, trainer) -> list:
        """The bank's successes of this env and training pool, replayed as token sequences (each with its bank
        row id, so a pairing that must not retrieve it can leave it out)."""
        from lopd_envs.trace import Trace
        from lopd_train.rollout.replay import replay_trace

        cfg = self.cfg
        data: list = []
        if cfg.lopd.cold_start_steps <= 0:
            return data  # nothing to fit: the algorithm refuses or logs the empty cold start
        env_id = getattr(trainer.envs[0].unwrapped, "env_id", "")
        for k, exp in enumerate(trainer.bank.all() if trainer.bank is not None else []):
            trace = Trace.from_json(exp.trace)
            if not exp.success or trace.env_id != env_id or (trainer.task_pool and trace.task_id not in trainer.task_pool):
                continue  # a failure, or another env's (category's) experience: no prompt to replay it in
            t = replay_trace(trainer.envs[0], trainer.tokenizer, trace, cfg.sampling(), group=-(k + 1))
            t.bank_id = exp.id
            data.append(t)
        return data


class ReferenceBank(BankMode):
    """The fixed bank of the authors' recipe, queried by the task instruction (an experience of the same task
    may come back). Built before training from the untrained student's samples (``--bank-samples``) unless
    ``--bank`` gives one built by ``lopd bank build``; either way its rollouts count in the run's budget."""

    name = "reference"
    retriever_key = "instruction"

    def __init__(self, cfg):
        super().__init__(cfg)
        if cfg.experience.init_bank:
            raise RunSettingError("--init-bank seeds the dynamic bank; in --bank-mode reference give a built bank "
                                  "with --bank (lopd bank build) or let the run build one (--bank-samples)")

    def seed(self, trainer, bank: ExperienceBank) -> None:
        if self.cfg.experience.bank:
            copy_bank(bank, self.cfg.experience.bank, held_back_path=Path(trainer.out) / HELD_BACK, vocab=trainer.vocab)

    def before_training(self, trainer) -> dict[str, Any] | None:
        """Sample the bank (or count the given one's rollouts) once; the provenance (model, sampling, tasks,
        rollouts) stays in the bank."""
        cfg, exp = self.cfg, self.cfg.experience
        if trainer.bank_built:
            return None
        with trainer.dist.main_first():  # data-parallel: rank 0 samples the one bank, the others read it
            if exp.bank or not trainer.dist.is_main:
                prov = trainer.bank.provenance()
                trainer.rollouts += int(prov.get("rollouts", 0))
            else:
                from lopd_train.experience.build import sample_bank

                prov = sample_bank(trainer, trainer.task_pool, exp.bank_samples, keep_failures=exp.bank_keep_failures,
                                   progress=cfg.progress)
                if trainer.vllm is not None:
                    trainer.vllm.sleep()  # the cold start's turn on the GPU
        trainer.retriever.sync()
        trainer.bank_built = True
        return {"phase": "bank", "step": 0, "rollouts": trainer.rollouts, "bank_size": len(trainer.bank),
                "bank_rollouts": int(prov.get("rollouts", 0)), "bank_successes": int(prov.get("successes", 0)),
                "bank_tasks": len(prov.get("tasks", []))}


class DynamicBank(BankMode):
    """A bank that grows with the run's successes (seeded by ``--init-bank``), queried by the trace; the cold
    start adds rollout batches until ``--cold-start-min-successes`` exist (at most ``--cold-start-max-batches``;
    greedy ones with ``--cold-start-greedy``)."""

    name = "dynamic"
    retriever_key = "trace"

    def __init__(self, cfg):
        super().__init__(cfg)
        if cfg.experience.bank:
            raise RunSettingError("--bank is a reference-mode bank; with --bank-mode dynamic use --init-bank")

    def seed(self, trainer, bank: ExperienceBank) -> None:
        if self.cfg.experience.init_bank:
            seed_bank(bank, self.cfg.experience.init_bank, trainer.vocab)

    def after_rollouts(self, trainer, trajectories: list) -> int:
        """The batch's successes into the bank (and the retriever); each success learns its bank row, which its
        own retrieval must never return."""
        for t in trajectories:
            if t.success and t.trace is not None:
                keep_tokens(t, trainer.tokenizer)
        added = trainer.dist.add_to_bank(trainer.bank, [t.trace for t in trajectories if t.success],
                                         rollout=trainer.rollouts)
        if trainer.retriever is not None:
            trainer.retriever.add(added)
        for t in trajectories:
            if t.success and t.trace is not None:
                exp = trainer.bank.get_by_key(trace_key(t.trace))
                t.bank_id = exp.id if exp is not None else None
        return len(added)

    def cold_start_data(self, trainer) -> list:
        lopd = self.cfg.lopd  # the cold start is LOPD's
        if lopd.cold_start_steps <= 0:
            return []  # nothing to fit: no rollouts spent on it
        data = super().cold_start_data(trainer)
        batches = 0
        while (trainer.dist.sum(sum(t.success for t in data))[0] < lopd.cold_start_min_successes
               and batches < lopd.cold_start_max_batches):
            trajs, _ = trainer.rollout_batch(greedy=lopd.cold_start_greedy)
            data += trajs
            batches += 1
        return data


MODES = {"reference": ReferenceBank, "dynamic": DynamicBank}


def make(cfg) -> BankMode:
    """The run's bank mode (``--bank-mode``), its settings checked."""
    mode = cfg.experience.bank_mode
    if mode not in MODES:
        raise RunSettingError(f"--bank-mode {mode!r}: choose from {sorted(MODES)}")
    return MODES[mode](cfg)
