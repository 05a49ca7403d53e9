"""The latent composer C_φ and the teacher that reads its output (DESIGN.md section 7, steps 4-5).

Encoder: the frozen backbone with the composer's own LoRA adapter (a second peft adapter on the same base
weights, so no second copy of the model) reads an experience's text. Compressor: a Q-Former whose K learned
queries attend to each other and cross-attend to the encoder's hidden states for a few layers, then map
into the backbone's token-embedding space: K latent tokens per experience, J·K for the J retrieved ones.

Teacher: the backbone with every adapter disabled (the frozen base), fed ``[latent tokens; token
embeddings of the student's sequence]`` through ``inputs_embeds``; one forward pass scores every prefix the
student visited. Gradients reach the composer through the latent tokens only.
"""

from __future__ import annotations

import contextlib
import inspect

import torch
from torch import nn

from lopd_train import models


class QFormerLayer(nn.Module):
    def __init__(self, dim: int, heads: int, ffn_mult: int = 4):
        super().__init__()
        self.norm_self = nn.LayerNorm(dim)
        self.self_attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm_cross = nn.LayerNorm(dim)
        self.norm_memory = nn.LayerNorm(dim)
        self.cross_attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm_ffn = nn.LayerNorm(dim)
        self.ffn = nn.Sequential(nn.Linear(dim, ffn_mult * dim), nn.GELU(), nn.Linear(ffn_mult * dim, dim))

    def forward(self, q: torch.Tensor, memory: torch.Tensor, memory_pad: torch.Tensor | None) -> torch.Tensor:
        h = self.norm_self(q)
        q = q + self.self_attn(h, h, h, need_weights=False)[0]
        m = self.norm_memory(memory)
        q = q + self.cross_attn(self.norm_cross(q), m, m, key_padding_mask=memory_pad, need_weights=False)[0]
        return q + self.ffn(self.norm_ffn(q))


class QFormer(nn.Module):
    """K learned queries → K vectors of the backbone's embedding width, at the scale of its token embeddings."""

    def __init__(self, encoder_dim: int, embed_dim: int, num_queries: int = 32, dim: int = 256,
                 layers: int = 2, heads: int = 4, embed_rms: float = 1.0):
        super().__init__()
        self.queries = nn.Parameter(torch.randn(num_queries, dim) * 0.02)
        self.memory_proj = nn.Linear(encoder_dim, dim)
        self.layers = nn.ModuleList([QFormerLayer(dim, heads) for _ in range(layers)])
        self.out_norm = nn.LayerNorm(dim)
        self.out_proj = nn.Linear(dim, embed_dim)
        self.gain = nn.Parameter(torch.tensor(float(embed_rms)))

    @property
    def num_queries(self) -> int:
        return self.queries.shape[0]

    def forward(self, memory: torch.Tensor, memory_mask: torch.Tensor) -> torch.Tensor:
        """``memory`` ``[N, L, encoder_dim]`` with ``memory_mask`` ``[N, L]`` (1 = real token) -> ``[N, K, embed_dim]``."""
        mem = self.memory_proj(memory.to(self.memory_proj.weight.dtype))
        q = self.queries.unsqueeze(0).expand(mem.shape[0], -1, -1)
        pad = memory_mask == 0
        for layer in self.layers:
            q = layer(q, mem, pad)
        out = self.out_proj(self.out_norm(q))
        out = out * torch.rsqrt(out.pow(2).mean(-1, keepdim=True) + 1e-6)  # unit RMS, then the embedding scale
        return out * self.gain


def decoder(peft_model):
    """The transformer body (no LM head) of a peft-wrapped causal LM."""
    return peft_model.get_base_model().get_decoder()


def lm_head(peft_model):
    return peft_model.get_base_model().get_output_embeddings()


def embed_tokens(peft_model):
    return peft_model.get_base_model().get_input_embeddings()


class Composer(nn.Module):
    """Encoder (backbone + ``composer`` LoRA) and Q-Former. Only the Q-Former is a submodule here: the LoRA
    weights live inside the shared peft model."""

    def __init__(self, peft_model, tokenizer, adapter_name: str = "composer", num_queries: int = 32,
                 dim: int = 256, layers: int = 2, heads: int = 4, max_tokens: int = 256):
        super().__init__()
        cfg = peft_model.get_base_model().config
        hidden = cfg.hidden_size
        emb = embed_tokens(peft_model).weight
        embed_rms = float(emb.detach().float().pow(2).mean().sqrt())
        self.qformer = QFormer(hidden, emb.shape[1], num_queries, dim, layers, heads, embed_rms)
        self.qformer.to(device=emb.device)  # kept in fp32 (trainable) even when the backbone runs in bf16
        self._peft = [peft_model]  # a list, so the shared backbone is not registered as a submodule
        self.tokenizer = tokenizer
        self.adapter_name = adapter_name
        self.max_tokens = max_tokens

    @property
    def peft_model(self):
        return self._peft[0]

    def lora_parameters(self) -> list[nn.Parameter]:
        return models.adapter_parameters(self.peft_model, self.adapter_name)

    def trainable_parameters(self) -> list[nn.Parameter]:
        return self.lora_parameters() + list(self.qformer.parameters())

    def encode(self, texts: list[str]) -> torch.Tensor:
        """``[N, K, d]`` latent tokens for N experience texts (differentiable in the composer's parameters)."""
        device = self.qformer.queries.device
        batch = self.tokenizer(texts, return_tensors="pt", padding=True, truncation=True,
                               max_length=self.max_tokens, add_special_tokens=False, padding_side="right")
        ids = batch["input_ids"].to(device)
        mask = batch["attention_mask"].to(device)
        with models.adapter(self.peft_model, self.adapter_name):
            hidden = decoder(self.peft_model)(input_ids=ids, attention_mask=mask).last_hidden_state
        return self.qformer(hidden, mask)


