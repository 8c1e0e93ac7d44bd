"""Benchmarks of perfmodel.sweep: a 10,000-point fixed-plan sweep in one vmapped call against a Python
loop, and a 16-point replanned sweep (a search per point) on the process pool and on local Ray.

    .venv/bin/python benchmarks/bench_sweep.py                # both; about 4 minutes on 2 CPU cores
    .venv/bin/python benchmarks/bench_sweep.py --only fixed --loop 1000    # a longer loop sample
    .venv/bin/python benchmarks/bench_sweep.py --only replanned --warm-start   # and the warm-start study

Replanned: dlrm-dcnv2-mlperf on h100-64, scale_out_bandwidth_GBps = 25:400:16, plan "search" (the
studies' default rounds and seed), 2 workers, after one search in this process has filled the
compile cache (the workers load the programs from it); then the same sweep on a local Ray instance
(num_cpus=2), and whether the two tables are identical. --warm-start also searches the 16 points
as a chain along the bandwidth axis, each point starting from its neighbour's plan with fewer
rounds, and prints the steps against the cold searches.

dlrm-dcnv2-mlperf on mtia300-64 with its default plan fixed; a 100 x 100 grid of scale-out bandwidth
(25-800 GB/s, geometric) x HBM bandwidth (2,000-8,000 GB/s). The sweep is timed after compile (best
of 3 calls); the loop evaluates the first --loop points one at a time with a jitted single-point
function (the same summary figures), timed in the same run. Two loops: one over systems built
beforehand (evaluation only, the loop's best case) and one that also builds each point's System
with perfmodel.set_knobs (what a user's loop does). Loop times are extrapolated to 10,000 points
when --loop is smaller, and the report says so.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import jax
import numpy as np

import perfmodel as pm
from perfmodel.analysis import STUDY_ITERATIONS, columns
from perfmodel.analysis.sweep import summarize

TARGET_S = 5.0
N_SIDE = 100
REPLANNED_TARGET_S = 120.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loop", type=int, default=300, help="points evaluated one at a time (default 300)")
    ap.add_argument("--reps", type=int, default=3, help="timed sweep calls after the first (default 3)")
    ap.add_argument("--only", choices=("fixed", "replanned"), help="run one of the two benchmarks")
    ap.add_argument("--workers", type=int, default=2, help="replanned: pool processes and Ray CPUs (default 2)")
    ap.add_argument("--iterations", type=int, default=STUDY_ITERATIONS,
                    help=f"replanned: search rounds per point (default: the studies', {STUDY_ITERATIONS})")
    ap.add_argument("--no-ray", action="store_true", help="replanned: skip the Ray run")
    ap.add_argument("--warm-start", action="store_true", help="replanned: also the warm-start chain study")
    args = ap.parse_args()

    load = " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    print(f"perfmodel sweep benchmark: jax {jax.__version__}, backend {jax.default_backend()}, "
          f"{os.cpu_count()} CPU cores, python {platform.python_version()}, load average {load}")
    pm.enable_compile_cache()
    if args.only != "replanned":
        fixed(args)
    if args.only != "fixed":
        replanned(args)


def replanned(args) -> None:
    from perfmodel.analysis import planner

    system = pm.load_system("h100-64")
    model = pm.load_model("dlrm-dcnv2-mlperf")
    vary = {"scale_out_bandwidth_GBps": np.linspace(25, 400, 16)}
    make = planner("search", iterations=args.iterations)
    print(f"  replanned: {model.name} on {system.name}, scale_out_bandwidth_GBps 25-400 (16 points); per point "
          f"{make.label}: pm.search gradient, iterations={args.iterations}, budget_s=None, no warm start")
    t = time.perf_counter()
    make(system, model)                  # fills the compile cache the workers read
    print(f"  one search here (compile or cache load, then {args.iterations} rounds): {time.perf_counter() - t:6.1f} s")
    t = time.perf_counter()
    pool = columns(pm.sweep(system, model, vary, plan=make, workers=args.workers))
    wall = time.perf_counter() - t
    print(f"  process pool, {args.workers} workers: {wall:6.1f} s   "
          f"[{'PASS' if wall <= REPLANNED_TARGET_S else 'MISS'}: target <= {REPLANNED_TARGET_S:g} s]")
    print("    GB/s:   " + " ".join(f"{x:6.0f}" for x in pool["scale_out_bandwidth_GBps"]))
    print("    step ms:" + " ".join(f"{x:6.3f}" for x in pool["step_ms"]))
    if pool["error"].any():
        print("    errors: " + "; ".join(e for e in pool["error"] if e))
    if not args.no_ray:
        import ray
        ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
        try:
            t = time.perf_counter()
            on_ray = columns(pm.sweep(system, model, vary, plan=make, executor="ray"))
            wall = time.perf_counter() - t
        finally:
            ray.shutdown()
        same = list(on_ray) == list(pool) and all(np.array_equal(on_ray[k], pool[k]) for k in pool)
        print(f"  local Ray, {args.workers} CPUs:       {wall:6.1f} s   tables identical to the pool's: {same}")
        if not same:
            sys.exit("the pool's and Ray's tables differ")
    if args.warm_start:
        warm_start(system, model, vary, pool)


def warm_start(system, model, vary, cold) -> None:
    """A chain along the axis: point i starts from point i-1's plan, with fewer rounds."""
    from perfmodel.analysis import set_knobs
    from perfmodel.analysis.sweep import _dummy_plan
    pa = _dummy_plan(system, model)
    for rounds in (50,):
        make = pm.analysis.planner("search", iterations=rounds)
        steps, prev = [], None
        t = time.perf_counter()
        for bw in vary["scale_out_bandwidth_GBps"]:
            s = set_knobs(system, model, pa, scale_out_bandwidth_GBps=float(bw)).system
            prev = make(s, model, start=prev)
            steps.append(float(pm.evaluate(s, model, prev).step_s) * 1e3)
        wall = time.perf_counter() - t
        d = np.asarray(steps) / cold["step_ms"] - 1
        print(f"  warm-start chain, {rounds} rounds per point (serial): {wall:6.1f} s; step vs cold "
              f"{STUDY_ITERATIONS} rounds: mean {d.mean() * 100:+.2f} %, worst {d.max() * 100:+.2f} %, "
              f"better at {int((d < -1e-6).sum())} of {len(d)} points")
        print("    step ms:" + " ".join(f"{x:6.3f}" for x in steps))


