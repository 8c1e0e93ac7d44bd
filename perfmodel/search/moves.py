"""Single moves of a discrete plan: candidates, the batches that score them, and the Plans they stand for.

A table move sets one table's sharding type, devices, domain and cache ratio; a swap exchanges two
table-wise tables' devices; a setting change is a Plan with another dense parallelism, algorithm,
precision, bucket or chunk count, pipelining or offload. Candidates are columns of index arrays
(one row a move); a compiled program applies a batch of them to one plan's arrays, so that a round
scores hundreds of moves in one vmapped call.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from ..cache import jit
from ..plan import (ALLOWED_ALGORITHMS, COLLECTIVES, CW, DENSE_MODES, DP, PRECISIONS, RW, SHARDING_TYPES, TW,
                    TWRW, Plan, PlanArrays, TablePlan, stack)
from .problem import CW_MOVE_SHARDS, Problem
from .score import host, in_batches, pad

HOT, COLD = 3, 4      # per resource: heaviest devices to relieve, lightest to load (large instances)
MIXED_SETTINGS = 32   # setting changes a mixed batch carries (padded to this: one compile)
COLUMNS = ("t", "st", "devs", "k", "dom", "cache")
WHOLE = 0             # a row-wise move's k over every device (k >= 1: a subset's blocks of k devices)


def table_batch(pa: PlanArrays, t, st, devs, k, dom, cache):
    """Batch of plans, each with table t[i] set to type st[i] on the devices devs[i] (a row of
    CW_MOVE_SHARDS, padded with -1: table-wise one device, column-wise k[i] of them, an equal share
    each; row-wise with k[i] >= 1 over a subset, the blocks of k[i] devices from each of devs[i],
    an equal share each, and with k[i] = WHOLE (0) over every device), domain dom[i], cache ratio
    cache[i]. Where pa carries row_shards (the search's arrays) the table's is set too: a subset's
    partial sums per sample (plan.row_partials, D where every device holds it), else D."""
    def one(t, st, devs, k, dom, cache):
        D, H = pa.placement.shape[1], pa.domain_placement.shape[1]
        cw = (st == CW).astype(jnp.float32)
        sub = (st == RW) & (k != WHOLE)
        dev = jnp.arange(D)
        blocks = ((dev[None, :] >= devs[:, None]) & (dev[None, :] < devs[:, None] + k)
                  & (devs[:, None] >= 0)).any(0).astype(jnp.float32)
        on = jnp.where(sub, blocks, jax.nn.one_hot(devs, D).sum(0))      # one_hot(-1) is all zeros
        out = dataclasses.replace(
            pa,
            shard_type=pa.shard_type.at[t].set(jax.nn.one_hot(st, 5)),
            placement=pa.placement.at[t].set(on / jnp.maximum(on.sum(), 1.0)),
            domain_placement=pa.domain_placement.at[t].set(jax.nn.one_hot(dom, H)),
            cw_shards=pa.cw_shards.at[t].set(1.0 + cw * (k - 1.0)),
            cache_ratio=pa.cache_ratio.at[t].set(cache),
        )
        if pa.row_shards is None:
            return out
        # row_partials: one per domain where the devices are two or more whole domains (not all),
        # else one per device (the search makes subsets on systems of equal domains only)
        n = on.sum()
        partials = n
        if D % H == 0:
            per_domain = on.reshape(H, D // H).sum(1)
            whole = jnp.all((per_domain == 0) | (per_domain == D // H))
            domains = (per_domain > 0).sum().astype(jnp.float32)
            partials = jnp.where(whole & (domains >= 2), domains, n)
        return dataclasses.replace(out, row_shards=pa.row_shards.at[t].set(jnp.where(sub & (n < D), partials, D)))
    return jax.vmap(one)(t, st, devs, k, dom, cache)


def swap_batch(pa: PlanArrays, t1, t2):
    """Batch of plans, each with the placements of tables t1[i] and t2[i] exchanged."""
    def one(a, b):
        P = pa.placement
        return dataclasses.replace(pa, placement=P.at[a].set(P[b]).at[b].set(P[a]))
    return jax.vmap(one)(t1, t2)


def mixed_batch(pa: PlanArrays, t, st, devs, k, dom, cache, t1, t2, kind, row, settings: PlanArrays):
    """One batch of three kinds of candidates: row i is the table move i (kind 0), the swap i (kind
    1), or the plan settings[row[i]] (kind 2: a setting change)."""
    moved, swapped = table_batch(pa, t, st, devs, k, dom, cache), swap_batch(pa, t1, t2)
    picked = jax.tree_util.tree_map(lambda x: x[row], settings)
    def pick(a, b, c):
        sel = kind.reshape(kind.shape + (1,) * (a.ndim - 1))
        return jnp.where(sel == 0, a, jnp.where(sel == 1, b, c))
    return jax.tree_util.tree_map(pick, moved, swapped, picked)


_table_batch = jit(table_batch, export=True)
_swap_batch = jit(swap_batch, export=True)
_mixed_batch = jit(mixed_batch, export=True)


def empty_moves() -> dict:
    """No table moves, typed (the columns index arrays in the compiled batches)."""
    return {"t": np.zeros(0, np.int64), "st": np.zeros(0, np.int64), "devs": np.zeros((0, CW_MOVE_SHARDS), np.int64),
            "k": np.zeros(0, np.int64), "dom": np.zeros(0, np.int64), "cache": np.zeros(0, np.float64)}


def take(c: dict, rows) -> dict:
    """The moves c[rows]."""
    return {k: v[rows] for k, v in c.items()}


def hot_cold(p: Problem, loads, memory, cap) -> tuple[np.ndarray, np.ndarray]:
    """Devices to move tables off (the HOT heaviest in every resource that can bind the step:
    compute, each all-to-all's send and receive bytes per level; when over capacity, memory) and
    to move them onto (the COLD lightest in each, and the ones with the most free memory)."""
    D = p.D
    rows = [r for r in np.asarray(loads) if r.max() > 0]
    if bool((memory > cap).any()):
        rows = [memory - cap] + rows
    hot = np.unique(np.concatenate([np.argsort(-r, kind="stable")[: min(D, HOT)] for r in rows]))
    cold = np.concatenate([np.argsort(r, kind="stable")[: min(D, COLD)] for r in rows]
                          + [np.argsort(memory, kind="stable")[: min(D, COLD)]])
    return hot, np.unique(cold)


def table_moves(p: Problem, plan: Plan, loads, memory, cap, exhaustive: bool) -> dict:
    """The table moves a round scores: every table to every device (exhaustive), or the tables on
    the hot devices and the heaviest others to the cold devices; for each, column-wise splits on a
    destination and the devices of least compute, row-wise, data-parallel, table-row-wise on the
    emptiest domains, row-wise over subsets of blocks (row_blocks), and (over capacity) a smaller
    cache ratio."""
    names = p.model.tables.names
    T, D, H, L = p.T, p.D, p.H, p.L
    infeasible = bool((memory > cap).any())
    cur_type = np.asarray([SHARDING_TYPES.index(plan.tables[n].sharding_type) for n in names])
    ranks = [plan.tables[n].ranks for n in names]
    hot, cold = hot_cold(p, loads, memory, cap)
    light = np.argsort(loads[0], kind="stable")[: min(D, CW_MOVE_SHARDS + 1)]      # least compute
    if exhaustive:
        src_tables, dests = np.arange(T), np.arange(D)
    else:
        on_hot = [t for t in range(T) if cur_type[t] in (TW, CW) and set(ranks[t]) & set(hot.tolist())]
        # and the heaviest tables (bytes per sample they move) that are not table- or column-wise
        others = sorted((t for t in range(T) if cur_type[t] not in (TW, CW)), key=lambda t: -p.weight[t])
        src_tables = np.asarray(sorted(set(on_hot) | set(others[:64])), dtype=int)[:256]
        dests = cold
    c = {k: [] for k in COLUMNS}

    def add(t, st, devs=(0,), dom=0, cache=1.0, k=None):
        c["t"].append(t), c["st"].append(st), c["devs"].append(list(devs) + [-1] * (CW_MOVE_SHARDS - len(devs)))
        c["k"].append(k if k is not None else len(devs) if st == CW else WHOLE if st == RW else 1)
        c["dom"].append(dom), c["cache"].append(cache)
    ok = p.allowed
    dom_load = p.domain_loads(memory)
    subsets = row_blocks(p, memory, exhaustive)
    for t in src_tables:
        cache = plan.tables[names[t]].cache_ratio
        if ok[t, TW]:
            for d in dests:
                if not (cur_type[t] == TW and ranks[t][0] == d):
                    add(t, TW, (d,), cache=cache)
        if ok[t, CW]:
            for k in p.cw_moves[t]:
                for d in dests[:4]:
                    devs = [int(d)] + [int(x) for x in light if x != d][: k - 1]
                    if len(devs) == k and not (cur_type[t] == CW and sorted(devs) == sorted(ranks[t])):
                        add(t, CW, devs, cache=cache)
        whole_rw = cur_type[t] == RW and len(ranks[t]) == D
        if ok[t, RW] and not whole_rw:
            add(t, RW, cache=cache)
        if ok[t, RW]:
            for u, firsts in subsets:
                if not (cur_type[t] == RW and subset_ranks(firsts, u) == sorted(ranks[t])):
                    add(t, RW, firsts, cache=cache, k=u)
        if ok[t, DP] and cur_type[t] != DP:
            add(t, DP)
        if ok[t, TWRW] and H > 1:
            for h in np.argsort(dom_load)[: min(H, 4)]:
                add(t, TWRW, dom=int(h), cache=cache)
        if infeasible and cur_type[t] in (TW, CW, RW, TWRW) and len(ranks[t]) <= CW_MOVE_SHARDS and not (
                cur_type[t] == RW and len(ranks[t]) < D):
            for ratio in (0.5, 0.2, 0.05):
                if ratio < cache:
                    add(t, int(cur_type[t]), ranks[t] if cur_type[t] in (TW, CW) else (0,), ranks[t][0] // L, ratio)
    if not c["t"]:
        return empty_moves()
    return p.admissible({k: np.asarray(v, np.float64 if k == "cache" else np.int64) for k, v in c.items()})[0]


def is_subset(c: dict, i: int) -> bool:
    """Whether table move i of c makes a row-wise subset (its k: the blocks' size; WHOLE: every device)."""
    return int(c["st"][i]) == RW and int(c["k"][i]) != WHOLE


def subset_ranks(firsts, u: int) -> list[int]:
    """The ranks of the blocks of u devices from each of `firsts` (-1: none), sorted."""
    return sorted(r for f in firsts if f >= 0 for r in range(int(f), int(f) + int(u)))


def row_blocks(p: Problem, memory, every: bool) -> list[tuple[int, list[int]]]:
    """Row-wise subsets a table move may make (Problem.row_subsets), as (block size u, the blocks'
    first devices): for each (u, m), the m blocks of least memory; every: also each aligned run of
    m blocks (on a small instance, where every move is scored), single devices' runs in the two
    domains of least memory only (a run per m and domain would outnumber every other move on a
    system of many domains)."""
    out, seen = [], set()
    near = set(np.argsort(p.domain_loads(memory), kind="stable")[:2].tolist())
    for u, m in p.row_subsets:
        load = p.block_loads(memory, u)
        sets = [np.sort(np.argsort(load, kind="stable")[:m])]
        if every:
            sets += [np.arange(j, j + m) for j in range(0, len(load) - m + 1, m) if u > 1 or j // p.L in near]
        for blocks in sets:
            key = (u, tuple(int(b) for b in blocks))
            if key not in seen:
                seen.add(key)
                out.append((u, [int(b) * u for b in blocks]))
    return out


def move_ranks(p: Problem, c: dict, i: int) -> list[int]:
    """The ranks table move i of c puts its table on."""
    st, devs = int(c["st"][i]), c["devs"][i]
    if st == TW:
        return [int(devs[0])]
    if st == CW:
        return sorted(int(d) for d in devs if d >= 0)
    if st == TWRW:
        return p.domain_ranks(int(c["dom"][i]))
    if is_subset(c, i):
        return subset_ranks(devs, int(c["k"][i]))
    return list(range(p.D))


def swaps(p: Problem, plan: Plan, loads, memory, cap, exhaustive: bool) -> tuple[np.ndarray, np.ndarray]:
    """Pairs of table-wise tables on different devices to swap: every pair (exhaustive), or a table
    on a hot device with one on a cold device; at most 4,096 (1,024), a seeded sample past that."""
    names = p.model.tables.names
    tw = [t for t, n in enumerate(names) if plan.tables[n].sharding_type == "table_wise"]
    none = np.zeros(0, int), np.zeros(0, int)
    if len(tw) < 2:
        return none
    dev = {t: plan.tables[names[t]].ranks[0] for t in tw}
    if exhaustive:
        pairs = [(a, b) for a in tw for b in tw if dev[a] != dev[b] and a < b]
    else:
        hot, cold = (set(x.tolist()) for x in hot_cold(p, loads, memory, cap))
        pairs = [(a, b) for a in tw if dev[a] in hot for b in tw if dev[b] in cold and dev[a] != dev[b]]
    limit = 4096 if exhaustive else 1024
    if len(pairs) > limit:
        rng = np.random.default_rng(len(pairs))
        pairs = [pairs[i] for i in np.sort(rng.choice(len(pairs), limit, replace=False))]
    if not pairs:
        return none
    a, b = zip(*pairs)
    return np.asarray(a), np.asarray(b)


def setting_changes(p: Problem, plan: Plan) -> list[Plan]:
    """Every plan one setting away from `plan` (none when the settings are frozen; none that
    changes a held setting)."""
    if p.freeze_settings:
        return []
    masks, out, held = p.masks, [], p.hold
    if "dense" not in held:
        for m, mode in enumerate(DENSE_MODES):
            if mode != plan.dense and masks.dense[m] > -1:
                out.append(dataclasses.replace(plan, dense=mode))
    for kind in (k for k in COLLECTIVES if k not in held):
        for a in ALLOWED_ALGORITHMS[kind]:
            if a != plan.algorithms.get(kind):
                out.append(dataclasses.replace(plan, algorithms=dict(plan.algorithms, **{kind: a})))
    for name, mask in (("a2a_precision", masks.a2a), ("grad_precision", masks.grad)):
        for i, prec in enumerate(PRECISIONS):
            if name not in held and mask[i] > -1 and prec != getattr(plan, name):
                out.append(dataclasses.replace(plan, **{name: prec}))
    if "grad_buckets" not in held:
        out += [dataclasses.replace(plan, grad_buckets=b) for b in (1, 2, 4, 8, 16, 32) if b != plan.grad_buckets]
    if "overlap_chunks" not in held:
        out += [dataclasses.replace(plan, overlap_chunks=c) for c in (1, 2, 4, 8) if c != plan.overlap_chunks]
    if "pipeline" not in held:
        out.append(dataclasses.replace(plan, pipeline=not plan.pipeline))
    if masks.has_engines and "offload" not in held:
        out.append(dataclasses.replace(plan, offload=not plan.offload))
    return out


# ---------------------------------------------------------------------- scoring batches of moves
def score_moves(p: Problem, pa, c: dict) -> np.ndarray:
    """Tie-broken scores of the table moves c applied to `pa`, max_batch at a time."""
    size = p.max_batch
    def batch(s):
        cols = [host(pad(c[k][s:s + size], size)) for k in COLUMNS[:5]]
        return p.scores(_table_batch(pa, *cols, host(pad(c["cache"][s:s + size], size), np.float32)))
    return in_batches(len(c["t"]), size, batch)


def score_swaps(p: Problem, pa, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Tie-broken scores of the swaps (a, b) applied to `pa`, max_batch at a time."""
    size = p.max_batch
    return in_batches(len(a), size, lambda s: p.scores(_swap_batch(pa, host(pad(a[s:s + size], size)),
                                                                    host(pad(b[s:s + size], size)))))


def score_mixed(p: Problem, plan: Plan, pa, c: dict, a: np.ndarray, b: np.ndarray, settings: list[Plan]):
    """Tie-broken scores of the table moves c, the swaps (a, b) and the plans `settings` (at most
    MIXED_SETTINGS), in batches built on `plan` by one program: one batch when they fit, else the
    settings and the first moves, then the rest max_batch at a time."""
    n, m = len(c["t"]), len(a)
    out, i, j, first = [[], [], []], 0, 0, True
    while first or i < n or j < m:
        extra = settings if first else []
        cn = min(n - i, p.max_batch - len(extra))
        cm = min(m - j, p.max_batch - len(extra) - cn)
        got = p.scores(mixed(p, plan, pa, take(c, slice(i, i + cn)), a[j:j + cm], b[j:j + cm], extra))
        for o, part in zip(out, (got[:cn], got[cn:cn + cm], got[cn + cm:cn + cm + len(extra)])):
            o.append(part)
        i, j, first = i + cn, j + cm, False
    return tuple(np.concatenate(o) for o in out)


def mixed(p: Problem, plan: Plan, pa, c: dict, a: np.ndarray, b: np.ndarray, settings: list[Plan]):
    """The padded batch score_mixed scores (table moves, swaps, then setting changes)."""
    n, m, q, size = len(c["t"]), len(a), len(settings), p.max_batch
    kind = np.concatenate([np.zeros(n, np.int32), np.ones(m, np.int32), np.full(size - n - m, 2, np.int32)])
    cols = [host(pad(c[k], size) if n else np.zeros((size,) + c[k].shape[1:], c[k].dtype)) for k in COLUMNS[:5]]
    cache = host(pad(c["cache"], size) if n else np.ones(size), np.float32)
    padded = lambda x: host(np.pad(x, (n, size - n - len(x)), mode="edge") if len(x) else np.zeros(size, np.int32))
    row = np.clip(np.arange(size) - n - m, 0, max(q - 1, 0)).astype(np.int32)
    batch = stack([p.arrays(s, pa) for s in settings or [plan]])
    batch = jax.tree_util.tree_map(lambda x: pad(np.asarray(x), MIXED_SETTINGS), batch)
    return _mixed_batch(pa, *cols, cache, padded(a), padded(b), kind, row, batch)


# ---------------------------------------------------------------------- the Plans moves stand for
def moved(p: Problem, plan: Plan, c: dict, i: int) -> Plan:
    """The Plan of table move i of c."""
    t, st = int(c["t"][i]), int(c["st"][i])
    tables = dict(plan.tables)
    tables[p.model.tables.names[t]] = TablePlan(SHARDING_TYPES[st], move_ranks(p, c, i), float(c["cache"][i]))
    return dataclasses.replace(plan, tables=tables)


def swapped(p: Problem, plan: Plan, a: int, b: int) -> Plan:
    """The Plan with tables a and b's ranks exchanged."""
    names = p.model.tables.names
    tables = dict(plan.tables)
    ta, tb = tables[names[a]], tables[names[b]]
    tables[names[a]] = dataclasses.replace(ta, ranks=list(tb.ranks))
    tables[names[b]] = dataclasses.replace(tb, ranks=list(ta.ranks))
    return dataclasses.replace(plan, tables=tables)


def kick(p: Problem, plan: Plan, rng: np.random.Generator) -> Plan:
    """A perturbed copy: max(2, T / 8) random tables each given a random allowed sharding type and
    placement (table-wise on a random device, column-wise in k shards on k random devices, k one of
    cw_moves, table-row-wise in a random domain, row-wise over every device or, as often where the
    system has them, over m random blocks of one of row_subsets, data-parallel)."""
    names, D = p.model.tables.names, p.D
    lim = p.limits
    tables = dict(plan.tables)
    for t in rng.choice(p.T, size=min(max(2, p.T // 8), p.T), replace=False):
        allowed = [j for j in range(5) if p.allowed[t, j] and (j != CW or p.cw_moves[t]) and (j != TWRW or p.H > 1)]
        if not allowed:
            continue
        st = int(rng.choice(allowed))
        cache = tables[names[t]].cache_ratio if st != DP else 1.0
        devs = D if lim is None else np.flatnonzero(lim.devices[t] > 0)     # the devices it may take
        if lim is not None and st != DP:
            cache = lim.clip_cache(t, cache)
        if st == TW:
            ranks = [int(rng.integers(D))] if lim is None else [int(rng.choice(devs))]
        elif st == CW:
            k = int(rng.choice(p.cw_moves[t]))
            ranks = sorted(int(d) for d in rng.choice(devs, size=k, replace=False))
        elif st == TWRW:
            h = int(rng.integers(p.H)) if lim is None else int(rng.choice(np.flatnonzero(lim.domains[t] > 0)))
            ranks = p.domain_ranks(h)
        elif st == RW and p.row_subsets and rng.random() < 0.5:
            u, m = p.row_subsets[int(rng.integers(len(p.row_subsets)))]
            blocks = [b for b in range(D // u) if lim is None or (lim.devices[t, b * u:(b + 1) * u] > 0).all()]
            ranks = subset_ranks([b * u for b in rng.choice(blocks, size=m, replace=False)], u) \
                if len(blocks) >= m else list(range(D))
        else:
            ranks = list(range(D))
        tables[names[t]] = TablePlan(SHARDING_TYPES[st], ranks, cache)
    return dataclasses.replace(plan, tables=tables)
