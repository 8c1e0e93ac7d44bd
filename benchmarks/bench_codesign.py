"""Co-design of a hardware knob with the plan (`pm.search(..., co_design=...)`): what it chose, what it
bought, and whether it kept to its budget; against the plain search at the preset value with the same
budget, measured in the same run.

    .venv/bin/python benchmarks/bench_codesign.py                  # three cases, budget 20 s, ~3 minutes
    .venv/bin/python benchmarks/bench_codesign.py --budget-s 30 --cases rec-150b@mtia300-256:nic_split

Per case (model@system:knob), in a fresh order: the co-design search first (compiles included: the
cold case), then the plain gradient search at the preset value with the same budget (its programs
partly compiled by then, an advantage to the baseline). Printed: the preset and chosen knob values;
the objective (step time, or cost per sample for a priced knob) of the preset's plan, of the chosen
pair, and of that plan with the knob alone moved; d objective / d knob at the choice; the wall time
against the budget; the plain search's objective and how much lower the co-designed one is.
Targets, PASS / MISS: wall time within the budget (+5 %), and an objective no worse than the plain
search's.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import perfmodel as pm  # noqa: E402
from perfmodel.config import ConfigError  # noqa: E402
from perfmodel.search.codesign import KNOBS, _metric  # noqa: E402
from perfmodel.search.instances import parse_instances  # noqa: E402

CASES = "rec-150b@mtia300-256:nic_split,dlrm-dcnv2-mlperf@mtia300-64:nic_split,dlrm-dcnv2-mlperf@h100-64:scale_out_bw"


def parse_cases(text: str) -> list[tuple[str, str, str]]:
    """'model@system:knob,...' -> [(model, system, knob)]; ConfigError naming --cases otherwise."""
    out = []
    for entry in (e.strip() for e in text.split(",") if e.strip()):
        inst, _, knob = entry.partition(":")
        if knob not in KNOBS:
            raise ConfigError("", "--cases", f"entry {entry!r}: knob {knob!r}; allowed: {', '.join(KNOBS)}")
        (model, system), = parse_instances(inst, "--cases")
        out.append((model, system, knob))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget-s", type=float, default=20.0, help="budget per search, s (default 20)")
    ap.add_argument("--cases", default=CASES, help=f"model@system:knob, comma-separated (default {CASES})")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if not a.budget_s > 0:
        ap.error("--budget-s must be > 0")
    try:
        cases = parse_cases(a.cases)
    except ConfigError as e:
        ap.error(str(e))
    print(f"co-design benchmark: budget {a.budget_s:g} s per search, seed {a.seed}, {os.cpu_count()} CPU cores")
    verdicts = []
    for model_name, system_name, knob in cases:
        system, model = pm.load_system(system_name), pm.load_model(model_name)
        t = time.time()
        r = pm.search(system, model, seed=a.seed, budget_s=a.budget_s, co_design=knob)
        wall = time.time() - t
        cd = r.notes["co_design"]
        plain = pm.search(system, model, seed=a.seed, budget_s=a.budget_s)
        metric = cd["metric"]
        unit = "ms" if metric == "step_s" else "$/M samples"
        scale = 1e3 if metric == "step_s" else 1.0
        ours, base = float(_metric(r.breakdown, metric)), float(_metric(plain.breakdown, metric))
        fixed = cd["objective_at_preset"] * (1.0 - cd["improvement_plan_fixed"])
        print(f"\n== {model_name}@{system_name}, {knob} ({cd['unit']}): preset {cd['preset']:.4g} -> chosen {cd['chosen']:.4g}")
        print(f"   {metric}: preset's plan {cd['objective_at_preset'] * scale:.5g} {unit}; the knob alone moved "
              f"{fixed * scale:.5g} ({100 * cd['improvement_plan_fixed']:.1f} %); chosen pair {ours * scale:.5g} "
              f"({100 * cd['improvement']:.1f} %); d {metric} / d knob there {cd['d_objective_d_knob']:.3g}")
        print(f"   searches at knob values {[round(v, 4) for v, _ in cd['history']]}; wall {wall:.1f} s of {a.budget_s:g} s")
        print(f"   plain search at the preset, same budget: {base * scale:.5g} {unit} ({plain.wall_s:.1f} s); "
              f"co-design {100 * (1 - ours / base):.1f} % lower")
        verdicts.append((wall <= 1.05 * a.budget_s, f"{model_name}@{system_name} {knob}: wall {wall:.1f} s within "
                                                    f"the {a.budget_s:g}-s budget (+5 %)"))
        verdicts.append((ours <= base * (1 + 1e-9), f"{model_name}@{system_name} {knob}: objective no worse than "
                                                     f"the plain search's ({100 * (1 - ours / base):.1f} % lower)"))
    print("\n== targets ==")
    for ok, text in verdicts:
        print(f"  {'PASS' if ok else 'MISS'}  {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
