"""The relaxed plan: unconstrained parameters -> PlanArrays (softmax at a temperature), and
rounding of a relaxed plan back to a discrete Plan.

Parameters (one restart; a leading restart axis is vmapped):
  type_logits [T, 5]   sharding type (masked: column_wise needs an even dim and D > 1, ...)
  place_logits [T, D]  device of a table_wise table / the column_wise shards (top-k at rounding)
  domain_logits [T, H] scale-up domain of a table_row_wise table
  cw_logit [T]         column-wise shard count k = 1 + (k_max - 1) sigmoid(.)
  dense_logits [3], algo_logits [4, 4] (disallowed algorithms masked), a2a_logits [3], grad_logits [3]
  offload_logit, pipeline_logit   sigmoid
  log_buckets, log_chunks         exp, clipped to [1, 64] and [1, 16]
Softmax temperature tau -> 0 makes every choice one-hot (DESIGN.md, "Plan space").
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ..hardware import System, _pytree
from ..constraints import Limits, unlimited
from ..plan import (ALGORITHMS, ALLOWED_ALGORITHMS, COLLECTIVES, CW, DENSE_MODES, MIN_CW_DIM, PRECISIONS, RW,
                    SHARDING_TYPES, TWRW, DP, Plan, PlanArrays, TablePlan, table_ranks)
from ..workload import RankingModel

NEG = -1e9
MAX_BUCKETS, MAX_CHUNKS = 64.0, 16.0


@_pytree
@dataclass(frozen=True)
class SoftParams:
    type_logits: jax.Array
    place_logits: jax.Array
    domain_logits: jax.Array
    cw_logit: jax.Array
    dense_logits: jax.Array
    algo_logits: jax.Array
    a2a_logits: jax.Array
    grad_logits: jax.Array
    offload_logit: jax.Array
    pipeline_logit: jax.Array
    log_buckets: jax.Array
    log_chunks: jax.Array


@_pytree
@dataclass(frozen=True)
class Masks:
    """Which discrete choices are allowed (additive logit masks: 0 allowed, NEG not). A pytree of
    arrays, so jitted search steps take it as an argument and compile once per problem shape."""

    types: np.ndarray        # [T, 5]
    algos: np.ndarray        # [4, 4]
    a2a: np.ndarray          # [3]
    grad: np.ndarray         # [3]
    dense: np.ndarray        # [3]
    k_max: np.ndarray        # [T] largest column-wise shard count
    engines: np.ndarray      # 1.0 where the chip has offload engines
    shards: np.ndarray       # [T, D + 1] 1.0 where k column-wise shards are allowed (cw_options, constraints)
    limits: Limits           # the per-table constraints (constraints.Limits; all allowed when none)

    def cw(self, t: int) -> list[int]:
        """The column-wise shard counts table t may take."""
        return [int(k) for k in np.flatnonzero(np.asarray(self.shards[t]) > 0)]

    @property
    def has_engines(self) -> bool:
        return bool(np.asarray(self.engines) > 0)


def cw_options(dim: int, D: int, min_dim: int = MIN_CW_DIM) -> list[int]:
    """Column-wise shard counts allowed for a table: k | dim, 2 <= k <= D, dim / k >= min_dim."""
    return [k for k in range(2, min(D, dim // min_dim) + 1) if dim % k == 0]


def make_masks(system: System, model: RankingModel, precisions=("fp32",), sharding_types=SHARDING_TYPES,
               dense_modes=DENSE_MODES, limits: Limits | None = None) -> Masks:
    """The allowed choices: the model's and system's, the search's sharding types and precisions,
    and the per-table constraints (`limits`, constraints.resolve)."""
    T, D, L = model.tables.count, system.num_chips, system.domain_size
    limits = limits if limits is not None else unlimited(T, D, system.num_domains)
    dims = np.asarray(model.tables.dim).astype(int)
    seq = np.asarray(model.tables.sequence) > 0
    types = np.where(np.asarray(limits.types) > 0, 0.0, NEG).astype(np.float32)
    for j, name in enumerate(SHARDING_TYPES):
        if name not in sharding_types:
            types[:, j] = NEG
    k_max = np.ones(T, np.float32)
    shards = np.zeros((T, D + 1), np.float32)
    for t in range(T):
        opts = [k for k in cw_options(int(dims[t]), D, int(limits.min_dim[t])) if limits.shards[t, k] > 0]
        shards[t, opts] = 1.0
        if opts:
            k_max[t] = max(opts)
        else:
            types[t, CW] = NEG
        if D == 1:
            types[t, [CW, RW, TWRW, DP]] = NEG
        if types[t, CW] < -1:
            shards[t] = 0.0                    # a type ruled out has no shard counts
        if len(system.levels) == 1 or L == 1:
            types[t, TWRW] = NEG               # with one domain, table_row_wise is row_wise
        if seq[t]:
            types[t, TWRW] = NEG               # a sequence feature's rows would all leave one domain
    algos = np.full((4, 4), NEG, np.float32)
    for c, kind in enumerate(COLLECTIVES):
        for a in ALLOWED_ALGORITHMS[kind]:
            algos[c, ALGORITHMS.index(a)] = 0.0
    prec = lambda allowed: np.asarray([0.0 if p in allowed else NEG for p in PRECISIONS], np.float32)
    dense = np.asarray([0.0 if m in dense_modes else NEG for m in DENSE_MODES], np.float32)
    if len(system.levels) == 1 or system.uneven_domains:
        dense[DENSE_MODES.index("hybrid")] = NEG       # hybrid = fully sharded with one domain; none on unequal ones
    return Masks(types, algos, prec(precisions), prec(precisions), dense, k_max,
                 np.float32(1.0 if float(system.offload.engines) > 0 else 0.0), shards, limits)


def init_params(rng: np.random.Generator, system: System, model: RankingModel, restarts: int,
                scale: float = 0.5) -> SoftParams:
    """`restarts` random relaxed plans (leading axis), float32 numpy: no XLA program to compile."""
    T, D = model.tables.count, system.num_chips
    H = system.num_domains
    R = restarts
    n = lambda *shape: (scale * rng.standard_normal((R, *shape))).astype(np.float32)
    full = lambda v, *shape: np.full((R, *shape), v, np.float32)
    return SoftParams(
        type_logits=n(T, 5), place_logits=n(T, D), domain_logits=n(T, H),
        cw_logit=n(T), dense_logits=n(3), algo_logits=n(4, 4),
        a2a_logits=full(0.0, 3), grad_logits=full(0.0, 3), offload_logit=full(1.0),
        pipeline_logit=full(1.0), log_buckets=full(np.log(4.0)), log_chunks=full(np.log(1.5)),
    )


def soft_arrays(p: SoftParams, masks: Masks, tau) -> PlanArrays:
    """The relaxed plan at softmax temperature tau."""
    sm = lambda logits, mask: jax.nn.softmax((logits + mask) / tau, axis=-1)
    offload = jax.nn.sigmoid(p.offload_logit / tau) * masks.engines
    return PlanArrays(
        shard_type=sm(p.type_logits, masks.types),
        placement=sm(p.place_logits, NEG * (1.0 - masks.limits.devices)),
        domain_placement=sm(p.domain_logits, NEG * (1.0 - masks.limits.domains)),
        cw_shards=1.0 + (masks.k_max - 1.0) * jax.nn.sigmoid(p.cw_logit),
        cache_ratio=jnp.ones_like(p.cw_logit) * masks.limits.target_cache(),
        dense_mode=sm(p.dense_logits, masks.dense),
        algorithm=sm(p.algo_logits, masks.algos),
        a2a_precision=sm(p.a2a_logits, masks.a2a),
        grad_precision=sm(p.grad_logits, masks.grad),
        offload=offload,
        pipeline=jax.nn.sigmoid(p.pipeline_logit / tau),
        grad_buckets=jnp.clip(jnp.exp(p.log_buckets), 1.0, MAX_BUCKETS),
        overlap_chunks=jnp.clip(jnp.exp(p.log_chunks), 1.0, MAX_CHUNKS),
    )


def round_params(p: SoftParams, masks: Masks, system: System, model: RankingModel) -> Plan:
    """The discrete plan nearest a relaxed one: argmax of each choice, top-k devices for column-wise
    shards (k the allowed shard count nearest the relaxed one), rounded bucket and chunk counts."""
    D, L = system.num_chips, system.domain_size
    lim = masks.limits
    types = np.argmax(np.asarray(p.type_logits) + masks.types, axis=1)
    place = np.asarray(p.place_logits) + NEG * (1.0 - np.asarray(lim.devices))
    dom = np.argmax(np.asarray(p.domain_logits) + NEG * (1.0 - np.asarray(lim.domains)), axis=1)
    cache = lim.target_cache()
    k_soft = 1.0 + (masks.k_max - 1.0) * np.asarray(jax.nn.sigmoid(p.cw_logit))
    tables = {}
    for t, name in enumerate(model.tables.names):
        st = int(types[t])
        k = 1
        if st == CW:
            k = min(masks.cw(t), key=lambda o: (abs(o - k_soft[t]), o))
        ranks = table_ranks(st, place[t], int(dom[t]), k, D, L)
        tables[name] = TablePlan(SHARDING_TYPES[st], ranks, 1.0 if st == DP else round(float(cache[t]), 6))
    algos = np.asarray(p.algo_logits) + masks.algos
    return Plan(
        tables=tables,
        dense=DENSE_MODES[int(np.argmax(np.asarray(p.dense_logits) + masks.dense))],
        algorithms={kind: ALGORITHMS[int(np.argmax(algos[c]))] for c, kind in enumerate(COLLECTIVES)},
        a2a_precision=PRECISIONS[int(np.argmax(np.asarray(p.a2a_logits) + masks.a2a))],
        grad_precision=PRECISIONS[int(np.argmax(np.asarray(p.grad_logits) + masks.grad))],
        offload=bool(masks.has_engines and float(p.offload_logit) > 0),
        pipeline=bool(float(p.pipeline_logit) > 0),
        grad_buckets=int(np.clip(np.rint(np.exp(float(p.log_buckets))), 1, MAX_BUCKETS)),
        overlap_chunks=int(np.clip(np.rint(np.exp(float(p.log_chunks))), 1, MAX_CHUNKS)),
    )
