"""Merge the fresh PIG run's 1,000-step row into the committed privileged_gain_v2 report (same bank, same held-back
set: checked), after checking its 200-step row and text pilot against the committed ones. Run from /work/pig with
/work/study-v2/.venv/bin/python /tmp/pig_merge.py"""
import json, sys
from pathlib import Path
sys.path.insert(0, "/work/pig"); sys.path.insert(0, "/work/pig/benchmarks")
import privileged_gain as pg

main = Path("/work/main/benchmarks/results/privileged_gain_v2")
a = json.loads((main / "results.json").read_text())
b = json.loads(Path("/work/pig/benchmarks/results/pig_1000/results.json").read_text())
assert a["held_back"] == b["held_back"], "held-back sets differ"
assert {k: v for k, v in a["bank"].items() if k != "time"} == {k: v for k, v in b["bank"].items() if k != "time"}
assert a["text_pilot"] == b["text_pilot"], "text pilot differs"
rows_b = {r["cold_start_steps"]: r for r in b["cold_start"]}
ra, rb = next(r for r in a["cold_start"] if r["cold_start_steps"] == 200), rows_b[200]
for k in ("latent", "other", "text"):
    print(f"200 steps {k}: committed {ra[k]['pig']:+.4f}, fresh {rb[k]['pig']:+.4f}")
print("sampled success 200: committed", ra.get("sampled_success"), "fresh", rb.get("sampled_success"))
assert 1000 in rows_b, "no 1,000-step row yet"
a["cold_start"] = [r for r in a["cold_start"] if r["cold_start_steps"] != 1000] + [rows_b[1000]]
a.setdefault("software", []).extend(b.get("software", []))
a["reruns"] = a.get("reruns", []) + [{"note": "1,000-step row from a fresh run at bf82301 (same bank and held-back set, "
                                      "text pilot identical); its 200-step row, measured again as a check",
                                      "bank_time": b["bank"]["time"], "row_200_again": rb}]
pg.write(main, a)
print("merged")
