"""Compile time and run time of the search's three programs under five XLA option sets, measured in
the same run: XLA's CPU defaults; perfmodel's with XLA's YNNPACK fusions on (no fusion emitters);
perfmodel's (perfmodel.cache.CPU_COMPILE_OPTIONS: no fusion emitters, no YNNPACK fusions); and quick
(cache.QUICK_COMPILE_OPTIONS: LLVM's optimizations off as well), with and without the YNNPACK fusions.
The library compiles the relaxed steps with them (cache.jit(library_fusions=True)), the scorers without.

    python benchmarks/bench_compile.py                 # three instances, about 3 minutes on 2 cores
    python benchmarks/bench_compile.py --instances dlrm-dcnv2-mlperf@h100-16

Per instance (model@system) and program:
  - scorer: the local search's batched hard scorer (search.score._score_batch) on one batch of
    search.score.batch_size plans (greedy's plan repeated); called hundreds of times a search;
  - details: the single-plan scorer the search calls once per round (search.score.details);
  - relaxed step: one Adam step of 8 relaxed restarts (search.adam.step_for), 150 per relaxed batch.
Each is lowered once and compiled under each option set (`Lowered.compile(compiler_options=...)`);
printed: compile s, the first call's ms (YNNPACK builds its kernels then, not at the compile; the
first program run in the process also pays oneDNN's kernel generation) and the best run ms of
--repeat calls after it under each, which one the library uses (*), and
the largest difference between the library's outputs and the defaults', relative to each output's
scale (its largest magnitude; 0: bitwise identical). Relative to each element instead, near-zero
entries (Adam's moments of logits the loss barely moves) read as 2.1 on prod-856's step while the
leaf differs by 1e-8 of its scale. A cold search of a new problem shape compiles all three (the relaxed
step when it runs its relaxed phase). A relaxed step whose gradient had entries that were not finite
under an option set is flagged NON-FINITE on its row.
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
from perfmodel.cache import CPU_COMPILE_OPTIONS, QUICK_COMPILE_OPTIONS, compile_options  # noqa: E402
from perfmodel.config import ConfigError  # noqa: E402
from perfmodel.plan import SHARDING_TYPES, plan_arrays, stack  # noqa: E402
from perfmodel.search import adam as gs  # noqa: E402
from perfmodel.search import score  # noqa: E402
from perfmodel.search.greedy import greedy_plan  # noqa: E402
from perfmodel.search.instances import parse_instances  # noqa: E402
from perfmodel.plan import make_masks  # noqa: E402

INSTANCES = "dlrm-dcnv2-mlperf@h100-16,dlrm-dcnv2-mlperf@h100-64,prod-856@mtia300-256"


OPTIONS = {"default": None, "with YNN": compile_options(library_fusions=True), "perfmodel": CPU_COMPILE_OPTIONS,
           "quick with YNN": compile_options(quick=True, library_fusions=True), "quick": QUICK_COMPILE_OPTIONS}


def programs(system, model):
    """(name, python function, args, the option set the library uses) of the three programs."""
    plan = greedy_plan(system, model)
    pa = plan_arrays(plan, system, model)
    batch = stack([pa] * score.batch_size(system, model))
    masks = make_masks(system, model, precisions=("fp32",), sharding_types=tuple(SHARDING_TYPES))
    params, state = gs.prepare(system, model, seed=0, restarts=8, warm=plan)
    step = gs.step_for(8, system, model)
    return [("scorer", score._score_batch.__wrapped__, (system, model, batch), "perfmodel"),
            ("details", score.details.__wrapped__, (system, model, pa), "quick"),
            ("relaxed step", step.__wrapped__, (params, state, system, model, masks, jnp.float32(0.5)),
             "quick with YNN" if step is gs._step_quick else "with YNN")]      # the steps keep them (adam._step)


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
    t = time.perf_counter()
    out = jax.block_until_ready(compiled(*args))
    first_s = time.perf_counter() - t
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        runs.append(time.perf_counter() - t)
    return compile_s, first_s, min(runs), [np.asarray(x) for x in jax.tree_util.tree_leaves(out)]


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
    print(f"jax {jax.__version__}, backend {jax.default_backend()}; " +
          "; ".join(f"{k}: {v}" for k, v in OPTIONS.items() if v))
    print("each cell: compile s, first call ms, best run ms; * the set the library compiles the program with")
    print(f"{'instance':<30}{'program':<14}" + "".join(f"{k:>34}" for k in OPTIONS) + "  max rel. diff")
    totals = dict.fromkeys(OPTIONS, 0.0)
    used_total = 0.0
    for model_name, system_name in instances:
        inst = f"{model_name}@{system_name}"
        system, model = pm.load_system(system_name), pm.load_model(model_name)
        for name, fun, args, used in programs(system, model):
            got = {k: measure(fun, args, o, a.repeat, k) for k, o in OPTIONS.items()}
            diff = max(float(np.max(np.abs(x.astype(np.float64) - y), initial=0.0) / max(np.max(np.abs(x), initial=0.0), 1e-30))
                       for x, y in zip(got["default"][3], got[used][3]) if x.dtype.kind == "f")
            for k in OPTIONS:
                totals[k] += got[k][0]
            used_total += got[used][0]
            cells = "".join(f"{c:>8.2f} s {f * 1e3:>8.1f} ms {r * 1e3:>7.2f} ms{'*' if k == used else ' '}"
                            for k, (c, f, r, _) in got.items())
            # the relaxed step's last output: its gradient entries that were not finite (it zeroes
            # them, so the outputs above agree closely even when one option set's derivative is wrong)
            bad = {k: int(g[3][-1]) for k, g in got.items() if name == "relaxed step" and int(g[3][-1])}
            print(f"{inst:<30}{name:<14}{cells}  {diff:.1e}" + (f"  NON-FINITE GRADIENT ENTRIES {bad}" if bad else ""),
                  flush=True)
    print("all compiles: " + ", ".join(f"{k} {v:.1f} s" for k, v in totals.items())
          + f"; as the library compiles them (*) {used_total:.1f} s ({used_total / totals['default']:.2f}x the defaults)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
