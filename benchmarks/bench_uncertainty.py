"""Benchmark of answers with error bars: 1,000 draws against one evaluation, MLPerf DLRM-DCNv2 on 64 chips.

    python benchmarks/bench_uncertainty.py            # about a minute on 2 CPU cores
    python benchmarks/bench_uncertainty.py --repeats 50

The target (the uncertainty issue): 1,000 draws cost at most 10x one evaluation's wall time.

  warm   in one process, after a first call of each: the median over --repeats of
         pm.evaluate(system, model, plan) (a Plan: checked, made arrays, evaluated, the step read) and of
         pm.uncertainty(system, model, plan, draws=1000) (the inputs read, 1,000 Latin-hypercube draws
         and the files' values evaluated in one vectorized call, the model's error added), and their ratio
  cold   fresh processes, the compile cache off: the first pm.evaluate of a process, and the first
         pm.uncertainty of another (each compiles its program), median over --cold runs, and their ratio

Systems: mtia300-64 and h100-64, greedy plans (written to a temporary folder once). Times in ms.
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

import numpy as np

MODEL = "dlrm-dcnv2-mlperf"
SYSTEMS = ("mtia300-64", "h100-64")
DRAWS = 1000

COLD = """
import json, sys, time
import perfmodel as pm
s = pm.load_system(sys.argv[1]); m = pm.load_model(sys.argv[2]); plan = pm.load_plan(sys.argv[3], s, m)
t = time.perf_counter()
if sys.argv[4] == "evaluate":
    float(pm.evaluate(s, m, plan).step_s)
else:
    pm.uncertainty(s, m, plan, draws=int(sys.argv[5])).p90
print(json.dumps({"s": time.perf_counter() - t}))
"""


def _median_ms(fn, repeats: int) -> float:
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts)) * 1e3


def _cold(system: str, plan_path: str, what: str, runs: int) -> float:
    env = {**os.environ, "PERFMODEL_CACHE_DIR": "", "PERFMODEL_QUIET": "1"}
    ts = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", COLD, system, MODEL, plan_path, what, str(DRAWS)], env=env,
                             capture_output=True, text=True, check=True)
        ts.append(json.loads(out.stdout.strip().splitlines()[-1])["s"])
    return float(np.median(ts)) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=30, help="warm calls timed per figure (default 30)")
    ap.add_argument("--cold", type=int, default=3, help="fresh processes per cold figure (default 3)")
    a = ap.parse_args()
    os.environ["PERFMODEL_QUIET"] = "1"
    import jax

    import perfmodel as pm
    print(f"jax {jax.__version__} on {jax.default_backend()}, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}; {DRAWS:,} draws, {MODEL}")
    print(f"{'system':<12} {'evaluate ms':>12} {'1,000 draws ms':>15} {'ratio':>6}   "
          f"{'cold evaluate ms':>17} {'cold draws ms':>14} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in SYSTEMS:
            s, m = pm.load_system(name), pm.load_model(MODEL)
            plan = pm.default_plan(s, m)
            path = Path(tmp) / f"{name}.json"
            path.write_text(json.dumps(plan.to_dict()))
            float(pm.evaluate(s, m, plan).step_s)
            pm.uncertainty(s, m, plan, draws=DRAWS)
            ev = _median_ms(lambda: float(pm.evaluate(s, m, plan).step_s), a.repeats)
            un = _median_ms(lambda: pm.uncertainty(s, m, plan, draws=DRAWS).p90, a.repeats)
            cev = _cold(name, str(path), "evaluate", a.cold)
            cun = _cold(name, str(path), "uncertainty", a.cold)
            print(f"{name:<12} {ev:>12.2f} {un:>15.2f} {un / ev:>6.1f}   {cev:>17.0f} {cun:>14.0f} {cun / cev:>6.1f}")
    print("target: 1,000 draws <= 10x one evaluation")
    return 0


if __name__ == "__main__":
    sys.exit(main())
