"""A randomly initialised model with the shape of a named published one, saved as a transformers folder, for
timing on a machine that cannot download weights (the GPU check, ``benchmarks/gpu_check.sh``).

    python benchmarks/random_model.py qwen3-4b --tokenizer TOKENIZER_FOLDER --out /tmp/qwen3-4b-random
    python benchmarks/random_model.py tiny --tokenizer TOKENIZER_FOLDER --out /tmp/tiny   # a CPU dry run

Why random weights measure the right thing: an update's cost (forward, backward, the LM head over the whole
vocabulary, the composer's passes) and a decoding step's are set by the shapes alone. What they cannot show is
anything that depends on what the model says: rewards, the length of what it samples before an end token
(``benchmarks/generation.py`` removes the end token; ``trainer_step.py`` samples a fixed number of tokens), the
teacher's agreement with the student. The shapes are the published ``config.json`` values (hidden size,
layers, heads, KV heads, head width, MLP width, vocabulary, tied embeddings); the tokenizer is whatever
folder is given (its ids must fit the vocabulary: every Qwen3 vocabulary holds SmolLM2's 49,152 ids)."""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

#: The shapes, from each model's config.json on the Hugging Face hub (Qwen/Qwen3-4B, Qwen/Qwen3-8B).
SHAPES: dict[str, dict] = {
    "qwen3-4b": dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True,
                     rope_theta=1_000_000.0, rms_norm_eps=1e-6, max_position_embeddings=40960),
    "qwen3-8b": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=False,
                     rope_theta=1_000_000.0, rms_norm_eps=1e-6, max_position_embeddings=40960),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, vocab_size=49152, tie_word_embeddings=True,
                 rope_theta=1_000_000.0, rms_norm_eps=1e-6, max_position_embeddings=8192),
}


def build(shape: str, tokenizer: str | Path, out: str | Path, dtype: str = "bfloat16", device: str = "auto") -> Path:
    """Initialise ``shape`` (on the GPU when there is one: seconds instead of minutes for billions of
    weights) and save it with the tokenizer's files to ``out``."""
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    tok = AutoTokenizer.from_pretrained(str(tokenizer))
    config = Qwen3Config(**SHAPES[shape], bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
    if len(tok) > config.vocab_size:
        raise ValueError(f"the tokenizer has {len(tok)} ids, more than {shape}'s vocabulary of {config.vocab_size}")
    dev = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else
                       ("cpu" if device == "auto" else device))
    torch.manual_seed(0)
    with dev:
        model = Qwen3ForCausalLM(config).to(getattr(torch, dtype))
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("--tokenizer", required=True, help="a folder with a transformers tokenizer")
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--device", default="auto")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    out = build(args.shape, args.tokenizer, args.out, args.dtype, args.device)
    size = sum(f.stat().st_size for f in out.iterdir()) / 2**30
    print(f"{args.shape} ({args.dtype}, random) -> {out}: {size:.2f} GiB in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
