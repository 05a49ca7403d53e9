"""The latent composer C_φ (docs/design.md section 7, step 4).

Encoder: the frozen backbone with the composer's own LoRA adapter (a second peft adapter on the same base
weights, so no second copy of the model) reads "task to solve + a retrieved experience". Compressor: K learned
queries that read the encoder's hidden states and come out in the backbone's token-embedding space: K latent
tokens per experience, J·K for the J retrieved ones. The teacher reads them at a placeholder in its task's user
turn (``lopd_train.latent.context``, ``lopd_train.scoring``); gradients reach the composer through the
latent tokens only.

Two compressors (``--composer``):

* ``perceiver``: the authors' (``memory/qformer.py`` of bingreeky/LOPD): a Perceiver resampler at the model's
  width, one attention block and one feed-forward block (x4) applied ``depth`` times with shared weights
  (8 in their configs), the queries attending over [memory; queries], heads as the backbone's. Its output is
  ``LayerNorm(proj_out(.))``: RMS about 1, the authors' scale, whatever the token embeddings' scale;
* ``qformer``: lopd's smaller BLIP-style Q-Former (separate self- and cross-attention layers at width
  ``--qformer-dim``), its output scaled to the token embeddings' RMS by a learned gain.

The anchor (``losses.anchor_loss``) is divided by the cold-started latents' mean square
(``--anchor-norm relative``), so λ weighs a given relative drift the same for both scales.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from lopd_train import models
from lopd_train.latent.context import encoder_text_parts
from lopd_train.scoring import decoder, embed_tokens

COMPOSERS = ("qformer", "perceiver")


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


class Compressor(nn.Module):
    """What both compressors share: K learned queries (the parameter named by ``queries_name``) read the
    encoder's hidden states once these are projected to the compressor's width."""

    queries_name = "queries"

    @property
    def num_queries(self) -> int:
        return getattr(self, self.queries_name).shape[0]

    def start(self, proj: nn.Linear, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``memory`` through ``proj`` (in its dtype), and the learned queries, one copy per row of it."""
        mem = proj(memory.to(proj.weight.dtype))
        return mem, getattr(self, self.queries_name).unsqueeze(0).expand(mem.shape[0], -1, -1)


class QFormer(Compressor):
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

    def forward(self, memory: torch.Tensor, memory_mask: torch.Tensor) -> torch.Tensor:
        """``memory`` ``[N, L, encoder_dim]`` with ``memory_mask`` ``[N, L]`` (1 = real token) -> ``[N, K, embed_dim]``."""
        mem, q = self.start(self.memory_proj, memory)
        pad = memory_mask == 0
        for layer in self.layers:
            q = layer(q, mem, pad)
        out = self.out_proj(self.out_norm(q))
        out = out * torch.rsqrt(out.pow(2).mean(-1, keepdim=True) + 1e-6)  # unit RMS, then the embedding scale
        return out * self.gain


class PerceiverBlock(nn.Module):
    """Queries attend over [memory; queries] (each normalised on its own), bias-free projections."""

    def __init__(self, dim: int, heads: int, dim_head: int):
        super().__init__()
        self.heads, self.dim_head = heads, dim_head
        self.norm_memory = nn.LayerNorm(dim)
        self.norm_latents = nn.LayerNorm(dim)
        self.to_q = nn.Linear(dim, heads * dim_head, bias=False)
        self.to_kv = nn.Linear(dim, 2 * heads * dim_head, bias=False)
        self.to_out = nn.Linear(heads * dim_head, dim, bias=False)

    def forward(self, memory: torch.Tensor, latents: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """``keep`` ``[N, L + K]``: True where a key may be attended to (padding of the memory is False)."""
        n, k = latents.shape[0], latents.shape[1]
        lat = self.norm_latents(latents)
        kv = torch.cat([self.norm_memory(memory), lat], dim=1)

        def heads(x: torch.Tensor) -> torch.Tensor:
            return x.view(n, x.shape[1], self.heads, self.dim_head).transpose(1, 2)

        key, value = self.to_kv(kv).chunk(2, dim=-1)
        out = F.scaled_dot_product_attention(heads(self.to_q(lat)), heads(key), heads(value),
                                             attn_mask=keep[:, None, None, :])
        return self.to_out(out.transpose(1, 2).reshape(n, k, -1))


class PerceiverResampler(Compressor):
    """The authors' compressor: K latents refined ``depth`` times by one shared (attention, feed-forward) pair at
    the model's width; output ``LayerNorm(proj_out(latents))`` (their scale, RMS about 1)."""

    queries_name = "latents"  # the authors' name, kept in checkpoints

    def __init__(self, dim: int, num_queries: int = 32, depth: int = 8, heads: int = 8, dim_head: int = 64,
                 ff_mult: int = 4):
        super().__init__()
        self.depth = depth
        self.latents = nn.Parameter(torch.randn(num_queries, dim) / dim ** 0.5)
        self.proj_in = nn.Linear(dim, dim)
        self.attn = PerceiverBlock(dim, heads, dim_head)
        self.ffn = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, ff_mult * dim, bias=False), nn.GELU(),
                                 nn.Linear(ff_mult * dim, dim, bias=False))
        self.proj_out = nn.Linear(dim, dim)
        self.norm_out = nn.LayerNorm(dim)

    def forward(self, memory: torch.Tensor, memory_mask: torch.Tensor) -> torch.Tensor:
        """``memory`` ``[N, L, dim]`` with ``memory_mask`` ``[N, L]`` (1 = real token) -> ``[N, K, dim]``."""
        mem, lat = self.start(self.proj_in, memory)
        keep = torch.cat([memory_mask.bool(), torch.ones(lat.shape[:2], dtype=torch.bool, device=lat.device)], 1)
        for _ in range(self.depth):
            lat = lat + self.attn(mem, lat, keep)
            lat = lat + self.ffn(lat)
        return self.norm_out(self.proj_out(lat))


