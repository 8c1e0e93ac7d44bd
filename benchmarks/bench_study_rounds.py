"""How many search rounds a study's per-point search needs: the MTIA 300 attribution's eight h100-64
variants (analysis.attribution's default factors), each searched with several seeds at several round
counts. Where the seeds disagree at a round count, a study's answer at that setting depends on the
seed; analysis.planning.STUDY_ITERATIONS is chosen where they agree.

    python benchmarks/bench_study_rounds.py                       # rounds 150,300; seeds 0,1,2
    python benchmarks/bench_study_rounds.py --rounds 150,300,600 --seeds 0,1,2,3
"""

from __future__ import annotations

import argparse
import time

import perfmodel as pm
from perfmodel.analysis.attribution import combinations, default_factors, moved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", default="150,300", help="comma-separated round counts (default 150,300)")
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    ap.add_argument("--model", default="dlrm-dcnv2-mlperf")
    args = ap.parse_args()
    rounds = [int(x) for x in args.rounds.split(",")]
    seeds = [int(x) for x in args.seeds.split(",")]
    pm.enable_compile_cache()
    system, reference, model = pm.load_system("h100-64"), pm.load_system("mtia300-64"), pm.load_model(args.model)
    factors = default_factors(system, reference, model)
    print(f"{model.name}: h100-64 with MTIA 300's factors, step ms per seed {seeds}; spread = max / min - 1")
    worst = {n: 0.0 for n in rounds}
    t0 = time.perf_counter()
    for S, knobs in combinations(factors):
        s, m = moved(system, model, knobs)
        cells = []
        for n in rounds:
            steps = [float(pm.search(s, m, seed=k, iterations=n, budget_s=None).step_s) * 1e3 for k in seeds]
            spread = max(steps) / min(steps) - 1.0
            worst[n] = max(worst[n], spread)
            cells.append(f"{n} rounds: " + " ".join(f"{x:.4f}" for x in steps) + f" (spread {100 * spread:.1f} %)")
        print(f"  {' + '.join(sorted(S)) or 'as built':<48} " + " | ".join(cells), flush=True)
    print("worst spread: " + ", ".join(f"{n} rounds {100 * w:.1f} %" for n, w in worst.items())
          + f" ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
