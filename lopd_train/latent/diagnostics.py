"""Privileged-information gain (PIG): how much the teacher's context actually knows.

Self-distillation can only teach what the teacher's context adds. PIG measures it directly, on successful
trajectories that were never in the bank (held back when it was built): the frozen teacher's negative
log-likelihood per sampled token of such a trajectory

* with **no context** (the base model: what the student starts as),
* with the retrieved experiences as **text** (what the latents compress: an upper bound for them),
* with the composer's **latents** of those experiences (what LOPD's teacher reads),
* and with controls: **zero** latents, **random** latents (Gaussian, at the composed latents' RMS), and
  latents composed from **another task's** experiences (the top-J for a different held-back task).

``PIG(c) = NLL(none) - NLL(c)`` (nats per token, positive: the context makes the successful trajectory more
likely). Each condition is also reported on the **decisive** tokens alone: those where the student's greedy
choice without context differs from the trajectory's token (where a teacher has something to correct). The
interval is a 95% percentile bootstrap over trajectories (:func:`bootstrap_gain`), token-weighted.

:func:`sampled_success` is the behavioural counterpart: the teacher's sampled success rate on the same tasks
with and without its context (single-turn episodes: one generated answer, scored by the env).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lopd_train import models
from lopd_train.latent.context import FRAMING_AFTER, FRAMING_BEFORE, context_prompt, experience_text
from lopd_train.rollout.engine import Trajectory
from lopd_train.scoring import embed_tokens, score_group

CONDITIONS = ("none", "text", "latent", "zero", "random", "other")


@dataclass
class NLLRecord:
    """One trajectory's teacher NLL under each condition: token sums and counts, all and decisive tokens."""

    task_id: str
    n_tokens: int
    n_decisive: int
    nll: dict[str, float] = field(default_factory=dict)  # condition -> summed NLL over all sampled tokens
    nll_decisive: dict[str, float] = field(default_factory=dict)  # condition -> summed NLL on decisive tokens


def text_context(experiences: Sequence[Any], fmt: str, max_tokens: int, tokenizer) -> str:
    """The retrieved experiences as one text, each cut to its last ``max_tokens`` tokens (what the encoder
    reads of it), numbered."""
    parts = []
    for k, e in enumerate(experiences):
        ids = models.encode(tokenizer, experience_text(e, fmt))[-max_tokens:]
        parts.append(f"Example {k + 1}:\n" + tokenizer.decode(ids))
    return "\n\n".join(parts)


def _sum_nll(logits: torch.Tensor, targets: torch.Tensor, keep: torch.Tensor) -> tuple[float, float]:
    lp = torch.log_softmax(logits.float(), -1).gather(-1, targets[:, None])[:, 0]
    return float(-lp.sum()), float(-(lp * keep).sum())


