"""Merge the fresh PIG run's 1,000-step row into the committed privileged_gain_v2 report (same bank, same held-back
set: checked), after checking its 200-step row and text pilot against the committed ones. Run with
/work/study-v2/.venv/bin/python benchmarks/results/privileged_gain_v2/merge_1000.py once run_1000.sh has finished;
it regenerates results.json, results.md and pig_vs_cold_start.png here, and says in results.md where each row ran."""
import json
import sys
from pathlib import Path

sys.path.insert(0, "/work/pig")
sys.path.insert(0, "/work/pig/benchmarks")
import privileged_gain as pg

main = Path("/work/main/benchmarks/results/privileged_gain_v2")
a = json.loads((main / "results.json").read_text())
b = json.loads(Path("/work/pig/benchmarks/results/pig_1000/results.json").read_text())
assert a["held_back"] == b["held_back"], "held-back sets differ"
assert {k: v for k, v in a["bank"].items() if k != "time"} == {k: v for k, v in b["bank"].items() if k != "time"}


def shown(x):
    """What the report prints: floats to 3 decimals (CPUs differ in the 5th: AVX2 vs AVX-512 float sums)."""
    if isinstance(x, dict):
        return {k: shown(v) for k, v in x.items()}
    if isinstance(x, list):
        return [shown(v) for v in x]
    return round(x, 3) if isinstance(x, float) else x


assert shown(a["text_pilot"]) == shown(b["text_pilot"]), "text pilot differs"
rows_b = {r["cold_start_steps"]: r for r in b["cold_start"]}
ra, rb = next(r for r in a["cold_start"] if r["cold_start_steps"] == 200), rows_b[200]
for k in ("latent", "other", "text"):
    print(f"200 steps {k}: committed {ra[k]['pig']:+.4f}, fresh {rb[k]['pig']:+.4f}")
print("sampled success 200: committed", ra.get("sampled_success"), "fresh", rb.get("sampled_success"))
assert 1000 in rows_b, "no 1,000-step row yet"
a["cold_start"] = [r for r in a["cold_start"] if r["cold_start_steps"] != 1000] + [rows_b[1000]]
a.setdefault("software", []).extend(r for r in b.get("software", []) if r not in a["software"])  # idempotent
a["reruns"] = [r for r in a.get("reruns", []) if "row_200_again" not in r] + [{"note": "1,000-step row from a fresh run at bf82301 (same bank and held-back set, "
                                      "text pilot equal to the printed 3 decimals); its 200-step row, measured again as a check",
                                      "bank_time": b["bank"]["time"], "row_200_again": rb}]
pg.write(main, a)
with open(main / "results.md", "a") as md:  # pg.write has no provenance section: say where the rows come from
    md.write("\n## Where the rows come from\n\n"
             "Rows 0, 50 and 200 and the text pilot: the original run at bf82301 (AVX2 CPU). Row 1,000: a fresh run "
             "at the same commit on an AVX-512 CPU (`pig_1000/`, `run_1000.sh`), with the same bank, held-back set "
             "and text pilot (checked equal to the printed 3 decimals); its own 200-step row, measured again, reads latent "
             f"{pg.fmt_gain(rb['latent'])}, another task's latents {pg.fmt_gain(rb['other'])}: float sums differ "
             "across CPUs and thread counts, and the 6-trajectory intervals are wide.\n")
print("merged")
