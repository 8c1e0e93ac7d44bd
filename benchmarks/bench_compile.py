"""Compile time and run time of the search's three programs, with XLA's default CPU options and with
perfmodel's (perfmodel.cache.CPU_COMPILE_OPTIONS), measured in the same run.

    python benchmarks/bench_compile.py                 # three instances, about 3 minutes on 2 cores
    python benchmarks/bench_compile.py --instances dlrm-dcnv2-mlperf@h100-16

Per instance (model@system) and program:
  - scorer: the local search's batched hard scorer (search.local._score_batch) on one batch of
    search.local.batch_size plans (greedy's plan repeated);
  - details: the single-plan scorer the search calls after each accepted move (search.local._details);
  - relaxed step: one Adam step of 8 relaxed restarts (search.gradient._step). The library compiles
    it with XLA's defaults (it runs slower with perfmodel's options): shown for comparison.
Each is lowered once and compiled under both option sets (`Lowered.compile(compiler_options=...)`);
printed: compile s, best run ms of --repeat calls, the ratios perfmodel / default, and the largest
relative difference between the two programs' outputs (0: bitwise identical; fused code may round
differently in the last bits). A cold search of a new problem shape compiles all three (the relaxed
step only when the budget leaves time for it).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import perfmodel as pm  # noqa: E402
from perfmodel.cache import CPU_COMPILE_OPTIONS  # noqa: E402
from perfmodel.config import ConfigError  # noqa: E402
from perfmodel.plan import SHARDING_TYPES, plan_arrays, stack  # noqa: E402
from perfmodel.search import gradient as gs  # noqa: E402
from perfmodel.search import local  # noqa: E402
from perfmodel.search.greedy import greedy_plan  # noqa: E402
from perfmodel.search.instances import parse_instances  # noqa: E402
from perfmodel.search.relax import make_masks  # noqa: E402

INSTANCES = "dlrm-dcnv2-mlperf@h100-16,dlrm-dcnv2-mlperf@h100-64,prod-856@mtia300-256"


def programs(system, model):
    """(name, python function, args) of the three programs for this instance."""
    plan = greedy_plan(system, model)
    pa = plan_arrays(plan, system, model)
    batch = stack([pa] * local.batch_size(system, model))
    masks = make_masks(system, model, precisions=("fp32",), sharding_types=tuple(SHARDING_TYPES))
    params, state = gs.prepare(system, model, seed=0, restarts=8, warm=plan)
    return [("scorer", local._score_batch.__wrapped__, (system, model, batch)),
            ("details", local._details.__wrapped__, (system, model, pa)),
            ("relaxed step", gs._step.__wrapped__, (params, state, system, model, masks, jnp.float32(0.5)))]


def measure(fun, args, options, repeat: int, tag: str):
    def program(*a):
        return fun(*a)
    # a name of its own: jax keeps compiled programs in memory keyed by module (whose name is the
    # function's) and options, and the search already compiled these under their own names
    program.__name__ = program.__qualname__ = f"{fun.__name__}_{tag}"
    lowered = jax.jit(program).lower(*args)
    t = time.perf_counter()
    compiled = lowered.compile(compiler_options=options) if options else lowered.compile()
    compile_s = time.perf_counter() - t
    out = jax.block_until_ready(compiled(*args))
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        runs.append(time.perf_counter() - t)
    return compile_s, min(runs), [np.asarray(x) for x in jax.tree_util.tree_leaves(out)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--instances", default=INSTANCES, help=f"model@system, comma-separated (default {INSTANCES})")
    ap.add_argument("--repeat", type=int, default=5, help="timed calls per program (best is shown)")
    a = ap.parse_args(argv)
    if a.repeat < 1:
        ap.error("--repeat must be at least 1")
    try:
        instances = parse_instances(a.instances)
    except ConfigError as e:
        ap.error(str(e))
    print(f"jax {jax.__version__}, backend {jax.default_backend()}; perfmodel's options: {CPU_COMPILE_OPTIONS}")
    print(f"{'instance':<32}{'program':<14}{'compile default':>16}{'perfmodel':>11}{'ratio':>7}"
          f"{'run default':>13}{'perfmodel':>11}{'ratio':>7}  max rel. diff")
    totals = np.zeros(2)
    for model_name, system_name in instances:
        inst = f"{model_name}@{system_name}"
        system, model = pm.load_system(system_name), pm.load_model(model_name)
        for name, fun, args in programs(system, model):
            c0, r0, o0 = measure(fun, args, None, a.repeat, "default")
            c1, r1, o1 = measure(fun, args, CPU_COMPILE_OPTIONS, a.repeat, "perfmodel")
            diff = max(float(np.max(np.abs(x.astype(np.float64) - y) / np.maximum(np.abs(x), 1e-30), initial=0.0))
                       for x, y in zip(o0, o1) if x.dtype.kind == "f")
            totals += (c0, c1)
            print(f"{inst:<32}{name:<14}{c0:>14.2f} s{c1:>9.2f} s{c1 / c0:>7.2f}{r0 * 1e3:>10.2f} ms"
                  f"{r1 * 1e3:>8.2f} ms{r1 / r0:>7.2f}  {diff:.1e}", flush=True)
    print(f"all compiles: default {totals[0]:.1f} s, perfmodel's options {totals[1]:.1f} s "
          f"({totals[1] / totals[0]:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
