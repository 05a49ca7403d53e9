"""The latent composer C_φ (docs/design.md section 7, step 4).

Encoder: the frozen backbone with the composer's own LoRA adapter (a second peft adapter on the same base
weights, so no second copy of the model) reads "task to solve + a retrieved experience". Compressor: a
Q-Former whose K learned queries attend to each other and cross-attend to the encoder's hidden states for a
few layers, then map into the backbone's token-embedding space: K latent tokens per experience, J·K for the
J retrieved ones. The teacher reads them at a placeholder in its task's user turn (``lopd_train.latent.context``,
``lopd_train.algorithms.scoring``); gradients reach the composer through the latent tokens only.
"""

from __future__ import annotations

import torch
from torch import nn

from lopd_train import models
from lopd_train.algorithms.scoring import decoder, embed_tokens
from lopd_train.latent.context import encoder_text_parts


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


class Composer(nn.Module):
    """Encoder (backbone + its own LoRA adapter) and Q-Former. Only the Q-Former is a submodule here: the LoRA
    weights live inside the shared peft model, under ``adapter_name``.

    The input is task-conditioned (:func:`lopd_train.latent.context.encoder_text_parts`): the current task, then the
    retrieved experience, so the same experience can be compressed differently for different tasks."""

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

    @property
    def num_queries(self) -> int:
        return self.qformer.num_queries

    def lora_parameters(self) -> list[nn.Parameter]:
        return models.adapter_parameters(self.peft_model, self.adapter_name)

    def trainable_parameters(self) -> list[nn.Parameter]:
        return self.lora_parameters() + list(self.qformer.parameters())

    def input_ids(self, task: str, trajectory: str) -> list[int]:
        """Encoder ids: the task part whole, the trajectory cut to ``max_tokens`` keeping its end (where the
        actions and their results are)."""
        head, body = encoder_text_parts(task, trajectory)
        return models.encode(self.tokenizer, head) + models.encode(self.tokenizer, body)[-self.max_tokens:]

    def encode(self, pairs: list[tuple[str, str]]) -> torch.Tensor:
        """``[N, K, d]`` latent tokens for N ``(task, experience text)`` pairs (differentiable in the
        composer's parameters)."""
        device = self.qformer.queries.device
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
        return self.qformer(hidden, mask)

    @torch.no_grad()
    def copy_from(self, other: "Composer") -> None:
        """Make this composer equal to ``other`` (its LoRA adapter and Q-Former), e.g. to keep a frozen
        snapshot of the cold-started composer under a second adapter name."""
        src = {n.replace(f".{other.adapter_name}.", "."): p for n, p in self.peft_model.named_parameters()
               if "lora_" in n and f".{other.adapter_name}." in n}
        for n, p in self.peft_model.named_parameters():
            if "lora_" in n and f".{self.adapter_name}." in n:
                p.copy_(src[n.replace(f".{self.adapter_name}.", ".")])
        self.qformer.load_state_dict(other.qformer.state_dict())