def fixed(args) -> None:
    system = pm.load_system("mtia300-64")
    model = pm.load_model("dlrm-dcnv2-mlperf")
    plan = pm.default_plan(system, model)
    vary = {"scale_out_bandwidth_GBps": np.geomspace(25, 800, N_SIDE),
            "hbm_bandwidth_GBps": np.linspace(2000, 8000, N_SIDE)}
    n = N_SIDE * N_SIDE
    print(f"  {model.name} on {system.name}, default plan fixed; grid scale_out_bandwidth_GBps (25-800, log) "
          f"x hbm_bandwidth_GBps (2000-8000): {n:,} points")

    t = time.perf_counter()
    table = columns(pm.sweep(system, model, vary, plan=plan))
    first = time.perf_counter() - t
    best = float("inf")
    for _ in range(args.reps):
        t = time.perf_counter()
        table = columns(pm.sweep(system, model, vary, plan=plan))
        best = min(best, time.perf_counter() - t)
    print(f"  sweep, first call (trace + compile + run): {first:6.2f} s")
    print(f"  sweep after compile, best of {args.reps}:        {best:6.3f} s  = {n / best:,.0f} points/s   "
          f"[{'PASS' if best < TARGET_S else 'MISS'}: target < {TARGET_S:g} s]")

    # ---- the loop baseline, on the first --loop points of the same grid
    k = min(args.loop, n)
    pa = pm.to_arrays(plan, system, model)
    single = jax.jit(lambda s: summarize(pm.evaluate(s, model, pa), s))
    points = [{"scale_out_bandwidth_GBps": float(table["scale_out_bandwidth_GBps"][i]),
               "hbm_bandwidth_GBps": float(table["hbm_bandwidth_GBps"][i])} for i in range(k)]
    t = time.perf_counter()
    systems = [pm.set_knobs(system, model, pa, **p).system for p in points]
    jax.block_until_ready(systems)
    build = time.perf_counter() - t
    jax.block_until_ready(single(systems[0]))                    # compile outside the timing
    t = time.perf_counter()
    steps = [float(single(s)["step_s"]) for s in systems]        # float() waits for each result
    loop_eval = time.perf_counter() - t
    ref = table["step_ms"][:k] / 1e3
    err = float(np.max(np.abs(np.asarray(steps) - ref) / ref))
    scale = n / k
    note = f" (measured on {k:,} points, extrapolated x {scale:.1f})" if k < n else ""
    print(f"  loop of single jitted evaluations, systems built beforehand: {loop_eval:7.3f} s for {k:,} points "
          f"-> {loop_eval * scale:7.2f} s for {n:,}{note}")
    print(f"  ... plus building each point's System with set_knobs:       {build:7.3f} s for {k:,} points "
          f"-> {(loop_eval + build) * scale:7.2f} s for {n:,}{note}")
    print(f"  sweep vs loop: {loop_eval * scale / best:,.0f}x faster than the evaluation-only loop, "
          f"{(loop_eval + build) * scale / best:,.0f}x faster than the loop that builds systems; "
          f"loop vs sweep step time on the same points: max rel diff {err:.1e}")
    if err > 1e-5:
        sys.exit("loop and sweep disagree")


if __name__ == "__main__":
    main()
