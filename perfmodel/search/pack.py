"""Multi-resource packing: re-place a plan's table-wise and column-wise shards so that no device is
the heaviest in any resource the step waits on.

A step is a max over devices of several things at once: compute busy time, and the bytes each
device sends and receives in the index and output all-to-alls. A packer that balances one
scalar "load" (TorchRec's perf estimate; our greedy's lookup seconds + bytes / bandwidth) leaves
some device far above the mean in one of them: on prod-856 over 256 H100s the greedy plan's
busiest output sender moves 1.78x the mean bytes and its busiest index receiver 4.7x. This packer
places shards heaviest first (vector bin packing) on the device that keeps the largest normalized
resource smallest:

    choose d minimizing  max_r (load_r[d] + w_r(shard)) / mean_r,   subject to memory

with r over: lookup seconds (forward + backward), output bytes sent, index bytes received, and
embedding bytes (memory, also as a resource so that memory stays spread). Sharding types, column
shard counts, cache ratios and every other choice of the plan are kept; the local search then
refines the result on the full model.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from ..cache import jit
from ..cost.embedding import table_seconds
from ..hardware import System, capacity_bytes
from ..plan import Plan
from ..workload import RankingModel

_table_seconds = jit(table_seconds, export=True)   # one program, not some fifteen op-by-op compiles
HEADROOM = 0.9         # fraction of the HBM left for embeddings that a packer (this one, greedy's) may fill


def rebalance(system: System, model: RankingModel, plan: Plan, memory_bytes: np.ndarray, guard=None) -> Plan:
    """`plan` with its table_wise / column_wise shards re-packed over resources. memory_bytes [D]:
    the HBM each device uses under `plan` (Breakdown.memory_bytes); what the packed shards do not
    account for (dense state, activations, buffers, the other tables) stays where it is. Returns
    `plan` unchanged if the packing does not fit in memory.
    guard (guard.ShardCosts): pack on its per-shard costs alone, heaviest first onto the device of
    least sum (longest-processing-time, as TorchRec's planner packs on its estimate), the other
    tables' costs counted where they are: its cap is hard, the other resources are the descent's."""
    # the tables' fields as numpy arrays (the same dtypes and values): the arithmetic below on jax
    # arrays would compile one program per operation
    tb = jax.tree_util.tree_map(np.asarray, model.tables)
    D = system.num_chips
    names = tb.names
    B = float(model.global_batch)
    packed = [i for i, n in enumerate(names) if plan.tables[n].sharding_type in ("table_wise", "column_wise")]
    if D == 1 or not packed:
        return plan
    dim = np.asarray(tb.dim, np.float64)
    k = np.ones(len(names))
    cache = np.ones(len(names))
    for i in packed:
        tp = plan.tables[names[i]]
        k[i], cache[i] = len(tp.ranks), tp.cache_ratio
    size = np.asarray(tb.rows * tb.bytes_per_row(), np.float64) / k * cache
    if guard is None:
        f, b = (np.asarray(x, np.float64) for x in _table_seconds(system.chip, model, tb.dim / k.astype(np.float32),
                                                                   cache.astype(np.float32)))
        out_b = B * np.asarray(tb.output_per_sample(), np.float64) * dim / k * 4.0
        in_b = B * np.asarray(tb.pooling, np.float64) * float(tb.index_bytes)     # every column shard gets all
        w = np.stack([f + b, out_b, in_b, size], axis=1)                          # [T, 4] per shard
        base = np.zeros((D, 4))                    # what stays where it is
    else:
        cw = np.asarray(guard.cw, np.float64)            # [T, K+1]: one shard's cost when split in k
        split = cw[np.arange(len(names)), np.minimum(k.astype(int), cw.shape[1] - 1)]
        cost = np.where(k > 1, split, np.asarray(guard.tw, np.float64))
        w = np.stack([cost, size], axis=1)
        base = np.zeros((D, 2))
        base[:, 0] = guard.device_loads(plan, system, model)
        for i in packed:
            base[plan.tables[names[i]].ranks, 0] -= cost[i]

    scored = slice(0, 1) if guard is not None else slice(None)      # the resources a device is chosen by
    shards = [i for i in packed for _ in range(int(k[i]))]
    mean = np.maximum((w[shards].sum(0) + base.sum(0)) / D, 1e-30)
    held = np.zeros(D)
    for i in packed:
        held[plan.tables[names[i]].ranks] += size[i]
    budget = HEADROOM * float(capacity_bytes(jax.tree_util.tree_map(np.asarray, system))) - (np.asarray(memory_bytes, np.float64) - held)
    order = sorted(range(len(shards)), key=lambda j: (-float(np.max((w[shards[j]] / mean)[scored])), shards[j]))
    load = base.copy()
    ranks: dict[int, list[int]] = {}
    for j in order:
        i = shards[j]
        taken = ranks.setdefault(i, [])
        score = np.max(((load + w[i]) / mean)[:, scored], axis=1)
        score[taken] = np.inf
        score[load[:, -1] + w[i, -1] > budget] = np.inf       # the last column: the shard's bytes
        d = int(np.argmin(score))
        if not np.isfinite(score[d]):
            return plan
        taken.append(d)
        load[d] += w[i]
    tables = dict(plan.tables)
    for i, r in ranks.items():
        tables[names[i]] = dataclasses.replace(plan.tables[names[i]], ranks=sorted(r))
    return dataclasses.replace(plan, tables=tables)
