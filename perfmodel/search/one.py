"""One problem's search: the problem built from the allowed choices, the method run by the driver
from the planners' plans, and a plan never worse than the best of them.

The wrappers of api.py (2D replicas, the objective over draws, co-design) each call `search_one`
once or more; this is the only place a method runs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..config import ConfigError
from ..evaluate import evaluate
from ..plan import (NEG, SHARDING_TYPES, Hold, Plan, PlanArrays, held_masks, from_arrays, make_masks, plan_violations,
                    validate_plan)
from .driver import Budget, run
from .exact import admits as exact_admits
from .greedy import greedy_plan
from .methods import method as make_method, spec
from .pipeline import Options
from .problem import Problem
from .result import SearchResult, gain_account
from .score import INFEASIBLE, VIOLATED
from .starts import starts


@dataclass(frozen=True)
class Settings:
    """What a search may choose and how long it runs: everything a wrapper passes on unchanged to
    each search_one it makes (a wrapper replaces the fields it sets: the budget, the start)."""

    seed: int = 0
    budget_s: float | None = None
    iterations: int | None = None
    precisions: tuple = ("fp32",)
    sharding_types: tuple = SHARDING_TYPES
    freeze_settings: bool = False
    options: Options = Options()
    constraints: tuple = (None, None)          # (Constraints, plan.Limits)
    hold: Hold = Hold()
    seeded: bool = True                        # start from the planners' plans (starts.py)
    shapes: str = "all"                        # problem.SHAPES


def make_problem(system, model, *, precisions, sharding_types, freeze_settings, guard=None, limits=None,
                 draws=None, hold: Hold = Hold(), shapes: str = "all") -> Problem:
    """The search problem: the allowed choices as masks (a guard's unpriced types disallowed, the
    per-table constraints' limits applied, the held settings only)."""
    bad = [t for t in sharding_types if t not in SHARDING_TYPES]
    if bad or not sharding_types:
        raise ConfigError("", "sharding_types", f"{bad or sharding_types!r}: allowed {', '.join(SHARDING_TYPES)}")
    masks = make_masks(system, model, precisions=tuple(precisions), sharding_types=tuple(sharding_types),
                       limits=limits)
    held_precisions = [v for k, v in hold.items if k in ("a2a_precision", "grad_precision") and v not in precisions]
    if held_precisions:
        raise ConfigError("", "hold", f"holds precision {held_precisions[0]}, which the search's precisions "
                          f"({', '.join(precisions)}) do not allow")
    masks = held_masks(hold, masks)
    if limits is not None:
        lost = [n for n, row in zip(model.tables.names, masks.types) if not (row > -1).any()]
        if lost:
            t = model.tables.names.index(lost[0])
            allowed = [st for j, st in enumerate(SHARDING_TYPES) if limits.types[t, j] > 0]
            raise ConfigError("constraints", lost[0], f"allows {', '.join(allowed)}, none of which this search can "
                              f"use for the table on system {system.name} (sharding_types {list(sharding_types)}; "
                              f"column_wise needs k | dim with shards >= {int(limits.min_dim[t])} columns on "
                              "2 or more ranks, table_row_wise two scale-up domains)")
    if guard is not None:          # a type the guard has no cost for is never used
        types = np.where(guard.priced(), masks.types, np.minimum(masks.types, NEG))
        lost = [n for n, row in zip(model.tables.names, types) if not (row > -1).any()]
        if lost:
            raise ConfigError("", "guard", f"table {lost[0]!r} has no cost for any sharding type the search may use")
        masks = dataclasses.replace(masks, types=types)
    return Problem(system, model, masks, guard=guard, freeze_settings=freeze_settings, limits=limits, draws=draws,
                   hold=hold, shapes=shapes)


def search_one(system, model, method: str, k: Settings, *, guard=None, on_round=None, draws=None,
               reference: Plan | None = None) -> SearchResult:
    """One search of a 1D plan. A method that picks the candidate of least score (Spec.scores)
    starts from the planners' plans (starts.py, with k.options.start as the user's) and returns
    the best of them where it found nothing lower (notes["starts"]: each start's score, and which
    was kept). draws (uncertainty.robust.Draws): candidates score the objective's quantile over
    them; `reference` (a plan, the nominal search's) is then returned instead where its objective
    is lower than the found plan's, and notes["objective"] holds both values."""
    budget = Budget(iterations=k.iterations, seconds=k.budget_s)
    given, limits = k.constraints
    traits = spec(method)
    if traits.exact and limits is not None:
        exact_admits(system, model, limits, given)
    p = make_problem(system, model, precisions=k.precisions, sharding_types=k.sharding_types,
                     freeze_settings=k.freeze_settings, guard=guard, limits=limits, draws=draws, hold=k.hold,
                     shapes=k.shapes)
    options = k.options
    seeds = []
    if traits.scores and k.seeded and not k.freeze_settings:
        seeds = starts(p, options.start)
        options = dataclasses.replace(options, seeds=tuple(seeds))
    out = run(make_method(method, options.start, options, p, [plan for _, plan in seeds]), p, k.seed, budget,
              on_round)
    plan = out.plan
    if isinstance(plan, PlanArrays):            # a sampler's best: its one-hot arrays
        plan = from_arrays(plan, system, model)
        if k.freeze_settings:
            plan = p.with_settings_of(options.start or greedy_plan(system, model, p.masks))(plan)
    plan = p.held(plan) if plan is not None else None
    notes = dict(out.notes)
    if seeds:
        plan, notes["starts"] = never_worse(p, plan, seeds)
    broken = plan_violations(plan, given, system, model) if limits is not None else []
    if broken and reference is None:       # a sampler that drew no plan keeping them (a search from a start always keeps them)
        raise ConfigError("constraints", broken[0][0], f"{method} found no plan that keeps the constraints in "
                          f"{k.iterations} rounds ({broken[0][1]}); give it more iterations or use gradient")
    if draws is not None:
        notes["objective"] = kept(p, plan, reference, bool(broken))
        if notes["objective"]["kept"] == "nominal-best plan":
            plan = reference
    evaluations = notes.pop("evaluations", 0) + len(seeds)      # the starts are plans priced too
    if traits.profile:
        notes["progress"] = list(out.progress)
        kept_start = seeds and notes.get("starts", {}).get("kept", "search") != "search"
        if kept_start and (not out.progress or notes["starts"]["best_s"] < out.progress[-1][1]):
            notes["progress"].append([round(budget.elapsed(), 4), notes["starts"]["best_s"]])   # the start it returns
    notes["phases"] = [dataclasses.asdict(ph) for ph in out.phases]
    if traits.scores:
        validate_plan(plan, system, model)
    bd = evaluate(system, model, plan)       # the figures a user's own evaluate of the plan gives
    feasible = bool(bd.feasible)
    if guard is not None:
        value = float(np.max(p.details(plan).loads[-1]))       # the loads' last row: the guard's
        met = guard.within(value)
        notes["guard"] = {"name": guard.name, "value_s": value, "cap_s": float(guard.cap), "met": met}
        feasible &= met
    return SearchResult(method=method, plan=plan, breakdown=bd, step_s=float(bd.step_s),
                        samples_per_s=float(bd.samples_per_s), feasible=feasible, wall_s=budget.elapsed(),
                        seed=k.seed, converged=out.stopped != "budget_s", evaluations=evaluations, notes=notes,
                        system=system, iterations=out.iterations, stopped=out.stopped)


def never_worse(p: Problem, found: Plan, seeds: list[tuple[str, Plan]]) -> tuple[Plan, dict]:
    """The found plan, or the start of lower score (then tie-broken score) where one is lower: the
    search never returns a plan worse than a planner's, in the objective it searched. With the
    starts' scores (None for a start that breaks the constraints) and which plan was kept."""
    rate = lambda plan: p.details(plan).rate
    found_rate = rate(found) if found is not None else (float("inf"), float("inf"))   # a sampler that drew none
    rated = [(name, plan, rate(plan)) for name, plan in seeds]
    usable = [r for r in rated if r[2][0] < VIOLATED]
    info = {"scores_s": {name: (r[0] if r[0] < VIOLATED else None) for name, _, r in rated}, "found_s": found_rate[0],
            "kept": "search"}
    if usable:
        name, plan, best = min(usable, key=lambda r: r[2])
        info["best"], info["best_s"] = name, best[0]
        if best < found_rate:
            return plan, dict(info, kept=name)
        if best[0] < INFEASIBLE:       # where the search's gain comes from (a start over memory or a guard's cap has no step to gain on)
            info["gain"] = gain_account(p.breakdown(plan), p.breakdown(found))
    return found, info


def kept(p: Problem, found: Plan, reference: Plan | None, broken: bool) -> dict:
    """The objective's values (p's hard score: the quantile over its draws, INFEASIBLE or more for a
    plan over memory) of the plan the pass found and of `reference`, and which is kept: the
    reference where it scores lower (or the found plan breaks the constraints), so the pass never
    returns a plan of higher objective than the nominal-best plan's (a sampler's pass does not start
    from it)."""
    value = lambda plan: float(p.details(plan).score_s)
    out = {"found_s": value(found), "kept": "search"}
    if reference is not None:
        out["nominal_best_s"] = value(reference)
        if broken or out["nominal_best_s"] < out["found_s"]:
            out["kept"] = "nominal-best plan"
    return out
