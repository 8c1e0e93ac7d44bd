"""First-order estimates of every single move's effect, from d score / d plan arrays.

On an instance too large to score every move (tables x devices > score.EXHAUSTIVE), a round scores
the moves whose first-order estimate is lowest. The estimate of a move is the inner product of the
gradient of the tie-broken score, taken at the current discrete plan through the smooth evaluation
(temperature TAU: the max over devices becomes a log-sum-exp, so every device near the max gets a
share of the gradient), with the change the move makes to the plan's arrays:

    est(move) = g_type . d type + [table- or column-wise] g_place . d place + [table-row-wise] g_dom . d dom
                + g_k d k + g_cache d cache

(a type change to row-wise over every device or data-parallel leaves the placement row out: it no
longer matters; row-wise over a subset of blocks takes the placement's mean over their devices). A
table not table- or column-wise (or row-wise over a subset) now has no placement gradient (its
placement does not enter the step), so its moves to each device tie; they are ordered by the
device's compute load. Estimates
rank the moves (ties by the destination's compute load, or a domain's memory); the hard scores of
the best-ranked decide.
"""

from __future__ import annotations

import jax
import numpy as np

from ..cache import jit
from ..plan import CW, DP, RW, SHARDING_TYPES, TW, TWRW, Plan
from .moves import WHOLE, empty_moves, row_blocks, subset_ranks
from .problem import CW_MOVE_SHARDS, Problem
from .score import scores

TAU = 0.02          # relative temperature of the smooth max the gradient is taken through


def _smooth_tie(system, model, pa, guard, draws):
    return scores(system, model, pa, guard, TAU, draws=draws)[1]


@jit(quick=True, export=True)
def gradient(system, model, pa, guard=None, draws=None):
    """d (tie-broken score at temperature TAU) / d plan arrays, at the plan `pa`. With a search
    objective's draws, of its quantile over the draws (uncertainty.robust: the quantile's
    derivative exists almost everywhere, through the draws at the order statistics it takes)."""
    return jax.grad(_smooth_tie, argnums=2)(system, model, pa, guard, draws)


def as_numpy(g):
    return jax.tree_util.tree_map(lambda x: np.asarray(x, np.float64), g)


