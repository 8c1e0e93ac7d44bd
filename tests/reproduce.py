"""Searches bounded by iterations, for tests/test_driver.py's reproducibility test, run as a script in
a fresh process with its compile cache in the folder given: `reproduce.py CACHE` searches the
problems; `reproduce.py CACHE --after-another` searches another problem first, so the searches run
after the process has traced, compiled and searched something else."""

import json
import sys

import perfmodel as pm
from perfmodel.search.instances import small_instance, synthetic_model


def problems():
    """(name, (system, model), iterations): a small instance through every phase, and a large one
    (tables x devices over score.EXHAUSTIVE) whose rounds rank their moves to first order."""
    return [("small", small_instance(0), 400),
            ("large", (pm.load_system("h100-16"), synthetic_model(seed=1, num_tables=300, total_params=2e9)), 30)]


def run() -> dict:
    out = {}
    for name, (system, model), n in problems():
        r = pm.search(system, model, seed=3, iterations=n, budget_s=None)
        out[name] = {"step_s": r.step_s, "plan": r.plan.to_dict(), "iterations": r.iterations}
    return out


if __name__ == "__main__":
    pm.enable_compile_cache(sys.argv[1])
    if "--after-another" in sys.argv[2:]:
        pm.search(*problems()[0][1], seed=9, iterations=40, budget_s=None)
    print(json.dumps(run()))
