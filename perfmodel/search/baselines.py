"""Baselines evaluated with the same hard model: random sampling and an evolutionary method.

random        vectorized sampling of discrete plans over the allowed choices (uniform sharding
              type per table, uniform device / domain, uniform settings); the best feasible wins
evolutionary  a genetic algorithm on the same one-hot encoding: tournament selection, uniform
              crossover of whole table rows and of settings, per-table mutation of type and
              device, elitism; one generation is one jitted, vmapped step
Both run a round at a time (a batch, a generation) from a seeded PRNG key until their iterations or
the wall-clock budget are spent.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ..cache import jit
from ..evaluate import _evaluate
from ..hardware import System
from ..plan import CW, DP, PlanArrays
from ..workload import RankingModel
from .score import constrained, score_of, score_plans
from .relax import NEG, Masks


def fewest_shards(masks: Masks) -> int:
    """The most devices a sampled table takes: the largest of the tables' fewest column-wise shards
    (2 unless a constraint says otherwise), 1 with none."""
    first = np.argmax(np.asarray(masks.shards) > 0, axis=1)
    return int(max(1, first.max(initial=1)))


def sample_plans(key, system: System, model: RankingModel, masks: Masks, n: int, most: int = 2) -> PlanArrays:
    """n random discrete plans (one-hot PlanArrays) over the allowed choices: a uniform sharding type
    per table, a uniform device (table-wise) or k of them (column-wise, k the fewest shards allowed:
    2 unless a constraint says otherwise) among those its constraints allow, a uniform allowed domain.
    most: fewest_shards(masks), static (the draw keeps that many top devices per table)."""
    T, D = model.tables.count, system.num_chips
    H = system.num_domains
    lim = masks.limits
    ks = jax.random.split(key, 12)
    g = lambda k, shape, mask: jax.nn.one_hot(jnp.argmax(jax.random.gumbel(k, shape) + mask, -1), shape[-1])
    st = g(ks[0], (n, T, 5), jnp.asarray(masks.types))
    cw = st[..., CW]
    # the fewest shards allowed (the first k with a 1 in masks.shards), 1 for the table-wise
    k = jnp.where(cw > 0, jnp.argmax(jnp.asarray(masks.shards) > 0, axis=-1), 1).astype(jnp.float32)
    draw = jax.random.gumbel(ks[1], (n, T, D)) + NEG * (1.0 - lim.devices)
    top = jax.lax.top_k(draw, min(max(most, 1), D))[0]              # the k-th largest draw of each table
    kth = jnp.take_along_axis(top, (k.astype(jnp.int32) - 1)[..., None], axis=-1)
    on = (draw >= kth).astype(jnp.float32)
    dom = g(ks[3], (n, T, H), NEG * (1.0 - lim.domains))
    return PlanArrays(
        shard_type=st, placement=on / k[..., None], domain_placement=dom,
        cw_shards=jnp.maximum(k, 1.0), cache_ratio=jnp.where(st[..., DP] > 0, 1.0, lim.target_cache()),
        dense_mode=g(ks[4], (n, 3), jnp.asarray(masks.dense)), algorithm=g(ks[5], (n, 4, 4), jnp.asarray(masks.algos)),
        a2a_precision=g(ks[6], (n, 3), jnp.asarray(masks.a2a)), grad_precision=g(ks[7], (n, 3), jnp.asarray(masks.grad)),
        offload=jax.random.bernoulli(ks[8], 0.5, (n,)).astype(jnp.float32) * masks.engines,
        pipeline=jax.random.bernoulli(ks[9], 0.5, (n,)).astype(jnp.float32),
        grad_buckets=2.0 ** jax.random.randint(ks[10], (n,), 0, 6).astype(jnp.float32),
        overlap_chunks=2.0 ** jax.random.randint(ks[11], (n,), 0, 4).astype(jnp.float32),
    )


_sample = jit(sample_plans, static_argnums=(4, 5))


@jit(static_argnums=(6, 9))
def _generation(key, pop, fit, system, model, masks, n, pm, limits=None, most=2):
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
    fresh = sample_plans(k5, system, model, masks, n, most)
    mut = jax.random.bernoulli(jax.random.fold_in(k5, 1), pm, (n, T))
    mrow = lambda x: mut.reshape(mut.shape + (1,) * (x.ndim - 2))
    child = dataclasses.replace(
        child,
        shard_type=jnp.where(mrow(child.shard_type), fresh.shard_type, child.shard_type),
        placement=jnp.where(mrow(child.placement), fresh.placement, child.placement),
        domain_placement=jnp.where(mrow(child.domain_placement), fresh.domain_placement, child.domain_placement),
        cw_shards=jnp.where(mut, fresh.cw_shards, child.cw_shards),
        cache_ratio=jnp.where(mut, fresh.cache_ratio, child.cache_ratio),
    )
    cfit = jax.vmap(lambda p: constrained(score_of(_evaluate(system, model, p, 0.0)), p, limits))(child)
    # elitism: keep the best n of parents and children
    allfit = jnp.concatenate([fit, cfit])
    keep = jnp.argsort(allfit)[:n]
    both = jax.tree_util.tree_map(lambda x, y: jnp.concatenate([x, y])[keep], pop, child)
    return both, allfit[keep]


@dataclass(frozen=True)
class Sampled:
    """A sampler's state: its PRNG key, the best plan seen (one-hot arrays) and its score, the
    plans evaluated; for the evolutionary method, the population and its fitness too."""

    key: object
    best_pa: object = None
    best: float = float("inf")
    evaluations: int = 0
    pop: object = None
    fit: object = None
    done: bool = False


class Random:
    """Vectorized random sampling: one batch of batch_size plans a round; the best feasible wins."""

    name = "random"

    def init(self, p, seed, budget):
        return Sampled(key=jax.random.PRNGKey(seed))

    def step(self, p, s: Sampled, budget) -> Sampled:
        key, sub = jax.random.split(s.key)
        batch = _sample(sub, p.system, p.model, p.masks, p.max_batch, fewest_shards(p.masks))
        sc = np.asarray(score_plans(p.system, p.model, batch, limits=p.limits))
        j = int(np.argmin(sc))
        better = sc[j] < s.best
        return dataclasses.replace(s, key=key, evaluations=s.evaluations + p.max_batch,
                                   best=float(sc[j]) if better else s.best,
                                   best_pa=jax.tree_util.tree_map(lambda x: x[j], batch) if better else s.best_pa)

    def best(self, s: Sampled):
        return (None if s.best_pa is None else s.best_pa), s.best

    def phase(self, s):
        return "sampling"

    def notes(self, s):
        return {"evaluations": s.evaluations}


class Evolutionary(Random):
    """A genetic algorithm on the one-hot encoding, one generation a round; `seeds` (the greedy
    plan's arrays) join the first population; `size` plans in it (None: the problem's batch)."""

    name = "evolutionary"

    def __init__(self, seeds=(), mutation: float | None = None, size: int | None = None):
        self.seeds, self.mutation, self.size = list(seeds), mutation, size

    def init(self, p, seed, budget):
        n = self.size or p.max_batch
        key, sub = jax.random.split(jax.random.PRNGKey(seed))
        pop = _sample(sub, p.system, p.model, p.masks, n, fewest_shards(p.masks))
        for i, s in enumerate(self.seeds[:n]):
            pop = jax.tree_util.tree_map(lambda x, y: x.at[i].set(y), pop, s)
        fit = jnp.asarray(score_plans(p.system, p.model, pop, limits=p.limits))
        return self._best(Sampled(key=key, pop=pop, fit=fit, evaluations=n))

    def step(self, p, s: Sampled, budget) -> Sampled:
        n = self.size or p.max_batch
        rate = jnp.float32(self.mutation if self.mutation is not None else min(0.5, 2.0 / p.T))
        key, sub = jax.random.split(s.key)
        pop, fit = _generation(sub, s.pop, s.fit, p.system, p.model, p.masks, n, rate, p.limits,
                               fewest_shards(p.masks))
        return self._best(dataclasses.replace(s, key=key, pop=pop, fit=fit, evaluations=s.evaluations + n))

    @staticmethod
    def _best(s: Sampled) -> Sampled:
        fit = np.asarray(s.fit)
        j = int(np.argmin(fit))
        return dataclasses.replace(s, best=float(fit[j]), best_pa=jax.tree_util.tree_map(lambda x: x[j], s.pop))

    def phase(self, s):
        return "generations"
