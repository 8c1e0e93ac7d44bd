"""2D sparse parallelism in a search: the replica counts a plan may take, a quick screen of them,
and the search of each count's sharding group as its own problem (one.search_one)."""

from __future__ import annotations

import dataclasses

from ..config import ConfigError
from ..cost.arrays import as_numpy
from ..evaluate import evaluate, step_model
from ..hardware import System, replication_problem, sync_every_problem
from ..plan import make_masks, plan_arrays, resolve as resolve_limits, sharding_problem, stack
from ..schema import GROUP_LAYOUTS
from .driver import Budget
from .greedy import greedy_plan
from .one import search_one
from .progress import Progress
from .result import SearchResult

SCREEN_AT = 3          # more replica counts than this are screened by their greedy plans first
# From this many chips a default search (replicas=None, no constraint on them) screens every replica
# count the system's domains allow: production shards recommendation models in 2D groups at this
# scale (Meta's 2D sparse parallelism, 1,024 GPUs in groups of 256)
TWO_D_AT = 1024


def plan_wide(given, replicas, sync_every, num_chips: int) -> tuple:
    """(replicas, sync_every) of a search: the arguments, else the constraints', else "auto" from
    TWO_D_AT chips and 1 below; arguments the constraints rule out are a ConfigError naming the
    constraint."""
    if replicas is None:
        replicas = list(given.replicas) if given.replicas is not None else "auto" if num_chips >= TWO_D_AT else 1
    elif given.replicas is not None and replicas != "auto":
        asked = list(replicas) if isinstance(replicas, (list, tuple)) else [replicas]
        bad = [r for r in asked if r not in given.replicas]
        if bad:
            raise ConfigError(given.source, "replicas", f"allows {list(given.replicas)}; the search was asked for {bad[0]}")
    if sync_every is None:
        sync_every = given.sync_every if given.sync_every is not None else 1
    elif given.sync_every is not None and not isinstance(sync_every, bool) and isinstance(sync_every, int) \
            and sync_every > given.sync_every:
        raise ConfigError(given.source, "sync_every", f"allows at most {given.sync_every}; the search was asked for "
                          f"{sync_every}")
    return replicas, sync_every


