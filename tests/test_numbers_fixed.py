"""What must not change (issue 53): a fixed-seed tiny run of every algorithm logs the same losses and metrics
as the code did when the golden values were recorded, to float tolerance.

Speed work (attention without K/V copies, prefill without the LM head, one pass over ``generate``'s log-probs,
allocator settings) must leave the numbers alone: each run here goes through the whole loop on the tiny random
Llama (grouped-query attention: 4 query heads, 2 key/value heads) and the coin-flip env, so it covers
rollouts (prefill, sampling, recorded log-probs and top-M), the bank, LOPD's cold start and composer, every
teacher and every update. Wall-clock and memory figures are not compared.

The golden values in ``tests/data/numbers_fixed.json`` were recorded from main 425d17f (before the speed work
of issue 53), with one thread::

    OMP_NUM_THREADS=1 python tests/test_numbers_fixed.py --record

Re-record only when a change is *meant* to change the numbers, and say so in the commit.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parent / "data" / "numbers_fixed.json"
ALGOS = ("lopd", "grpo", "opsd", "sdpo", "sdft", "skill_sd", "vanilla")
#: two steps: the second update is off-policy (ratios, clipping, KL to the reference move off their start)
SETTINGS = dict(model="tiny-random", env="lopd-test/Coin-v0", category="all", steps=2, tasks_per_step=2,
                group_size=4, max_new_tokens=16, num_latents=4, qformer_dim=32, qformer_layers=1,
                experience_tokens=96, lora_r=4, lora_alpha=8, lr=1e-3, composer_lr=1e-3, composer_lora_r=4,
                composer_lora_alpha=8, cold_start_steps=2, cold_start_batch_size=4, cold_start_min_successes=1,
                cold_start_max_batches=1, skill_tokens=6, seed=0, progress=False, export=False,
                tensorboard=False)
FLAGS = {"grpo": dict(grpo_kl_coef=0.1)}  # a KL term, so that kl_ref is measured
RTOL, ATOL = 1e-4, 1e-7


def volatile(key: str) -> bool:
    """Figures of the machine, not of the method: wall and CPU time, memory."""
    return any(word in key for word in ("seconds", "time", "memory", "rss", "_mb", "_bytes", "faults"))


def logged(algo: str, out: Path) -> list[dict]:
    """The rows ``metrics.jsonl`` holds after a tiny run of ``algo``, without the volatile figures."""
    import torch

    import tests.coin_env  # noqa: F401  (registers lopd-test/Coin-v0)
    from lopd_train.config import TrainConfig
    from lopd_train.training.trainer import train

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # reductions split over threads round differently
    try:
        train(TrainConfig(**{**SETTINGS, **FLAGS.get(algo, {}), "algo": algo, "output_dir": str(out)}))
    finally:
        torch.set_num_threads(threads)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [{k: v for k, v in row.items() if not volatile(k)} for row in rows]


def differences(want: list[dict], got: list[dict]) -> list[str]:
    """Each logged figure that is missing, new, or off by more than the tolerance, as a readable line."""
    problems = [] if len(want) == len(got) else [f"{len(got)} rows logged, {len(want)} recorded"]
    for i, (w, g) in enumerate(zip(want, got)):
        where = f"row {i} ({w.get('phase')}, step {w.get('step')})"
        for key in sorted(set(w) | set(g)):
            if key not in g or key not in w:
                problems.append(f"{where}: {key} {'missing' if key not in g else 'new'}")
            elif isinstance(w[key], float) or isinstance(g[key], float):
                if not (isinstance(g[key], (int, float)) and math.isclose(g[key], w[key], rel_tol=RTOL, abs_tol=ATOL)):
                    problems.append(f"{where}: {key} = {g[key]!r}, recorded {w[key]!r}")
            elif g[key] != w[key]:
                problems.append(f"{where}: {key} = {g[key]!r}, recorded {w[key]!r}")
    return problems


def test_differences_sees_a_changed_missing_or_new_figure():
    want = [{"phase": "train", "step": 1, "loss": 0.5, "rollouts": 8}]
    assert differences(want, [dict(want[0], loss=0.5 * (1 + RTOL / 2))]) == []
    assert differences(want, [dict(want[0], loss=0.5 * (1 + 3 * RTOL))]) != []
    assert differences(want, [dict(want[0], rollouts=9)]) != []
    assert differences(want, [{k: v for k, v in want[0].items() if k != "loss"}]) != []
    assert differences(want, [dict(want[0], extra=1.0)]) != []
    assert differences(want, want + want) != []


@pytest.mark.parametrize("algo", ALGOS)
def test_a_fixed_seed_tiny_run_logs_the_recorded_numbers(algo, tmp_path):
    recorded = json.loads(GOLDEN.read_text())["runs"][algo]
    problems = differences(recorded, logged(algo, tmp_path))
    assert not problems, "\n".join(problems)


def record() -> None:
    import subprocess
    import tempfile

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=GOLDEN.parents[1]).stdout.strip() or "unknown"
    runs = {algo: logged(algo, Path(tempfile.mkdtemp(prefix=f"numbers-{algo}-"))) for algo in ALGOS}
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(json.dumps({"recorded_from": commit, "settings": SETTINGS, "flags": FLAGS, "runs": runs},
                                 indent=1) + "\n")
    print(f"wrote {GOLDEN}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit(__doc__)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    record()
