"""Baselines evaluated with the same hard model: random sampling and an evolutionary method.

random        vectorized sampling of discrete plans over the allowed choices (uniform sharding
              type per table, uniform device / domain, uniform settings); the best feasible wins
evolutionary  a genetic algorithm on the same one-hot encoding: tournament selection, uniform
              crossover of whole table rows and of settings, per-table mutation of type and
              device; the best of parents and children survive ((mu + lambda) selection)
Both run a round at a time (a batch, a generation) until their iterations or the wall-clock budget
are spent. Plans are drawn and crossed in numpy (index arithmetic on arrays of some MB) and scored
by the problem's batch scorer, the compiled program every search on the instance shares: a baseline
or a population phase compiles nothing of its own. A round's draws come from a generator seeded by
(seed, round), so a run is a function of its seed and its rounds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..plan import CW, DP, PlanArrays
from ..schema import ALGORITHMS, COLLECTIVES
from .relax import Masks
from .score import TABLE_FIELDS

FIELDS = tuple(f.name for f in dataclasses.fields(PlanArrays) if f.name != "row_shards")   # None in a search's plans


def table_rows(rng: np.random.Generator, masks: Masks, t: np.ndarray, H: int) -> dict:
    """Fresh table rows (TABLE_FIELDS, each [len(t), ...]) for the tables t: a uniform allowed
    sharding type; table-wise on a uniform allowed device, column-wise on k of them (k the fewest
    shards allowed: 2 unless a constraint says otherwise); a uniform allowed domain; the cache ratio
    a fresh placement takes (constraints.Limits.target_cache)."""
    lim, n = masks.limits, len(t)
    pick = lambda ok: np.argmax(np.where(ok, rng.random(ok.shape, np.float32), -1.0), axis=-1)   # uniform in ok
    st = pick(np.asarray(masks.types)[t] > -1)
    k = np.where(st == CW, np.argmax(np.asarray(masks.shards)[t] > 0, axis=-1), 1)
    # k distinct devices among a table's allowed ones, uniformly: the i-th a uniform rank among the
    # allowed devices not yet taken (its rank among all of them: one more for each taken one at or
    # below it, in ascending order), in O(k^2) a row rather than a draw per device
    allowed = np.asarray(lim.devices) > 0
    count, devices = allowed.sum(axis=1)[t], np.argsort(~allowed, axis=1, kind="stable")[t]
    rows, placement = np.arange(n), np.zeros((n, allowed.shape[1]), np.float32)
    taken = np.zeros((n, 0), np.int64)
    for i in range(int(k.max(initial=1))):
        r = (rng.random(n) * np.maximum(count - i, 1)).astype(np.int64)
        for below in np.sort(taken, axis=1).T:
            r += r >= below
        on = i < k
        placement[rows[on], devices[rows[on], np.minimum(r[on], allowed.shape[1] - 1)]] = 1.0 / k[on]
        taken = np.concatenate([taken, r[:, None]], axis=1)
    return dict(shard_type=np.eye(5, dtype=np.float32)[st], placement=placement,
                domain_placement=np.eye(H, dtype=np.float32)[pick(np.asarray(lim.domains)[t] > 0)],
                cw_shards=k.astype(np.float32),
                cache_ratio=np.where(st == DP, 1.0, np.asarray(lim.target_cache())[t]).astype(np.float32))


def sample_plans(rng: np.random.Generator, p, n: int) -> PlanArrays:
    """n random discrete plans (one-hot PlanArrays, numpy) over the allowed choices: table_rows for
    every table, uniform allowed settings."""
    m = p.masks
    flat = table_rows(rng, m, np.tile(np.arange(p.T), n), p.H)
    rows = {f: x.reshape((n, p.T) + x.shape[1:]) for f, x in flat.items()}
    one = lambda mask, shape: np.eye(shape[-1], dtype=np.float32)[
        np.argmax(np.where(np.asarray(mask) > -1, rng.random(shape), -1.0), axis=-1)]
    return PlanArrays(
        **rows, dense_mode=one(m.dense, (n, 3)), algorithm=one(m.algos, (n, len(COLLECTIVES), len(ALGORITHMS))),
        a2a_precision=one(m.a2a, (n, 3)), grad_precision=one(m.grad, (n, 3)),
        offload=((rng.random(n) < 0.5) * float(np.asarray(m.engines))).astype(np.float32),
        pipeline=(rng.random(n) < 0.5).astype(np.float32),
        grad_buckets=(2.0 ** rng.integers(0, 6, n)).astype(np.float32),
        overlap_chunks=(2.0 ** rng.integers(0, 4, n)).astype(np.float32))


def children(rng: np.random.Generator, p, pop: PlanArrays, fit: np.ndarray, n: int, rate: float) -> PlanArrays:
    """n children of the population: two parents each by binary tournament on fit (lower wins),
    each table's row from either (uniform crossover), the settings from either as a whole, and each
    table's row drawn afresh with probability rate (mutation)."""
    def tournament():
        i = rng.integers(0, len(fit), (n, 2))
        return np.where(fit[i[:, 0]] <= fit[i[:, 1]], i[:, 0], i[:, 1])
    a, b = tournament(), tournament()
    rows, setting, mutated = rng.random((n, p.T)) < 0.5, rng.random(n) < 0.5, rng.random((n, p.T)) < rate
    c, t = np.nonzero(mutated)
    fresh = table_rows(rng, p.masks, t, p.H)
    out = {}
    for f in FIELDS:
        x = getattr(pop, f)
        m = rows if f in TABLE_FIELDS else setting
        out[f] = np.where(m.reshape(m.shape + (1,) * (x.ndim - m.ndim)), x[a], x[b])
        if f in TABLE_FIELDS:
            out[f][c, t] = fresh[f]
    return PlanArrays(**out)


