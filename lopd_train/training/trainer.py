"""The training loop shared by all algorithms: rollouts → experience bank → algorithm update → log →
checkpoint. Everything a run needs to continue is checkpointed atomically, and ``resume`` continues exactly
(the run folder's files: :mod:`lopd_train.training`).

The settings are :class:`lopd_train.config.TrainConfig`; writing, finding and reading checkpoints is
:mod:`lopd_train.training.checkpoints`. The trainer is the loop and its set-up, read top to bottom: set-up
(:meth:`Trainer._build`, in named builders), the bank (:mod:`lopd_train.experience.modes`: one object per
``--bank-mode``), the cold start, then per step rollout, update (with the algorithm's own diagnostics, e.g.
LOPD's probe NLL and PIG metric), log, checkpoint and held-out point (:mod:`lopd_train.training.heldout`).
"""

from __future__ import annotations

import json
import os
import random
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lopd_train import distributed, models, software, tracking
from lopd_train.config import TrainConfig
from lopd_train.errors import RunExistsError, RunSettingError
from lopd_train.experience import modes as bank_modes
from lopd_train.rollout.engine import Trajectory, batch_stats, make_envs, run_episodes, task_ids
from lopd_train.rollout.vllm import rollout_engine_for
from lopd_train.runlock import FolderLock
from lopd_train.training import allocator, checkpoints, runrecord
from lopd_train.training.envs import check_env, run_env_kwargs
from lopd_train.training.plots import plot_curve

# ----------------------------------------------------------------------------------- the trainer