def action_positions(action_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For a 1-D ``action_mask``: the positions whose hidden state predicts each sampled token, and those
    token positions."""
    targets = torch.nonzero(action_mask, as_tuple=False).squeeze(-1)
    return targets - 1, targets


def student_logits(peft_model, input_ids: torch.Tensor, action_mask: torch.Tensor) -> torch.Tensor:
    """Student (active adapter) logits at the positions that predict the sampled tokens: ``[T_a, V]``."""
    pos, _ = action_positions(action_mask)
    hidden = decoder(peft_model)(input_ids=input_ids.unsqueeze(0)).last_hidden_state[0]
    return lm_head(peft_model)(hidden[pos])


def teacher_logits(peft_model, input_ids: torch.Tensor, action_mask: torch.Tensor,
                   latents: torch.Tensor | None) -> torch.Tensor:
    """Frozen-backbone logits (all adapters disabled) with ``latents`` ``[P, d]`` placed before the sequence,
    at the positions that predict the sampled tokens: ``[T_a, V]``. One forward pass for all prefixes."""
    pos, _ = action_positions(action_mask)
    with models.base_only(peft_model):
        emb = embed_tokens(peft_model)(input_ids)
        prefix = 0
        if latents is not None and latents.shape[0] > 0:
            emb = torch.cat([latents.to(emb.dtype), emb], dim=0)
            prefix = latents.shape[0]
        hidden = decoder(peft_model)(inputs_embeds=emb.unsqueeze(0)).last_hidden_state[0]
        return lm_head(peft_model)(hidden[pos + prefix])


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


def _cache_kw(body) -> str:
    params = inspect.signature(body.forward).parameters
    return "cache" if "cache" in params else "past_key_values"  # transformers >= 5.2 renamed it


def score_group(peft_model, seqs: list[torch.Tensor], masks: list[torch.Tensor], latents: torch.Tensor | None = None,
                teacher: bool = False, share_prefix: bool = True) -> list[torch.Tensor]:
    """Logits at the positions that predict each sequence's sampled tokens (``[T_a_i, V]`` each), for the
    student (active adapter) or the teacher (base model, ``latents`` ``[P, d]`` before every sequence).

    The rollouts of one task share their prompt: it is run once, and its key/value cache (which carries
    gradients) is expanded over the group's continuations, so a group of G costs one prompt plus G
    continuations instead of G full sequences. The result equals scoring each sequence alone.
    """
    if not share_prefix:
        fn = (lambda s, m: teacher_logits(peft_model, s, m, latents)) if teacher else \
            (lambda s, m: student_logits(peft_model, s, m))
        return [fn(s, m) for s, m in zip(seqs, masks)]
    body, head, embed = decoder(peft_model), lm_head(peft_model), embed_tokens(peft_model)
    n = common_prefix_length(seqs, masks)
    with models.base_only(peft_model) if teacher else contextlib.nullcontext():
        emb = embed(seqs[0][:n])
        lead = 0
        if latents is not None and latents.shape[0] > 0:
            emb = torch.cat([latents.to(emb.dtype), emb], dim=0)
            lead = latents.shape[0]
        out = body(inputs_embeds=emb.unsqueeze(0), use_cache=True)
        h_prefix = out.last_hidden_state[0]
        cache = out["cache"] if "cache" in out else out["past_key_values"]
        rests = [s[n:] for s in seqs]
        width = max(len(r) for r in rests)
        h_rest = None
        if width:
            g = len(seqs)
            cache.batch_repeat_interleave(g)
            ids = torch.zeros((g, width), dtype=torch.long, device=seqs[0].device)
            attn = torch.zeros((g, lead + n + width), dtype=torch.long, device=seqs[0].device)
            attn[:, :lead + n] = 1
            for i, r in enumerate(rests):
                ids[i, :len(r)] = r
                attn[i, lead + n:lead + n + len(r)] = 1
            h_rest = body(input_ids=ids, attention_mask=attn, use_cache=False,
                          **{_cache_kw(body): cache}).last_hidden_state
        results = []
        for i, m in enumerate(masks):
            pos, _ = action_positions(m)
            in_prefix = pos < n
            parts = [h_prefix[lead + pos[in_prefix]]]
            if h_rest is not None:
                parts.append(h_rest[i, pos[~in_prefix] - n])
            results.append(head(torch.cat(parts, dim=0)))
        return results
