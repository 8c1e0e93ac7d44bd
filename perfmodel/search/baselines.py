"""Baselines evaluated with the same hard model: random sampling and an evolutionary method.

random        vectorized sampling of discrete plans over the allowed choices (uniform sharding
              type per table, uniform device / domain, uniform settings); the best feasible wins
evolutionary  a genetic algorithm on the same one-hot encoding: tournament selection, uniform
              crossover of whole table rows and of settings, per-table mutation of type and
              device, elitism; one generation is one jitted, vmapped step
Both run until the wall-clock budget is spent, in fixed-size batches, from a seeded PRNG key.
"""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

from ..cache import jit
from ..evaluate import _evaluate
from ..hardware import System
from ..plan import CW, PlanArrays
from ..workload import RankingModel
from .local import batch_size, note_progress, score_of, score_plans
from .relax import Masks


def sample_plans(key, system: System, model: RankingModel, masks: Masks, n: int) -> PlanArrays:
    """n random discrete plans (one-hot PlanArrays) over the allowed choices."""
    T, D = model.tables.count, system.num_chips
    H = D // system.domain_size
    ks = jax.random.split(key, 12)
    g = lambda k, shape, mask: jax.nn.one_hot(jnp.argmax(jax.random.gumbel(k, shape) + mask, -1), shape[-1])
    st = g(ks[0], (n, T, 5), jnp.asarray(masks.types))
    cw = st[..., CW]
    r1 = jax.random.randint(ks[1], (n, T), 0, D)
    r2 = (r1 + 1 + jax.random.randint(ks[2], (n, T), 0, max(D - 1, 1))) % D
    placement = jax.nn.one_hot(r1, D) * (1 - 0.5 * cw[..., None]) + jax.nn.one_hot(r2, D) * 0.5 * cw[..., None]
    return PlanArrays(
        shard_type=st, placement=placement, domain_placement=jax.nn.one_hot(jax.random.randint(ks[3], (n, T), 0, H), H),
        cw_shards=1.0 + cw, cache_ratio=jnp.ones((n, T)),
        dense_mode=g(ks[4], (n, 3), jnp.asarray(masks.dense)), algorithm=g(ks[5], (n, 4, 4), jnp.asarray(masks.algos)),
        a2a_precision=g(ks[6], (n, 3), jnp.asarray(masks.a2a)), grad_precision=g(ks[7], (n, 3), jnp.asarray(masks.grad)),
        offload=jax.random.bernoulli(ks[8], 0.5, (n,)).astype(jnp.float32) * masks.engines,
        pipeline=jax.random.bernoulli(ks[9], 0.5, (n,)).astype(jnp.float32),
        grad_buckets=2.0 ** jax.random.randint(ks[10], (n,), 0, 6).astype(jnp.float32),
        overlap_chunks=2.0 ** jax.random.randint(ks[11], (n,), 0, 4).astype(jnp.float32),
    )


_sample = jit(sample_plans, static_argnums=4)


def random_search(system: System, model: RankingModel, masks: Masks, *, seed: int, deadline: float,
                  progress: list | None = None):
    """Returns (best one-hot PlanArrays, its score, plans evaluated). progress: the anytime profile
    to append to (local.note_progress), or None."""
    n = batch_size(system, model)
    sample = lambda k: _sample(k, system, model, masks, n)
    score = lambda b: score_plans(system, model, b)
    key = jax.random.PRNGKey(seed)
    best, best_pa, count = np.inf, None, 0
    while True:
        key, sub = jax.random.split(key)
        batch = sample(sub)
        sc = np.asarray(score(batch))
        count += n
        j = int(np.argmin(sc))
        if sc[j] < best:
            best, best_pa = float(sc[j]), jax.tree_util.tree_map(lambda x: x[j], batch)
            if progress is not None:
                note_progress(progress, best)
        if time.time() > deadline:
            break
    return best_pa, best, count


@jit(static_argnums=6)
def _generation(key, pop, fit, system, model, masks, n, pm):
    T = model.tables.count
    k1, k2, k3, k4, k5 = jax.random.split(key, 5)
    def tournament(k):
        i = jax.random.randint(k, (n, 2), 0, n)
        return jnp.where(fit[i[:, 0]] <= fit[i[:, 1]], i[:, 0], i[:, 1])
    a, b = tournament(k1), tournament(k2)
    rows = jax.random.bernoulli(k3, 0.5, (n, T))
    setting = jax.random.bernoulli(k4, 0.5, (n,))
    def mix(x, name):
        xa, xb = x[a], x[b]
        if name in ("shard_type", "placement", "domain_placement", "cw_shards", "cache_ratio"):
            m = rows.reshape(rows.shape + (1,) * (x.ndim - 2))
        else:
            m = setting.reshape((n,) + (1,) * (x.ndim - 1))
        return jnp.where(m, xa, xb)
    child = PlanArrays(**{f.name: mix(getattr(pop, f.name), f.name) for f in dataclasses.fields(PlanArrays)})
    fresh = sample_plans(k5, system, model, masks, n)
    mut = jax.random.bernoulli(jax.random.fold_in(k5, 1), pm, (n, T))
    mrow = lambda x: mut.reshape(mut.shape + (1,) * (x.ndim - 2))
    child = dataclasses.replace(
        child,
        shard_type=jnp.where(mrow(child.shard_type), fresh.shard_type, child.shard_type),
        placement=jnp.where(mrow(child.placement), fresh.placement, child.placement),
        domain_placement=jnp.where(mrow(child.domain_placement), fresh.domain_placement, child.domain_placement),
        cw_shards=jnp.where(mut, fresh.cw_shards, child.cw_shards),
    )
    cfit = jax.vmap(lambda p: score_of(_evaluate(system, model, p, 0.0)))(child)
    # elitism: keep the best n of parents and children
    allfit = jnp.concatenate([fit, cfit])
    keep = jnp.argsort(allfit)[:n]
    both = jax.tree_util.tree_map(lambda x, y: jnp.concatenate([x, y])[keep], pop, child)
    return both, allfit[keep]


def evolutionary_search(system: System, model: RankingModel, masks: Masks, *, seed: int, deadline: float,
                        seeds: list[PlanArrays] = (), mutation: float | None = None, progress: list | None = None):
    """Genetic algorithm; `seeds` (e.g. the greedy plan) join the first population. progress: the
    anytime profile to append the population's best to after each generation (local.note_progress), or None."""
    n = batch_size(system, model)
    T = model.tables.count
    pm = jnp.float32(mutation if mutation is not None else min(0.5, 2.0 / T))
    key = jax.random.PRNGKey(seed)
    key, sub = jax.random.split(key)
    pop = _sample(sub, system, model, masks, n)
    for i, s in enumerate(seeds[:n]):
        pop = jax.tree_util.tree_map(lambda x, y: x.at[i].set(y), pop, s)
    fit = jnp.asarray(score_plans(system, model, pop))
    if progress is not None:
        note_progress(progress, float(jnp.min(fit)))
    gens = 0
    while time.time() < deadline:
        key, sub = jax.random.split(key)
        pop, fit = _generation(sub, pop, fit, system, model, masks, n, pm)
        gens += 1
        if progress is not None:
            note_progress(progress, float(np.min(np.asarray(fit))))
    j = int(np.argmin(np.asarray(fit)))
    return jax.tree_util.tree_map(lambda x: x[j], pop), float(fit[j]), (gens + 1) * n
