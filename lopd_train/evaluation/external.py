"""``lopd-eval --score-samples FILE`` and ``--score-bfcl PATH ...``: score what was generated elsewhere.

An evalplus samples file (:mod:`.evalplus_samples`: what ``evalplus.evaluate --samples`` takes, for HumanEval+ or
MBPP+) is run in lopd's sandbox and judged by the HumanEval+/MBPP+ env's evalplus verdicts; BFCL-v3 result
files (:mod:`.bfcl_results`: bfcl-eval's ``BFCL_v3_<category>_result.json``, one model's) are scored by the
BFCL-v3 env's scorer. Nothing is generated and no model is loaded: each sample or result becomes one record
of ``records.jsonl`` (its ``source`` names the file and line), and ``results.json``, ``results.md`` and
``results.png`` follow from the records by the leaderboards' own aggregation
(:mod:`lopd_train.evaluation.leaderboards`: evalplus's pass@k on base and base + plus per task, bfcl-eval's
category and group accuracies), exactly as after a run that generated them. Both flags may be given at once.

Settings that apply: ``--env`` (the dataset of ``--score-samples``; otherwise read from its task ids),
``--category base`` (evalplus's ``--base-only``), ``--data-dir``, ``--env-kwargs`` (e.g. ``scoring=strict``),
``--batch-size`` (samples judged at once), ``--output``, ``--no-progress``, ``--model`` (a label for the
results), ``--bfcl-format``. Generation settings given on the command line are refused (one line, exit 2).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from lopd_train import textforms

BFCL_ENV = "lopd/BFCLv3-v0"
SCORING = ("score_samples", "score_bfcl", "bfcl_format")
APPLIES = (*SCORING, "env", "category", "data_dir", "env_kwargs", "batch_size", "output", "progress", "model", "config")


def add_arguments(parser) -> None:
    """The flags of this mode, in their own ``--help`` group."""
    group = parser.add_argument_group(
        "scoring files generated elsewhere (no model is loaded; the files are scored as evalplus and bfcl-eval "
        "score them, and records.jsonl/results.* written as after a run)")
    group.add_argument("--score-samples", metavar="FILE",
                       help="an evalplus samples file (samples.jsonl: {task_id, solution} or {task_id, "
                            "completion} lines, or evalplus's <task>/<n>.py folder) for HumanEval+ or MBPP+ "
                            "(--env names which, else the task ids say): every sample run in lopd's sandbox "
                            "on the base then the plus tests, pass@k per task as evalplus.evaluate reports it")
    group.add_argument("--score-bfcl", metavar="PATH", nargs="+", action="extend",
                       help="BFCL-v3 result files (BFCL_v3_<category>_result.json, as bfcl-eval writes them "
                            "for a model), or a folder of them (or bfcl-eval's result/ folder holding one "
                            "model's): each category present scored, with bfcl-eval's leaderboard aggregation")
    group.add_argument("--bfcl-format", choices=("auto", "fc", "prompting"), default="auto",
                       help="how BFCL responses are read: as a function-calling model's (fc: lists of "
                            "{name: JSON arguments}; text is no call), a prompting model's (text such as "
                            "[f(a=1)]), or auto: each by its shape (what lopd writes)")


def wanted(args: Any) -> bool:
    return bool(getattr(args, "score_samples", None) or getattr(args, "score_bfcl", None))


def options(parser, argv: Sequence[str] | None, args: Any) -> SimpleNamespace:
    """The settings that apply here: defaults, then ``--config``'s, then the command line's. A generation
    setting on the command line is refused: it would silently change nothing."""
    from lopd_train import config
    from lopd_train.usage import UsageError

    given = vars(config._given(parser, argv))
    extra = [k for k in given if k not in APPLIES]
    if extra:
        raise UsageError(f"lopd-eval: --{extra[0].replace('_', '-')} does not apply when scoring files "
                         "(--score-samples, --score-bfcl): nothing is generated")
    values = {k: getattr(args, k) for k in APPLIES if hasattr(args, k)}
    if args.config:
        from lopd_train.evaluation import EvalConfig

        try:
            from_file = config.load_settings(args.config, EvalConfig)
        except (OSError, ValueError) as exc:
            raise UsageError(f"lopd-eval: --config {args.config}: {exc}") from None
        values.update({k: v for k, v in from_file.items() if k in APPLIES and k not in given})
    values.update(given)
    values["category"] = textforms.as_list(values.get("category")) or ["all"]
    try:
        values["env_kwargs"] = textforms.as_table(values.get("env_kwargs"), "env_kwargs")
    except ValueError as exc:
        raise UsageError(f"lopd-eval: {exc}") from None
    values["language"] = None
    if int(values.get("batch_size") or 1) < 1:
        raise UsageError("lopd-eval: --batch-size must be at least 1")
    return SimpleNamespace(**values)


def main(parser, argv: Sequence[str] | None, args: Any) -> dict[str, Any]:
    """The whole mode for ``lopd-eval``: the user's mistakes (a file that is not what it should be, an output
    folder in use or already holding records, no sandbox) as one line each."""
    from lopd_envs.datafile import DataFileError
    from lopd_envs.sandbox import SandboxUnavailable
    from lopd_train.errors import RunLockedError
    from lopd_train.evaluation.bfcl_results import ResultFileError
    from lopd_train.evaluation.evalplus_samples import SamplesFileError
    from lopd_train.evaluation.selection import SelectionError
    from lopd_train.runlock import FolderLock
    from lopd_train.usage import UsageError

    opts = options(parser, argv, args)
    try:
        with FolderLock(opts.output, "lopd-eval"):
            return score(opts)
    except (SamplesFileError, ResultFileError, DataFileError, SelectionError, RunLockedError, SandboxUnavailable,
            FileExistsError) as exc:
        raise UsageError(f"lopd-eval: {exc}") from None


def _make(opts: SimpleNamespace, env_id: str, **override: Any):
    """The env with the run's arguments (as ``lopd-eval`` builds it); its refusal of them as one line."""
    import gymnasium as gym

    from lopd_train.evaluation import env_kwargs
    from lopd_train.evaluation.selection import env_refusal

    kwargs = {**env_kwargs(opts, env_id), **override}
    try:
        return gym.make(env_id, **kwargs), kwargs
    except (ValueError, TypeError, KeyError) as exc:
        raise env_refusal(env_id, exc) from None


