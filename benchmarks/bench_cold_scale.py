"""Cold compile at scale: a gradient search of 200 synthetic tables on 48 H100s (6 hosts x 8), cold
and warm, read at 10, 30 and 60 s, against a warm 300-s search.

    python benchmarks/bench_cold_scale.py                  # about 13 minutes (two 300-s searches in one)
    python benchmarks/bench_cold_scale.py --budget-s 30 --reference-s 120
    python benchmarks/bench_cold_scale.py --cold-only --json cold.json     # the cold process alone, its figures kept

The instance is built as benchmarks/vs_torchrec.py builds its synthetic cases
(perfmodel.search.instances.synthetic_model: seed 0, 200 tables, 1.5e10 parameters, on h100-48).
One run of each, each in a fresh Python process (the machine is slow and shared; say so beside the
figures):

  cold        an empty compile-cache folder (pm.enable_compile_cache), one search of --budget-s
              (default 60 s), seed 0: everything it runs is traced and compiled inside the budget
  warm        a second process on the same folder: a search of --reference-s (default 300 s) to
              compile every program the search reaches (not counted), then the same search again in
              the same process, every program compiled: its profile is the warm row, its final step
              the warm reference (a search with the default iterations may end before its budget)
  from disk   a third process on that filled folder: one search of --budget-s, the programs loaded

Per row, at 10, 30 and 60 s: the rounds done and the best step held (the search's anytime profile,
notes["progress"]; a 30-s search is the first 30 s of a 60-s one, since a search reads only its
rounds, never the clock, and the clock only stops it). Rounds are timed by the search's per-round
callback (the one its progress bar uses). Printed too: the seconds the search took to hold its
first plan, the starts' (planners' plans) and start's seconds, and, per process, the seconds JAX
spent tracing, lowering and compiling and the programs compiled. Last, the ratio of the cold
search's step at 30 s to the warm reference's step (target: at most 1.03).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SYSTEM, TABLES, PARAMS, SEED = "h100-48", 200, 1.5e10, 0
MARKS = (10.0, 30.0, 60.0)
TARGET = 1.03

CHILD = r"""
import json, sys, time
t_import = time.perf_counter()
import jax
import perfmodel as pm
from perfmodel.search import progress as pg
from perfmodel.search.instances import synthetic_model

jit_s = {"trace": 0.0, "lower": 0.0, "compile": 0.0, "programs": 0, "by_name": {}}
EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "trace",
          "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
          "/jax/core/compile/backend_compile_duration": "compile"}
def on_duration(event, secs, fun_name=None, **kw):
    if event in EVENTS:
        jit_s[EVENTS[event]] += secs
        if event.endswith("backend_compile_duration"):
            jit_s["programs"] += 1
            name = str(fun_name)
            n, total = jit_s["by_name"].get(name, (0, 0.0))
            jit_s["by_name"][name] = (n + 1, total + secs)
jax.monitoring.register_event_duration_secs_listener(on_duration)

rounds = []               # (seconds, rounds done, phase, process CPU seconds) at each driver callback
update = pg.Progress.update
def timed(self, phase, budget):
    rounds.append((budget.elapsed(), budget.used, phase, time.process_time() - cpu0[0]))
    return update(self, phase, budget)
pg.Progress.update = timed

mode, folder, budget, reference = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
pm.enable_compile_cache(folder)
system = pm.load_system("%s")
model = synthetic_model(seed=%d, num_tables=%d, total_params=%g)
print(f"[{mode}] perfmodel imported and the instance built in {time.perf_counter() - t_import:.1f} s", file=sys.stderr, flush=True)

cpu0 = [0.0]
def one(b):
    rounds.clear()
    for k in ("trace", "lower", "compile", "programs"):
        jit_s[k] = 0
    jit_s["by_name"] = {}
    t, cpu0[0] = time.perf_counter(), time.process_time()
    r = pm.search(system, model, "gradient", seed=%d, budget_s=b, progress=True)
    return {"wall_s": time.perf_counter() - t, "step_s": r.step_s, "iterations": r.iterations,
            "stopped": r.stopped, "progress": r.notes["progress"], "phases": r.notes["phases"],
            "rounds": list(rounds), "jit": dict(jit_s), "best_start": r.notes.get("starts", {}).get("best"),
            "best_start_s": r.notes.get("starts", {}).get("best_s")}

if mode == "warm":
    first = one(reference)
    print(f"[warm] filling search: {first['iterations']} rounds in {first['wall_s']:.1f} s, "
          f"{1e3 * first['step_s']:.4f} ms", file=sys.stderr, flush=True)
    out = one(reference)
    out["filling"] = {k: first[k] for k in ("wall_s", "step_s", "iterations", "jit")}
else:
    out = one(budget)