def table_estimates(p: Problem, plan: Plan, pa, g, memory, loads, infeasible: bool) -> tuple[dict, np.ndarray, np.ndarray]:
    """Every single table move of `plan` (table-wise to each device, column-wise in each allowed
    shard count on the devices where the gradient is least, row-wise, data-parallel, table-row-wise
    in each domain, and over capacity smaller cache ratios), as move columns (moves.COLUMNS), their
    first-order estimates, and a key that orders their ties. g: gradient(...) at the plan (numpy)."""
    T, D, H, L = p.T, p.D, p.H, p.L
    names = p.model.tables.names
    ok = p.allowed
    cur = np.asarray([SHARDING_TYPES.index(plan.tables[n].sharding_type) for n in names])
    S, P, dom = (np.asarray(x, np.float64) for x in (pa.shard_type, pa.placement, pa.domain_placement))
    k_now, cache_now = np.asarray(pa.cw_shards, np.float64), np.asarray(pa.cache_ratio, np.float64)
    gS, gP, gdom, gk, gcache = g.shard_type, g.placement, g.domain_placement, g.cw_shards, g.cache_ratio
    base = (gS * S).sum(1)                                  # d score / d type at the current types
    sub_now = (cur == RW) & (np.asarray(pa.row_shards) < D - 0.5) if pa.row_shards is not None else np.zeros(T, bool)
    placed = np.isin(cur, (TW, CW)) | sub_now                # row-wise over a subset: placed by its row
    here = np.where(placed, (gP * P).sum(1), 0.0)           # the placement's own term
    dom_here = (gdom * dom).sum(1)
    order = np.argsort(np.argsort(loads[0], kind="stable"), kind="stable").astype(np.float64)   # device rank by compute
    cols, ests, ties = [], [], []

    def add(t, st, devs, k, d, cache, est, tie=0.0):
        n = len(t)
        if not n:
            return
        devs = np.asarray(devs, np.int64).reshape(n, -1)
        devs = np.concatenate([devs, np.full((n, CW_MOVE_SHARDS - devs.shape[1]), -1)], axis=1)
        full = lambda x, dtype: np.broadcast_to(np.asarray(x, dtype), (n,)).copy()
        cols.append({"t": np.asarray(t, np.int64), "st": full(st, np.int64), "devs": devs, "k": full(k, np.int64),
                     "dom": full(d, np.int64), "cache": full(cache, np.float64)})
        ests.append(full(est, np.float64)), ties.append(full(tie, np.float64))

    # table-wise on every device (not where it is): a tie among devices broken by their compute rank
    tw_t, tw_d = np.nonzero(ok[:, TW][:, None] & np.ones((1, D), bool))
    keep = ~((cur[tw_t] == TW) & (P[tw_t, tw_d] > 0.5))
    tw_t, tw_d = tw_t[keep], tw_d[keep]
    est = gS[tw_t, TW] - base[tw_t] + np.where(placed[tw_t], gP[tw_t, tw_d] - here[tw_t], 0.0) \
        + gk[tw_t] * (1.0 - k_now[tw_t])
    add(tw_t, TW, tw_d[:, None], 1, 0, cache_now[tw_t], est, order[tw_d])
    # column-wise in k shards, on the k devices of least placement gradient (compute rank on ties)
    by_compute = np.argsort(loads[0], kind="stable")
    for t in np.flatnonzero(ok[:, CW]):
        rank = by_compute[np.argsort(gP[t, by_compute] if placed[t] else np.zeros(D), kind="stable")]
        for k in p.cw_moves[t]:
            devs = np.sort(rank[:k])
            if cur[t] == CW and sorted(plan.tables[names[t]].ranks) == devs.tolist():
                continue
            share = gP[t, devs].mean() - here[t] if placed[t] else 0.0
            add([t], CW, devs[None, :], k, 0, cache_now[t], [gS[t, CW] - base[t] + share + gk[t] * (k - k_now[t])])
    for st in (RW, DP):
        t = np.flatnonzero(ok[:, st] & ((cur != st) | (sub_now & (st == RW))))
        cache = cache_now[t] if st == RW else np.ones(len(t))
        add(t, st, np.zeros((len(t), 1)), WHOLE if st == RW else 1, 0, cache,
            gS[t, st] - base[t] + gk[t] * (1.0 - k_now[t]) + gcache[t] * (cache - cache_now[t]))
    # row-wise over a subset of blocks (moves.row_blocks): the placement's gradient over their devices
    for u, firsts in row_blocks(p, memory, False):
        ranks = subset_ranks(firsts, u)
        same = np.asarray([cur[i] == RW and sorted(plan.tables[n].ranks) == ranks for i, n in enumerate(names)])
        t = np.flatnonzero(ok[:, RW] & ~same)
        add(t, RW, np.tile(firsts, (len(t), 1)), u, 0, cache_now[t],
            gS[t, RW] - base[t] + gP[t][:, ranks].mean(1) - here[t] + gk[t] * (1.0 - k_now[t]))
    if H > 1:
        dom_order = np.argsort(np.argsort(p.domain_loads(memory), kind="stable"), kind="stable")
        tr_t, tr_h = np.nonzero(ok[:, TWRW][:, None] & np.ones((1, H), bool))
        keep = ~((cur[tr_t] == TWRW) & (dom[tr_t, tr_h] > 0.5))
        tr_t, tr_h = tr_t[keep], tr_h[keep]
        est = gS[tr_t, TWRW] - base[tr_t] + np.where(cur[tr_t] == TWRW, gdom[tr_t, tr_h] - dom_here[tr_t], 0.0) \
            + gk[tr_t] * (1.0 - k_now[tr_t])
        add(tr_t, TWRW, np.zeros((len(tr_t), 1)), 1, tr_h, cache_now[tr_t], est, dom_order[tr_h])
    if infeasible:                   # a smaller share in HBM, the table's type and devices kept
        few = np.asarray([len(plan.tables[n].ranks) <= CW_MOVE_SHARDS for n in names]) & ~sub_now
        kept = np.full((T, CW_MOVE_SHARDS), -1)
        for i, n in enumerate(names):
            r = plan.tables[n].ranks if cur[i] in (TW, CW) else [0]
            kept[i, :min(len(r), CW_MOVE_SHARDS)] = r[:CW_MOVE_SHARDS]
        doms = np.asarray([plan.tables[n].ranks[0] // L for n in names])
        for ratio in (0.5, 0.2, 0.05):
            t = np.flatnonzero((cur != DP) & (cache_now > ratio) & few)
            add(t, cur[t], kept[t], np.where(cur[t] == CW, k_now[t], np.where(cur[t] == RW, WHOLE, 1)), doms[t], ratio,
                gcache[t] * (ratio - cache_now[t]))
    if not cols:
        return empty_moves(), np.zeros(0), np.zeros(0)
    join = lambda xs: np.concatenate(xs)
    moves, keep = p.admissible({k: join([c[k] for c in cols]) for k in cols[0]})
    return moves, join(ests)[keep], join(ties)[keep]


def swap_estimates(p: Problem, plan: Plan, g) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every swap of two table-wise tables on different devices, (a, b) with a < b, and its
    first-order estimate: g_place[a, dev b] - g_place[a, dev a] + g_place[b, dev a] - g_place[b, dev b]."""
    names = p.model.tables.names
    tw = np.asarray([t for t, n in enumerate(names) if plan.tables[n].sharding_type == "table_wise"], int)
    if len(tw) < 2:
        return np.zeros(0, int), np.zeros(0, int), np.zeros(0)
    dev = np.asarray([plan.tables[names[t]].ranks[0] for t in tw])
    G = np.asarray(g.placement, np.float64)[tw][:, dev]             # G[i, j] = g_place[tw_i, dev_j]
    own = np.diag(G)
    est = G - own[:, None] + G.T - own[None, :]
    i, j = np.nonzero(np.triu(dev[:, None] != dev[None, :], 1))
    return tw[i], tw[j], est[i, j]


def ranked(est: np.ndarray, tie: np.ndarray | None = None) -> np.ndarray:
    """Indices of the estimates, lowest first; ties by `tie`, then by index."""
    return np.lexsort((np.arange(len(est)), np.zeros(len(est)) if tie is None else tie, est))
