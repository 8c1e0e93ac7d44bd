"""Benchmark of perfmodel.sweep: a 10,000-point hardware sweep in one vmapped call against a Python loop.

    .venv/bin/python benchmarks/bench_sweep.py                # about a minute on 2 CPU cores
    .venv/bin/python benchmarks/bench_sweep.py --loop 1000    # a longer loop sample

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
from perfmodel.analysis import columns
from perfmodel.analysis.sweep import summarize

TARGET_S = 5.0
N_SIDE = 100


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loop", type=int, default=300, help="points evaluated one at a time (default 300)")
    ap.add_argument("--reps", type=int, default=3, help="timed sweep calls after the first (default 3)")
    args = ap.parse_args()

    load = " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    print(f"perfmodel sweep benchmark: jax {jax.__version__}, backend {jax.default_backend()}, "
          f"{os.cpu_count()} CPU cores, python {platform.python_version()}, load average {load}")
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
    err = float(np.max(np.abs(np.asarray(steps) - table["step_s"][:k]) / table["step_s"][:k]))
    scale = n / k
    note = f" (measured on {k:,} points, extrapolated x {scale:.1f})" if k < n else ""
    print(f"  loop of single jitted evaluations, systems built beforehand: {loop_eval:7.3f} s for {k:,} points "
          f"-> {loop_eval * scale:7.2f} s for {n:,}{note}")
    print(f"  ... plus building each point's System with set_knobs:       {build:7.3f} s for {k:,} points "
          f"-> {(loop_eval + build) * scale:7.2f} s for {n:,}{note}")
    print(f"  sweep vs loop: {loop_eval * scale / best:,.0f}x faster than the evaluation-only loop, "
          f"{(loop_eval + build) * scale / best:,.0f}x faster than the loop that builds systems; "
          f"loop vs sweep step_s on the same points: max rel diff {err:.1e}")
    if err > 1e-5:
        sys.exit("loop and sweep disagree")


if __name__ == "__main__":
    main()