print(json.dumps(out))
""" % (SYSTEM, SEED, TABLES, PARAMS, SEED)


def child(mode: str, folder: str, budget: float, reference: float) -> dict:
    """One fresh process (CHILD); its progress lines pass through to stderr."""
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD, mode, folder, str(budget), str(reference)],
                         stdout=subprocess.PIPE, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    if out.returncode != 0:
        raise SystemExit(f"the {mode} process failed (exit {out.returncode})")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    r["process_s"] = time.perf_counter() - t
    return r


def at(r: dict, t: float) -> tuple[int | None, float | None]:
    """(rounds done, best step held) t seconds into the search (a search that ended before t: its
    end); the step None while it held no plan yet."""
    done = [n for s, n, *_ in r["rounds"] if s <= t]
    held = [step for s, step in r["progress"] if s <= t]
    return (done[-1] if done else 0), (held[-1] if held else None)


def phases(r: dict) -> str:
    """When each phase first ran (the driver's callbacks) and the rounds it took."""
    first = {}
    for s, _, ph, cpu in r["rounds"]:
        first.setdefault(ph, (s, cpu))
    took = {p["name"]: p["rounds"] for p in r["phases"]}
    return ", ".join(f"{ph} from {s:.1f} s ({cpu:.1f} CPU s; {took.get(ph, 0)} rounds)"
                     for ph, (s, cpu) in first.items())


def report(label: str, r: dict, marks) -> list:
    cells = []
    for t in marks:
        n, step = at(r, t)
        cells.append(f"{n:>4} rounds {'-' if step is None else format(1e3 * step, '.4f'):>8} ms")
    first = r["progress"][0][0] if r["progress"] else float("nan")
    j = r["jit"]
    print(f"  {label:<10} " + " | ".join(cells) +
          f"   (ran {r['wall_s']:.1f} s, {r['iterations']} rounds, {r['stopped']}; first plan at {first:.1f} s; "
          f"jax: {j['programs']} programs compiled, trace {j['trace']:.1f} s, lower {j['lower']:.1f} s, "
          f"compile {j['compile']:.1f} s)")
    print(f"  {'':<10} phases: {phases(r)}")
    top = sorted(j["by_name"].items(), key=lambda kv: -kv[1][1])[:6]
    if top:
        print(f"  {'':<10} compiled: " + ", ".join(f"{name} {n}x {s:.1f} s" for name, (n, s) in top))
    return cells


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget-s", type=float, default=60.0, help="the cold and from-disk searches' budget")
    ap.add_argument("--reference-s", type=float, default=300.0, help="the warm searches' budget")
    ap.add_argument("--cache", help="the compile-cache folder (default: a new empty one, removed after)")
    ap.add_argument("--cold-only", action="store_true", help="the cold process only (no warm reference, no ratio)")
    ap.add_argument("--json", help="also write each process's figures (profile, rounds, compiles) to this file")
    ap.add_argument("--from-json", help="print the table of a file --json wrote, running nothing")
    a = ap.parse_args()
    marks = [t for t in MARKS if t <= a.budget_s] or [a.budget_s]
    if a.from_json:
        summary(json.loads(Path(a.from_json).read_text()), marks, f"from {a.from_json}")
        return
    print(f"cold compile at scale: synthetic_model(seed {SEED}, {TABLES} tables, {PARAMS:g} parameters) on "
          f"{SYSTEM}, gradient search, seed {SEED}, {os.cpu_count()} CPU cores, load {os.getloadavg()[0]:.1f}\n"
          f"one run each, each a fresh process: cold ({a.budget_s:g} s, empty cache), warm (a {a.reference_s:g}-s "
          f"search to compile, then the same search again), from disk ({a.budget_s:g} s, the filled cache); "
          f"read at {', '.join(f'{t:g}' for t in marks)} s", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = a.cache or os.path.join(tmp, "cache")
        if a.cache is None:
            os.makedirs(folder)
        elif any(Path(folder).iterdir()):
            print(f"note: {folder} is not empty: the 'cold' row is not cold", flush=True)
        rows = {}
        for mode in ("cold",) if a.cold_only else ("cold", "warm", "disk"):
            print(f"running {mode} ...", flush=True)
            rows[mode] = child(mode, folder, a.budget_s, a.reference_s)
            print(f"  {mode} process done in {rows[mode]['process_s']:.0f} s (load {os.getloadavg()[0]:.1f})", flush=True)
        if a.json:
            Path(a.json).write_text(json.dumps(rows, indent=1))
        files = [f for f in Path(folder).rglob("*") if f.is_file()]
        size = sum(f.stat().st_size for f in files) / 1e6
    summary(rows, marks, f"load at the end {os.getloadavg()[0]:.1f}; cache {len(files)} files, {size:.0f} MB")


def summary(rows: dict, marks, note: str) -> None:
    """The table of rows (mode -> a process's figures) at the marks, the warm reference, and the ratio."""
    print(f"\nrounds and best step at {', '.join(f'{t:g}' for t in marks)} s ({note}):")
    report("cold", rows["cold"], marks)
    if "warm" not in rows:
        return
    report("warm", rows["warm"], marks)
    report("from disk", rows["disk"], marks)
    w = rows["warm"]
    f = w["filling"]
    print(f"  warm reference: {1e3 * w['step_s']:.4f} ms after {w['iterations']} rounds in {w['wall_s']:.1f} s "
          f"({w['stopped']}); the filling search: {1e3 * f['step_s']:.4f} ms, {f['iterations']} rounds in "
          f"{f['wall_s']:.1f} s, {f['jit']['programs']} programs compiled ({f['jit']['compile']:.1f} s)")
    print(f"  best start: {w['best_start']} {1e3 * w['best_start_s']:.4f} ms")
    for mode, label in (("cold", "cold"), ("warm", "warm"), ("disk", "from disk")):
        within = next(((s, step) for s, step in rows[mode]["progress"] if step <= TARGET * w["step_s"]), None)
        if within is None:
            print(f"  {label}: never within {100 * (TARGET - 1):.0f} % of the warm reference")
        else:
            n = max((k for s, k, *_ in rows[mode]["rounds"] if s <= within[0]), default=0)
            print(f"  {label}: first within {100 * (TARGET - 1):.0f} % of the warm reference at {within[0]:.1f} s "
                  f"(round {n}, {1e3 * within[1]:.4f} ms)")
    t30 = 30.0 if 30.0 in marks else marks[-1]
    _, cold = at(rows["cold"], t30)
    ratio = float("nan") if cold is None else cold / w["step_s"]
    print(f"cold step at {t30:g} s / warm reference step = {ratio:.4f} (target <= {TARGET}: "
          f"{'met' if ratio <= TARGET else 'missed'})")


if __name__ == "__main__":
    main()