def score(opts: SimpleNamespace) -> dict[str, Any]:
    """Score the files named in ``opts`` and write ``records.jsonl``, ``results.json``, ``results.md`` and
    ``results.png`` in ``opts.output``. Returns the results."""
    from lopd_train.records import RecordWriter

    out = Path(opts.output)
    records_path = out / "records.jsonl"
    if records_path.exists() and records_path.stat().st_size:
        raise FileExistsError(f"{records_path} already holds records: choose another --output")
    t0 = time.time()
    scored: list[tuple[str, list[dict[str, Any]], dict[str, Any]]] = []
    if opts.score_samples:
        scored.append(_score_samples(opts))
    if opts.score_bfcl:
        scored.append(_score_bfcl(opts))
    out.mkdir(parents=True, exist_ok=True)
    records = [to_record(env_id, item) for env_id, items, _ in scored for item in items]
    with RecordWriter(records_path) as writer:
        writer.write_all(records)
    results = summarise(opts, {env_id: info for env_id, _, info in scored}, records)
    results["timings"] = {"total_seconds": round(time.time() - t0, 3)}
    write_results(out, results)
    return results


def _files(paths: Sequence[Path]) -> list[dict[str, Any]]:
    from lopd_envs.provenance import file_sha256

    return [{"path": str(p), "bytes": p.stat().st_size, "sha256": file_sha256(p)} for p in paths if p.is_file()]


def _bar(opts: SimpleNamespace, total: int, name: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=name, unit="sample", disable=not opts.progress)


def _score_samples(opts: SimpleNamespace) -> tuple[str, list[dict[str, Any]], dict[str, Any]]:
    from lopd_train.evaluation.evalplus_samples import dataset_env, read_samples, score_samples

    samples = read_samples(opts.score_samples)
    env_id = dataset_env(samples, [e for e in opts.env or [] if e != BFCL_ENV])
    env, kwargs = _make(opts, env_id)
    try:
        bar = _bar(opts, len(samples), env_id.split("/")[-1])
        items, info = score_samples(samples, env, int(opts.batch_size or 1), bar.update)
        bar.close()
        path = Path(opts.score_samples)
        source = {"format": "evalplus samples" + (" folder" if path.is_dir() else ""), "path": str(path),
                  "files": _files([path])}
        return env_id, items, _env_info(env, kwargs, items, {**source, **info})
    finally:
        env.close()


