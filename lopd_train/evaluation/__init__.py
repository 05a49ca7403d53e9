"""lopd-eval: any checkpoint or served model, on any lopd env, scored with each leaderboard's own aggregation.

One run = one model (a checkpoint loaded here, or a served model behind an OpenAI-compatible URL) x one or
more envs. Per env: the task list (``--limit`` first N in the benchmark's order, ``--samples`` k each), the
episodes driven by :mod:`lopd_train.evaluation.loop` through a backend (:mod:`lopd_train.evaluation.backends`), one
record per task and sample appended durably to ``records.jsonl`` (:mod:`lopd_train.records`), and at the end the
leaderboard tables (:mod:`lopd_train.evaluation.leaderboards`) in ``results.json``, ``results.md`` and ``results.png``.
``resume=True`` skips every record already written, so an interrupted run (even by ``kill -9``) ends with
the same records as an uninterrupted one (at temperature 0 exactly; sampled runs are seeded per task and
sample, so equal too wherever the backend's sampling is batch-independent).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from lopd_envs import provenance
from lopd_train import config
from lopd_train.config import (
    EvalBackendSection,
    EvalEnvSection,
    EvalModelSection,
    EvalOutputSection,
    EvalSamplingSection,
)
from lopd_train.envargs import gym_kwargs
from lopd_train.evaluation import leaderboards, report, tracking
from lopd_train.evaluation.backends import (
    Backend,
    BackendError,
    HFBackend,
    OpenAIBackend,
    VLLMBackend,
    sampling_dict,
)
from lopd_train.evaluation.loop import WorkItem, run_chat_episodes
from lopd_train.evaluation.selection import SelectionError, plan  # noqa: F401 - SelectionError for callers
from lopd_train.evaluation.spec import ModelSpec, folder_sha256, resolve_model
from lopd_train.records import RecordWriter, read_records, record_key, settled
from lopd_train.sampling import Sampling
from lopd_train.tracking import parse_report_to

if TYPE_CHECKING:
    from types import SimpleNamespace

    from lopd_envs import AgentEnv

log = logging.getLogger(__name__)


@dataclass
class EvalConfig(EvalOutputSection, EvalBackendSection, EvalSamplingSection, EvalEnvSection, EvalModelSection):
    """Every setting of ``lopd-eval`` (also the keys of its ``--config`` TOML/JSON file): the union of the
    evaluation sections of :mod:`lopd_train.config`, checked when it is built."""

    def __post_init__(self) -> None:
        config.normalise(self)
        config.check_values(self)  # choices and types, from flags, a file or Python alike
        parse_report_to(self.report_to)
        if not self.model:
            raise ValueError("--model is required (or model = ... in --config)")
        missing = missing_extra(self.backend)
        if missing:
            raise ValueError(missing)
        if self.backend == "openai" and not self.base_url:
            raise ValueError("--backend openai needs --base-url (e.g. http://127.0.0.1:8000/v1)")
        if self.samples < 1 or (self.limit is not None and self.limit < 1) or self.batch_size < 1:
            raise ValueError("--samples, --limit and --batch-size must be at least 1")
        if self.samples > 1 and self.temperature <= 0:
            raise ValueError("--samples > 1 needs --temperature > 0 (greedy samples are all the same)")
        if not self.env:
            raise ValueError("name at least one --env")

    def sampling(self) -> Sampling:
        return Sampling(temperature=self.temperature, max_new_tokens=self.max_new_tokens,
                        max_sequence_tokens=self.max_sequence_tokens, tool_syntax=self.tool_syntax,
                        tool_prompt=self.tool_prompt, seed=self.seed)


# ------------------------------------------------------------------------------------------- backends

#: backend -> (the modules it imports, the extra that installs them): ``lopd[eval]`` alone runs ``openai``
BACKEND_EXTRAS = {"hf": (("torch", "transformers", "peft"), "train"), "vllm": (("vllm", "torch"), "vllm"),
                  "openai": (("openai",), "eval")}


def missing_extra(backend: str) -> str | None:
    """One line naming the extra to install when ``backend``'s packages are not importable (checked before
    anything loads, so a torch-free ``lopd[eval]`` venv gets this line, not a traceback); ``None`` when all are."""
    import importlib.util
    import sys

    modules, extra = BACKEND_EXTRAS[backend]
    absent = [m for m in modules if sys.modules.get(m) is None  # None there: blocked, as find_spec says
              and (m in sys.modules or importlib.util.find_spec(m) is None)]
    if not absent:
        return None
    other = "" if backend == "openai" else " (or --backend openai --base-url URL, which lopd[eval] runs)"
    return (f"--backend {backend} needs {', '.join(absent)}, not installed here: pip install \"lopd[{extra}]\""
            f"{other}")



def make_backend(cfg: EvalConfig, spec: ModelSpec) -> Backend:
    if cfg.backend == "openai":
        key = os.environ.get(cfg.api_key_env) if cfg.api_key_env else None
        if cfg.api_key_env and not key:
            raise BackendError(f"--api-key-env {cfg.api_key_env}: that environment variable is not set")
        return OpenAIBackend(cfg.base_url or "", cfg.served_model or cfg.model, key, cfg.concurrency,
                             cfg.request_timeout, cfg.max_retries, tool_mode=cfg.tool_mode,
                             extra_body=cfg.request_extra)
    from lopd_train import models

    if cfg.backend == "vllm":
        from transformers import AutoTokenizer

        path = models.resolve(spec.base)
        return VLLMBackend(path, AutoTokenizer.from_pretrained(path), spec.adapter, cfg.dtype, cfg.seed)
    import torch

    device = models.default_device() if cfg.device == "auto" else torch.device(cfg.device)
    policy, tok = models.load_backbone(spec.base, device, cfg.dtype)
    if spec.adapter:
        from peft import PeftModel

        policy = PeftModel.from_pretrained(policy, spec.adapter).merge_and_unload()
    policy.eval()
    return HFBackend(policy, tok)


# ------------------------------------------------------------------------------------------- envs


def env_kwargs(cfg: EvalConfig | SimpleNamespace, env_id: str) -> dict[str, Any]:
    """gym.make arguments for one env (:func:`lopd_train.envargs.gym_kwargs`): ``env_kwargs`` holds arguments
    for every env and, under an env id, arguments for that env alone; ``language`` only where the env takes
    it; every category when none is named. ``cfg``: the run's config, or lopd-eval's options when it scores
    files."""
    return gym_kwargs(env_id, cfg.env_kwargs, category=cfg.category or ["all"], data_dir=cfg.data_dir,
                      language=cfg.language)


def task_list(env) -> list[Any]:
    tasks = getattr(env.unwrapped, "tasks", None)
    if not tasks:
        raise ValueError(f"{env.unwrapped.__class__.__name__}: no tasks for these settings")
    return list(tasks)


def task_meta(task: Any) -> dict[str, Any]:
    """Per-task facts a leaderboard splits by (LiveCodeBench's difficulty)."""
    data = getattr(task, "data", None)
    return {k: data[k] for k in ("difficulty", "platform") if isinstance(data, dict) and k in data}


def data_fingerprint(tasks: Sequence[Any]) -> str:
    """sha256 of the evaluated tasks' ids and instructions: changes whenever the data do."""
    h = hashlib.sha256()
    for t in tasks:
        h.update(f"{t.task_id}\0{t.category}\0{t.instruction}\0".encode())
    return h.hexdigest()


# ------------------------------------------------------------------------------------------- the run


def run_eval(cfg: EvalConfig) -> dict[str, Any]:
    """Evaluate and write ``records.jsonl``, ``results.json``, ``results.md``, ``results.png`` in
    ``cfg.output``. Returns the results dict."""
    chosen = check_selection(cfg)  # before anything is written, loaded or generated
    out = Path(cfg.output)
    out.mkdir(parents=True, exist_ok=True)
    records_path = out / "records.jsonl"
    settings = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in ("resume", "progress", "report_to")}
    saved = out / "settings.json"
    if records_path.exists() and records_path.stat().st_size and not cfg.resume:
        raise FileExistsError(f"{records_path} already holds records: pass --resume to continue that run, or "
                              "choose another --output")
    if cfg.resume and saved.exists():
        before = config.normalised_settings(EvalConfig, json.loads(saved.read_text()))  # an older lopd's too
        changed = {k for k in before if k != "output" and before.get(k) != settings.get(k)}
        if changed:
            raise ValueError(f"--resume with different settings ({sorted(changed)}) would mix two runs' records")
    saved.write_text(json.dumps(settings, indent=2))
    done = {record_key(r) for r in settled(read_records(records_path, repair=True))[0]}  # errors run again
    spec = resolve_model(cfg.model, cfg.adapter)
    t0 = time.time()
    backend = make_backend(cfg, spec)
    load_seconds = time.time() - t0
    sampling = cfg.sampling()
    env_info: dict[str, Any] = {}
    try:
        with RecordWriter(records_path) as writer, ThreadPoolExecutor(max_workers=max(2, cfg.batch_size)) as pool:
            for env_id in cfg.env:
                env_info[env_id] = _run_env(cfg, env_id, chosen[env_id], backend, sampling, writer, done, pool)
    finally:
        backend_info = backend.describe()
        backend.close()
    results = summarise(cfg, spec, backend_info, env_info, read_records(records_path))
    results["timings"] = {"model_load_seconds": round(load_seconds, 3), "total_seconds": round(time.time() - t0, 3),
                          **{f"{e}_seconds": round(v["seconds"], 3) for e, v in env_info.items()}}
    failed = sum(e.get("n_errors", 0) for e in results["envs"].values())
    if failed:
        log.warning("%d record(s) not scored: the server's reply was unusable (each record's 'error' says why); "
                    "run again with --resume to retry them", failed)
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str))
    (out / "results.md").write_text(report.markdown(results))
    report.plot(results, out / "results.png")
    tracking.send(cfg.report_to, results, settled(read_records(records_path))[0], out, settings)
    return results


