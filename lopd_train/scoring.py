"""Sequence scoring: the logits a model gives to the tokens a student sampled.

Every algorithm needs the same thing: for each rollout, the logits at the positions that predict its
sampled tokens, under the student (the active LoRA adapter) or under a teacher (the frozen base model, all
adapters off). A teacher may read a privileged context; when that context is continuous (LOPD's latent
tokens), ``inject`` replaces the input embeddings of a run of placeholder ids (see
:func:`lopd_train.latent.context.context_prompt`) with the latent vectors, so the sequence keeps the ids and
positions a serving engine would be given. Nothing here knows about losses.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence

import torch

from lopd_train import models


def decoder(peft_model):
    """The transformer body (no LM head) of a peft-wrapped causal LM."""
    return peft_model.get_base_model().get_decoder()


def lm_head(peft_model):
    return peft_model.get_base_model().get_output_embeddings()


def embed_tokens(peft_model):
    return peft_model.get_base_model().get_input_embeddings()


def action_positions(action_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For a 1-D ``action_mask``: the positions whose hidden state predicts each sampled token, and those
    token positions."""
    targets = torch.nonzero(action_mask, as_tuple=False).squeeze(-1)
    return targets - 1, targets


def inject_embeddings(emb: torch.Tensor, positions: Sequence[int], latents: torch.Tensor | None) -> torch.Tensor:
    """``emb`` ``[L, d]`` with rows ``positions`` (one contiguous run) replaced by ``latents`` ``[P, d]``.

    Built by concatenation rather than in-place assignment so the gradient reaches ``latents``."""
    if latents is None or len(positions) == 0:
        return emb
    start, end = int(positions[0]), int(positions[-1]) + 1
    if list(positions) != list(range(start, end)) or latents.shape[0] != end - start:
        raise ValueError(f"latent positions must be one contiguous run of {latents.shape[0]} ids, got "
                         f"{len(positions)} from {start}")
    if end > emb.shape[0]:
        raise ValueError(f"latent positions end at {end}, past the scored prefix of {emb.shape[0]} tokens")
    return torch.cat([emb[:start], latents.to(emb.dtype), emb[end:]], dim=0)


def student_logits(peft_model, input_ids: torch.Tensor, action_mask: torch.Tensor) -> torch.Tensor:
    """Student (active adapter) logits at the positions that predict the sampled tokens: ``[T_a, V]``."""
    pos, _ = action_positions(action_mask)
    hidden = decoder(peft_model)(input_ids=input_ids.unsqueeze(0)).last_hidden_state[0]
    return lm_head(peft_model)(hidden[pos])


def teacher_logits(peft_model, input_ids: torch.Tensor, action_mask: torch.Tensor,
                   inject: tuple[Sequence[int], torch.Tensor] | None = None) -> torch.Tensor:
    """Frozen-backbone logits (all adapters disabled) at the positions that predict the sampled tokens,
    ``[T_a, V]``, with ``inject = (positions, latents)`` replacing those positions' input embeddings."""
    pos, _ = action_positions(action_mask)
    with models.base_only(peft_model):
        emb = embed_tokens(peft_model)(input_ids)
        if inject is not None:
            emb = inject_embeddings(emb, *inject)
        hidden = decoder(peft_model)(inputs_embeds=emb.unsqueeze(0)).last_hidden_state[0]
        return lm_head(peft_model)(hidden[pos])


def common_prefix_length(seqs: list[torch.Tensor], masks: list[torch.Tensor]) -> int:
    """Length of the prefix all sequences share and in which nobody sampled anything (the group's prompt)."""
    limit = min(int(torch.nonzero(m)[0]) if m.any() else len(m) for m in masks)
    limit = min([limit] + [len(s) for s in seqs])
    first = seqs[0][:limit]
    for s in seqs[1:]:
        diff = torch.nonzero(s[:limit] != first)
        if len(diff):
            limit = int(diff[0])
            first = first[:limit]
    return limit