class Trainer:
    def __init__(self, cfg: TrainConfig, resume: bool = False):
        self.cfg = cfg
        self.dist = distributed.from_environment()  # ranks of `accelerate launch`; LOCAL in a plain run
        self.out = Path(cfg.output_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        # one process per run folder (rank 0 holds it for every rank of a data-parallel run)
        self.lock = FolderLock(self.out, "lopd-train") if self.dist.is_main else None
        if self.lock is not None:
            self.lock.acquire()
        try:
            self._build(resume)
        except BaseException:
            self.release_lock()
            raise

    def release_lock(self) -> None:
        lock = getattr(self, "lock", None)
        if lock is not None:
            lock.release()

    def _build(self, resume: bool) -> None:
        """Set-up, in order: what the folder's run is (checked before anything loads), the model with its
        adapters, the bank, the algorithm, the restored checkpoint, the envs and held-out evaluators, the run's
        record files and the tracker. The random generators are restored last."""
        latest = self._check_folder(resume)
        env_kwargs = run_env_kwargs(self.cfg)
        self.data_provenance = check_env(self.cfg, env_kwargs) if self.dist.is_main else None
        if self.record is not None:
            runrecord.check_data(self.record, self.data_provenance, self.out)
        if latest is None and self.cfg.init_from:
            latest = checkpoints.fork(self, Path(self.cfg.init_from))
        self._load_policy()
        self.bank_mode = bank_modes.make(self.cfg) if self.algo_cls.needs_bank(self.cfg) else None
        self.bank = self.bank_mode.open(self, fresh=latest is None) if self.bank_mode is not None else None
        self.retriever = None
        self.algo = self.algo_cls(self.policy, self.tokenizer, self.cfg, self.bank, None)
        self.algo.dist = self.dist  # gradients and the dual statistic averaged over the ranks
        self.dist.broadcast_parameters(distributed.trainable_parameters(self.policy, self.algo))
        self.dist.prepare_model(self.policy)  # FSDP: the backbone sharded per decoder layer (all adapters exist now)
        rng = self._restore(latest)
        if self.bank is not None and self.bank_mode is not None:  # a bank is opened by its mode: both or neither
            from lopd_train.experience.retriever import Retriever

            self.retriever = self.algo.retriever = Retriever(self.bank, key=self.bank_mode.retriever_key)
        self.envs = make_envs(self.cfg.env, self.cfg.tasks_per_step * self.cfg.group_size, **env_kwargs)
        self.algo.attach_env(self.envs[0], self.out)  # tasks' privileged data (OPSD's answers), LOPD's PIG
        self.task_pool = list(self.cfg.tasks or task_ids(self.envs[0]))
        self.pool = ThreadPoolExecutor(max_workers=max(1, self.cfg.env_workers))
        self.heldout = self.make_heldout(env_kwargs, resumed=latest is not None)
        if self.dist.is_main:
            runrecord.write_run_files(self.out, self.cfg.to_dict(), self.record, self.data_provenance,
                                      self.envs[0], self.step, self.rollouts)
        else:
            self.heldout = None  # rank 0 evaluates; every rank left the held-out tasks out of its pool
        self.tracker = self._make_tracker(resumed=latest is not None)
        if self.dist.world_size > 1:  # identical initial weights above; from here on each rank its own samples
            random.seed(self.dist.rank_seed(self.cfg.seed))
            torch.manual_seed(self.dist.rank_seed(self.cfg.seed))
        if rng is not None:  # last, so that nothing built above draws from the restored generators
            checkpoints.set_rng_state(rng, self.np_rng)

    def _check_folder(self, resume: bool):
        """The newest checkpoint (None: a new run); refuses a folder that holds another run, or a run without
        ``--resume``; threads and the algorithm name checked first."""
        from lopd_train.algorithms import ALGORITHMS

        cfg = self.cfg
        self.ckpt_dir = self.out / "checkpoints"
        self.ckpt_dir.mkdir(exist_ok=True)
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        if self.dist.world_size == 1 and torch.get_num_threads() > 1:  # a shared machine says so now
            models.warn_oversubscribed(torch.get_num_threads(), models.busy_cores(), os.cpu_count() or 1)
        if cfg.algo not in ALGORITHMS:
            raise RunSettingError(f"unknown algo {cfg.algo!r}; choose from {sorted(ALGORITHMS)}")
        self.algo_cls = ALGORITHMS[cfg.algo]
        latest = checkpoints.latest(self.ckpt_dir)
        if latest is not None and not resume:
            raise RunExistsError(f"{self.out} already holds checkpoints; pass --resume to continue the run or "
                                 "choose another --output-dir")
        # what this folder's run is, checked before anything loads: a resume cannot mix two runs
        self.record = runrecord.saved(self.out) if latest is not None else None
        if self.record is not None:
            runrecord.check_settings(self.record, cfg.to_dict(), self.out)
        return latest

    def _load_policy(self) -> None:
        """The backbone with its LoRA adapters: "student", and the algorithm's own (LOPD's composer encoder and
        its snapshot); the seeds set first, so the adapters' initial weights are the seed's."""
        cfg = self.cfg
        self.device = (((self.dist.device or torch.device("cpu")) if self.dist.world_size > 1
                        else models.default_device())
                       if cfg.device == "auto" else torch.device(cfg.device))
        random.seed(cfg.seed)
        np.random.seed(cfg.seed)
        torch.manual_seed(cfg.seed)
        self.np_rng = np.random.default_rng(self.dist.rank_seed(cfg.seed))  # each rank its own tasks
        backbone, self.tokenizer = models.load_backbone(cfg.model, self.device, cfg.dtype)
        targets = cfg.lora_targets  # "all-linear" or the module names
        adapters = {"student": models.lora_config(cfg.lora_r, cfg.lora_alpha, targets=targets)}
        for name, (r, alpha) in self.algo_cls.extra_adapters(cfg).items():
            adapters[name] = models.lora_config(r, alpha, targets=targets)
        self.policy = models.wrap_lora(backbone, adapters)
        # token ids a bank may carry: the tokenizer's (or the embedding's, where the model pads it)
        self.vocab = max(len(self.tokenizer), self.policy.get_input_embeddings().num_embeddings)
        self.vllm = rollout_engine_for(self.cfg, self.tokenizer, self.device, self.out, self.dist,
                                       self.cfg.sampling(self.algo_cls.records_top_m(self.cfg)))  # None: HF
        if cfg.gradient_checkpointing:
            models.enable_gradient_checkpointing(self.policy)

    def _restore(self, latest):
        """The run's counters, from ``latest`` when resuming (its RNG state returned, set last by the caller);
        a new run clears what a run that died before its first checkpoint left."""
        self.step = 0
        self.rollouts = 0
        self.bank_built = False
        self.cold_start_progress = 0  # composer steps of the cold start already taken (resumed inside it)
        self.cold_start_done = not self.algo_cls.has_cold_start  # 0 steps: refused unless --allow-empty-cold-start
        if latest is not None:
            return checkpoints.load(self, latest)
        if self.dist.is_main:
            (self.out / "metrics.jsonl").unlink(missing_ok=True)
            (self.out / software.FILE).unlink(missing_ok=True)
        return None

    def _make_tracker(self, resumed: bool):
        """``--report-to`` on rank 0 (``--no-tensorboard`` drops TensorBoard from it); None elsewhere."""
        cfg = self.cfg
        if not self.dist.is_main:
            return None
        return tracking.Tracker(tracking.parse_report_to(cfg.report_to), self.out, run_name=self.out.name,
                                config=cfg.to_dict(), resume=resumed, purge_step=self.step + 1 if self.step else None,
                                exclude=() if cfg.tensorboard else ("tensorboard",))

    def make_heldout(self, env_kwargs: dict[str, Any], resumed: bool):
        """The held-out evaluator (None when off), with the training-tasks one beside it when asked; takes the
        held-out tasks out of the training pool (:func:`lopd_train.training.heldout.make_evaluators`)."""
        from lopd_train.training.heldout import make_evaluators

        self.evaluators, self.task_pool = make_evaluators(self.cfg, self.out, env_kwargs, self.task_pool,
                                                          self.rollouts, resumed)
        return self.evaluators[0] if self.evaluators else None

    def heldout_point(self, final: bool = False) -> None:
        """Evaluate on the held-out tasks if a rollout milestone is due (after the checkpoint that holds it), or
        at the end of the run (``final``) if no point holds the last student yet. Rank 0 evaluates; under FSDP
        every rank gathers the backbone with it."""
        from lopd_train.training.heldout import evaluate_due

        if self.heldout is not None:
            with self.dist.unsharded(self.policy, when=self.cfg.eval_every_rollouts > 0):
                evaluate_due(self.evaluators, self.policy, self.tokenizer, self.rollouts, self.step, final,
                             self.tracker)
        allocator.trim()  # a phase ends: what generation held goes back before the next phase grows its own

    # ------------------------------------------------------------------ rollouts
    def serving_student(self):
        """The generator for :func:`run_episodes`: None (HF generate), or the vLLM engine serving the current
        student adapter (re-synced once per update)."""
        if self.vllm is None:
            return None
        if getattr(self, "_served_step", None) != self.step:
            self.vllm.sync_lora(self.policy, "student")
            self._served_step = self.step
        return self.vllm

    def sample_tasks(self, n: int | None = None) -> list[str | None]:
        n = n or self.cfg.tasks_per_step
        if self.task_pool:
            replace = n > len(self.task_pool)
            picks = self.np_rng.choice(len(self.task_pool), size=n, replace=replace)
            return [self.task_pool[int(i)] for i in picks]
        return [None] * n

    def rollout_batch(self, greedy: bool = False):
        """One batch of on-policy rollouts: ``tasks_per_step`` tasks x ``group_size`` samples (``greedy``: as many
        distinct tasks, one greedy rollout each), their successes added to the bank."""
        g = 1 if greedy else self.cfg.group_size
        tasks = self.sample_tasks(self.cfg.tasks_per_step * self.cfg.group_size if greedy else None)
        seeds = [int(self.np_rng.integers(2**31)) for _ in tasks]
        per_env_tasks = [t for t in tasks for _ in range(g)]
        per_env_seeds = [s for s in seeds for _ in range(g)]
        groups = [i for i in range(len(tasks)) for _ in range(g)]
        self.policy.eval()
        with models.adapter(self.policy, "student"), self.dist.unsharded(self.policy, when=self.vllm is None):
            sampling = self.cfg.sampling(self.algo_cls.records_top_m(self.cfg))
            sampling.greedy = greedy
            trajs = run_episodes(self.policy, self.tokenizer, self.envs, per_env_tasks, sampling, groups=groups,
                                 seeds=per_env_seeds, pool=self.pool, generator=self.serving_student())
        self.policy.train()
        if self.vllm is not None:
            self.vllm.sleep()  # the update's turn on the GPU
        self.rollouts += int(self.dist.sum(len(trajs))[0])  # every rank's rollouts
        added = self.bank_mode.after_rollouts(self, trajs) if self.bank_mode is not None else 0
        return trajs, added

    def build_bank(self) -> None:
        """Fill the bank before training, as the bank mode does it (reference mode: the fixed bank, its
        rollouts counted in the run's budget; :mod:`lopd_train.experience.modes`)."""
        row = self.bank_mode.before_training(self) if self.bank_mode is not None else None
        if row is not None:
            self.log(row)

    # ------------------------------------------------------------------ loop
    def log(self, row: dict[str, Any]) -> None:
        row = self.dist.merge_rows(row)  # every rank's numbers, averaged; rank 0 writes
        if not self.dist.is_main:
            return
        with open(self.out / "metrics.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()
            os.fsync(f.fileno())
        if self.tracker is not None:
            self.tracker.log(row)

    def run(self) -> dict[str, Any]:
        from tqdm.auto import tqdm

        cfg = self.cfg
        self.heldout_point()  # rollouts 0: the untrained student, before the bank and any cold start
        if not self.bank_built:
            self.build_bank()
            if self.bank_built:
                checkpoints.save(self)  # the bank's rollouts are spent: a kill from here on keeps them
        # the milestone the bank crossed, taken now (step 0, the untrained student), not after the first update
        # for the algorithms without a cold start (SDPO, SDFT, Skill-SD)
        self.heldout_point()
        if not self.cold_start_done:
            self.cold_start()
            allocator.trim()
            self.heldout_point()
        bar = tqdm(total=cfg.steps, initial=self.step, desc=f"{cfg.algo} {cfg.env}", disable=not cfg.progress or not self.dist.is_main,
                   unit="step")
        last: dict[str, Any] = {}
        while self.step < cfg.steps and not (cfg.rollout_budget and self.rollouts >= cfg.rollout_budget):
            t0 = time.time()
            trajs, added = self.rollout_batch()
            t_roll = time.time() - t0
            with self.dist.unsharded(self.policy):  # FSDP: ranks run different passes, so no collective inside
                metrics = self.algo.update(trajs)
                self.step += 1
                final = self.step >= cfg.steps or bool(cfg.rollout_budget and self.rollouts >= cfg.rollout_budget)
                metrics.update(self.algo.diagnostics(self.step, final))  # e.g. LOPD's probe NLL and PIG
            last = {"phase": "train", "step": self.step, "rollouts": self.rollouts, **batch_stats(trajs),
                    **metrics, "bank_added": added, "bank_size": len(self.bank) if self.bank is not None else 0,
                    "rollout_seconds": t_roll, "update_seconds": time.time() - t0 - t_roll,
                    "seconds": time.time() - t0}
            self.log(last)
            if self.tracker is not None and cfg.rollout_table_every and self.step % cfg.rollout_table_every == 0:
                # an algorithm may attach per-rollout notes (experience ids, delta, KL) as ``table_notes``
                notes = [getattr(t, "table_notes", None) or {} for t in trajs]
                self.tracker.log_rollouts(tracking.rollout_rows(trajs, self.tokenizer, extras=notes), self.step)
            bar.update(1)
            bar.set_postfix(reward=f"{last['reward_mean']:.2f}", bank=last["bank_size"])
            if self.step % cfg.save_every == 0 or self.step == cfg.steps:
                checkpoints.save(self)
                self.heldout_point()
        bar.close()
        newest = checkpoints.latest(self.ckpt_dir)
        if newest is None or newest.name != f"step-{self.step:06d}":
            checkpoints.save(self)
        self.heldout_point(final=True)
        if self.dist.is_main:
            plot_curve(self.out / "metrics.jsonl", self.out / "reward_curve.png", f"{cfg.algo} on {cfg.env}")
        exported = None
        if cfg.export and self.dist.is_main:
            from lopd_train import export

            exported = export.export_trained(self.out, self.policy, cfg.push_to_hub)
        self.close()
        return {"step": self.step, "rollouts": self.rollouts, "last": last,
                "exported": str(exported) if exported else None}

    # ------------------------------------------------------------------ cold start
    def cold_start_data(self) -> list[Trajectory]:
        """Successful trajectories to cold-start on, as the bank mode gives them."""
        return self.bank_mode.cold_start_data(self) if self.bank_mode is not None else []

    def cold_start(self) -> None:
        """The cold-start phase: collect successes, fit the composer (one metrics row per step: the NLL
        curve), then a checkpoint at step 0."""
        t0 = time.time()
        data = self.cold_start_data()
        log = lambda row: self.log({"phase": "cold_start", "step": 0, **row})  # noqa: E731
        every = self.cfg.lopd.cold_start_save_every

        def on_step(n: int) -> None:  # a checkpoint inside the cold start: step 0, n composer steps taken
            self.cold_start_progress = n
            if every > 0 and n % every == 0:
                checkpoints.save(self)

        with self.dist.unsharded(self.policy):
            summary = self.algo.cold_start(data, log=log, progress=self.cfg.progress,
                                           start=self.cold_start_progress, on_step=on_step)
        self.cold_start_done = True
        self.log({"phase": "cold_start", "step": 0, "rollouts": self.rollouts, **batch_stats(data), **summary,
                  "bank_size": len(self.bank) if self.bank is not None else 0, "seconds": time.time() - t0})
        saved = checkpoints.save(self)
        if self.dist.is_main:  # kept for runs that start from this cold start (--init-from)
            checkpoints.keep_as_cold_start(self.ckpt_dir, saved)

    def close(self) -> None:
        if self.tracker is not None:
            self.tracker.close()
            self.tracker = None
        self.pool.shutdown(wait=True)
        for env in self.envs:
            env.close()
        for evaluator in getattr(self, "evaluators", None) or []:
            evaluator.close()
        # The banks last, and here rather than at garbage collection: closing a WAL-mode SQLite file folds its
        # -wal into the .sqlite, and a run's folder must not change after train() returns (pig_of_checkpoint.py
        # reads it while the same process lives on).
        if getattr(self, "algo", None) is not None:
            self.algo.close()
        bank = getattr(self, "bank", None)
        if bank is not None:
            bank.close()
        self.release_lock()  # last: the folder is complete



def train(cfg: TrainConfig, resume: bool = False) -> dict[str, Any]:
    trainer = Trainer(cfg, resume=resume)
    try:
        return trainer.run()
    finally:
        trainer.release_lock()  # also when the run fails: the folder is free for its --resume
