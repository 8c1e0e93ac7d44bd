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

from ..plan import FIELDS, ROW_FIELDS, PlanArrays, sample_plans, table_rows, with_rows

# the leaves a population's plans carry: the search's arrays, row_shards a table leaf (plan.with_rows)
LEAVES = FIELDS + ("row_shards",)


def sampled(rng: np.random.Generator, p, n: int) -> PlanArrays:
    """n random plans (plan.sample_plans) in the search's form: every row-wise table over every device."""
    return with_rows(sample_plans(rng, p.masks, n), p.D)


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
    fresh = dict(table_rows(rng, p.masks, t, p.H), row_shards=np.float32(p.D))    # a fresh row-wise table: every device
    out = {}
    for f in LEAVES:
        x = getattr(pop, f)
        m = rows if f in ROW_FIELDS else setting
        out[f] = np.where(m.reshape(m.shape + (1,) * (x.ndim - m.ndim)), x[a], x[b])
        if f in ROW_FIELDS:
            out[f][c, t] = fresh[f]
    return PlanArrays(**out)


def take(pa: PlanArrays, i) -> PlanArrays:
    return PlanArrays(**{f: getattr(pa, f)[i] for f in LEAVES})


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
        batch = sampled(s.rng, p, p.max_batch)
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
        pop = sampled(s.rng, p, n)
        for i, plan in enumerate(self.seeds[:n]):
            plan = with_rows(plan, p.D)
            for f in LEAVES:
                getattr(pop, f)[i] = np.asarray(getattr(plan, f))
        return self._best(dataclasses.replace(s, rounds=1, pop=pop, fit=p.pairs(pop)[0], evaluations=n))

    def step(self, p, s: Sampled, budget) -> Sampled:
        n = p.max_batch
        rate = self.mutation if self.mutation is not None else min(0.5, 2.0 / p.T)
        child = children(s.rng, p, s.pop, s.fit, n, rate)
        fit = np.concatenate([s.fit, p.pairs(child)[0]])
        keep = np.argsort(fit, kind="stable")[:n]     # parents first among equals
        pop = PlanArrays(**{f: np.concatenate([getattr(s.pop, f), getattr(child, f)])[keep] for f in LEAVES})
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
