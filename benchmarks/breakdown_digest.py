"""A digest of the Breakdowns of fixed plans on a few full presets: run it on two commits to check
that a change leaves every number bit for bit (e.g. one that should touch only partial systems).

    .venv/bin/python benchmarks/breakdown_digest.py            # this checkout
    git archive REV | tar -x -C /tmp/rev && PYTHONPATH=/tmp/rev .venv/bin/python benchmarks/breakdown_digest.py

The plans: 8 seeded random one-hot plans (every sharding type, dense mode, algorithm and setting:
plan.random_plans) and a table-wise round-robin plan, evaluated traced (jit, one plan at a time) and
in numpy (the batch scorer); the digest hashes every leaf of every Breakdown.
"""

import hashlib
import sys

import jax
import numpy as np

import perfmodel as pm
from perfmodel.cost.arrays import as_numpy
from perfmodel.evaluate import step_model
from perfmodel.plan import Plan, TablePlan, plan_arrays, random_plans, stack

CASES = [("mtia300-64", "dlrm-dcnv2-mlperf"), ("h100-16", "dlrm-dcnv2-mlperf"), ("h100pcie-16", "dlrm-small"),
         ("gb200nvl72-144", "dlrm-small")]
N = 8


def digest(system, model) -> tuple[float, str]:
    h = hashlib.sha256()
    D = system.num_chips
    rr = Plan(tables={n: TablePlan("table_wise", [i % D]) for i, n in enumerate(model.tables.names)})
    bd = pm.evaluate(system, model, rr)
    for leaf in jax.tree_util.tree_leaves(bd):
        h.update(np.asarray(leaf).tobytes())
    plans = random_plans(jax.random.PRNGKey(0), system, model, N)
    for i in range(N):
        for leaf in jax.tree_util.tree_leaves(pm.evaluate(system, model, jax.tree_util.tree_map(lambda x: x[i], plans))):
            h.update(np.asarray(leaf).tobytes())
    batch = stack([plan_arrays(rr, system, model)] * 2)
    for pa in (as_numpy(plans), batch):
        nb, _ = step_model(as_numpy(system), as_numpy(model), pa, 0.0)
        for leaf in jax.tree_util.tree_leaves(nb):
            h.update(np.asarray(leaf).tobytes())
    return float(bd.step_s), h.hexdigest()[:16]


if __name__ == "__main__":
    print(f"perfmodel from {pm.__file__}", file=sys.stderr)
    for s, m in CASES:
        step, d = digest(pm.load_system(s), pm.load_model(m))
        print(f"{s:16s} {m:20s} round-robin step {step * 1e3:.6f} ms  digest {d}")
