"""pm.search: find the fastest memory-feasible plan, by gradient search or by a baseline.

    result = pm.search(system, model, method="gradient", seed=0, budget_s=30)
    result.plan, result.step_s, result.breakdown, result.wall_s

Methods: gradient (relaxed plans + optax, rounding, repair, vectorized local refinement),
greedy (TorchRec-style), random, evolutionary, exact (MILP over table placements, small instances).
Every method's plan is evaluated by the same hard model. The same seed gives the same plan when
the search finishes within its budget (`converged`); a budget cut depends on the machine's speed.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import jax
import numpy as np

from ..config import ConfigError
from ..evaluate import Breakdown, evaluate
from ..hardware import System
from ..plan import PRECISIONS, SHARDING_TYPES, Plan, from_arrays, to_arrays
from ..workload import RankingModel
from .greedy import greedy_plan
from .local import INFEASIBLE, LocalSearch
from .relax import make_masks, round_params

METHODS = ("gradient", "greedy", "random", "evolutionary", "exact")


@dataclass
class SearchResult:
    method: str
    plan: Plan
    breakdown: Breakdown
    step_s: float
    samples_per_s: float
    feasible: bool
    wall_s: float                      # wall time, compile included
    seed: int
    converged: bool = True             # finished before the budget (so the result is reproducible)
    evaluations: int = 0               # hard plan evaluations spent (where counted)
    notes: dict = field(default_factory=dict)
    system: System | None = None

    @property
    def memory_headroom(self) -> float:
        """Free fraction of usable HBM on the fullest device."""
        mem = float(np.max(np.asarray(self.breakdown.memory_bytes)))
        return 1.0 - mem / float(self.breakdown.capacity_bytes)


def _check(method: str, budget_s, restarts: int, precisions) -> None:
    if method not in METHODS:
        raise ConfigError("", "method", f"is {method!r}; allowed: {', '.join(METHODS)}")
    if budget_s is not None and not (isinstance(budget_s, (int, float)) and budget_s > 0 and np.isfinite(budget_s)):
        raise ConfigError("", "budget_s", f"must be a number of seconds > 0, got {budget_s!r}")
    if not isinstance(restarts, int) or restarts < 1:
        raise ConfigError("", "restarts", f"must be an integer >= 1, got {restarts!r}")
    bad = [p for p in precisions if p not in PRECISIONS]
    if bad or not precisions:
        raise ConfigError("", "precisions", f"{bad or precisions!r}: allowed {', '.join(PRECISIONS)}")


def search(system: System, model: RankingModel, method: str = "gradient", *, seed: int = 0,
           budget_s: float | None = 60.0, restarts: int = 8, steps: int = 150,
           precisions: tuple[str, ...] = ("fp32",), sharding_types: tuple[str, ...] = SHARDING_TYPES,
           freeze_settings: bool = False, start: Plan | None = None, progress: bool = False) -> SearchResult:
    """The fastest memory-feasible plan `method` finds within `budget_s` seconds of wall time.

    precisions: the all-to-all and gradient precisions the plan may use (lower precision changes
    the numerics: fp32 only unless you allow more). sharding_types: the ones tables may use.
    freeze_settings: keep the start plan's dense parallelism, algorithms, precisions, buckets, chunks,
    pipelining and offload; search the tables only. start: a plan to refine (default: greedy).
    Raises ConfigError for an unknown method, a budget <= 0, or a model that fits on no plan.
    """
    _check(method, budget_s, restarts, precisions)
    t0 = time.time()
    deadline = t0 + (budget_s if budget_s is not None else 1e9)
    bad = [t for t in sharding_types if t not in SHARDING_TYPES]
    if bad or not sharding_types:
        raise ConfigError("", "sharding_types", f"{bad or sharding_types!r}: allowed {', '.join(SHARDING_TYPES)}")
    masks = make_masks(system, model, precisions=tuple(precisions), sharding_types=tuple(sharding_types))
    greedy = start if start is not None else greedy_plan(system, model)    # raises if nothing fits
    ls = LocalSearch(system, model, masks, freeze_settings=freeze_settings)
    settings_of = lambda p: dataclasses.replace(greedy, tables=p.tables) if freeze_settings else p
    notes: dict = {}
    evaluations = 0
    converged = True

    if method == "greedy":
        plan = greedy
    elif method == "gradient":
        from .gradient import gradient_search
        params, losses, taken = gradient_search(system, model, masks, seed=seed, restarts=restarts, steps=steps,
                                                warm=greedy, deadline=t0 + 0.5 * (deadline - t0))
        notes["gradient_steps"] = taken
        converged &= taken == steps
        candidates = [settings_of(round_params(jax.tree_util.tree_map(lambda x: x[r], params), masks, system, model))
                      for r in range(restarts)] + [greedy]
        scores = [ls.score(to_arrays(p, system, model)) for p in candidates]
        order = np.argsort(scores, kind="stable")
        notes["rounded_scores_s"] = [float(s) for s in scores]
        best_plan, best = None, np.inf
        finalists = [int(i) for i in order[:3]]
        for rank, i in enumerate(finalists):
            share = t0 + (deadline - t0) * (0.5 + 0.5 * (rank + 1) / len(finalists))
            p, s = ls.run(candidates[i], deadline=min(share, deadline))
            converged &= time.time() < deadline
            if s < best:
                best_plan, best = p, s
        plan = best_plan
    elif method in ("random", "evolutionary"):
        from .baselines import evolutionary_search, random_search
        if method == "random":
            pa, _, evaluations = random_search(system, model, masks, seed=seed, deadline=deadline)
        else:
            seeds = [to_arrays(greedy, system, model)]
            pa, _, evaluations = evolutionary_search(system, model, masks, seed=seed, deadline=deadline, seeds=seeds)
        plan = settings_of(from_arrays(pa, system, model))
        converged = False                       # these run until the budget is spent
    else:  # exact
        from .exact import exact_plan
        plan, notes["milp"] = exact_plan(system, model, greedy)

    bd = evaluate(system, model, plan)
    return SearchResult(method=method, plan=plan, breakdown=bd, step_s=float(bd.step_s),
                        samples_per_s=float(bd.samples_per_s), feasible=bool(bd.feasible),
                        wall_s=time.time() - t0, seed=seed, converged=converged, evaluations=evaluations,
                        notes=notes, system=system)


def compare(system: System, model: RankingModel, methods=("gradient", "greedy", "random", "evolutionary"), *,
            seed: int = 0, budget_s: float | None = 60.0, **kw) -> list[SearchResult]:
    """Run several methods with the same budget each; results in the order given."""
    return [search(system, model, m, seed=seed, budget_s=budget_s, **kw) for m in methods]