def cache_kw(model) -> str:
    """The name of the key/value cache argument: transformers >= 5.2 renamed ``past_key_values`` to ``cache``.
    A PEFT wrapper's ``forward`` takes ``**kwargs``, so its base model's signature decides."""
    body = model.get_base_model() if hasattr(model, "get_base_model") else model
    params = inspect.signature(body.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def cached(out):
    """The key/value cache of a model output, under either name."""
    return out["cache"] if "cache" in out else out["past_key_values"]


class FrozenPrefixCache:
    """The frozen backbone's states of recent prompt heads, keyed by their token ids.

    A teacher's prompt up to its first latent (system prompt, tool listing, few-shot demonstrations, the
    task turn's opening) is the same for every group of a batch and every step of a run, and the frozen
    backbone maps it to the same hidden states and key/value cache each time: computing it once is exact.
    Each use gets its own copy of the cache (the forward appends to it). Only valid while the backbone's
    weights do not change, so nothing is cached when any of them is trainable (a full fine-tune).

    Where the tools are listed in the system prompt (BFCL), each task has its own head, so the cache holds one
    entry per recurring task: least recently used first out once ``max_bytes`` (default 1 GiB, or
    ``$LOPD_PREFIX_CACHE_MB``) is exceeded; SmolLM2's head of a few-shot BFCL prompt takes ~30 MB."""

    def __init__(self, max_bytes: int | None = None):
        env = os.environ.get("LOPD_PREFIX_CACHE_MB")
        self.max_bytes = max_bytes if max_bytes is not None else int(float(env) * 2**20) if env else 2**30
        self._entries: OrderedDict[tuple, tuple[torch.Tensor, object, int, weakref.ref]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def states(self, body, ids: torch.Tensor, emb: torch.Tensor) -> tuple[torch.Tensor, object]:
        """Hidden states ``[n, d]`` and a fresh key/value cache of ``emb`` (the embeddings of ``ids``), no graph."""
        if any(p.requires_grad for n, p in body.named_parameters() if "lora_" not in n):
            with torch.no_grad():
                out = body(inputs_embeds=emb.unsqueeze(0), use_cache=True)
            return out.last_hidden_state[0], cached(out)
        key = (id(body), str(emb.device), emb.dtype, tuple(ids.tolist()))
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None and hit[3]() is not body:  # another model now has that id: not its states
                self._bytes -= self._entries.pop(key)[2]
                hit = None
            if hit is not None:
                self._entries.move_to_end(key)
                self.hits += 1
        if hit is None:
            with torch.no_grad():
                out = body(inputs_embeds=emb.unsqueeze(0), use_cache=True)
            hidden, kv = out.last_hidden_state[0], cached(out)
            hit = (hidden, kv, hidden.nbytes + cache_nbytes(kv), weakref.ref(body))
            with self._lock:
                self.misses += 1
                if key not in self._entries and hit[2] <= self.max_bytes:
                    self._entries[key] = hit
                    self._bytes += hit[2]
                while self._bytes > self.max_bytes and self._entries:
                    self._bytes -= self._entries.popitem(last=False)[1][2]
        return hit[0], copy.deepcopy(hit[1])

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0


def cache_nbytes(cache) -> int:
    """Bytes held by a key/value cache (transformers' ``DynamicCache``, either layout)."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return sum(t.nbytes for layer in layers for t in (getattr(layer, "keys", None), getattr(layer, "values", None))
                   if isinstance(t, torch.Tensor))
    return sum(t.nbytes for t in [*getattr(cache, "key_cache", []), *getattr(cache, "value_cache", [])]
               if isinstance(t, torch.Tensor))


FROZEN_PREFIXES = FrozenPrefixCache()


def kv_pairs(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's (keys, values) of a key/value cache (transformers' ``DynamicCache``, either layout)."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return [(layer.keys, layer.values) for layer in layers]
    return list(zip(cache.key_cache, cache.value_cache))


def cache_of(body, pairs: Sequence[tuple[torch.Tensor, torch.Tensor]]):
    """A fresh ``DynamicCache`` for ``body`` holding ``pairs`` (each layer's keys and values)."""
    from transformers import DynamicCache

    cache = DynamicCache(config=body.config)
    for i, (k, v) in enumerate(pairs):
        cache.update(k, v, i)
    return cache


def _flag(name: str, default: str) -> bool:
    return os.environ.get(name, default).strip().lower() not in ("0", "false", "no", "off", "")


#: whether a shared prompt's graph is recomputed in the backward rather than kept (``$LOPD_CHECKPOINT_PROMPT``)
CHECKPOINT_PROMPT = _flag("LOPD_CHECKPOINT_PROMPT", "1")
#: whether a teacher's pass with latents is recomputed in the backward where its caller does not say
#: (``$LOPD_CHECKPOINT_TEACHER``; off: it pays only where the backward comes late, which its caller knows)
CHECKPOINT_TEACHER = _flag("LOPD_CHECKPOINT_TEACHER", "0")


def _run_prompt(body, emb: torch.Tensor, head=None, recompute=None) -> tuple[torch.Tensor, object]:
    """Hidden states ``[n, d]`` and key/value cache of the prompt embeddings ``emb`` ``[n, d]``, after the cache
    ``head`` (the states of what precedes ``emb``) if given.

    With ``recompute`` (a ``context_fn`` for ``torch.utils.checkpoint``), and a graph being recorded, the pass is
    checkpointed: only its inputs and outputs (hidden states and key/value cache) are kept, and its activations
    are recomputed when the backward reaches it. A group's prompt is most of what the student scores (a BFCL
    prompt of ~850 tokens before 3 continuations of ~48), and its activations, kept from the forward until the
    loss's backward, were most of the student's graph (issue 53). The backward reaches it after every
    continuation (autograd runs the later nodes first), so the recomputed activations replace the continuations'
    ones instead of adding to them. It costs one more forward of the prompt per scored group. The result and the
    gradient are the same: the recomputation runs the same operations on the same inputs, in the adapter mode
    of the forward (``recompute``)."""
    if recompute is None or not torch.is_grad_enabled():
        kw = {cache_kw(body): head} if head is not None else {}
        out = body(inputs_embeds=emb.unsqueeze(0), use_cache=True, **kw)
        return out.last_hidden_state[0], cached(out)
    from torch.utils.checkpoint import checkpoint

    head_kv = [t for kv in kv_pairs(head) for t in kv] if head is not None else []

    def run(x, *flat):
        # the head is rebuilt from its tensors at each run: the forward appends to the cache it is given
        kw = {cache_kw(body): cache_of(body, list(zip(flat[::2], flat[1::2])))} if flat else {}
        out = body(inputs_embeds=x.unsqueeze(0), use_cache=True, **kw)
        return out.last_hidden_state, *[t for kv in kv_pairs(cached(out)) for t in kv]

    hidden, *flat = checkpoint(run, emb, *head_kv, use_reentrant=False, context_fn=recompute)
    return hidden[0], cache_of(body, list(zip(flat[::2], flat[1::2])))


def _head_states(body, emb: torch.Tensor, ids: torch.Tensor | None) -> tuple[torch.Tensor, object]:
    """Hidden states and key/value cache of a prompt head that carries no graph: from :data:`FROZEN_PREFIXES`
    when its token ids are given, else computed here."""
    if ids is not None:
        return FROZEN_PREFIXES.states(body, ids, emb)
    with torch.no_grad():
        head = body(inputs_embeds=emb.unsqueeze(0), use_cache=True)
    return head.last_hidden_state[0], cached(head)


def _prefix_states(body, emb: torch.Tensor, frozen: int, ids: torch.Tensor | None = None,
                   recompute=None) -> tuple[torch.Tensor, object]:
    """Hidden states ``[n, d]`` and key/value cache of the prompt embeddings ``emb`` ``[n, d]``.

    The first ``frozen`` positions run without a graph. For a teacher (the frozen backbone) the only trainable
    input is the latent context, so nothing before the first latent depends on a trainable tensor: its states
    are constants whether or not autograd records them, and recording them would only cost memory and a
    backward pass over the system prompt and tool listing (most of a BFCL prompt). The rest of the prompt
    attends to that cached part as it would in one pass. With ``ids`` (the prompt's token ids) that part comes
    from :data:`FROZEN_PREFIXES`, computed once for every group and step that shares it, also when no graph is
    recorded at all (LOPD's probe NLL after every update, the PIG metric, the PIG benchmark: without the cache
    each of those passes ran the whole head again, ~5x the tail's cost on a BFCL prompt). Without ``ids`` and
    without a graph there is nothing to save by splitting, and the prompt runs in one pass. The part with a
    graph is checkpointed when ``recompute`` is given (:func:`_run_prompt`)."""
    if not frozen or (ids is None and not torch.is_grad_enabled()):
        return _run_prompt(body, emb, recompute=recompute)
    h_head, cache = _head_states(body, emb[:frozen], None if ids is None else ids[:frozen])
    if frozen == emb.shape[0]:
        return h_head, cache
    h_tail, cache = _run_prompt(body, emb[frozen:], cache, recompute)
    return torch.cat([h_head, h_tail]), cache


def _continuation_states(body, h_prefix: torch.Tensor, cache, seqs: list[torch.Tensor], masks: list[torch.Tensor],
                         n: int) -> list[torch.Tensor]:
    """The hidden states that predict each sequence's sampled tokens, ``[T_a_i, d]``, given the shared prompt's
    (the first ``n`` tokens) states and cache: the continuations run as one padded batch after the cache,
    expanded over them."""
    rests = [s[n:] for s in seqs]
    width = max(len(r) for r in rests)
    h_rest = None
    if width:
        g = len(seqs)
        cache.batch_repeat_interleave(g)
        ids = torch.zeros((g, width), dtype=torch.long, device=seqs[0].device)
        attn = torch.zeros((g, n + width), dtype=torch.long, device=seqs[0].device)
        attn[:, :n] = 1
        for i, r in enumerate(rests):
            ids[i, :len(r)] = r
            attn[i, n:n + len(r)] = 1
        h_rest = body(input_ids=ids, attention_mask=attn, use_cache=False,
                      **{cache_kw(body): cache}).last_hidden_state
    out = []
    for i, m in enumerate(masks):
        pos, _ = action_positions(m)
        in_prefix = pos < n
        parts = [h_prefix[pos[in_prefix]]]
        if h_rest is not None:
            parts.append(h_rest[i, pos[~in_prefix] - n])
        out.append(torch.cat(parts, dim=0))
    return out


def _teacher_states_checkpointed(body, emb: torch.Tensor, frozen: int, ids: torch.Tensor, seqs, masks, n: int,
                                 recompute) -> list[torch.Tensor]:
    """:func:`_continuation_states` of a teacher whose pass after its frozen head (latents, the rest of the
    prompt, the continuations) is checkpointed whole: LOPD keeps the teacher's graph from its forward, through
    the student's forward and backward, to the composer's backward, and only the latents, the head's cache
    and the states it returns are kept meanwhile; the pass runs again in the composer's backward, when the
    student's graph is gone. Costs one more forward of that part."""
    from torch.utils.checkpoint import checkpoint

    h_head, head = _head_states(body, emb[:frozen], ids[:frozen]) if frozen else (None, None)
    head_kv = [t for kv in kv_pairs(head) for t in kv] if head is not None else []

    def run(x, *flat):
        cache = cache_of(body, list(zip(flat[::2], flat[1::2]))) if flat else None
        h_prefix, cache = _run_prompt(body, x, cache)
        if h_head is not None:
            h_prefix = torch.cat([h_head, h_prefix])
        return tuple(_continuation_states(body, h_prefix, cache, seqs, masks, n))

    return list(checkpoint(run, emb[frozen:], *head_kv, use_reentrant=False, context_fn=recompute))


def score_group(peft_model, seqs: list[torch.Tensor], masks: list[torch.Tensor],
                inject: tuple[Sequence[int], torch.Tensor] | None = None, teacher: bool = False,
                share_prefix: bool = True, checkpoint_prompt: bool | None = None,
                checkpoint_teacher: bool | None = None) -> list[torch.Tensor]:
    """Logits at the positions that predict each sequence's sampled tokens (``[T_a_i, V]`` each), for the
    student (active adapter) or the teacher (base model; ``inject`` as in :func:`teacher_logits`, at
    positions inside the shared prompt).

    The rollouts of one task share their prompt: it is run once, and its key/value cache (which carries
    gradients) is expanded over the group's continuations, so a group of G costs one prompt plus G
    continuations instead of G full sequences. The result equals scoring each sequence alone, and so does the
    gradient; for a teacher with latents, the prompt before the first latent runs without a graph
    (:func:`_prefix_states`).

    Checkpointing (never when every layer already recomputes, ``--gradient-checkpointing``, or without a
    graph; same values, same gradient): ``checkpoint_prompt`` (default :data:`CHECKPOINT_PROMPT`) recomputes the
    part of the prompt with a graph in the backward rather than keeping it (:func:`_run_prompt`): it pays
    wherever the backward follows, as it reaches the prompt after the continuations. ``checkpoint_teacher``
    (default :data:`CHECKPOINT_TEACHER`) keeps nothing of a teacher's pass with latents after the frozen head
    but its inputs and outputs (:func:`_teacher_states_checkpointed`): it pays where other graphs are built
    before its backward (LOPD's update: the student's step) and costs a forward where the backward comes at
    once (the cold start).
    """
    if not share_prefix:
        if teacher:
            return [teacher_logits(peft_model, s, m, inject) for s, m in zip(seqs, masks)]
        return [student_logits(peft_model, s, m) for s, m in zip(seqs, masks)]
    body, head, embed = decoder(peft_model), lm_head(peft_model), embed_tokens(peft_model)
    n = common_prefix_length(seqs, masks)
    with models.base_only(peft_model) if teacher else contextlib.nullcontext():
        emb = embed(seqs[0][:n])
        frozen = 0
        if inject is not None:
            emb = inject_embeddings(emb, *inject)
            frozen = min(int(inject[0][0]), n) if teacher and len(inject[0]) else 0
        if checkpoint_prompt is None:
            checkpoint_prompt = CHECKPOINT_PROMPT
        recompute = (models.recompute_in_mode(peft_model)
                     if torch.is_grad_enabled() and not models.gradient_checkpointing_on(peft_model) else None)
        if checkpoint_teacher is None:
            checkpoint_teacher = CHECKPOINT_TEACHER
        if teacher and checkpoint_teacher and recompute is not None and inject is not None and frozen < n:
            states = _teacher_states_checkpointed(body, emb, frozen, seqs[0][:n], seqs, masks, n, recompute)
        else:
            h_prefix, cache = _prefix_states(body, emb, frozen, seqs[0][:n] if teacher else None,
                                             recompute if checkpoint_prompt else None)
            states = _continuation_states(body, h_prefix, cache, seqs, masks, n)
        return [head(h) for h in states]


def split(items: list, sizes: list[int]) -> list[list]:
    """``items`` cut into consecutive runs of ``sizes``."""
    out, i = [], 0
    for n in sizes:
        out.append(items[i:i + n])
        i += n
    return out


def score_groups(peft_model, seqs_by_group: list[list[torch.Tensor]], masks_by_group: list[list[torch.Tensor]],
                 share_prefix: bool = True, checkpoint_prompt: bool | None = None) -> list[torch.Tensor]:
    """:func:`score_group` over several groups (student, no context), in one pass when that runs fewer tokens,
    else one pass per group; the logits of every sequence, in order.

    One pass runs the groups' common prefix once (a system prompt and demonstrations shared by every task) but
    each rollout's own prompt in full; a pass per group runs each group's prompt once for its rollouts. Which
    is cheaper depends on the benchmark: where the tools are listed in the system prompt (BFCL), tasks share
    almost nothing and per group wins; where they share a long prompt, one pass does. Both are exact."""
    flat_s = [s for g in seqs_by_group for s in g]
    flat_m = [m for g in masks_by_group for m in g]
    if not share_prefix or len(seqs_by_group) <= 1:
        return score_group(peft_model, flat_s, flat_m, share_prefix=share_prefix, checkpoint_prompt=checkpoint_prompt)

    def cost(seqs, masks):  # tokens run: the shared prefix once, every rest padded to the longest
        n = common_prefix_length(seqs, masks)
        return n + len(seqs) * max(len(s) - n for s in seqs)

    together = cost(flat_s, flat_m)
    apart = sum(cost(s, m) for s, m in zip(seqs_by_group, masks_by_group))
    if together <= apart:
        return score_group(peft_model, flat_s, flat_m, checkpoint_prompt=checkpoint_prompt)
    return [x for s, m in zip(seqs_by_group, masks_by_group)
            for x in score_group(peft_model, s, m, checkpoint_prompt=checkpoint_prompt)]