def _score_bfcl(opts: SimpleNamespace) -> tuple[str, list[dict[str, Any]], dict[str, Any]]:
    from lopd_train.evaluation.bfcl_results import categories_in, result_files, score_files
    from lopd_train.evaluation.evalplus_samples import DATASETS
    from lopd_train.evaluation.leaderboards import BFCL_V3_SIZES

    other = [e for e in opts.env or [] if e != BFCL_ENV and not (opts.score_samples and e in DATASETS)]
    if other:
        from lopd_train.evaluation.bfcl_results import ResultFileError

        raise ResultFileError(f"--env {other[0]}: --score-bfcl scores {BFCL_ENV} (its categories come from the "
                              "file names)")
    cats = categories_in(opts.score_bfcl)
    env, kwargs = _make(opts, BFCL_ENV, category=cats)
    try:
        items = score_files(opts.score_bfcl, env, opts.bfcl_format)
        present: dict[str, int] = {}
        for item in items:
            present[item["category"]] = present.get(item["category"], 0) + 1
        partial = {c: [n, BFCL_V3_SIZES[c]] for c, n in present.items() if n < BFCL_V3_SIZES.get(c, n)}
        source = {"format": "bfcl-eval result files", "bfcl_format": opts.bfcl_format,
                  "files": _files(result_files(opts.score_bfcl)),
                  "partial_categories": partial}  # category -> [ids present, ids in the category]
        return BFCL_ENV, items, _env_info(env, kwargs, items, source)
    finally:
        env.close()


def _env_info(env: Any, kwargs: dict[str, Any], items: Sequence[dict[str, Any]],
              source: dict[str, Any]) -> dict[str, Any]:
    """What ``results.json`` says of an env after a run, for the tasks the files scored."""
    from lopd_envs import provenance
    from lopd_train.evaluation import data_fingerprint, sandbox_of

    unwrapped = env.unwrapped
    ids = {i["task_id"] for i in items}
    tasks = [t for t in unwrapped.tasks if t.task_id in ids]
    return {"kwargs": kwargs, "n_tasks": len(tasks), "data_sha256": data_fingerprint(tasks),
            "data_origin": getattr(unwrapped, "data_origin", None) or "data found",
            "provenance": provenance.of(unwrapped) if unwrapped.provenance else None,
            "scoring": getattr(unwrapped, "scoring", "official"), "sandbox": sandbox_of(unwrapped),
            "scored_from": source}


def to_record(env_id: str, item: dict[str, Any]) -> dict[str, Any]:
    """A scored sample or result as a record of ``records.jsonl`` (the fields a generated one has; no
    messages or trace, ``source`` naming the file and line it came from)."""
    details = json.loads(json.dumps(item["details"], default=str))
    return {"env": env_id, "task_id": item["task_id"], "sample": item["sample"], "seed": 0, "order": item["order"],
            "category": item["category"], "reward": 1.0 if item["success"] else 0.0, "success": item["success"],
            "scored": True, "turns": item["turns"], "truncated": False, "overflow": False, "text_fallbacks": 0,
            "generated_tokens": item["tokens"], "score": details, "trace": None, "messages": [],
            "batch_seconds": 0.0, "meta": {}, "source": item["where"]}


def summarise(opts: SimpleNamespace, env_info: dict[str, dict[str, Any]],
              records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``results.json`` in the shape of a generating run's (:func:`lopd_train.evaluation.summarise`)."""
    from lopd_train.evaluation import leaderboards, report

    label = opts.model or "scored files: " + ", ".join(
        Path(p).name for p in [opts.score_samples, *(opts.score_bfcl or [])] if p)
    envs = {}
    for env_id, info in env_info.items():
        recs = sorted((r for r in records if r["env"] == env_id), key=lambda r: (r["order"], r["sample"]))
        ran = sorted({str(r["score"]["backend"]) for r in recs if r["score"].get("backend")})
        envs[env_id] = {**info, "n_records": len(recs), "n_errors": 0, "sandbox_backends_in_records": ran,
                        "leaderboard": leaderboards.leaderboard(env_id, recs),
                        "mean_reward": sum(r["reward"] for r in recs) / len(recs) if recs else 0.0,
                        "generated_tokens": sum(r["generated_tokens"] for r in recs)}
    per_task: dict[tuple[str, str], int] = {}
    for r in records:
        per_task[(r["env"], r["task_id"])] = per_task.get((r["env"], r["task_id"]), 0) + 1
    return {"model": {"spec": label, "kind": "scored-files", "base": label, "adapter": None, "base_sha256": None,
                      "adapter_sha256": None},
            "backend": {"backend": "none (scored from files)"}, "sampling": {"temperature": "n/a"},
            "samples": max(per_task.values(), default=0), "envs": envs, "packages": report.package_versions(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def write_results(out: Path, results: dict[str, Any]) -> None:
    from lopd_train.evaluation import report

    (out / "results.json").write_text(json.dumps(results, indent=2, default=str))
    (out / "results.md").write_text(report.markdown(results))
    report.plot(results, out / "results.png")
