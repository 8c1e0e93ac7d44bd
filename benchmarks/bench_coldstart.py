"""A new process's first seconds: how soon a search started in a fresh Python process holds its first
plan, and how good a plan it holds by the end of a short budget, with the persistent compile cache
(perfmodel.enable_compile_cache) on, keeping the search's programs as traced programs and as the
executables compiled from them (perfmodel.cache.EXPORT, the library's setting: the search's scorers,
move batches and relaxed step are loaded, not traced, lowered or looked up in XLA's cache) against
keeping XLA's compiled programs only (EXPORT = False, every program traced again), in the same run.

    python benchmarks/bench_coldstart.py                       # MLPerf on h100-16, 2-s budget, 5 runs each
    python benchmarks/bench_coldstart.py --instance dlrm-dcnv2-mlperf@mtia300-64 --budget-s 3 --runs 3

Per setting: a new, empty cache folder; one process to fill it (its figures printed, not counted),
then --runs processes, alternating between the settings so that the machine's load falls on both
alike. Each process imports perfmodel, turns the cache on with the setting and runs
pm.search(system, model, budget_s=B); printed per run: the search call's wall time, when it first
held a plan and that plan's step time (the anytime profile's first entry), when it first held a plan
at most --target-ms (default: none) and the final step time. Then, per setting, the medians and the
cache folder's entries and size. The import of perfmodel (0.7 s here) is not in the search's times.
(Every compiled program is kept either way, cache.MIN_CACHED_COMPILE_S = 0: against 0.2 s, the
setting before that, a new process held its first plan at 1.12 s instead of 1.38.)
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
SETTINGS = (True, False)     # cache.EXPORT

CHILD = """
import json, sys, time
import perfmodel as pm
from perfmodel import cache
cache.EXPORT = sys.argv[1] == "True"
pm.enable_compile_cache(sys.argv[2])
model, system = sys.argv[3].split("@")
t = time.perf_counter()
r = pm.search(system, model, budget_s=float(sys.argv[4]), seed=0)
wall = time.perf_counter() - t
first = r.notes["progress"][0]
print(json.dumps({"wall_s": wall, "first_at_s": first[0], "first_step_s": first[1],
                  "target_at_s": r.first_at(float(sys.argv[5])), "step_s": r.step_s}))
"""


def run(setting: bool, folder: str, instance: str, budget: float, target_s: float) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(setting), folder, instance, str(budget), str(target_s)],
                         capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if out.returncode != 0:
        raise SystemExit(f"child process failed ({setting}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def row(label: str, r: dict) -> str:
    return (f"  {label:<22} search {r['wall_s']:5.2f} s   first plan at {r['first_at_s']:5.2f} s "
            f"({1e3 * r['first_step_s']:.3f} ms)   {'at the target at ' + format(r['target_at_s'], '5.2f') + ' s' if r['target_at_s'] is not None else 'target not reached'}"
            f"   final {1e3 * r['step_s']:.3f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--instance", default="dlrm-dcnv2-mlperf@h100-16", help="model@system")
    ap.add_argument("--budget-s", type=float, default=2.0)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--target-ms", type=float, default=0.0,
                    help="report when each process first held a plan of at most this step time (ms)")
    a = ap.parse_args()
    if a.runs < 1 or a.budget_s <= 0 or "@" not in a.instance:
        ap.error("--runs >= 1, --budget-s > 0 and --instance model@system")
    print(f"cold start: {a.instance}, budget {a.budget_s:g} s, {a.runs} runs per setting, {os.cpu_count()} CPU cores")
    target = a.target_ms * 1e-3
    label = lambda s: "export" if s else "no export"
    with tempfile.TemporaryDirectory() as tmp:
        folders = {s: os.path.join(tmp, f"cache-{label(s)}") for s in SETTINGS}
        for s in SETTINGS:
            print(row(f"{label(s)}, filling", run(s, folders[s], a.instance, a.budget_s, target)))
        results: dict[float, list[dict]] = {s: [] for s in SETTINGS}
        for i in range(a.runs):
            for s in SETTINGS:
                results[s].append(run(s, folders[s], a.instance, a.budget_s, target))
                print(row(f"{label(s)}, run {i + 1}", results[s][-1]))
        print("medians:")
        for s in SETTINGS:
            rs = results[s]
            files = [f for f in Path(folders[s]).rglob("*") if f.is_file()]
            med = {k: statistics.median(r[k] for r in rs) for k in rs[0] if k != "target_at_s"}
            reached = [r["target_at_s"] for r in rs if r["target_at_s"] is not None]
            med["target_at_s"] = statistics.median(reached) if len(reached) == len(rs) else None
            print(row(f"{label(s)}", med) + f"   cache: {len(files)} entries, {sum(f.stat().st_size for f in files) / 1e3:.0f} kB")


if __name__ == "__main__":
    main()