def check_selection(cfg: EvalConfig) -> dict[str, list[str]]:
    """The task ids each env scores; every env id, category and ``--tasks`` id checked before the first
    generation (:mod:`.selection`), an unknown one a :class:`SelectionError`."""
    import gymnasium as gym

    import lopd_envs

    gym.register_envs(lopd_envs)
    return plan(cfg.env, cfg.tasks, cfg.limit, lambda env_id: gym.make(env_id, **env_kwargs(cfg, env_id)),
                gym.registry)


def _run_env(cfg, env_id, task_ids, backend, sampling, writer, done, pool) -> dict[str, Any]:
    import gymnasium as gym
    from tqdm.auto import tqdm

    kwargs = env_kwargs(cfg, env_id)  # registered the envs too
    envs = [gym.make(env_id, **kwargs) for _ in range(min(cfg.batch_size, max(1, len(task_ids) * cfg.samples)))]
    t0 = time.time()
    try:
        chosen = set(task_ids)
        tasks = [t for t in task_list(envs[0]) if t.task_id in chosen]
        meta = {t.task_id: task_meta(t) for t in tasks}
        items = [WorkItem(t.task_id, s, _seed(cfg.seed, env_id, t.task_id, s), order)
                 for order, t in enumerate(tasks) for s in range(cfg.samples)]
        todo = [it for it in items if (env_id, it.task_id, it.sample) not in done]
        wins = total = 0
        bar = tqdm(total=len(items), initial=len(items) - len(todo), desc=env_id.split("/")[-1], unit="ep",
                   disable=not cfg.progress)
        for i in range(0, len(todo), len(envs)):
            chunk = todo[i:i + len(envs)]
            for rec in run_chat_episodes(backend, envs, chunk, sampling, pool):
                rec = {"env": env_id, **rec, "meta": meta.get(rec["task_id"], {})}
                writer.write(rec)
                wins += rec["success"]
                total += 1
            bar.update(len(chunk))
            bar.set_postfix(acc=f"{wins / max(total, 1):.3f}")
        bar.close()
        unwrapped = cast("AgentEnv", envs[0].unwrapped)
        return {"kwargs": kwargs, "n_tasks": len(tasks), "data_sha256": data_fingerprint(tasks),
                "data_origin": getattr(unwrapped, "data_origin", None) or "data found",
                "provenance": provenance.of(unwrapped) if unwrapped.provenance else None,
                "scoring": getattr(unwrapped, "scoring", kwargs.get("scoring", "official")),
                "sandbox": sandbox_of(unwrapped),
                "seconds": time.time() - t0}
    finally:
        for env in envs:
            env.close()


