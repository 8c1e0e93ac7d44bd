"""A search for an objective over draws of the uncertain inputs ("p90", say): the nominal search,
then the same method at the objective from its plan (uncertainty/robust.py holds the objective)."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..config import ConfigError
from ..hardware import System
from ..workload import RankingModel
from .driver import Budget
from .methods import OBJECTIVE_METHODS, spec
from .one import search_one
from .progress import Progress
from .result import SearchResult

# A round of the objective's pass prices each candidate at K draws (at K = 64 some 30 times a nominal
# round's cost): this keeps the pass near the nominal search's time on a 2-core CPU (MLPerf on h100-64:
# 60 rounds, about 35 s, beside the nominal search's 50 s)
ROBUST_WORK = 6.4e6
ROBUST_ITERATIONS = (20, 1000)


def checked_objective(objective, draws, uncertainty_seed, method, co_design) -> float | None:
    """The objective's quantile (None: nominal), checked with what it is searched with."""
    from ..uncertainty.robust import check_objective_draws, parse_objective
    from ..uncertainty.propagate import check_seed
    q = parse_objective(objective)
    if q is None:
        for name, v in (("draws", draws), ("uncertainty_seed", uncertainty_seed)):
            if v is not None:
                raise ConfigError("", name, f"is for an objective over draws (objective 'p90', say); the objective is "
                                  f"{objective!r}")
        return None
    if draws is not None:
        check_objective_draws(draws)
    if uncertainty_seed is not None:
        check_seed(uncertainty_seed, "uncertainty_seed")
    if not spec(method).scores:
        raise ConfigError("", "objective", f"is {objective!r}, which is for the methods that score candidate plans "
                          f"({', '.join(OBJECTIVE_METHODS)}); {method} builds its plan by its own rule (give "
                          "objective 'nominal' with it)")
    if co_design is not None:
        raise ConfigError("", "objective", f"is {objective!r}: co-design searches the nominal step only (give "
                          "objective 'nominal' with co_design)")
    return q


def robust_iterations(system: System, model: RankingModel, draws: int) -> int:
    """The rounds the objective's pass takes when iterations="auto": ROBUST_WORK / (tables x
    devices x draws), within ROBUST_ITERATIONS. Its rounds score every candidate at every draw."""
    return int(np.clip(ROBUST_WORK / (model.tables.count * system.num_chips * draws), *ROBUST_ITERATIONS))


def robust(system, model, method, q, draws, uncertainty_seed, iterations, guard, progress, k) -> SearchResult:
    """The nominal search, then the objective's pass from its plan, the plan of lower objective of
    the two, and both plans at the check's draws (search's objective)."""
    from ..uncertainty import robust as rb
    K = rb.DEFAULT_OBJECTIVE_DRAWS if draws is None else int(draws)
    useed = 0 if uncertainty_seed is None else int(uncertainty_seed)
    objective_draws = rb.make_draws(system, model, q, K, useed)      # refuses a problem with no uncertain inputs
    budget = Budget(seconds=k.budget_s)
    name = rb.objective_name(q)
    with Progress(progress, k.budget_s, k.iterations, f"search {method} (nominal)") as bar:
        nominal = search_one(system, model, method, k, guard=guard, on_round=bar.update)
    left = None if k.budget_s is None else max(k.budget_s - budget.elapsed(), 1e-3)
    # the objective's pass refines the nominal-best plan: the gradient method's local search and
    # kicks under the objective (its relaxed restarts and population, which explore for the
    # nominal pass, would price every one of their candidates at every draw); the planners' plans
    # started the nominal pass, whose plan is the pass's reference
    options = dataclasses.replace(k.options, start=nominal.plan, relaxed=False, population=False)
    with Progress(progress, left, iterations, f"search {method} ({name} over {K} draws)") as bar:
        r = search_one(system, model, method, dataclasses.replace(k, budget_s=left, iterations=iterations,
                                                                  options=options, seeded=False),
                       guard=guard, on_round=bar.update, draws=objective_draws, reference=nominal.plan)
    check = rb.compare(system, model, r.plan, nominal.plan, q, seed=rb.check_seed_of(useed),
                       progress=f"{name} check" if progress else None)
    info = dict(r.notes.pop("objective"), objective=name, q=q, draws=K, seed=useed,
                inputs=len(objective_draws.spec), iterations=iterations, check=check)
    # the notes of both passes: the phases in order (the objective's named after it), the counts summed
    notes = dict(nominal.notes, **r.notes, objective=info)
    notes["phases"] = nominal.notes["phases"] + [dict(ph, name=f"{name} {ph['name']}") for ph in r.notes["phases"]]
    for key in ("kicks", "relaxed_batches", "gradient_steps", "generations"):
        if key in nominal.notes and key in r.notes:
            notes[key] = nominal.notes[key] + r.notes[key]
    if "progress" in r.notes:     # the objective's values, in seconds since the call (the nominal pass first)
        notes["progress"] = [[round(t + nominal.wall_s, 4), v] for t, v in r.notes["progress"]]
    return dataclasses.replace(r, notes=notes, wall_s=budget.elapsed(), iterations=nominal.iterations + r.iterations,
                               evaluations=nominal.evaluations + r.evaluations,
                               converged=nominal.converged and r.converged, nominal=nominal)
