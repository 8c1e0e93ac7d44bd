"""PlanArrays: a plan as arrays, the only form the cost model sees.

`to_arrays` turns a Plan into one-hot PlanArrays; a relaxed plan (softmax probabilities, fractional
placements) runs through the very same cost model, and at one-hot values equals the hard result by
construction. `from_arrays` is the way back.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace

import jax
import jax.numpy as jnp
import numpy as np

from ..config import ConfigError
from ..hardware import System
from ..pytree import pytree, static
from ..workload import RankingModel
from .plans import Plan, TablePlan, group_problem
from .space import (ALGORITHMS, COLLECTIVES, DENSE_MODES, DP, PRECISIONS, RW, SHARDING_TYPES, TW, CW, TWRW,
                    row_partials, table_ranks)


@pytree
@dataclass(frozen=True)
class PlanArrays:
    """A plan as arrays (T tables, D devices, H = D / scale-up-domain domains).

    Discrete plans are one-hot; relaxed plans hold probabilities and fractions.
      shard_type [T, 5]   probabilities over SHARDING_TYPES
      placement  [T, D]   share of the table on each device under table_wise / column_wise (rows sum to 1)
      domain_placement [T, H]  share on each scale-up domain under table_row_wise (rows sum to 1)
      cw_shards  [T]      column-wise shard count k (the shard's row is dim / k wide)
      cache_ratio [T]     fraction of the table's shard kept in HBM; the rest lives in host DRAM
      dense_mode [3]      probabilities over DENSE_MODES
      algorithm  [C, A]   per collective kind (COLLECTIVES), probabilities over ALGORITHMS
      a2a_precision, grad_precision [3]  probabilities over PRECISIONS
      offload, pipeline   in [0, 1]: collectives on the offload engines; sparse-dist pipelining
      grad_buckets, overlap_chunks  >= 1
      row_shards [T]      None, or per row_wise table over a subset of the devices (its placement
                          row holds 1 / its ranks on each) the partial sums per sample it sends each
                          device (row_partials; D: every device, reduce-scattered; other types hold
                          D): None means every row_wise table spans every device. A framework's
                          planner (HugeCTR's hier_auto) splits a table over a subset of the devices,
                          which the cost model prices as its own case; the search's arrays always
                          carry it (plan_arrays(rows=True), with_rows), so that its moves reach that
                          shape and its compiled programs see one structure of arrays.
    """

    shard_type: jax.Array
    placement: jax.Array
    domain_placement: jax.Array
    cw_shards: jax.Array
    cache_ratio: jax.Array
    dense_mode: jax.Array
    algorithm: jax.Array
    a2a_precision: jax.Array
    grad_precision: jax.Array
    offload: jax.Array
    pipeline: jax.Array
    grad_buckets: jax.Array
    overlap_chunks: jax.Array
    row_shards: jax.Array | None = None
    # a 2D plan (Plan.replicas > 1): the arrays are one sharding group's (D = its chips)
    replicas: int = static(default=1)
    group_layout: str = static(default="strided")
    sync_every: int = static(default=1)


TABLE_FIELDS = ("shard_type", "placement", "domain_placement", "cw_shards", "cache_ratio")
GROUP_FIELDS = ("replicas", "group_layout", "sync_every")
# row_shards is neither: it is None where every row_wise table spans every device; the search's
# arrays carry it as a table leaf (ROW_FIELDS)
SETTING_FIELDS = tuple(f.name for f in dataclasses.fields(PlanArrays)
                       if f.name not in TABLE_FIELDS + GROUP_FIELDS + ("row_shards",))
FIELDS = TABLE_FIELDS + SETTING_FIELDS
ROW_FIELDS = TABLE_FIELDS + ("row_shards",)      # a table's leaves in the search's arrays


def build(tables: dict, settings: dict, row_shards=None, group: dict | None = None) -> PlanArrays:
    """PlanArrays from its table leaves (TABLE_FIELDS) and its settings leaves (SETTING_FIELDS), each
    set whole: the one constructor every plan builder goes through, so a field added to PlanArrays
    is a field every builder must provide. group: a 2D plan's GROUP_FIELDS (default: 1D)."""
    if set(tables) != set(TABLE_FIELDS) or set(settings) != set(SETTING_FIELDS):
        wrong = sorted(set(tables) ^ set(TABLE_FIELDS)) + sorted(set(settings) ^ set(SETTING_FIELDS))
        raise TypeError(f"PlanArrays leaves missing or unknown: {', '.join(wrong)}")
    return PlanArrays(**tables, **settings, row_shards=row_shards, **(group or {}))


def group_of(plan) -> dict:
    """The GROUP_FIELDS of a Plan or PlanArrays."""
    return {f: getattr(plan, f) for f in GROUP_FIELDS}


def to_arrays(plan: Plan, system: System, model: RankingModel) -> PlanArrays:
    """One-hot PlanArrays of a (validated) discrete plan."""
    return jax.tree_util.tree_map(jnp.asarray, plan_arrays(plan, system, model))


def with_rows(pa: PlanArrays, D: int) -> PlanArrays:
    """`pa` carrying row_shards (D for every table: row_wise over every device) where it holds None;
    numpy leaves, any leading batch axes. The search's form of plans (PlanArrays.row_shards)."""
    if pa.row_shards is not None:
        return pa
    return replace(pa, row_shards=np.full(np.shape(pa.shard_type)[:-1], float(D), np.float32))


def plan_arrays(plan: Plan, system: System, model: RankingModel, tables: PlanArrays | None = None,
                rows: bool = False) -> PlanArrays:
    """to_arrays with numpy float32 leaves: what a search builds by the thousand (a jitted function
    takes them as they are; thirteen device transfers per plan cost more than the plan's scoring).
    tables: the arrays of a plan with the same tables (a variant of `plan`'s settings), whose table
    leaves are reused: only the settings are built (a search scores hundreds of such variants).
    rows: carry row_shards even where every row_wise table spans every device (the search's form)."""
    settings, rows_wanted = settings_arrays(plan), rows
    if tables is not None:
        return replace(tables, **settings, **group_of(plan))
    system, model = group_problem(system, model, plan)
    names = model.tables.names
    T, D, L = len(names), system.num_chips, system.domain_size
    H = system.num_domains
    st = np.zeros((T, 5), np.float32)
    pl = np.zeros((T, D), np.float32)
    dp = np.zeros((T, H), np.float32)
    cw = np.ones(T, np.float32)
    cache = np.ones(T, np.float32)
    rows = np.full(T, float(D), np.float32)
    for i, name in enumerate(names):
        t = plan.tables[name]
        j = SHARDING_TYPES.index(t.sharding_type)
        st[i, j] = 1.0
        if j in (TW, CW) or (j == RW and len(t.ranks) < D):
            pl[i, t.ranks] = 1.0 / len(t.ranks)
            cw[i] = len(t.ranks) if j == CW else 1.0
            rows[i] = row_partials(t.ranks, system) if j == RW else D
        else:
            pl[i, :] = 1.0 / D     # unused by these types; kept a valid distribution
        if j == TWRW:
            dp[i, t.ranks[0] // L] = 1.0
        else:
            dp[i, :] = 1.0 / H
        cache[i] = t.cache_ratio
    subset = rows_wanted or bool(np.any(rows < D))     # else None (PlanArrays' docstring)
    return build(dict(shard_type=st, placement=pl, domain_placement=dp, cw_shards=cw, cache_ratio=cache), settings,
                 row_shards=rows if subset else None, group=group_of(plan))


def settings_arrays(plan: Plan) -> dict:
    """The PlanArrays leaves of a plan's settings (dense parallelism, algorithms, precisions,
    offload, pipelining, buckets, chunks), numpy float32."""
    algo = np.zeros((len(COLLECTIVES), len(ALGORITHMS)), np.float32)
    defaults = Plan(tables={}).algorithms
    for c, kind in enumerate(COLLECTIVES):
        algo[c, ALGORITHMS.index(plan.algorithms.get(kind, defaults[kind]))] = 1.0
    onehot = lambda v, opts: np.eye(len(opts), dtype=np.float32)[opts.index(v)]
    f = lambda x: np.asarray(x, np.float32)
    return dict(dense_mode=onehot(plan.dense, DENSE_MODES), algorithm=algo,
                a2a_precision=onehot(plan.a2a_precision, PRECISIONS), grad_precision=onehot(plan.grad_precision, PRECISIONS),
                offload=f(1.0 if plan.offload else 0.0), pipeline=f(1.0 if plan.pipeline else 0.0),
                grad_buckets=f(plan.grad_buckets), overlap_chunks=f(plan.overlap_chunks))


def stack(plans: list[PlanArrays]) -> PlanArrays:
    """Stack PlanArrays along a new leading axis, for jax.vmap (numpy leaves stay numpy)."""
    return jax.tree_util.tree_map(
        lambda *xs: np.stack(xs) if all(isinstance(x, np.ndarray) for x in xs) else jnp.stack(xs), *plans)


# PlanArrays fields that hold probabilities or fractions (in [0, 1]), and those that count (>= 1)
_UNIT_FIELDS = ("shard_type", "placement", "domain_placement", "cache_ratio", "dense_mode", "algorithm",
                "a2a_precision", "grad_precision", "offload", "pipeline")
_COUNT_FIELDS = ("cw_shards", "grad_buckets", "overlap_chunks")


def check_arrays(pa: PlanArrays, system: System, model: RankingModel) -> None:
    """Raise ConfigError naming the field where concrete PlanArrays cannot be priced: a NaN or
    infinite entry, a probability or fraction outside [0, 1], a count below 1, or a shape that is not
    this model's tables on this system's devices (the model would return a NaN step or a shape error
    from inside jax). Traced plans (under jit, vmap or grad) are not checked. A 2D plan's arrays are
    one sharding group's (plans.group_problem)."""
    system, model = group_problem(system, model, pa)
    T, D, H = model.tables.count, system.num_chips, system.num_domains
    last = {"shard_type": (T, 5), "placement": (T, D), "domain_placement": (T, H), "cw_shards": (T,),
            "cache_ratio": (T,)}
    arrays = {f: np.asarray(x, np.float64) for f in _UNIT_FIELDS + _COUNT_FIELDS + ("row_shards",)
              if (x := getattr(pa, f)) is not None}
    # every single-plan evaluate() runs this: one pass over all entries when the plan is sound (the
    # usual case), the field-by-field search below only to name what is wrong
    flat = lambda fields: np.concatenate([arrays[f].ravel() for f in fields])
    unit, counts = flat(_UNIT_FIELDS), flat(_COUNT_FIELDS)
    if (all(arrays[f].shape[arrays[f].ndim - len(w):] == w for f, w in last.items())
            and np.isfinite(flat(arrays)).all() and unit.min(initial=0.0) >= -1e-6
            and unit.max(initial=0.0) <= 1.0 + 1e-6 and counts.min(initial=1.0) >= 1.0 - 1e-6):
        return
    for f, a in arrays.items():
        want = last.get(f)
        if want is not None and a.shape[a.ndim - len(want):] != want:
            raise ConfigError("", f"plan.{f}", f"has shape {a.shape}; this model and system need (..., "
                              f"{', '.join(map(str, want))}) ({T} tables, {D} devices, {H} scale-up domains)")
        if not np.all(np.isfinite(a)):
            raise ConfigError("", f"plan.{f}", "holds NaN or infinite entries; every entry must be a finite number")
        if f in _UNIT_FIELDS and (a.min(initial=0.0) < -1e-6 or a.max(initial=0.0) > 1.0 + 1e-6):
            raise ConfigError("", f"plan.{f}", f"holds {a.min():g} to {a.max():g}; it is a probability or a "
                              "fraction, from 0 to 1")
        if f in _COUNT_FIELDS and a.min(initial=1.0) < 1.0 - 1e-6:
            raise ConfigError("", f"plan.{f}", f"holds {a.min():g}; it counts shards, buckets or chunks, at least 1")


def from_arrays(pa: PlanArrays, system: System, model: RankingModel) -> Plan:
    """The discrete Plan of one-hot PlanArrays (the inverse of to_arrays); relaxed arrays are
    rounded to their largest entries. A 2D plan's arrays are one group's: on the whole system, or on
    its sharding group (whose replication then says the group's layout)."""
    rep = system.replication
    group = group_of(pa) if rep is None else dict(replicas=rep.replicas, group_layout=rep.layout,
                                                  sync_every=rep.sync_every)
    system, model = group_problem(system, model, pa)
    D, L = system.num_chips, system.domain_size
    st = np.argmax(np.asarray(pa.shard_type), axis=1)
    place = np.asarray(pa.placement)
    dom = np.argmax(np.asarray(pa.domain_placement), axis=1)
    k = np.rint(np.asarray(pa.cw_shards)).astype(int)
    k_rw = np.full(len(k), D) if pa.row_shards is None else np.rint(np.asarray(pa.row_shards)).astype(int)
    cache = np.asarray(pa.cache_ratio)
    tables = {}
    for t, name in enumerate(model.tables.names):
        j = int(st[t])
        ranks = table_ranks(j, place[t], int(dom[t]), max(int(k[t]), 1), D, L)
        if j == RW and k_rw[t] < D:           # a subset: the ranks its placement holds
            ranks = [int(r) for r in np.flatnonzero(place[t] > 0)]
        tables[name] = TablePlan(SHARDING_TYPES[j], ranks, 1.0 if j == DP else round(float(cache[t]), 6))
    algo = np.argmax(np.asarray(pa.algorithm), axis=1)
    pick = lambda v, opts: opts[int(np.argmax(np.asarray(v)))]
    return Plan(
        tables=tables, dense=pick(pa.dense_mode, DENSE_MODES),
        algorithms={kind: ALGORITHMS[int(algo[c])] for c, kind in enumerate(COLLECTIVES)},
        a2a_precision=pick(pa.a2a_precision, PRECISIONS), grad_precision=pick(pa.grad_precision, PRECISIONS),
        offload=bool(float(pa.offload) > 0.5), pipeline=bool(float(pa.pipeline) > 0.5),
        grad_buckets=int(np.rint(float(pa.grad_buckets))), overlap_chunks=int(np.rint(float(pa.overlap_chunks))),
        **group)
