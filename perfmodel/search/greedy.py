"""A greedy, memory-aware planner in the manner of TorchRec's: options per table, then
longest-processing-time packing under per-device memory caps. It gives `default_plan`.

Per table (cost of a whole table at the global batch, from the same cost functions `evaluate` uses):
  tiny tables (gradient all-reduce cheaper than shipping their outputs) -> data_parallel
  tables too big for one device's budget -> table_row_wise (inside one scale-up domain) when a
      domain holds them and they pool (sequence features' rows would all leave one domain),
      else row_wise over every device
  tables heavier than a fair share of the load -> column_wise into k shards (k | dim, dim/k >= 32):
      the fewest whose shard load is within the fair share, else the k of least shard load, if
      any splitting lowers it (each shard looks up every row at width dim/k and receives every index)
  the rest, and the column-wise shards, are packed heaviest first onto the least-loaded device
      with memory room; a shard that fits nowhere is kept in host DRAM with an HBM cache.
Load of a table = lookup forward + backward seconds + its output and index bytes / the scale-out bandwidth.
With the tables placed, the dense parallelism, collective algorithms, gradient buckets and overlap
chunks are chosen by evaluating all their combinations at once (the precisions stay fp32, as
TorchRec's default: lower precision changes the numerics, which is the user's call).
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools

import numpy as np

from ..cache import jit
from ..config import ConfigError, fmt_bytes
from ..cost.arrays import as_numpy, xp_of
from ..cost.embedding import table_seconds
from ..cost.memory import activation_bytes, dense_state_bytes
from ..hardware import System, capacity_bytes, link_bandwidths, whole_system
from ..plan import (ALLOWED_ALGORITHMS, DENSE_MODES, DP, MIN_CW_DIM, RW, SHARDING_TYPES, TW, TWRW, Plan, TablePlan,
                    cw_options, domain_ranks, has_hybrid, plan_arrays)
from ..workload import RankingModel
from .pack import HEADROOM
from .score import INFEASIBLE, eager, score_settings



def _inputs_of(system: System, model: RankingModel, shards):
    """What the greedy planner needs from the cost model: every table's (forward, backward) seconds at
    row width dim / c for c = 1..C (shards: [C, T] of c), the link bandwidths, the capacity, the
    activation bytes, and the dense state per shard count. In numpy (numpy system and model:
    cost.arrays) or traced (_inputs)."""
    tb = model.tables
    xp = xp_of(tb.dim)
    f, b = table_seconds(system.chip, model, tb.dim / shards, np.ones(tb.count, np.float32))
    up, out = link_bandwidths(system)
    D = system.num_chips
    dw = whole_system(system)        # a 2D plan's dense state is sharded over every group's chips
    pooled = xp.sum(tb.output_per_sample() * tb.dim)
    return dict(f=f, b=b, up=up, out=out, cap=capacity_bytes(system), out_rows=tb.output_per_sample(),
                row_bytes=tb.bytes_per_row(), act=activation_bytes(model, model.global_batch / D, pooled),
                dense=xp.stack([dense_state_bytes(model, shard) for shard in (1.0, float(dw.domain_size),
                                                                              float(dw.num_chips))]))


# one compiled program where greedy's inputs are not computed in numpy (score.eager): called op by
# op, the same functions would compile some thirty one-operation programs
_inputs = jit(_inputs_of, export=True)


def greedy_plan(system: System, model: RankingModel, masks=None, settings: bool = True, hold=None) -> Plan:
    """TorchRec-style greedy planning (module docstring). On a small instance (score.eager) its inputs
    and its settings are computed in numpy, with no program to compile. masks (relax.Masks): the
    choices a search allows (sharding types, column-wise shard counts, per-table constraints), which
    the plan keeps; None: every choice the planner makes by itself. settings=False: the placement
    alone, with the default settings and every input in numpy (a quick screen: nothing compiles).
    hold (plan.Hold): settings held; its dense mode sizes the tables' memory, and the settings chosen
    keep them."""
    fast = eager(system, model) or not settings
    tb = model.tables
    D, L = system.num_chips, system.domain_size
    T = tb.count
    B = float(model.global_batch)
    rows = np.asarray(tb.rows, np.float64)
    dim = np.asarray(tb.dim, np.float64)
    ok, lim = _choices(masks, dim, D, system.num_domains)
    widest = max(2, min(D, int(dim.max()) // int(lim.min_dim.min())))
    shards = np.repeat(np.arange(1, widest + 1, dtype=np.float32)[:, None], T, 1)
    numpy_problem = (as_numpy(system), as_numpy(model)) if fast else None
    q = {k: np.asarray(v, np.float64) for k, v in
         (_inputs_of(*numpy_problem, shards) if fast else _inputs(system, model, shards)).items()}
    out_rows = q["out_rows"]
    size = rows * q["row_bytes"]
    f, bw = q["f"][0], q["b"][0]
    up, out = float(q["up"]), float(q["out"])
    link = out if len(system.levels) > 1 else up
    out_bytes = B * out_rows * dim * 4.0
    in_bytes = B * np.asarray(tb.pooling, np.float64) * float(tb.index_bytes)
    load = f + bw + (out_bytes + in_bytes) / max(link, 1.0)
    sequence = np.asarray(tb.sequence) > 0

    dense_mode = "replicated"
    cap = float(q["cap"])
    pooled = float(np.sum(out_rows * dim))
    act = float(q["act"])
    buffers = 4.0 * (B / D) * pooled * 4.0
    for mode, dense in zip(("replicated", "hybrid", "fully_sharded"), q["dense"]):
        if mode == "hybrid" and system.uneven_domains:  # hybrid needs equal domains (plan.validate_plan)
            continue
        if hold is not None and hold.as_dict().get("dense", mode) != mode:
            continue
        dense = float(dense)
        dense_mode = mode
        if dense + act + buffers < 0.5 * cap:
            break
    budget = HEADROOM * (cap - dense - act - buffers)
    if budget <= 0:
        raise _no_plan(system, model, f"the dense part and activations alone need {fmt_bytes(dense + act + buffers)} "
                       f"of the {fmt_bytes(cap)} a device may use (the chip's HBM x hbm_usable_fraction)")

    tables: dict[str, TablePlan] = {}
    used = np.zeros(D)
    work = np.zeros(D)
    names = tb.names

    def whole(i, st, ranks):          # a table spread over `ranks` (data-parallel: a copy on each)
        share = size[i] if st == "data_parallel" else size[i] / len(ranks)
        ratio = 1.0 if st == "data_parallel" else lim.clip_cache(i, 1.0)
        tables[names[i]] = TablePlan(st, ranks, ratio)
        used[ranks] += share * ratio
        work[ranks] += load[i] / len(ranks)

    sizes = np.asarray(system.domain_sizes)

    def domain(i):                    # the least-used scale-up domain table i may take (per device)
        doms = np.flatnonzero(lim.domains[i] > 0)
        fits = doms[size[i] / sizes[doms] <= 0.5 * budget]     # a partial domain's devices hold more of it
        doms = fits if fits.size else doms
        per_device = (np.add.reduceat(used, np.arange(0, D, L)) / sizes if system.uneven_domains
                      else used.reshape(-1, L).sum(1))
        h = int(doms[np.argmin(per_device[doms])])
        return domain_ranks(h, D, L)

    dp = (2.0 * rows * dim * 4.0 < out_bytes / D) & (size < 0.01 * budget) & (D > 1) & ok[:, DP]
    for i in np.flatnonzero(dp):
        whole(i, "data_parallel", list(range(D)))
    big = (size > 0.5 * budget) & ~dp & (ok[:, TWRW] | ok[:, RW])
    spread = []           # big tables row-wise over every device, part in host DRAM when HBM runs short
    for i in np.flatnonzero(big):
        if D > L and size[i] / L <= 0.5 * budget and not sequence[i] and ok[i, TWRW] or not ok[i, RW]:
            whole(i, "table_row_wise", domain(i))
        else:
            spread.append(i)
    # When they and the tables packed below do not fit in HBM on average, they share it at one cache
    # ratio, leaving those tables their even share and room for the largest of them whole (taking
    # what is left in turn, the last ones would leave no device with room for a small table). Where
    # even that leaves them under 1 %, each takes what is left in turn, and the packer caches the rest.
    small_sizes = size[~dp & ~big]
    shares, free, even = size[spread] / D, budget - used.max(), small_sizes.sum() / D
    common = 1.0
    if shares.sum() + even > free:
        common = (free - even - (small_sizes.max() if small_sizes.size else 0.0)) / shares.sum()
    host_used = 0.0
    for i, share in zip(spread, shares):
        room = budget - used.max()
        ratio = min(1.0, common) if common >= 0.01 else (1.0 if share <= room else room / share)
        ratio = lim.clip_cache(i, ratio)
        if ratio < 0.01 or (1.0 - ratio) * share > float(system.chip.host_dram_bytes) - host_used:
            raise _no_plan(system, model, f"table {names[i]} needs {fmt_bytes(share)} per device even row-wise "
                           f"over {D} devices; {fmt_bytes(max(room, 0))} of HBM and "
                           f"{fmt_bytes(float(system.chip.host_dram_bytes) - host_used)} of host DRAM are left")
        tables[names[i]] = TablePlan("row_wise", list(range(D)), lim.clip_cache(i, round(float(ratio), 4)))
        used += share * ratio
        host_used += share * (1.0 - ratio)
        work += load[i] / D

    # a table that may be neither table- nor column-wise takes the first other type it may
    for i in [i for i in range(T) if names[i] not in tables and not ok[i, TW] and not lim.cw[i]]:
        st = next(SHARDING_TYPES[j] for j in (RW, TWRW, DP) if ok[i, j])
        whole(i, st, domain(i) if st == "table_row_wise" else list(range(D)))
    rest = [i for i in range(T) if names[i] not in tables]
    fair = (load[rest].sum() + work.sum()) / D if rest else 0.0
    shards = []      # (load, bytes, table index, k)
    shard_load = {1: load}
    for c in range(2, widest + 1):             # one shard of c: all the lookups at width dim / c
        shard_load[c] = q["f"][c - 1] + q["b"][c - 1] + (out_bytes / c + in_bytes) / max(link, 1.0)
    for i in rest:
        k = 1
        options = lim.cw[i]
        if (load[i] > fair and D > 1) or not ok[i, TW]:
            fits = [c for c in options if shard_load[c][i] <= fair]
            best = min(options, key=lambda c: shard_load[c][i], default=1)
            k = min(fits) if fits else (best if options and (shard_load[best][i] < load[i] or not ok[i, TW]) else 1)
        shards += [(float(shard_load[k][i]), size[i] / k, i, k)] * k
    shards.sort(key=lambda s: (-s[0], s[2]))
    placed: dict[int, list[int]] = {}
    cache: dict[int, float] = {}
    # the devices by (work, index), least loaded first, as a heap: only the device a shard goes to
    # changes its work, so a pop, the checks and a push back keep it exact, at log D a shard
    heap = [(float(w), d) for d, w in enumerate(work)]
    heapq.heapify(heap)
    for ld, nbytes, i, k in shards:
        taken = placed.setdefault(i, [])
        popped, choice, first = [], None, None
        while heap:
            w, d = heapq.heappop(heap)
            popped.append((w, d))
            if lim.devices[i, d] > 0 and d not in taken:
                first = d if first is None else first
                if used[d] + nbytes <= budget:
                    choice = d
                    break
        if choice is None:
            choice = first
            room = budget - used[choice]
            if room <= 0.05 * nbytes:
                raise _no_plan(system, model, f"table {names[i]} ({fmt_bytes(nbytes)} per shard) finds no device "
                               "with room" + (" among the ranks its constraints allow"
                                              if (lim.devices[i] > 0).sum() < D else ""))
            cache[i] = min(cache.get(i, 1.0), room / nbytes)
        for item in popped:            # all but the chosen one, whose work changes below
            if item[1] != choice:
                heapq.heappush(heap, item)
        taken.append(int(choice))
        used[choice] += nbytes * cache.get(i, 1.0)
        work[choice] += ld
        heapq.heappush(heap, (float(work[choice]), int(choice)))
    for i, ranks in placed.items():
        st = "column_wise" if len(ranks) > 1 else "table_wise"
        tables[names[i]] = TablePlan(st, sorted(ranks), lim.clip_cache(i, round(float(cache.get(i, 1.0)), 4)))

    base = Plan(tables={n: tables[n] for n in names}, dense=dense_mode,
                offload=bool(float(system.offload.engines) > 0), pipeline=True, grad_buckets=4, overlap_chunks=1)
    if hold is not None:
        base = hold.apply(base)
    if not settings:
        return base
    return best_settings(*(numpy_problem or (system, model)), base, fast, hold)


def best_settings(system: System, model: RankingModel, base: Plan, eager: bool = False, hold=None) -> Plan:
    """Keep the table placement; choose dense parallelism, collective algorithms, gradient buckets
    and overlap chunks by evaluating every combination in one vmapped call (fastest feasible wins,
    first in enumeration order on ties, so the choice is deterministic). eager: scored in numpy
    (score.score_pairs). hold (plan.Hold): only combinations that keep the held settings."""
    candidates = []
    # hybrid on one level is fully sharded; on unequal domains it does not exist (plan.validate_plan)
    modes = [m for m in DENSE_MODES if m != "hybrid" or has_hybrid(system)]
    for dense, ar, a2a, buckets, chunks in itertools.product(
            modes, ALLOWED_ALGORITHMS["all_reduce"], ALLOWED_ALGORITHMS["all_to_all"], (1, 4, 16), (1, 2, 4)):
        algos = dict(base.algorithms, all_reduce=ar, all_to_all=a2a)
        candidates.append(dataclasses.replace(base, dense=dense, algorithms=algos, grad_buckets=buckets,
                                              overlap_chunks=chunks))
    if hold:                 # each combination with the held settings, once (the first of equals kept)
        key = lambda c: (c.dense, tuple(sorted(c.algorithms.items())), c.grad_buckets, c.overlap_chunks)
        held = {}
        for c in (hold.apply(c) for c in candidates):
            held.setdefault(key(c), c)
        candidates = list(held.values())
    # the search's form of the arrays (row_shards carried: plan_arrays(rows=True)) whether or not a
    # table is row-wise over a subset, so that greedy's plan, the planners' and the search's moves
    # share one compiled scorer rather than one per arguments' structure
    scores = score_settings(system, model, candidates, plan_arrays(base, system, model, rows=True), eager=eager)
    best = int(np.argmin(scores))
    return candidates[best] if scores[best] < INFEASIBLE else base


@dataclasses.dataclass
class _Allowed:
    """What greedy may choose per table: column-wise shard counts, devices, domains, cache ratios."""

    cw: list
    devices: np.ndarray
    domains: np.ndarray
    min_dim: np.ndarray
    limits: object

    def clip_cache(self, i: int, ratio: float) -> float:
        return ratio if self.limits is None else self.limits.clip_cache(i, ratio)


def _choices(masks, dim, D: int, H: int) -> tuple[np.ndarray, _Allowed]:
    """[T, 5] the sharding types greedy may use and the rest of what it may choose (_Allowed)."""
    T = len(dim)
    if masks is None:
        cw = [cw_options(int(d), D) for d in dim]
        return (np.ones((T, 5), bool),
                _Allowed(cw, np.ones((T, D)), np.ones((T, H)), np.full(T, MIN_CW_DIM), None))
    lim = masks.limits
    cw = [masks.cw(t) for t in range(T)]        # [] where column_wise is not allowed
    return (np.asarray(masks.types) > -1, _Allowed(cw, np.asarray(lim.devices),
                                                   np.asarray(lim.domains), np.asarray(lim.min_dim), lim))


def _no_plan(system: System, model: RankingModel, why: str) -> ConfigError:
    return ConfigError(f"model {model.name} on system {system.name}", "model", f"fits on no plan: {why}")


def default_plan(system: System | str, model: RankingModel | str) -> Plan:
    """A sensible, memory-feasible plan: the greedy planner's. `system` and `model` may be objects,
    or preset names or file paths (as evaluate takes them)."""
    from ..evaluate import as_model, as_system
    return greedy_plan(as_system(system), as_model(model))