def replica_options(system: System, layout: str = "strided") -> list[int]:
    """Every replica count a 2D plan may take on `system` in `layout` (hardware.replication_problem),
    1 included: the counts whose groups hold whole domains of every level."""
    D = system.num_chips
    return [r for r in range(1, D // 2 + 1) if D % r == 0 and replication_problem(system, r, layout) is None]


def replica_counts(system: System, replicas, layout: str, sync_every, start, given_replicas=None) -> list[int]:
    """The replica counts a search tries: `replicas` checked (an integer, a list of them or "auto"),
    or the start plan's."""
    if start is not None and start.replicas != 1:
        return [start.replicas]
    if replicas == "auto":
        counts = replica_options(system, layout)
        if given_replicas is not None:          # "auto" within what the constraints allow
            counts = [r for r in counts if r in given_replicas]
            if not counts:
                raise ConfigError("constraints", "replicas", f"allows {list(given_replicas)}, none of which "
                                  f"{system.name} can take in {layout} groups (it allows "
                                  f"{replica_options(system, layout)})")
    else:
        counts = list(replicas) if isinstance(replicas, (list, tuple)) else [replicas]
        if not counts:
            raise ConfigError("", "replicas", "is an empty list; give 1, a count, a list of counts or 'auto'")
    for r in counts:
        why = replication_problem(system, r, layout)
        if why is not None:
            raise ConfigError("", "group_layout" if layout not in GROUP_LAYOUTS else "replicas", why)
    why = sync_every_problem(sync_every)
    if why is not None:
        raise ConfigError("", "sync_every", why)
    return sorted(set(int(r) for r in counts))


def screen(system, model, R: int, layout: str, sync_every: int, given) -> dict:
    """A quick price of replica count R: greedy's placement of one group (no settings search) priced
    in numpy (nothing compiles), with the touched rows' gradients synchronized every step and, where
    sync_every allows more, the weights every sync_every steps: {"step_s", "feasible", "sync_every"}."""
    group, gmodel = sharding_problem(system, model, R, layout)
    limits = resolve_limits(given, group, gmodel)
    masks = make_masks(group, gmodel, limits=limits) if limits is not None else None
    try:
        plan = greedy_plan(group, gmodel, masks, settings=False)
    except ConfigError:                  # the tables fit no group of this size
        return {"step_s": float("inf"), "feasible": False, "sync_every": 1}
    best = None
    for k in sorted({1, sync_every}):
        g, _ = sharding_problem(system, model, R, layout, k)
        bd = step_model(as_numpy(g), as_numpy(gmodel), stack([plan_arrays(plan, g, gmodel)]), 0.0)[0]
        row = {"step_s": float(bd.step_s[0]), "feasible": bool(bd.feasible[0]), "sync_every": k}
        if best is None or (not row["feasible"], row["step_s"]) < (not best["feasible"], best["step_s"]):
            best = row
    return best


def replicated(system, model, method, counts, layout, sync_every, progress, k) -> SearchResult:
    """The fastest plan over replica counts `counts` (search's replicas): each count's group searched
    as its own problem (plan.sharding_problem), the best kept; with more than SCREEN_AT counts, only
    1 and the count whose greedy plan is fastest are searched in full."""
    budget = Budget(seconds=k.budget_s)
    given = dataclasses.replace(k.constraints[0], replicas=None, sync_every=None)   # a group's plan: its tables'

    def one(R, bar, every=1):
        group, gmodel = sharding_problem(system, model, R, layout, every)
        left = None if k.budget_s is None else max(k.budget_s - budget.elapsed(), 1e-3)
        on_round = lambda phase, b: bar.update(f"{R} replicas, {method}: {phase}", b)
        r = search_one(group, gmodel, method, dataclasses.replace(
            k, budget_s=left, constraints=(given, resolve_limits(given, group, gmodel))), on_round=on_round)
        return dataclasses.replace(r, plan=dataclasses.replace(r.plan, replicas=R, group_layout=layout,
                                                               sync_every=every))

    screened = {}
    full = counts
    with Progress(progress, k.budget_s, None, f"search {method} over {len(counts)} replica counts") as bar:
        if len(counts) > SCREEN_AT:
            for R in counts:
                bar.update(f"screening {R} replicas", budget)
                screened[R] = screen(system, model, R, layout, sync_every, given)
            ranked = sorted((R for R in counts if R != 1), key=lambda R: (not screened[R]["feasible"],
                                                                          screened[R]["step_s"]))
            full = sorted({1, ranked[0]} & set(counts)) if ranked else [1]
        results = {}
        for R in full:
            # searched at the sync period its screen chose (else the longest allowed), then priced at the
            # other one too: the weights every k steps against the touched rows' gradients every step
            every = screened[R]["sync_every"] if R in screened else sync_every if R > 1 else 1
            results[R] = one(R, bar, every)
            if sync_every > 1 and R > 1:
                plan_k = dataclasses.replace(results[R].plan, sync_every=sync_every if every == 1 else 1)
                bd_k = evaluate(system, model, plan_k)
                if bool(bd_k.feasible) and float(bd_k.step_s) < results[R].step_s:
                    results[R] = dataclasses.replace(results[R], plan=plan_k, breakdown=bd_k, step_s=float(bd_k.step_s),
                                                     samples_per_s=float(bd_k.samples_per_s))
    best = min(results.values(), key=lambda r: (not r.feasible, r.step_s))
    table = [dict(screened[R], replicas=R, searched=False, method="greedy placement") for R in screened
             if R not in results]
    table += [{"replicas": R, "step_s": r.step_s, "feasible": r.feasible, "sync_every": r.plan.sync_every,
               "searched": True, "method": r.method, "screened_step_s": screened.get(R, {}).get("step_s")}
              for R, r in results.items()]
    table.sort(key=lambda row: row["replicas"])
    notes = dict(best.notes, replicas=table)
    return dataclasses.replace(best, notes=notes, system=system, wall_s=budget.elapsed(),
                               iterations=sum(r.iterations for r in results.values()))
