"""Cost of HumanEval+ expected outputs at the first step: the one-file v2 cache (every output parsed at
once, the baseline) against the v3 form (an index, then one output decoded at a time), same files, same run.

    python benchmarks/evalplus_expected_outputs.py [--task HumanEval/130 --task HumanEval/15]

Each measurement runs in a fresh interpreter so its peak RSS (``ru_maxrss``) is its own:
  * ``v2 load``: what the first step paid before, whatever the answer (the whole JSON parsed into values);
  * ``v3 index``: what a step pays when the answer has no code or its code does not load (times only);
  * ``v3 first``: a wrong answer, judged at its first output (evalplus's fast check stops there);
  * ``v3 all``: a correct answer, every expected output decoded in turn (none kept).
The expected outputs must be cached (run the env once on the task); a missing v2 file is written from the
v3 one for the baseline, in a temporary folder.

Measured 2026-12-01 on the 2-core dev VM (shared, load average 8-10), Python 3.11, bubblewrap:
  HumanEval/130 (124 MB v2 file; 10 base, 115 plus): v2 load 7.57 s, +501 MB; v3 index 0.000 s, +0 MB;
      v3 first output 0.000 s, +0 MB; v3 all outputs one at a time 6.9 s, +62 MB.
  HumanEval/15 (147 MB; 3 base, 134 plus): v2 load 0.69 s, +280 MB; v3 index and first 0.000 s, +0 MB;
      v3 all 1.6 s, +19 MB.
  Whole first step in a fresh process (env.step, strict; "before" = the same outputs held as lists):
      HumanEval/130 no-code answer 7.1 s / 611 MB peak -> 0.22 s / 200 MB; wrong answer 7.8 s / 611 MB ->
      0.21 s / 200 MB; canonical answer 19.4 s / 1011 MB -> 19.9 s / 652 MB (the run itself dominates).
      HumanEval/15 wrong answer 1.35 s / 353 MB -> 0.22 s / 200 MB; canonical 12.0 s / 515 MB -> 12.8 s / 375 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROBE = r"""
import json, resource, sys, time
from pathlib import Path
from lopd_envs.suites.evalplus import groundtruth as gt
mode, path = sys.argv[1], Path(sys.argv[2])
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
if mode == "v2":
    oracle = gt.read_legacy(path)
    n = len(oracle.plus)
else:
    oracle = gt.read_oracle(path)
    n = 0
    if mode == "first":
        oracle.base[0]; n = 1
    elif mode == "all":
        for name in ("base", "plus"):
            seq = getattr(oracle, name)
            for i in range(len(seq)):
                seq[i]; n += 1
elapsed = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": elapsed, "rss_mb": peak / 1024, "added_mb": (peak - base) / 1024, "n": n}))
"""


def measure(mode: str, path: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, mode, str(path)], capture_output=True, text=True,
                         cwd=ROOT, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", action="append", default=None)
    args = parser.parse_args()
    tasks = args.task or ["HumanEval/130", "HumanEval/15"]

    from lopd_envs import assets
    from lopd_envs.codeexec import valuecodec
    from lopd_envs.suites.evalplus import groundtruth as gt

    root = assets.cache_dir() / "evalplus" / "groundtruth"
    folders = sorted(root.glob(f"HumanEvalPlus-*-v{gt.GROUNDTRUTH_VERSION}"))
    if not folders:
        print(f"no v{gt.GROUNDTRUTH_VERSION} expected outputs under {root}: run the HumanEval+ env once first")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        for task in tasks:
            meta = folders[-1] / (task.replace("/", "_") + ".json")
            oracle = gt.read_oracle(meta)
            if oracle is None:
                print(f"{task}: not cached in {folders[-1]}; skipped")
                continue
            legacy = folders[-1].with_name(folders[-1].name.rsplit("-v", 1)[0] + "-v2") / meta.name
            if not legacy.exists():
                legacy = Path(tmp) / meta.name
                legacy.write_text(json.dumps({"base": [valuecodec.encode(x) for x in oracle.base],
                                              "plus": [valuecodec.encode(x) for x in oracle.plus],
                                              "base_time": oracle.base_time, "plus_time": oracle.plus_time,
                                              "errors": oracle.errors}))
            size = os.path.getsize(legacy) / 1e6
            v2 = measure("v2", legacy)
            print(f"{task}: {size:.0f} MB of expected outputs ({len(oracle.base)} base, {len(oracle.plus)} plus)")
            print(f"  v2 load  : {v2['seconds']:7.3f} s  peak RSS {v2['rss_mb']:7.0f} MB (+{v2['added_mb']:.0f})")
            for mode in ("index", "first", "all"):
                r = measure(mode, meta)
                print(f"  v3 {mode:<6}: {r['seconds']:7.3f} s  peak RSS {r['rss_mb']:7.0f} MB (+{r['added_mb']:.0f})"
                      f"   v2/v3 time x{v2['seconds'] / max(r['seconds'], 1e-6):,.2f}, "
                      f"added memory x{max(v2['added_mb'], 1) / max(r['added_mb'], 1):,.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