@torch.no_grad()
def teacher_nll(algo, trajectories: Sequence[Trajectory], experiences: Sequence[Sequence[Any]],
                other_experiences: Sequence[Sequence[Any]] | None = None,
                conditions: Sequence[str] = CONDITIONS, seed: int = 0) -> list[NLLRecord]:
    """Score each trajectory under the frozen teacher in each condition (see the module docstring).
    ``algo`` is a :class:`~lopd_train.algorithms.lopd.LOPD` (its policy, tokenizer, composer and config);
    ``experiences[i]`` are trajectory i's retrieved experiences, ``other_experiences[i]`` another task's."""
    policy, tok, cfg = algo.policy, algo.tokenizer, algo.cfg
    gen = torch.Generator().manual_seed(seed)
    records = []
    for i, t in enumerate(trajectories):
        g = algo.group([t], list(experiences[i]))
        (y,) = g.targets
        seq, mask = g.seqs, g.masks
        with models.adapter(policy, algo.student_adapter):
            (s_logits,) = score_group(policy, seq, mask, share_prefix=False)
        decisive = (s_logits.argmax(-1) != y).float()
        rec = NLLRecord(t.task_id, len(y), int(decisive.sum()))

        def put(name: str, logits: torch.Tensor) -> None:
            rec.nll[name], rec.nll_decisive[name] = _sum_nll(logits, y, decisive)  # noqa: B023 - called in this loop

        if "none" in conditions:
            (lg,) = score_group(policy, seq, mask, teacher=True, share_prefix=False)
            put("none", lg)
        if "text" in conditions:
            text = text_context(experiences[i], cfg.experience.experience_format, cfg.experience.experience_tokens, tok)
            _, t_seqs, t_masks = algo.context_view([t], text=text, framing=(FRAMING_BEFORE, FRAMING_AFTER))
            (lg,) = score_group(policy, t_seqs, t_masks, teacher=True, share_prefix=False)
            put("text", lg)
        z = algo.compose(t.task, list(experiences[i]))
        for name in ("latent", "zero", "random", "other"):
            if name not in conditions:
                continue
            if name == "latent":
                lat = z
            elif name == "zero":
                lat = torch.zeros_like(z)
            elif name == "random":
                rms = z.float().pow(2).mean().sqrt()
                lat = (torch.randn(z.shape, generator=gen) * rms).to(z.device, z.dtype)
            else:
                if not other_experiences or not other_experiences[i]:
                    continue
                other = algo.compose(t.task, list(other_experiences[i]))
                if other.shape != z.shape:  # a different number of experiences: a different placeholder run
                    continue
                lat = other
            (lg,) = score_group(policy, g.teacher_seqs, g.teacher_masks, (g.positions, lat), teacher=True,
                                share_prefix=False)
            put(name, lg)
        records.append(rec)
    return records


def bootstrap_gain(records: Sequence[NLLRecord], condition: str, decisive: bool = False, reps: int = 2000,
                   seed: int = 0) -> dict[str, float]:
    """PIG of ``condition`` (token-weighted mean NLL(none) - NLL(condition)) with a 95% percentile bootstrap
    interval over trajectories. Records missing the condition are left out."""
    use = [r for r in records if condition in r.nll and "none" in r.nll]
    key = "nll_decisive" if decisive else "nll"
    n = np.array([r.n_decisive if decisive else r.n_tokens for r in use], dtype=float)
    base = np.array([getattr(r, key)["none"] for r in use])
    cond = np.array([getattr(r, key)[condition] for r in use])
    if not len(use) or n.sum() == 0:
        return {"pig": float("nan"), "low": float("nan"), "high": float("nan"), "n": len(use), "tokens": 0,
                "nll_none": float("nan"), "nll": float("nan")}
    gain = float((base - cond).sum() / n.sum())
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(reps):
        k = rng.integers(len(use), size=len(use))
        if n[k].sum() > 0:
            draws.append((base[k] - cond[k]).sum() / n[k].sum())
    low, high = np.percentile(draws, [2.5, 97.5]) if draws else (float("nan"), float("nan"))
    return {"pig": gain, "low": float(low), "high": float(high), "n": len(use), "tokens": int(n.sum()),
            "nll_none": float(base.sum() / n.sum()), "nll": float(cond.sum() / n.sum())}


