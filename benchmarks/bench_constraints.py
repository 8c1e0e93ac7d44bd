"""What per-table constraints cost: each search method on one instance with and without a constraint
set (the heaviest table pinned column-wise to two ranks, the next one kept in host DRAM at a 0.3
cache load factor, the two lightest table-wise on rank 0), the step time each finds and its wall
time, and whether its plan keeps the constraints.

    python benchmarks/bench_constraints.py                       # dlrm-small on mtia300-16, 200 rounds
    python benchmarks/bench_constraints.py --instance dlrm-dcnv2-mlperf@h100-16 --iterations 100

Each method runs twice per setting with the same seed (the first run compiles; the second's wall
time is printed), so the printed wall times are warm.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import perfmodel as pm
from perfmodel.plan import plan_violations
from perfmodel.search.instances import load_instance, parse_instances


def constraint_set(model) -> dict:
    tb = model.tables
    weight = np.asarray(tb.pooling) * np.asarray(tb.dim)
    order = [tb.names[i] for i in np.argsort(-weight, kind="stable")]
    return {order[0]: {"sharding_types": ["column_wise"], "ranks": [0, 1]},
            order[1]: {"compute_kernels": ["fused_uvm_caching"], "cache_load_factor": 0.3},
            order[-1]: {"sharding_types": ["table_wise"], "ranks": [0]},
            order[-2]: {"sharding_types": ["table_wise"], "ranks": [0]}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--instance", default="dlrm-small@mtia300-16")
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--methods", default="greedy,random,evolutionary,gradient")
    args = ap.parse_args()
    pm.enable_compile_cache()
    (model_name, system_name), = parse_instances(args.instance, "--instance")
    system, model = load_instance(model_name, system_name)
    cons = constraint_set(model)
    print(f"{model.name} on {system.name}, {args.iterations} rounds, seed 0; constraints: {cons}")
    print(f"{'method':<14}{'free ms':>10}{'constrained ms':>16}{'cost':>8}{'free wall s':>13}{'constr. wall s':>16}  kept")
    for method in args.methods.split(","):
        row = {}
        for label, c in (("free", None), ("constrained", cons)):
            for _ in range(2):
                t = time.perf_counter()
                r = pm.search(system, model, method, seed=0, iterations=args.iterations, budget_s=None, constraints=c)
                wall = time.perf_counter() - t
            row[label] = (r.step_s, wall, not plan_violations(r.plan, cons, system, model))
        (f_s, f_w, _), (c_s, c_w, kept) = row["free"], row["constrained"]
        print(f"{method:<14}{f_s * 1e3:>10.4f}{c_s * 1e3:>16.4f}{100 * (c_s / f_s - 1):>7.1f}%{f_w:>13.2f}{c_w:>16.2f}  {kept}")


if __name__ == "__main__":
    main()