def make_compressor(kind: str, encoder_dim: int, embed_dim: int, num_queries: int, *, dim: int = 256,
                    layers: int = 2, heads: int = 4, embed_rms: float = 1.0, depth: int = 8,
                    backbone_heads: int = 8) -> Compressor:
    """The ``--composer`` compressor: ``perceiver`` at the backbone's width and heads (``depth`` shared
    iterations), or ``qformer`` (``dim``/``layers``/``heads``, at the embeddings' RMS)."""
    if kind == "perceiver":
        if encoder_dim != embed_dim:
            raise ValueError(f"the Perceiver resampler works at the model's width, but the hidden size "
                             f"({encoder_dim}) differs from the embedding width ({embed_dim}); use --composer qformer")
        if encoder_dim % backbone_heads:
            raise ValueError(f"hidden size {encoder_dim} is not divisible by {backbone_heads} heads")
        return PerceiverResampler(encoder_dim, num_queries, depth, backbone_heads, encoder_dim // backbone_heads)
    if kind == "qformer":
        return QFormer(encoder_dim, embed_dim, num_queries, dim, layers, heads, embed_rms)
    raise ValueError(f"unknown composer {kind!r}; choose from {COMPOSERS}")


class Composer(nn.Module):
    """Encoder (backbone + its own LoRA adapter) and compressor (``kind``: ``qformer`` or ``perceiver``). Only the
    compressor is a submodule here: the LoRA weights live inside the shared peft model, under ``adapter_name``.

    The input is task-conditioned (:func:`lopd_train.latent.context.encoder_text_parts`): the current task, then the
    retrieved experience, so the same experience can be compressed differently for different tasks."""

    def __init__(self, peft_model, tokenizer, adapter_name: str = "composer", num_queries: int = 32,
                 dim: int = 256, layers: int = 2, heads: int = 4, max_tokens: int = 256, kind: str = "qformer",
                 depth: int = 8):
        super().__init__()
        cfg = peft_model.get_base_model().config
        emb = embed_tokens(peft_model).weight
        embed_rms = float(emb.detach().float().pow(2).mean().sqrt())
        self.kind = kind
        self.compressor = make_compressor(kind, cfg.hidden_size, emb.shape[1], num_queries, dim=dim, layers=layers,
                                          heads=heads, embed_rms=embed_rms, depth=depth,
                                          backbone_heads=cfg.num_attention_heads)
        self.compressor.to(device=emb.device)  # kept in fp32 (trainable) even when the backbone runs in bf16
        self._peft = [peft_model]  # a list, so the shared backbone is not registered as a submodule
        self.tokenizer = tokenizer
        self.adapter_name = adapter_name
        self.max_tokens = max_tokens

    @property
    def peft_model(self):
        return self._peft[0]

    @property
    def num_queries(self) -> int:
        return self.compressor.num_queries

    def lora_parameters(self) -> list[nn.Parameter]:
        return models.adapter_parameters(self.peft_model, self.adapter_name)

    def trainable_parameters(self) -> list[nn.Parameter]:
        return self.lora_parameters() + list(self.compressor.parameters())

    def input_ids(self, task: str, trajectory: str) -> list[int]:
        """Encoder ids: the task part whole, the trajectory cut to ``max_tokens`` keeping its end (where the
        actions and their results are)."""
        head, body = encoder_text_parts(task, trajectory)
        return models.encode(self.tokenizer, head) + models.encode(self.tokenizer, body)[-self.max_tokens:]

    def encode(self, pairs: list[tuple[str, str]]) -> torch.Tensor:
        """``[N, K, d]`` latent tokens for N ``(task, experience text)`` pairs (differentiable in the
        composer's parameters)."""
        device = next(self.compressor.parameters()).device
        rows = [self.input_ids(task, text) for task, text in pairs]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), int(self.tokenizer.pad_token_id or 0), dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, :len(r)] = torch.tensor(r)
            mask[i, :len(r)] = 1
        ids, mask = ids.to(device), mask.to(device)
        with models.adapter(self.peft_model, self.adapter_name):
            hidden = decoder(self.peft_model)(input_ids=ids, attention_mask=mask).last_hidden_state
        return self.compressor(hidden, mask)

    @torch.no_grad()
    def copy_from(self, other: Composer) -> None:
        """Make this composer equal to ``other`` (its LoRA adapter and compressor), e.g. to keep a frozen
        snapshot of the cold-started composer under a second adapter name."""
        src = {n.replace(f".{other.adapter_name}.", "."): p for n, p in self.peft_model.named_parameters()
               if "lora_" in n and f".{other.adapter_name}." in n}
        for n, p in self.peft_model.named_parameters():
            if "lora_" in n and f".{self.adapter_name}." in n:
                p.copy_(src[n.replace(f".{self.adapter_name}.", ".")])
        self.compressor.load_state_dict(other.compressor.state_dict())