def paired_gain(records: Sequence[NLLRecord], condition: str, control: str, decisive: bool = False,
                by_task: bool = True, reps: int = 2000, seed: int = 0) -> dict[str, float]:
    """How much more ``condition`` helps than ``control`` on the same trajectories: token-weighted
    ``NLL(control) - NLL(condition)`` (nats per token; ``PIG(condition) - PIG(control)``), with a 95% percentile
    bootstrap interval that resamples **tasks** (``by_task``: a task's trajectories drawn together, since the
    successes of one task are often the same call) or trajectories. Records missing either are left out."""
    key = "nll_decisive" if decisive else "nll"
    use = [r for r in records if condition in getattr(r, key) and control in getattr(r, key)]
    n = np.array([r.n_decisive if decisive else r.n_tokens for r in use], dtype=float)
    diff = np.array([getattr(r, key)[control] - getattr(r, key)[condition] for r in use])
    tasks = sorted({r.task_id for r in use})
    if not use or n.sum() == 0:
        return {"pig": float("nan"), "low": float("nan"), "high": float("nan"), "n": len(use), "tasks": len(tasks),
                "tokens": 0}
    clusters = ([np.array([i for i, r in enumerate(use) if r.task_id == t]) for t in tasks] if by_task
                else [np.array([i]) for i in range(len(use))])
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(reps):
        k = np.concatenate([clusters[j] for j in rng.integers(len(clusters), size=len(clusters))])
        if n[k].sum() > 0:
            draws.append(diff[k].sum() / n[k].sum())
    low, high = np.percentile(draws, [2.5, 97.5]) if draws else (float("nan"), float("nan"))
    return {"pig": float(diff.sum() / n.sum()), "low": float(low), "high": float(high), "n": len(use),
            "tasks": len(tasks), "tokens": int(n.sum())}


def write_records(path, records: Sequence[NLLRecord]) -> None:
    """One JSON line per trajectory (its task, token counts and summed NLLs per condition), written atomically:
    every interval of a report recomputes from these."""
    import dataclasses
    import json
    from pathlib import Path

    from lopd_train.statefile import write_text_atomic as atomic_write

    atomic_write(Path(path), "".join(json.dumps(dataclasses.asdict(r), sort_keys=True) + "\n" for r in records))


def read_records(path) -> list[NLLRecord]:
    import json
    from pathlib import Path

    return [NLLRecord(**json.loads(line)) for line in Path(path).read_text().splitlines() if line.strip()]


def summary(records: Sequence[NLLRecord], conditions: Sequence[str] = CONDITIONS) -> dict[str, dict[str, float]]:
    """``{condition: bootstrap_gain(...), condition + "@decisive": ...}`` for every condition but ``none``."""
    out = {}
    for c in conditions:
        if c == "none":
            continue
        out[c] = bootstrap_gain(records, c)
        out[c + "@decisive"] = bootstrap_gain(records, c, decisive=True)
    return out


def other_task_experiences(trajectories: Sequence[Trajectory], experiences: Sequence[Sequence[Any]]
                           ) -> list[list[Any]]:
    """For each trajectory, the experiences retrieved for the next trajectory of a different task (a
    control whose latents are well-formed but about the wrong task)."""
    out = []
    for i, t in enumerate(trajectories):
        j = next((j for j in list(range(i + 1, len(trajectories))) + list(range(i))
                  if trajectories[j].task_id != t.task_id), None)
        out.append(list(experiences[j]) if j is not None else [])
    return out


# ----------------------------------------------------------------------------------- sampled success