def take(pa: PlanArrays, i) -> PlanArrays:
    return PlanArrays(**{f: getattr(pa, f)[i] for f in FIELDS})


@dataclass(frozen=True)
class Sampled:
    """A sampler's state: its seed and rounds taken, the best plan seen (one-hot arrays) and its
    score, the plans evaluated; for the evolutionary method, the population and its fitness too."""

    seed: int
    rounds: int = 0
    best_pa: object = None
    best: float = float("inf")
    evaluations: int = 0
    pop: object = None
    fit: object = None
    done: bool = False

    @property
    def rng(self) -> np.random.Generator:
        """This round's draws: a function of the seed and the rounds taken."""
        return np.random.default_rng([self.seed, self.rounds])


class Random:
    """Vectorized random sampling: one batch of the problem's batch size a round; the best wins."""

    name = "random"

    def init(self, p, seed, budget):
        return Sampled(seed=seed)

    def step(self, p, s: Sampled, budget) -> Sampled:
        batch = sample_plans(s.rng, p, p.max_batch)
        sc = p.pairs(batch)[0]
        j = int(np.argmin(sc))
        better = sc[j] < s.best
        return dataclasses.replace(s, rounds=s.rounds + 1, evaluations=s.evaluations + p.max_batch,
                                   best=float(sc[j]) if better else s.best,
                                   best_pa=take(batch, j) if better else s.best_pa)

    def best(self, s: Sampled):
        return s.best_pa, s.best

    def phase(self, s):
        return "sampling"

    def notes(self, s):
        return {"evaluations": s.evaluations}


class Evolutionary(Random):
    """A genetic algorithm on the one-hot encoding, one generation a round (the first population
    the first); `seeds` (the greedy plan's arrays) join the first population. A population is the
    problem's batch size of plans (a batch the scorer takes in one call), and so are a generation's
    children."""

    name = "evolutionary"

    def __init__(self, seeds=(), mutation: float | None = None):
        self.seeds, self.mutation = list(seeds), mutation

    def init(self, p, seed, budget):
        n = p.max_batch
        s = Sampled(seed=seed)
        pop = sample_plans(s.rng, p, n)
        for i, plan in enumerate(self.seeds[:n]):
            for f in FIELDS:
                getattr(pop, f)[i] = np.asarray(getattr(plan, f))
        return self._best(dataclasses.replace(s, rounds=1, pop=pop, fit=p.pairs(pop)[0], evaluations=n))

    def step(self, p, s: Sampled, budget) -> Sampled:
        n = p.max_batch
        rate = self.mutation if self.mutation is not None else min(0.5, 2.0 / p.T)
        child = children(s.rng, p, s.pop, s.fit, n, rate)
        fit = np.concatenate([s.fit, p.pairs(child)[0]])
        keep = np.argsort(fit, kind="stable")[:n]     # parents first among equals
        pop = PlanArrays(**{f: np.concatenate([getattr(s.pop, f), getattr(child, f)])[keep] for f in FIELDS})
        return self._best(dataclasses.replace(s, rounds=s.rounds + 1, pop=pop, fit=fit[keep],
                                              evaluations=s.evaluations + n))

    @staticmethod
    def _best(s: Sampled) -> Sampled:
        j = int(np.argmin(s.fit))
        return dataclasses.replace(s, best=float(s.fit[j]), best_pa=take(s.pop, j))

    def phase(self, s):
        return "generations"

    def notes(self, s):
        return {"evaluations": s.evaluations, "generations": s.rounds}
