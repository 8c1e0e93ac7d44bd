"""The search methods behind one protocol (driver.Method): greedy and exact take one pass at init;
random and evolutionary a batch or a generation a round; gradient a chain of phases (pipeline.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..evaluate import evaluate
from ..plan import PRECISIONS, Plan
from .baselines import Evolutionary, Random
from .exact import exact_plan
from .greedy import greedy_plan
from ..interop.hugectr import as_recipe, hugectr_plan, with_run_settings
from .pipeline import Gradient, Options



@dataclass(frozen=True)
class OnePass:
    plan: Plan
    score: float
    notes: dict = field(default_factory=dict)
    done: bool = True


class Greedy:
    """TorchRec-style greedy planning (greedy.py), or the given start as it is."""

    name = "greedy"

    def __init__(self, start: Plan | None = None):
        self.start = start

    def init(self, p, seed, budget) -> OnePass:
        plan = self.start if self.start is not None else greedy_plan(p.system, p.model, p.masks)
        return OnePass(plan, float(evaluate(p.system, p.model, plan).step_s))

    def step(self, p, s, budget):
        return s

    def best(self, s: OnePass):
        return s.plan, s.score

    def phase(self, s) -> str:
        return self.name

    def notes(self, s: OnePass) -> dict:
        return dict(s.notes)


class Exact(Greedy):
    """The MILP optimum of the table-placement subproblem around the start (exact.py)."""

    name = "exact"

    def init(self, p, seed, budget) -> OnePass:
        start = self.start if self.start is not None else greedy_plan(p.system, p.model, p.masks)
        devices = None if p.limits is None else p.limits.devices
        plan, info = exact_plan(p.system, p.model, start, devices=devices)
        return OnePass(plan, info["hard_step_s"], {"milp": info})


class HugeCTR(Greedy):
    """HugeCTR's own planner (interop/hugectr.py) with a recipe ('hugectr:auto:7:0.008'), the run's
    settings chosen as a run of it picks them (with_run_settings): a framework's plan to compare with."""

    name = "hugectr"

    def __init__(self, recipe: str):
        self.recipe = as_recipe(recipe)

    def init(self, p, seed, budget) -> OnePass:
        r = self.recipe
        tables = hugectr_plan(p.system, p.model, r.plan, r.mem_comm_bw_ratio, r.dp_threshold_gb)
        allowed = tuple(x for x, m in zip(PRECISIONS, np.asarray(p.masks.a2a)) if m > -1)
        plan = with_run_settings(p.system, p.model, tables, precisions=allowed)
        return OnePass(plan, float(evaluate(p.system, p.model, plan).step_s), {"planner": str(r)})


@dataclass(frozen=True)
class Spec:
    """A method's traits, read wherever a search's wrappers must know what a method does (no code
    outside this registry tests a method's name)."""

    name: str
    build: object                # (recipe name, start, options, problem) -> a driver.Method
    scores: bool = False         # its plan is the candidate of least score: an objective over draws, the
                                 # planners' starts and the never-worse rule apply (one.py)
    samples: bool = False        # samples until its budget is spent (random, evolutionary)
    refines: bool = False        # takes a start plan and improves it (co-design hands it its last plan)
    guarded: bool = False        # searches under a guard's cap
    exact: bool = False          # a MILP of small instances (its admissibility is checked first)

    @property
    def profile(self) -> bool:
        """It records an anytime profile (a method that builds its plan by its own rule does not)."""
        return self.scores


def _evolutionary(name, start, options, problem, seeds=()):
    plans = list(seeds) or [start if start is not None else greedy_plan(problem.system, problem.model, problem.masks)]
    return Evolutionary([problem.arrays(q) for q in plans])


REGISTRY = {s.name: s for s in (
    Spec("gradient", lambda name, start, options, problem, seeds=(): Gradient(options), scores=True, refines=True,
         guarded=True),
    Spec("greedy", lambda name, start, options, problem, seeds=(): Greedy(start)),
    Spec("random", lambda name, start, options, problem, seeds=(): Random(), scores=True, samples=True),
    Spec("evolutionary", _evolutionary, scores=True, samples=True, refines=True),
    Spec("exact", lambda name, start, options, problem, seeds=(): Exact(start), exact=True),
    Spec("hugectr", lambda name, start, options, problem, seeds=(): HugeCTR("auto" if name == "hugectr" else name)),
)}
METHODS = tuple(REGISTRY)
SAMPLERS = tuple(n for n, s in REGISTRY.items() if s.samples)     # methods that sample until their budget is spent
OBJECTIVE_METHODS = tuple(n for n, s in REGISTRY.items() if s.scores)


def is_method(name: str) -> bool:
    """`name` is a method: one of METHODS, or hugectr with a recipe (hugectr:PLAN[:RATIO[:THRESHOLD_GB]])."""
    return name in REGISTRY or str(name).startswith("hugectr:")


def spec(name: str) -> Spec:
    """The traits of method `name` (a hugectr recipe is the hugectr method's)."""
    return REGISTRY["hugectr" if str(name).startswith("hugectr:") else name]


def method(name: str, start: Plan | None, options: Options, problem, seeds=()) -> object:
    """The method called `name`, for a search from `start` (None: greedy's plan); seeds: the plans a
    population starts with (starts.starts)."""
    return spec(name).build(name, start, options, problem, seeds)