def sandbox_of(env) -> dict[str, Any] | None:
    """The code env's sandbox backend (the one that ran, or would have run, the candidates)."""
    from lopd_envs.codeexec.env import CodeEnv

    if not isinstance(env, CodeEnv):
        return None
    box = env.sandbox
    return {"backend": box.name, "isolating": bool(getattr(box, "isolating", False))}


def _seed(base: int, env_id: str, task_id: str, sample: int) -> int:
    """A seed per (env, task, sample), independent of batching and of what was already done."""
    digest = hashlib.sha256(f"{base}\0{env_id}\0{task_id}\0{sample}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def summarise(cfg: EvalConfig, spec: ModelSpec, backend_info: dict[str, Any], env_info: dict[str, Any],
              records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``results.json`` from the records on disk (never from memory, so a resumed run reports the same)."""
    base_path = spec.base
    try:
        if cfg.backend != "openai":
            from lopd_train import models  # torch: a served model has no local weights to hash

            base_path = models.resolve(spec.base)
    except Exception:  # noqa: BLE001 - a hash we cannot take is reported as None, not a failure
        pass
    envs = {}
    good, errors = settled(records)
    for env_id, info in env_info.items():
        recs = sorted((r for r in good if r["env"] == env_id), key=lambda r: (r["order"], r["sample"]))
        ran = sorted({str(r["score"]["backend"]) for r in recs if isinstance(r.get("score"), dict)
                      and r["score"].get("backend")})
        envs[env_id] = {**{k: v for k, v in info.items() if k != "seconds"}, "n_records": len(recs),
                        "n_errors": sum(r["env"] == env_id for r in errors),
                        "sandbox_backends_in_records": ran, "leaderboard": leaderboards.leaderboard(env_id, recs),
                        "mean_reward": sum(r["reward"] for r in recs) / len(recs) if recs else 0.0,
                        "generated_tokens": sum(r.get("generated_tokens", 0) for r in recs)}
    return {"model": {**spec.to_dict(), "base_sha256": folder_sha256(base_path) if cfg.backend != "openai" else None,
                      "adapter_sha256": folder_sha256(spec.adapter) if spec.adapter else None},
            "backend": backend_info, "sampling": sampling_dict(cfg.sampling()), "samples": cfg.samples,
            "envs": envs, "packages": report.package_versions(), "created": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                       time.gmtime())}


def write_legacy_summary(results: dict[str, Any], records: Sequence[dict[str, Any]], out: Path) -> None:
    """The earlier ``--out FILE`` output: mean reward per env and category, and a chart beside it."""
    summary = []
    records = settled(records)[0]
    for env_id in results["envs"]:
        recs = [r for r in records if r["env"] == env_id]
        cats: dict[str, list[float]] = {}
        for r in recs:
            cats.setdefault(r["category"], []).append(r["reward"])
        summary.append({"env": env_id, "n": len(recs),
                        "reward_mean": sum(r["reward"] for r in recs) / len(recs) if recs else 0.0,
                        "success_rate": sum(r["success"] for r in recs) / len(recs) if recs else 0.0,
                        "categories": {c: {"n": len(v), "reward_mean": sum(v) / len(v)} for c, v in sorted(cats.items())}})
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"model": results["model"]["spec"], "adapter": results["model"]["adapter"],
                               "results": summary}, indent=2))
    report.plot(results, out.with_suffix(".png"))
