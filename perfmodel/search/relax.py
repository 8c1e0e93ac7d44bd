"""The relaxed plan: unconstrained parameters -> PlanArrays (softmax at a temperature), and
rounding of a relaxed plan back to a discrete Plan.

Parameters (one restart; a leading restart axis is vmapped):
  type_logits [T, 5]   sharding type (masked: column_wise needs an even dim and D > 1, ...)
  place_logits [T, D]  device of a table_wise table / the column_wise shards (top-k at rounding)
  domain_logits [T, H] scale-up domain of a table_row_wise table
  cw_logit [T]         column-wise shard count k = 1 + (k_max - 1) sigmoid(.)
  dense_logits [3], algo_logits [collectives, algorithms] (disallowed algorithms masked), a2a_logits [3], grad_logits [3]
  offload_logit, pipeline_logit   sigmoid
  log_buckets, log_chunks         exp, clipped to [1, 64] and [1, 16]
Softmax temperature tau -> 0 makes every choice one-hot (DESIGN.md, "Plan space").
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ..hardware import System
from ..pytree import pytree
from ..plan import (ALGORITHMS, COLLECTIVES, CW, DENSE_MODES, DP, NEG, PRECISIONS, SHARDING_TYPES, Masks, Plan,
                    PlanArrays, TablePlan, build, table_ranks)
from ..workload import RankingModel

MAX_BUCKETS, MAX_CHUNKS = 64.0, 16.0


@pytree
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
        cw_logit=n(T), dense_logits=n(3), algo_logits=n(len(COLLECTIVES), len(ALGORITHMS)),
        a2a_logits=full(0.0, 3), grad_logits=full(0.0, 3), offload_logit=full(1.0),
        pipeline_logit=full(1.0), log_buckets=full(np.log(4.0)), log_chunks=full(np.log(1.5)),
    )


def soft_arrays(p: SoftParams, masks: Masks, tau) -> PlanArrays:
    """The relaxed plan at softmax temperature tau."""
    sm = lambda logits, mask: jax.nn.softmax((logits + mask) / tau, axis=-1)
    offload = jax.nn.sigmoid(p.offload_logit / tau) * masks.engines
    return build(dict(
        shard_type=sm(p.type_logits, masks.types),
        placement=sm(p.place_logits, NEG * (1.0 - masks.limits.devices)),
        domain_placement=sm(p.domain_logits, NEG * (1.0 - masks.limits.domains)),
        cw_shards=1.0 + (masks.k_max - 1.0) * jax.nn.sigmoid(p.cw_logit),
        cache_ratio=jnp.ones_like(p.cw_logit) * masks.limits.target_cache()), dict(
        dense_mode=sm(p.dense_logits, masks.dense),
        algorithm=sm(p.algo_logits, masks.algos),
        a2a_precision=sm(p.a2a_logits, masks.a2a),
        grad_precision=sm(p.grad_logits, masks.grad),
        offload=offload,
        pipeline=jax.nn.sigmoid(p.pipeline_logit / tau),
        grad_buckets=jnp.clip(jnp.exp(p.log_buckets), 1.0, MAX_BUCKETS),
        overlap_chunks=jnp.clip(jnp.exp(p.log_chunks), 1.0, MAX_CHUNKS),
    ))


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
