"""After a ``lopd-eval`` run, its answers in the official tools' own formats, in ``<output>/official/``:

* HumanEval+ / MBPP+: ``humaneval.jsonl`` / ``mbpp.jsonl``, evalplus samples (``{"task_id", "solution"}``, one
  line per task and sample, the program the env judged), for ``evalplus.evaluate --dataset humaneval --samples
  <output>/official/humaneval.jsonl``, and ``*.raw.jsonl`` beside them (the answers as the model gave them,
  for ``evalplus.sanitize``), as evalplus's ``codegen`` writes the pair;
* BFCL-v3: ``bfcl_result/<model>/BFCL_v3_<category>_result.json``, one ``{"id", "result"}`` per task as
  bfcl-eval writes them (``result/<model>/``), for ``bfcl evaluate`` with ``--result-dir`` (bfcl-eval takes
  the folder's name as a model it knows: rename it to one whose handler reads responses as these are, an
  ``-FC`` model for native calls). Sample ``k`` > 0 of a multi-sample run goes to ``bfcl_result-sample<k>/``.

and ``manifest.json`` listing the files, each with the command that scores it (evalplus pointed at the run's
data file through its own override variable when that was not the release, e.g. MBPP+'s pre-release), and
what an official tool will see differently (a category or dataset only partly run: evalplus and bfcl-eval
score only complete ones; text and native calls mixed in one BFCL file; a run scored ``strict``). ``lopd-eval --score-samples`` / ``--score-bfcl`` (:mod:`.external`) reads them back to the
same scores. Records whose reply was unusable (``error``) are left out, as they are of the scores.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from lopd_train.evaluation import env_kwargs
from lopd_train.evaluation.leaderboards import BFCL_V3_SIZES, benchmark_name
from lopd_train.records import read_records, settled

if TYPE_CHECKING:
    from lopd_envs.suites.evalplus.env import EvalPlusEnv

FOLDER = "official"


def model_folder(model: str) -> str:
    """bfcl-eval's folder name for a model (``/`` as ``_``), of lopd's ``--model``."""
    name = str(model).strip().rstrip("/").replace("/", "_").replace("\\", "_")
    return name.lstrip(".") or "model"


def write_official_files(cfg: Any, output: str | Path) -> dict[str, Any] | None:
    """Write the official-format files of the run in ``output`` (its ``records.jsonl``) for every env of
    ``cfg.env`` that has a format (HumanEval+, MBPP+, BFCL-v3). Returns the manifest, or None when no env has one."""
    out = Path(output)
    records = settled(read_records(out / "records.jsonl"))[0]
    manifest: dict[str, Any] = {"files": [], "notes": []}
    for env_id in cfg.env or []:
        recs = sorted((r for r in records if r["env"] == env_id and r.get("turns")),
                      key=lambda r: (r["order"], r["sample"]))
        name = benchmark_name(env_id)
        if name not in ("HumanEvalPlus", "MBPPPlus", "BFCLv3") or not recs:
            continue
        if name == "BFCLv3":
            _write_bfcl(cfg, recs, out / FOLDER, manifest)
        else:
            _write_evalplus(cfg, env_id, recs, out / FOLDER, manifest)
        scoring = env_kwargs(cfg, env_id).get("scoring", "official")
        if scoring != "official":
            manifest["notes"].append(f"{env_id} was scored {scoring!r}: the official tools score officially; to "
                                     f"reproduce the run's scores, score with --env-kwargs '{{\"scoring\": "
                                     f"\"{scoring}\"}}'")
    if not manifest["files"]:
        return None
    (out / FOLDER / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def _jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def _write_evalplus(cfg: Any, env_id: str, records: Sequence[dict[str, Any]], folder: Path,
                    manifest: dict[str, Any]) -> None:
    import gymnasium as gym

    from lopd_envs.suites.evalplus.data import OVERRIDE_VARIABLES
    from lopd_train.evaluation.evalplus_samples import samples_of

    env = gym.make(env_id, **env_kwargs(cfg, env_id))
    try:
        unwrapped = cast("EvalPlusEnv", env.unwrapped)  # a HumanEval+ or MBPP+ id
        sanitised, raw = samples_of(records, env)
        dataset, n_problems, data = unwrapped.dataset, len(unwrapped.problems), unwrapped.provenance
    finally:
        env.close()
    assert data is not None, "an EvalPlus env records the data it loaded"
    path = folder / f"{dataset}.jsonl"
    _jsonl(path, sanitised)
    _jsonl(folder / f"{dataset}.raw.jsonl", raw)
    tasks = len({r["task_id"] for r in records})
    # data other than the release (MBPP+'s pre-release, an override file): evalplus is pointed at the same file
    same_data = "" if data.source == "official" else f"{OVERRIDE_VARIABLES[dataset]}={data.files[0]} "
    manifest["files"] += [{"env": env_id, "format": "evalplus samples", "path": str(path), "tasks": tasks,
                           "samples": len(sanitised), "command": f"{same_data}evalplus.evaluate --dataset {dataset} "
                                                                  f"--samples {path}"},
                          {"env": env_id, "format": "evalplus raw samples (unsanitised answers)",
                           "path": str(folder / f"{dataset}.raw.jsonl")}]
    if tasks < n_problems:
        manifest["notes"].append(f"{path.name} holds {tasks} of the {n_problems} tasks: evalplus.evaluate scores "
                                 f"only a file with every task (lopd-eval --score-samples scores those present)")


def _write_bfcl(cfg: Any, records: Sequence[dict[str, Any]], folder: Path, manifest: dict[str, Any]) -> None:
    from lopd_envs.suites.bfcl.data import is_multi_turn
    from lopd_train.evaluation.bfcl_results import episode_result, sort_key

    files: dict[Path, list[dict[str, Any]]] = {}
    for r in records:
        k = int(r.get("sample", 0))
        root = folder / ("bfcl_result" if k == 0 else f"bfcl_result-sample{k}") / model_folder(cfg.model)
        entry = {"id": r["task_id"], "result": episode_result(r, is_multi_turn(r["category"])),
                 "output_token_count": int(r.get("generated_tokens") or 0)}
        files.setdefault(root / f"BFCL_v3_{r['category']}_result.json", []).append(entry)
    for path, entries in sorted(files.items()):
        entries.sort(key=lambda e: sort_key(e["id"]))
        _jsonl(path, entries)
        category = path.name[len("BFCL_v3_"):-len("_result.json")]
        shapes = {_shape(e["result"]) for e in entries} - {"none"}
        manifest["files"].append({"env": "lopd/BFCLv3-v0", "format": "bfcl-eval result file", "path": str(path),
                                  "category": category, "entries": len(entries), "responses": sorted(shapes),
                                  "command": f"bfcl evaluate --model <the folder renamed to a bfcl-eval model> "
                                             f"--test-category {category} --result-dir {path.parent.parent}"})
        size = BFCL_V3_SIZES.get(category)
        if size and len(entries) < size:
            manifest["notes"].append(f"{path.name} holds {len(entries)} of the {size} entries of {category}: "
                                     "bfcl-eval scores only complete category files (lopd-eval --score-bfcl scores "
                                     "the ids present)")
        if len(shapes) > 1 or "mixed" in shapes:
            manifest["notes"].append(f"{path.name} mixes native (FC) calls and text answers: bfcl-eval reads a "
                                     "file with one model's handler (an FC one takes text as no call); lopd-eval "
                                     "--score-bfcl --bfcl-format auto reads each as the run did")


def _shape(result: Any) -> str:
    """``fc`` (calls as data), ``text``, or ``none`` for a response of neither kind only (empty turns)."""
    if isinstance(result, str):
        return "text"
    if isinstance(result, list) and all(isinstance(c, dict) for c in result) and result:
        return "fc"
    if isinstance(result, list):  # a multi-turn result: its turns' steps
        shapes = {_shape(step) for turn in result if isinstance(turn, list) for step in turn} - {"none"}
        return shapes.pop() if len(shapes) == 1 else ("mixed" if shapes else "none")
    return "none"
