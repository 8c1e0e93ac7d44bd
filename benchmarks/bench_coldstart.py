"""A new process's first seconds: how soon a search started in a fresh Python process holds its first
plan, and how good a plan it holds by the end of a short budget, with the persistent compile cache
(perfmodel.enable_compile_cache) keeping every program (perfmodel.cache.MIN_CACHED_COMPILE_S = 0, the
library's setting) against keeping only those that compiled in >= 0.2 s (the setting before), in the
same run.

    python benchmarks/bench_coldstart.py                       # MLPerf on h100-16, 2-s budget, 5 runs each
    python benchmarks/bench_coldstart.py --instance dlrm-dcnv2-mlperf@mtia300-64 --budget-s 3 --runs 3

Per setting: a new, empty cache folder; one process to fill it (its figures printed, not counted),
then --runs processes, alternating between the settings so that the machine's load falls on both
alike. Each process imports perfmodel, turns the cache on with the setting and runs
pm.search(system, model, budget_s=B); printed per run: the search call's wall time, when it first
held a plan and that plan's step time (the anytime profile's first entry), and the final step time.
Then, per setting, the medians and the cache folder's entries and size. The import of perfmodel
(0.7 s here) is not in the search's times.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = (0.0, 0.2)

CHILD = """
import json, sys, time
import perfmodel as pm
from perfmodel import cache
cache.MIN_CACHED_COMPILE_S = float(sys.argv[1])
pm.enable_compile_cache(sys.argv[2])
model, system = sys.argv[3].split("@")
t = time.perf_counter()
r = pm.search(system, model, budget_s=float(sys.argv[4]), seed=0)
wall = time.perf_counter() - t
first = r.notes["progress"][0]
print(json.dumps({"wall_s": wall, "first_at_s": first[0], "first_step_s": first[1], "step_s": r.step_s}))
"""


def run(setting: float, folder: str, instance: str, budget: float) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(setting), folder, instance, str(budget)],
                         capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if out.returncode != 0:
        raise SystemExit(f"child process failed ({setting}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def row(label: str, r: dict) -> str:
    return (f"  {label:<22} search {r['wall_s']:5.2f} s   first plan at {r['first_at_s']:5.2f} s "
            f"({1e3 * r['first_step_s']:.3f} ms)   final {1e3 * r['step_s']:.3f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--instance", default="dlrm-dcnv2-mlperf@h100-16", help="model@system")
    ap.add_argument("--budget-s", type=float, default=2.0)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    if a.runs < 1 or a.budget_s <= 0 or "@" not in a.instance:
        ap.error("--runs >= 1, --budget-s > 0 and --instance model@system")
    print(f"cold start: {a.instance}, budget {a.budget_s:g} s, {a.runs} runs per setting, {os.cpu_count()} CPU cores")
    with tempfile.TemporaryDirectory() as tmp:
        folders = {s: os.path.join(tmp, f"cache-{s}") for s in SETTINGS}
        for s in SETTINGS:
            print(row(f"min {s:g} s, filling", run(s, folders[s], a.instance, a.budget_s)))
        results: dict[float, list[dict]] = {s: [] for s in SETTINGS}
        for i in range(a.runs):
            for s in SETTINGS:
                results[s].append(run(s, folders[s], a.instance, a.budget_s))
                print(row(f"min {s:g} s, run {i + 1}", results[s][-1]))
        print("medians:")
        for s in SETTINGS:
            rs = results[s]
            files = [f for f in Path(folders[s]).rglob("*") if f.is_file()]
            med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
            print(row(f"min {s:g} s", med) + f"   cache: {len(files)} entries, {sum(f.stat().st_size for f in files) / 1e3:.0f} kB")


if __name__ == "__main__":
    main()
