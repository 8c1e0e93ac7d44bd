"""Compound moves: many tables to one sharding type at once, which no single move sees.

A change of sharding type often pays only for many tables together: the first table-row-wise or
data-parallel table brings a collective's fixed cost, and the next ones ride on it. For k = 1, 2,
...: the k smallest tables made data-parallel; the k heaviest table-row-wise (domains filled
least-loaded first) or row-wise; the k heaviest table-wise ones column-wise in two (the second half
on the device then least loaded); splits, the k smallest data-parallel with every other table
table-row-wise or row-wise; and column-wise splits (Problem.splits). A move is a row of arrays
[moves, T] (each table's type, its domain or its column-wise block's first device, whether the move
sets it, the device of its second half) with a shard count and a dense parallelism per move; one
batch builder (groups_batch) makes their plan arrays, in numpy or in a compiled program.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from ..cache import jit
from ..plan import CW, DENSE_MODES, DP, RW, SETTING_FIELDS, SHARDING_TYPES, TW, TWRW, Plan, PlanArrays, TablePlan, build
from .problem import GROUP_MAX, Problem, fill
from .score import host, in_batches, pad

def groups_batch(pa: PlanArrays, types, doms, changed, partner, width, dense, xp=None):
    """Batch of plans, each `pa` with the tables where changed[i] is set made type types[i]:
    table-row-wise on domain doms[i]; column-wise in two, half on the table's device and half on
    partner[i], or (partner -1) in width[i] shards on devices doms[i] ... doms[i] + width[i] - 1;
    spread evenly as plan_arrays builds them, data-parallel ones whole in HBM (cache ratio 1), a
    row-wise one over every device; the dense parallelism DENSE_MODES[dense[i]] (-1: as in pa). xp: numpy, or jax.numpy (default)."""
    if xp is None:
        import jax.numpy as xp
    D, H = pa.placement.shape[1], pa.domain_placement.shape[1]
    c, one = changed[..., None], lambda x: x[None]
    onehot = lambda x, n: xp.eye(n, dtype=np.float32)[x]
    rows = xp.where((types == TWRW)[..., None], onehot(xp.where(types == TWRW, doms, 0), H), np.float32(1.0 / H))
    split = (types == CW)[..., None]          # a table-wise table's placement row is one-hot on its device
    halves = np.float32(0.5) * (one(pa.placement) + onehot(xp.maximum(partner, 0), D))
    w = xp.maximum(width, 1)[:, None, None]   # (padded rows of a batch may hold width 0)
    dev = xp.arange(D)
    block = ((dev >= doms[..., None]) & (dev < doms[..., None] + w)).astype(np.float32) / w.astype(np.float32)
    return build(dict(
        shard_type=xp.where(c, onehot(types, 5), one(pa.shard_type)),
        placement=xp.where(c, xp.where(split, xp.where((partner >= 0)[..., None], halves, block), np.float32(1.0 / D)),
                           one(pa.placement)),
        domain_placement=xp.where(c, rows, one(pa.domain_placement)),
        cw_shards=xp.where(changed, xp.where(types == CW, w[:, :, 0].astype(np.float32), np.float32(1.0)),
                           one(pa.cw_shards)),
        cache_ratio=xp.where(changed & (types == DP), np.float32(1.0), one(pa.cache_ratio))), dict(
        dense_mode=xp.where((dense >= 0)[:, None], onehot(xp.maximum(dense, 0), len(DENSE_MODES)), one(pa.dense_mode)),
        **{f: xp.broadcast_to(one(getattr(pa, f)), (len(types),) + np.shape(getattr(pa, f)))
           for f in SETTING_FIELDS if f != "dense_mode"}),
        # a changed table spans every device of its type (row-wise: all of them); the others keep theirs
        row_shards=None if pa.row_shards is None else xp.where(changed, np.float32(D), one(pa.row_shards)))


def _groups_in_program(pa, types, doms, changed, partner, width, dense):
    return groups_batch(pa, types, doms, changed, partner, width, dense)


_groups_batch = jit(_groups_in_program, export=True)


def _none(T: int) -> tuple:
    return (np.zeros((0, T), int), np.zeros((0, T), int), np.zeros((0, T), bool), np.zeros((0, T), int),
            np.zeros(0, int), np.zeros(0, int))


def group_specs(p: Problem, plan: Plan, other_dense: bool = False) -> tuple[np.ndarray, ...]:
    """The compound moves of `plan` (module docstring); other_dense=True: the column-wise splits
    only, under each other dense parallelism allowed (none when the settings are frozen). As arrays
    [moves, T] (type, domain or first device, changed, partner) and per move the column-wise shard
    count and the dense parallelism (an index of DENSE_MODES; -1: as in `plan`)."""
    T, L, H = p.T, p.L, p.H
    limit = T if p.exhaustive else GROUP_MAX
    small, heavy, ok = p.small, p.heavy, p.allowed
    base = [plan.tables[n] for n in p.model.tables.names]
    base_type = np.asarray([SHARDING_TYPES.index(t.sharding_type) for t in base])
    base_dom = np.asarray([t.ranks[0] // L if j == TWRW else t.ranks[0] if j == CW else 0
                           for t, j in zip(base, base_type)])
    base_width = np.asarray([len(t.ranks) if j == CW and t.ranks == list(range(t.ranks[0], t.ranks[0] + len(t.ranks)))
                             else 0 for t, j in zip(base, base_type)])
    whole = np.asarray([t.cache_ratio == 1.0 for t in base])
    load0 = np.zeros(H)              # what table-row-wise tables already put on each domain
    np.add.at(load0, base_dom[base_type == TWRW], p.weight[base_type == TWRW])

    def prefixes(st, todo, doms=None, partners=None):
        """Move k sets the k + 1 first tables of `todo` to type st (table-row-wise on doms,
        column-wise with the second half on partners)."""
        m = len(todo)
        changed = np.zeros((m, T), bool)
        changed[:, todo] = np.tri(m, dtype=bool)
        dom, partner = np.tile(base_dom, (m, 1)), np.full((m, T), -1)
        if doms is not None:
            dom[:, todo] = np.where(changed[:, todo], doms, base_dom[todo])
        if partners is not None:
            partner[:, todo] = np.where(changed[:, todo], partners, -1)
        return np.where(changed, st, base_type), dom, changed, partner

    def unchanged(types, dom, changed, width):
        """Rows of a split that would leave every table as it is in `plan`."""
        same = ~changed | ((types == base_type) & ((types != TWRW) | (dom == base_dom)) & ((types != DP) | whole)
                           & ((types != CW) | ((dom == base_dom) & (width[:, None] == base_width))))
        return same.all(axis=1)

    out = []
    for st, order in ((DP, small), (TWRW, heavy), (RW, heavy)) if not other_dense else ():
        if st == TWRW and H < 2:
            continue
        todo = order[(base_type[order] != st) & ok[order, st]][:limit]
        if not len(todo):
            continue
        doms, load = np.zeros(len(todo), int), load0.copy()
        for i, t in enumerate(todo if st == TWRW else ()):
            doms[i] = int(np.argmin(load))
            load[doms[i]] += p.weight[t]
        out.append(prefixes(st, todo, doms if st == TWRW else None))
    # the k heaviest table-wise tables split column-wise in two, each second half on the device then
    # least loaded (a table-wise plan's devices can be full of one table each, where halves of
    # several share the load)
    halves = np.asarray([2 in k for k in p.cw_moves])
    todo = heavy[(base_type[heavy] == TW) & ok[heavy, CW] & halves[heavy]][:limit]
    if len(todo) and p.D > 1 and not other_dense:
        load = np.zeros(p.D)         # what table- and column-wise tables put on each device
        for i, (t, j) in enumerate(zip(base, base_type)):
            if j in (TW, CW):
                load[t.ranks] += p.weight[i] / len(t.ranks)
        partners = np.zeros(len(todo), int)
        for i, t in enumerate(todo):
            own = base[t].ranks[0]
            load[own] -= p.weight[t] / 2
            free = load.copy()
            free[own] = np.inf
            partners[i] = int(np.argmin(free))
            load[partners[i]] += p.weight[t] / 2
        out.append(prefixes(CW, todo, partners=partners))
    # splits: the k smallest data-parallel, every other table sharded (balanced from empty domains)
    replicated = p.replicated
    K = len(replicated)
    for st in (TWRW, RW) if not other_dense else ():
        if st == TWRW and H < 2:
            continue
        sharded = ~replicated & ok[None, :, st]
        dom = np.tile(base_dom, (K, 1))
        if st == TWRW:          # each split fills the domains least-loaded first, heaviest first
            dom = np.where(sharded, fill(heavy, sharded, p.weight, np.zeros((K, H))), dom)
        types = np.where(replicated, DP, np.where(sharded, st, base_type))
        changed = replicated | sharded
        new = ~unchanged(types, dom, changed, np.zeros(K, int))    # a split that changes nothing is no move
        out.append((types[new], dom[new], changed[new], np.full((int(new.sum()), T), -1)))
    out = [o + (np.full(len(o[0]), 2), np.full(len(o[0]), -1)) for o in out]
    # column-wise splits: under the plan's dense parallelism (-1), or each other one allowed
    types, doms, changed, width = p.splits
    modes = [-1] if not other_dense else [] if p.freeze_settings or "dense" in p.hold else \
        [i for i, m in enumerate(DENSE_MODES) if m != plan.dense and p.masks.dense[i] > -1]
    types, doms = np.where(changed, types, base_type), np.where(changed, doms, base_dom)
    same = unchanged(types, doms, changed, width)
    for m in modes:
        new = ~same if m == -1 else np.ones(len(types), bool)
        if new.any():
            out.append((types[new], doms[new], changed[new], np.full((int(new.sum()), T), -1), width[new],
                        np.full(int(new.sum()), m)))
    return tuple(np.concatenate(x) for x in zip(*out)) if out else _none(T)


def group_plan(p: Problem, plan: Plan, types, doms, changed, partner, width: int, dense: int) -> Plan:
    """The Plan of one compound move (a row of group_specs)."""
    names, D = p.model.tables.names, p.D
    tables = dict(plan.tables)
    for t in np.flatnonzero(changed):
        st, name = int(types[t]), names[t]
        if st == TWRW:
            ranks = p.domain_ranks(int(doms[t]))
        elif st == CW and partner[t] >= 0:
            ranks = sorted([plan.tables[name].ranks[0], int(partner[t])])
        elif st == CW:
            ranks = list(range(int(doms[t]), int(doms[t]) + int(width)))
        else:
            ranks = list(range(D))
        tables[name] = TablePlan(SHARDING_TYPES[st], ranks, 1.0 if st == DP else plan.tables[name].cache_ratio)
    return dataclasses.replace(plan, tables=tables, **({"dense": DENSE_MODES[int(dense)]} if dense >= 0 else {}))


def group_candidates(p: Problem, plan: Plan, other_dense: bool = False) -> list[Plan]:
    """The compound moves of `plan` as Plans."""
    return [group_plan(p, plan, *row) for row in zip(*group_specs(p, plan, other_dense))]


def group_moves(p: Problem, plan: Plan, pa, other_dense: bool = False,
                eager: bool = False) -> tuple[np.ndarray, Callable[[int], Plan]]:
    """[2, moves]: the hard and the tie-broken scores of the compound moves of `plan` (pa: its numpy
    arrays), each batch built from the moves' sharding types (in a compiled program when
    p.in_program); and a function giving move i's Plan. eager: scored in numpy (not p.in_program)."""
    specs = group_specs(p, plan, other_dense)
    group = lambda i: group_plan(p, plan, *(x[i] for x in specs))
    n, size = len(specs[0]), p.max_batch
    if not n:
        return np.zeros((2, 0)), group
    if not p.in_program:
        return p.pairs(groups_batch(pa, *specs, xp=np), eager), group
    return in_batches(n, size, lambda s: p.pairs(_groups_batch(pa, *(host(pad(x[s:s + size], size)) for x in specs)))), group


def pick_compound(hard: np.ndarray, tie: np.ndarray, step_below: float, tie_below: float) -> int | None:
    """Which compound move to take, given their hard and tie-broken scores: the one of least step when
    that is below step_below, whatever its tie-broken score (a whole-plan move trades the step for
    its resource spread); else the least tie-broken one when below tie_below; else None."""
    if not len(tie):
        return None
    j, i = int(np.argmin(hard)), int(np.argmin(tie))
    return j if hard[j] < step_below else i if tie[i] < tie_below else None