@torch.no_grad()
def sampled_success(algo, env, trajectories: Sequence[Trajectory], experiences: Sequence[Sequence[Any]] | None,
                    kind: str = "none", samples: int = 4, seed: int = 0) -> float:
    """The frozen teacher's sampled success rate on the trajectories' tasks: ``samples`` answers per task at
    the run's sampling settings, from the task's prompt with no context (``none``), the experiences as text
    (``text``) or their composed latents (``latent``), each answer scored by ``env`` as a one-turn episode.
    Multi-turn tasks are scored on their first turn only (a later turn would need the context carried on).
    Each task is sampled once, from its first trajectory: a task's trajectories share its prompt and (retrieval
    is by instruction) its experiences, so a second would only repeat the same draw at the same odds and weigh
    tasks with more held-back successes more."""
    from lopd_train.rollout.engine import neutral_generation_config

    if experiences is None and kind in ("text", "latent"):
        raise ValueError(f"sampled_success of kind {kind!r} needs the experiences")
    exps = experiences if experiences is not None else ()  # read only under kind text or latent
    policy, tok, cfg = algo.policy, algo.tokenizer, algo.cfg
    sampling = cfg.sampling()
    embed = embed_tokens(policy)
    wins, total = 0, 0
    torch.manual_seed(seed)
    seen: set[str] = set()
    for i, t in enumerate(trajectories):
        if t.task_id in seen:
            continue
        seen.add(t.task_id)
        prompt = t.input_ids[:t.prompt_len]
        positions: list[int] = []
        lat = None
        if kind == "text":
            text = text_context(exps[i], cfg.experience.experience_format, cfg.experience.experience_tokens, tok)
            prompt = context_prompt(tok, prompt, t.messages, t.tools, text=text,
                                    text_tools=cfg.text_tools).input_ids
        elif kind == "latent":
            lat = algo.compose(t.task, list(exps[i]))
            cp = context_prompt(tok, prompt, t.messages, t.tools, n_latent=lat.shape[0],
                                text_tools=cfg.text_tools)
            prompt, positions = cp.input_ids, cp.positions
        elif kind != "none":
            raise ValueError(f"kind must be none, text or latent, got {kind!r}")
        ids = torch.tensor([prompt] * samples, device=algo.device)
        with models.base_only(policy):
            emb = embed(ids)
            if lat is not None:
                emb[:, positions] = lat.to(emb.dtype)
            gc = neutral_generation_config(tok, sampling)
            gc.output_logits = False
            out = policy.generate(inputs_embeds=emb, attention_mask=torch.ones_like(ids), generation_config=gc)
        for row in out.sequences:
            toks = row.tolist()
            if tok.eos_token_id in toks:
                toks = toks[:toks.index(tok.eos_token_id)]
            env.reset(options={"task_id": t.task_id})
            *_, info = env.step(tok.decode(toks, skip_special_tokens=True))
            trace = info.get("trace")
            wins += int(bool(getattr(trace, "success", False)))
            total += 1
    return wins / max(total, 1)


# ----------------------------------------------------------------------------------- the run's PIG metric

class PIGMetric:
    """The PIG metric of a training run (``--pig-every``): the frozen teacher's NLL gain per token from its
    context, on the successes held back when the bank was built (never in it): text (the retrieved
    experiences), the composer's latents, and zero latents (a control), with bootstrap bounds. ``algo`` is
    the run's LOPD (its env and run folder attached); empty when nothing was held back, said once."""

    CONDITIONS = ("none", "text", "latent", "zero")

    def __init__(self, algo):
        self.algo = algo
        self.held: list[Trajectory] | None = None
        self.warned = False

    def measure(self) -> dict[str, float]:
        from lopd_train.experience.build import HELD_BACK, read_held_back
        from lopd_train.rollout.replay import replay_trace

        algo = self.algo
        if algo.retriever is None or getattr(algo, "run_dir", None) is None:
            return {}
        if self.held is None:
            self.held = [replay_trace(algo.env, algo.tokenizer, tr, algo.cfg.sampling())
                         for tr in read_held_back(Path(algo.run_dir) / HELD_BACK)]
        if not self.held:
            if not self.warned:  # an empty metric must not look like a zero one
                self.warned = True
                from tqdm.auto import tqdm

                tqdm.write(f"warning: --pig-every {algo.cfg.lopd.pig_every} measures nothing: no successes were held "
                           "back from the bank (a run that builds its bank holds back --pig-trajectories; a bank "
                           "from `lopd bank build` needs --hold-back N)")
            return {}
        exps = algo.retriever.retrieve([t.task for t in self.held], k=algo.cfg.experience.top_j)
        s = summary(teacher_nll(algo, self.held, exps, conditions=self.CONDITIONS), self.CONDITIONS)
        out = {}
        for c in self.CONDITIONS[1:]:
            out.update({f"pig_{c}": s[c]["pig"], f"pig_{c}_low": s[c]["low"], f"pig_{c}_high": s[c]["high"],
                        f"pig_{c}_decisive": s[c + "@decisive"]["pig"]})
        return out
