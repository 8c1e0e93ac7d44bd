"""The gradient method: a chain of phases over one explicit state.

  population  on a small instance (every move scored: p.exhaustive), first: the evolutionary
           method's generations (baselines.Evolutionary as the "evolutionary" method runs it, a
           batch of plans, greedy's in the first, the same seed; under a guard also the start
           packed on its costs, and the generations score with it), until STALL generations find
           no lower plan, or half the rounds (at most GENERATIONS);
           its best plan is the third basin of the start's race, and the one that descends first.
           None when that half is under MIN_GENERATIONS (a search of 300 rounds, a study's point,
           has none) or with frozen settings (they vary the settings).
  start    greedy's plan (or the given start), or its multi-resource repacking (pack.py) when that
           scores better (with a guard, also a start packed on the guard's costs); on a large
           instance its best compound move when that leads by COMPOUND_LEAD; on a small one a race
           (race.py) of the start's descent and its best compound move's. Half the rounds left.
  relaxed  batches of relaxed restarts (relax.py, adam.py: every choice a masked softmax at an
           annealed temperature, Adam on all restarts in one vmapped step; a batch's `steps` steps
           are one round, its rounding another), each restart rounded
           (argmax, and argmax repacked), the FINALISTS best roundings raced with half the rounds
           left (the start's descent joins the first race when it had not stopped); batches from
           other seeds, restart 0 warm from the best plan, while a batch takes at most half the
           rounds left, up to `batches`; none that would leave its finalists no round each.
  kicks    iterated local search: the best plan kicked (a few seeded random table moves) and
           descended, kept when better; `planned` kicks.

The order of the last two depends on what a kick costs. On a large instance a kick's descent
(first-order-ranked moves) takes tens of rounds, and the relaxed phase's restarts are the better
use of them: start, relaxed, kicks. On a small one (every move scored: p.exhaustive) a descent is
a few cheap rounds and the kicks find the nearby basins first: population, start, kicks while
each finds a better plan, the relaxed phase at the first that does not (a stalled local search is
when a restart from elsewhere pays), then the rest of the kicks from the best plan held. There a
search makes the same kicks from the same plans as the search without the relaxed phase until that
kick, so the relaxed phase spends only rounds the kicks had stopped paying for.

The population phase is there because a descent from greedy's plan keeps greedy's basin: where
greedy's plan is far from good, the descents of its start and its compound move stall in it, while
a population's best plan, its tables crossed from many random plans, starts a descent in another.
A generation is a batch of children built in numpy and scored in one call of the batch scorer the
descents use, so the phase compiles nothing of its own; the search holds the population's best plan
as it comes; on MLPerf, where greedy's basin is the good one, the phase stalls within a few hundred
generations of tens of milliseconds. The phase is the evolutionary method's first generations, so
the gradient method's plan is never worse than that method's after as many generations.

Gradient information enters twice, each switched by an option for the ablation: the relaxed phase
(relaxed=False skips it), and first-order ranking of a large instance's moves (rank=False: the
moves off the hot devices instead; descent.py). Every phase advances a round per step, and every
allocation is a share of the rounds left, so the plan is a function of the problem, the seed and
the iterations.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import jax
import numpy as np

from ..plan import Plan, from_arrays
from . import adam
from . import descent as ds
from . import moves as mv
from . import race as rc
from .baselines import Evolutionary
from .compound import group_moves, pick_compound
from .greedy import greedy_plan
from .guard import packed_start
from .pack import rebalance
from .problem import Problem
from .relax import round_params

FINALISTS = 4          # rounded restarts raced
RELAXED_BATCHES = 8    # batches of relaxed restarts a search may run
COMPOUND_LEAD = 0.03   # a compound move becomes the start of a large instance's descent when 3 % better
KICK_WORK = 65536      # iterated-local-search kicks: 65,536 / (tables x devices), between 2 and 30
STALL = 50             # generations without a lower plan that end it ...
GENERATIONS = 1000     # ... or half the rounds, up to this many ...
MIN_GENERATIONS = 200  # ... and none when that half is fewer than this (MLPerf's stall after 130-260)


@dataclass(frozen=True)
class Options:
    restarts: int = 8
    steps: int = 150                 # Adam steps per relaxed batch
    batches: int = RELAXED_BATCHES
    relaxed: bool = True             # run the relaxed phase
    rank: bool = True                # first-order ranked moves on large instances
    population: bool = True          # a small instance's population phase
    start: Plan | None = None        # the plan to refine (default: greedy's)
    seeds: tuple = ()                # ((name, plan), ...): the planners' plans (starts.py); the best is the
                                     # start, and all of them join the population


@dataclass(frozen=True)
class Batch:
    """A relaxed batch in flight: its parameters and optimizer state, the steps taken."""

    params: object
    opt: object
    taken: int = 0                   # Adam steps taken (all of them in one round)
    nonfinite: tuple = ()            # per step, the gradient entries that were not finite


@dataclass(frozen=True)
class State:
    phase: str
    best_plan: Plan
    best: float
    greedy: Plan
    seed: int = 0
    race: rc.Race | None = None
    incumbent: bool = False          # the start's descent had not stopped: it joins the first race
    relaxed_due: bool = False        # a small instance's relaxed phase, run when a kick first finds nothing
    early: tuple = (None, float("inf"))   # a small instance's best start compound move, scored in numpy
    within: Plan | None = None       # under a guard: greedy's choices packed on its costs (guard.packed_start)
    pop: object = None               # the population phase's baselines.Sampled
    generations: int = 0             # generations the population phase may take (0: none)
    pop_gained: int = 0              # the last generation that lowered the population's best
    evolved: Plan | None = None      # the population's best plan, a basin of the start's race
    starts: tuple = ()               # the names of the start race's plans, by origin
    seeds: tuple = ()                # the planners' plans (Options.seeds), the start's first
    batch: Batch | None = None
    batches: int = 0                 # relaxed batches begun
    batch_began: int = 0             # the round (budget.used) at which the last batch began
    kick: ds.Descent | None = None
    kicks: int = 0
    planned: int = 0
    notes: dict = field(default_factory=dict)
    done: bool = False


def _better(s: State, plan: Plan, score: float) -> State:
    return dataclasses.replace(s, best_plan=plan, best=score) if score < s.best * ds.LOWER else s


def _half(budget) -> int | None:
    left = budget.left()
    return None if left is None else max(left // 2, 1)


class Gradient:
    """The gradient method (module docstring) under the driver's protocol."""

    name = "gradient"

    def __init__(self, options: Options = Options()):
        self.o = options

    # ------------------------------------------------------------------ start
    def init(self, p: Problem, seed: int, budget) -> State:
        """Greedy's plan (or the start), under a guard also its choices packed on the guard's
        costs; on a small instance their best compound move, all scored in numpy (score.eager), so
        that they are held before any program is compiled."""
        notes, seeds = {}, ()
        if self.o.seeds:            # the planners' plans: the best (least score, then tie-broken) is the start
            rated = [(*p.details(plan, eager=p.eager).rate, name, plan) for name, plan in self.o.seeds]
            best = min(range(len(rated)), key=lambda i: rated[i][:2])
            greedy = rated[best][3]
            seeds = tuple(plan for *_, plan in [rated[best]] + rated[:best] + rated[best + 1:])
            notes = {"best_start": rated[best][2]}
        else:
            greedy = p.held(self.o.start if self.o.start is not None else greedy_plan(p.system, p.model, p.masks,
                                                                                          hold=p.hold))
        within = packed_start(p, greedy) if p.guard is not None else None
        s = State(phase="start", best_plan=greedy, best=float("inf"), greedy=greedy, seed=seed, within=within,
                  planned=int(np.clip(KICK_WORK / (p.T * p.D), 2, 30)), seeds=seeds, notes=notes)
        left = budget.left()
        generations = GENERATIONS if left is None else min(GENERATIONS, left // 2)
        if self.o.population and p.exhaustive and not p.freeze_settings \
                and generations >= MIN_GENERATIONS:
            s = dataclasses.replace(s, phase="population", generations=generations)
        if not p.eager:
            return s
        g_step, g_tie = p.details(greedy, eager=True).rate
        early = _compound(p, greedy, g_step, g_tie)
        s = dataclasses.replace(s, best=g_step)
        if within is not None:      # a start within the guard's cap (greedy's seldom is), and its compound move
            w_step, w_tie = p.details(within, eager=True).rate
            s = _better(s, within, w_step)
            w_early = _compound(p, within, w_step, w_tie)
            early = w_early if w_early[1] < early[1] else early
        s = dataclasses.replace(s, early=early)
        return _better(s, *early) if early[0] is not None else s

    def _setup(self, p: Problem, s: State, budget) -> State:
        """The start's race: its starts scored by the compiled scorer (module docstring)."""
        greedy, early = s.greedy, s.early
        d = p.details(greedy)
        greedy_score, tie = d.rate
        start, start_tie, start_step, name = greedy, tie, greedy_score, s.notes.get("best_start", "greedy")
        packed = _repacked(p, greedy, start_tie, d.memory_bytes)
        if packed is not None:
            (start, start_tie, start_step), name = packed, "repacked"
        if s.within is not None:    # a start within the guard's cap, packed on its costs
            within = s.within
            within_step, within_tie = p.details(within).rate
            if within_tie < start_tie:
                start, start_tie, start_step, name = within, within_tie, within_step, "packed on the guard's costs"
        if not p.exhaustive:        # no rounds to race two basins: the compound move when it leads
            (_, ties), group = group_moves(p, start, p.arrays(start))
            k = leading(ties, start_tie)
            if k is not None:
                start, name = group(k), name + ", compound move"
                start_step = float(p.details(start).score_s)
            plans, steps, names = [start], [start_step], [name]
        else:                       # two basins: the start's and its best compound move's (or greedy's)
            compound, compound_step = _compound(p, start, start_step, start_tie) if start is not greedy else early
            if early[0] is not None and early[1] < compound_step:
                compound, compound_step = early
            plans, steps = [start] + ([compound] if compound is not None else []), [start_step, compound_step]
            names = [name, name + ", compound move"]
        first = None
        if s.evolved is not None:   # the population's basin descends first: the most rounds went into it
            evolved, evolved_step, evolved_name = self._evolved_start(p, s.evolved)
            first, plans, steps = len(plans), plans + [evolved], steps[:len(plans)] + [evolved_step]
            names = names[:first] + [evolved_name]
        race = rc.start(plans, steps, allowance=_half(budget), rank=self.o.rank, first=first)
        s = dataclasses.replace(s, race=race, starts=tuple(names))
        if s.evolved is None:       # held in the compiled scorer's figures (the population's are already)
            s = dataclasses.replace(s, best_plan=greedy, best=greedy_score)
        return _better(s, *race.best[:2])

    @staticmethod
    def _evolved_start(p: Problem, plan: Plan) -> tuple[Plan, float, str]:
        """The population's plan, or its repacking when that scores better (as greedy's), its step
        and its name."""
        d = p.details(plan)
        step, tie = d.rate
        packed = _repacked(p, plan, tie, d.memory_bytes)
        if packed is not None:
            return packed[0], packed[2], "population, repacked"
        return plan, float(step), "population"

    # ------------------------------------------------------------------ the chain
    def step(self, p: Problem, s: State, budget) -> State:
        if s.phase == "population":
            return self._population(p, s, budget)
        if s.phase == "start":
            return self._start(p, s, budget)
        if s.phase == "relaxed":
            return self._relaxed(p, s, budget)
        return self._kicks(p, s, budget)

    def _population(self, p, s, budget) -> State:
        """A generation a round (the first population the first round); the best plan after the
        last joins the start's race."""
        if s.pop is None:
            seeds = list(s.seeds or [s.greedy]) + ([s.within] if s.within is not None else [])
            pop = Evolutionary([p.arrays(q) for q in seeds]).init(p, s.seed, budget)
        else:
            pop = Evolutionary().step(p, s.pop, budget)
        generation = pop.rounds
        if s.pop is not None and pop.best < s.pop.best * ds.LOWER:
            s = dataclasses.replace(s, pop_gained=generation)
        if pop.best < s.best * ds.LOWER:        # held as it comes: a search cut now returns it
            s = _better(s, p.held(from_arrays(pop.best_pa, p.system, p.model)), pop.best)
        if generation < s.generations and generation - s.pop_gained < STALL:
            return dataclasses.replace(s, pop=pop)
        notes = dict(s.notes, generations=generation, population_s=pop.best)
        return dataclasses.replace(s, phase="start", pop=None,
                                   evolved=p.held(from_arrays(pop.best_pa, p.system, p.model)), notes=notes)

    def _start(self, p, s, budget) -> State:
        if s.race is None:
            return self._setup(p, s, budget)
        race = rc.step(p, s.race)
        s = _better(dataclasses.replace(s, race=race), *race.best[:2])
        if not race.done:
            return s
        plan, score, origin = race.best
        notes = dict(s.notes, start=s.starts[origin], refined_start_s=score)
        if self.o.relaxed and not p.exhaustive:
            return self._begin_relaxed(p, dataclasses.replace(s, notes=notes, incumbent=_unfinished(race)), budget)
        return self._begin_kicks(p, dataclasses.replace(s, notes=notes, relaxed_due=self.o.relaxed), budget)

    def _begin_relaxed(self, p, s, budget) -> State:
        left = budget.left()
        # a batch that would leave its finalists no round each to descend is not begun
        if s.batches >= self.o.batches or (left is not None and left < FINALISTS + 2):
            return self._begin_kicks(p, s, budget)
        entropy = s.seed if s.batches == 0 else [s.seed, s.batches]
        warm = s.greedy if s.batches == 0 else s.best_plan
        params, opt = adam.prepare(p.system, p.model, seed=entropy, restarts=self.o.restarts, warm=warm)
        return dataclasses.replace(s, phase="relaxed", batch=Batch(params, opt), batches=s.batches + 1,
                                   batch_began=budget.used, race=None)

    def _relaxed(self, p, s, budget) -> State:
        b = s.batch
        if b is not None and b.taken < self.o.steps:           # the Adam steps of every restart: one round
            step = adam.step_of(self.o.restarts, p.system, p.model)
            params, opt, bad = b.params, b.opt, []
            for i in range(self.o.steps):
                params, opt, _, nonfinite = step(params, opt, p.masks, adam.temperature(i, self.o.steps))
                bad.append(nonfinite)
            return dataclasses.replace(s, batch=Batch(params, opt, self.o.steps, tuple(bad)))
        if b is not None:                                      # round, score, race the finalists
            notes = dict(s.notes)
            notes["gradient_steps"] = notes.get("gradient_steps", 0) + b.taken
            nonfinite = int(sum(int(x) for x in b.nonfinite))
            if nonfinite:           # a bug in the model's derivative, if ever > 0: said, not hidden
                notes["nonfinite_gradient_entries"] = notes.get("nonfinite_gradient_entries", 0) + nonfinite
            candidates = roundings(b.params, p, s.greedy)
            scores = p.scores_of(candidates)
            finalists = [candidates[int(i)] for i in np.argsort(scores, kind="stable")[:FINALISTS]]
            if not s.incumbent:
                race = rc.start(finalists, allowance=_half(budget), rank=self.o.rank)
            else:                   # the start's descent, still going, races them with all the rounds left
                race = rc.start([s.best_plan] + finalists, [s.best], allowance=budget.left(), rank=self.o.rank)
            return dataclasses.replace(s, batch=None, race=race, notes=notes, incumbent=False)
        race = rc.step(p, s.race)
        s = _better(dataclasses.replace(s, race=race), *race.best[:2])
        if not race.done:
            return s
        left, took = budget.left(), budget.used - s.batch_began
        if left is None or took <= 0.5 * left:
            return self._begin_relaxed(p, s, budget)
        return self._begin_kicks(p, s, budget)

    # ------------------------------------------------------------------ kicks
    def _begin_kicks(self, p, s, budget) -> State:
        s = dataclasses.replace(s, phase="kicks", race=None, batch=None, notes=dict(s.notes, relaxed_batches=s.batches))
        return self._next_kick(p, s, budget)

    def _next_kick(self, p, s, budget) -> State:
        if s.kicks >= s.planned:
            if s.relaxed_due:        # every kick paid: the relaxed phase takes the rounds they left
                return self._begin_relaxed(p, dataclasses.replace(s, relaxed_due=False), budget)
            return dataclasses.replace(s, kick=None, done=True, notes=dict(s.notes, kicks=s.kicks))
        rng = np.random.default_rng([s.seed, s.kicks])
        d = ds.start(p, mv.kick(p, s.best_plan, rng), rank=self.o.rank)
        return dataclasses.replace(s, kick=d, kicks=s.kicks + 1)

    def _kicks(self, p, s, budget) -> State:
        d = ds.descend(p, s.kick)
        s = dataclasses.replace(s, kick=d)
        if not d.done:
            return s
        before = s.best
        s = _better(s, *d.best)
        if s.relaxed_due and s.best >= before:      # the first kick that found nothing better
            return self._begin_relaxed(p, dataclasses.replace(s, kick=None, relaxed_due=False), budget)
        return self._next_kick(p, s, budget)

    # ------------------------------------------------------------------ protocol
    def best(self, s: State):
        return s.best_plan, s.best

    def phase(self, s: State) -> str:
        return s.phase

    def notes(self, s: State) -> dict:
        out = dict(s.notes)
        if s.phase == "start" and s.race is not None:      # cut in the start's race: the plan leading it
            out["start"] = s.starts[s.race.best[2]]
        out.setdefault("kicks", s.kicks)
        out.setdefault("relaxed_batches", s.batches)
        out.setdefault("gradient_steps", 0)
        return out


def _repacked(p: Problem, plan: Plan, tie: float, memory) -> tuple[Plan, float, float] | None:
    """`plan`'s multi-resource repacking (pack.rebalance), its tie-broken score and its step, when
    it scores below `tie` (plan's own); None otherwise."""
    packed = rebalance(p.system, p.model, plan, memory)
    if packed is plan:
        return None
    packed_step, packed_tie = p.details(packed).rate
    return (packed, packed_tie, packed_step) if packed_tie < tie else None


def _unfinished(race: rc.Race) -> bool:
    """Whether the race winner's descent had not stopped on its own (it joins the next race)."""
    e = min(race.field, key=lambda e: e.score)
    return e.descent is not None and not e.stopped


def leading(ties: np.ndarray, start_tie: float) -> int | None:
    """The compound move a large instance starts from: the least tie-broken one when it is
    COMPOUND_LEAD below the start's (a move that barely helps is left to the descent, which tries
    compound moves when single moves stall); None otherwise."""
    if not len(ties):
        return None
    k = int(np.argmin(ties))
    return k if ties[k] < (1.0 - COMPOUND_LEAD) * start_tie else None


def _compound(p: Problem, start: Plan, start_step: float, start_tie: float) -> tuple[Plan | None, float]:
    """A small instance's second basin: `start`'s compound move of least step time when below
    start_step, else its least tie-broken one when below start_tie (as a descent takes them), and
    its step time; (None, inf) when neither is lower. Scored in numpy when p.eager."""
    (hard, tie), group = group_moves(p, start, p.arrays(start), eager=p.eager)
    k = pick_compound(hard, tie, start_step * ds.LOWER, start_tie)
    return (group(k), float(hard[k])) if k is not None else (None, float("inf"))


def roundings(params, p: Problem, base: Plan) -> list[Plan]:
    """Discrete plans from relaxed restarts (leading axis of `params`): each restart's argmax
    rounding, then each again with its table-wise / column-wise shards repacked over resources
    (pack.rebalance): argmax rounding keeps the relaxation's sharding types and settings but not its
    balance (a table spread over many devices lands whole on one). Frozen settings stay `base`'s."""
    params = jax.tree_util.tree_map(np.asarray, params)    # sliced in numpy: no op-by-op compile per restart
    n = jax.tree_util.tree_leaves(params)[0].shape[0]
    settings_of = p.with_settings_of(base)
    rounded = [settings_of(round_params(jax.tree_util.tree_map(lambda x: x[r], params), p.masks, p.system, p.model))
               for r in range(n)]
    return rounded + [rebalance(p.system, p.model, q, p.details(q).memory_bytes) for q in rounded]
