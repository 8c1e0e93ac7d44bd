"""pm.search: find the fastest memory-feasible plan, by the gradient method or by a baseline.

    result = pm.search(system, model, method="gradient", seed=0, iterations=1000, budget_s=60)
    result.plan, result.step_s, result.breakdown, result.iterations, result.converged

Methods: gradient (greedy start, vectorized local search with first-order-ranked moves on large
instances, iterated local search, relaxed restarts optimized by Adam and rounded when a kick stops
paying), greedy
(TorchRec-style), random, evolutionary, exact (MILP over table placements, small instances). Every
method's plan is evaluated by the same hard model. The work is bounded by `iterations` (rounds:
driver.py), so the same problem, seed and iterations give the same plan in any process;
`budget_s` is an outer wall-clock stop, and a result it cut says so (converged False).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from ..config import ConfigError
from ..constraints import as_constraints, model_constraints
from ..cost.arrays import as_numpy
from ..evaluate import Breakdown, _loaded, evaluate, resolve, step_model
from ..hardware import System, replication_problem, sync_every_problem
from ..schema import GROUP_LAYOUTS
from ..plan import (NEG, PRECISIONS, SHARDING_TYPES, Plan, PlanArrays, from_arrays, make_masks, plan_arrays,
                    plan_violations, resolve as resolve_limits, sharding_problem, stack, validate_plan)
from ..workload import RankingModel
from .codesign import co_design as run_co_design, knob_spec
from .driver import Budget, run
from .exact import admits as exact_admits
from .greedy import greedy_plan
from .guard import ShardCosts, load_shard_costs
from ..interop.hugectr import parse_recipe
from .methods import METHODS, SAMPLERS, is_method, method as make_method
from .pipeline import Options
from .problem import Problem
from .progress import Progress
from ..uncertainty.robust import DEFAULT_OBJECTIVE_DRAWS

# Rounds a search takes by default ("auto"): ROUND_WORK / (tables x devices), within [100, 3000]. A
# round's cost grows with the plans' arrays, so this keeps a default search to about a minute on a
# 2-core CPU: every phase of the MLPerf instances' gradient method runs to its end within them, and
# instances of hundreds of tables on hundreds of chips get the 100 rounds of a start and a relaxed batch
ROUND_WORK = 4e6
ITERATIONS = (100, 3000)


def default_iterations(system: System, model: RankingModel) -> int:
    """The rounds a search takes when iterations="auto" (ROUND_WORK, ITERATIONS)."""
    return int(np.clip(ROUND_WORK / (model.tables.count * system.num_chips), *ITERATIONS))


@dataclass
class SearchResult:
    method: str
    plan: Plan
    breakdown: Breakdown
    step_s: float
    samples_per_s: float
    feasible: bool                     # fits in memory (and within the guard's cap, when searched with one)
    wall_s: float                      # wall time, compile included
    seed: int
    converged: bool = True             # not cut by budget_s: the same problem, seed and iterations give this plan again
    evaluations: int = 0               # hard plan evaluations spent (random, evolutionary)
    notes: dict = field(default_factory=dict)   # "progress": [[s, step_s], ...]; "phases"; the method's own
    system: System | None = None
    iterations: int = 0                # rounds taken
    stopped: str = "done"              # "done" (the method finished), "iterations" or "budget_s"
    nominal: SearchResult | None = None    # with an objective other than "nominal": the nominal-best plan's search

    @property
    def memory_headroom(self) -> float:
        """Free fraction of usable HBM on the fullest device."""
        mem = float(np.max(np.asarray(self.breakdown.memory_bytes)))
        return 1.0 - mem / float(self.breakdown.capacity_bytes)

    def first_at(self, step_s: float) -> float | None:
        """Seconds (since the call, compilation included) at which the search first held a plan of step
        <= step_s, from its anytime profile; None: never (or no profile)."""
        return first_at(self.notes.get("progress", []), step_s)


def first_at(progress, step_s: float) -> float | None:
    """When an anytime profile ([[seconds, step_s], ...], notes["progress"]) first held a plan of step
    <= step_s (to a relative 1e-9); None: never."""
    return next((t for t, s in progress if s <= step_s * (1 + 1e-9)), None)


def _check(method: str, budget_s, iterations, restarts: int, precisions, seed=0, steps=1) -> None:
    count = lambda x: isinstance(x, (int, np.integer)) and not isinstance(x, bool)
    if not is_method(method):
        raise ConfigError("", "method", f"is {method!r}; allowed: {', '.join(METHODS)} (hugectr with a recipe: "
                          "hugectr:PLAN[:RATIO[:THRESHOLD_GB]])")
    if method.startswith("hugectr:"):
        parse_recipe(method, "", "method")
    if budget_s is not None and not (isinstance(budget_s, (int, float)) and not isinstance(budget_s, bool)
                                     and budget_s > 0 and np.isfinite(budget_s)):
        raise ConfigError("", "budget_s", f"must be a number of seconds > 0, got {budget_s!r}")
    if iterations not in (None, "auto") and not (count(iterations) and iterations >= 1):
        raise ConfigError("", "iterations", f"must be an integer >= 1 (rounds), 'auto' or None, got {iterations!r}")
    if not (count(seed) and seed >= 0):
        raise ConfigError("", "seed", f"must be an integer >= 0, got {seed!r}")
    if not (count(steps) and steps >= 1):
        raise ConfigError("", "steps", f"must be an integer >= 1 (relaxed gradient steps per batch), got {steps!r}")
    if budget_s is None and iterations is None and method in SAMPLERS:
        raise ConfigError("", "budget_s", f"and iterations are None, but {method} samples until its budget is spent: "
                          "give a number of seconds or of iterations (both None, no limit, is for gradient, greedy "
                          "and exact, which stop by themselves)")
    if not count(restarts) or restarts < 1:
        raise ConfigError("", "restarts", f"must be an integer >= 1, got {restarts!r}")
    bad = [p for p in precisions if p not in PRECISIONS]
    if bad or not precisions:
        raise ConfigError("", "precisions", f"{bad or precisions!r}: allowed {', '.join(PRECISIONS)}")


def search(system: System | str, model: RankingModel | str, method: str = "gradient", *, seed: int = 0,
           budget_s: float | None = None, restarts: int = 8, steps: int = 150,
           precisions: tuple[str, ...] = ("fp32",), sharding_types: tuple[str, ...] = SHARDING_TYPES,
           freeze_settings: bool = False, start: Plan | None = None, co_design: str | None = None,
           guard: ShardCosts | str | None = None, progress: bool = False, iterations: int | str | None = "auto",
           gradients: bool | str = True, constraints=None, replicas=None, group_layout: str = "strided",
           sync_every: int | None = None, objective: str = "nominal", draws: int | None = None,
           uncertainty_seed: int | None = None) -> SearchResult:
    """The fastest memory-feasible plan `method` finds in `iterations` rounds, or `budget_s` seconds
    of wall time if those run out first (no wall-clock limit unless given: a plan is then a function
    of the problem, the seed and the iterations alone, on any machine and under any load).

    iterations: rounds (a descent's round, a relaxed batch's Adam steps, a generation, a batch of
    random plans); "auto": default_iterations (100 to 3,000, fewer the larger the instance); None:
    no limit. The same problem, seed and iterations give the same plan and figures in any process,
    whatever it did before, unless budget_s cut the search (r.converged False, r.stopped
    "budget_s"). budget_s=None: no wall-clock limit. The clock is read between rounds, so a search
    ends within a round of budget_s; a round that compiles a program runs to its end (the relaxed
    phase's first, some 10 s on 2 cores in a process with nothing compiled, can carry a short search
    that far past its budget). With both None the gradient method runs every phase to its end;
    random and evolutionary need one or the other.

    precisions: the all-to-all and gradient precisions the plan may use (lower precision changes
    the numerics: fp32 only unless you allow more). sharding_types: the ones tables may use.
    freeze_settings: keep the start plan's dense parallelism, algorithms, precisions, buckets, chunks,
    pipelining and offload; search the tables only. start: a plan to refine (default: greedy).
    co_design: a hardware knob ('nic_split', 'scale_out_bw') searched with the plan (alternating the
    plan search and a vectorized scan of the knob); the result's `system` carries the chosen value
    and notes['co_design'] says what it bought.
    guard: a second cost model's per-shard costs and a cap (guard.ShardCosts, or a path to its JSON):
    the gradient method returns the fastest plan whose busiest device's sum of shard costs is within
    the cap. r.feasible then also says the cap is met; r.notes["guard"] gives the plan's value and the cap.
    gradients: the gradient method's use of gradient information (True: all; False: none, its local
    search and kicks alone; "rank" or "relaxed": that one only), for ablations.
    constraints: per-table constraints in TorchRec's vocabulary (constraints.py: {table: {sharding_types,
    compute_kernels, cache_load_factor, min_partition, max_cw_shards, ranks}}, Constraints, TorchRec
    ParameterConstraints objects, or a TOML/JSON path); every method's plan keeps them. A model given
    by name or path brings its file's [constraints.<table>] too (these replace them table by table).
    replicas: 2D sparse parallelism (hardware.Replication): 1 shards every table over every chip; an
    integer R makes the chips R replicas of sharding groups of D / R chips; a list of them, or "auto"
    (replica_options: every count the system's domains allow), searches each (a screen of greedy
    placements first where there are more than SCREEN_AT, then the search proper on R = 1 and on the
    best other count) and keeps the fastest; r.notes["replicas"] lists each count's best step.
    None (default): the constraints' replicas, else 1. A 2D plan's per-table constraints on ranks
    name a sharding group's ranks.
    group_layout: "strided" (a shard's replicas on neighbouring ranks) or "contiguous".
    sync_every: the most steps between the replicas' synchronizations the plan may take (1: every
    step); the search prices both 1 and this. None: the constraints' sync_every, else 1.
    objective: "nominal" (the step at the files' values), or "pNN" (1 <= NN <= 99): the plan whose
    NN-th percentile of the step over `draws` draws of the files' uncertain inputs (default 64,
    seeded by uncertainty_seed, default 0; the same draws for every candidate) is least, for the
    methods that score candidates (OBJECTIVE_METHODS), on 1D plans without co-design. The search
    first runs the nominal search (the same method, seed and settings; r.nominal), then the same
    method at the objective from its plan (for the gradient method, its local search and kicks),
    in robust_iterations rounds where iterations is "auto", else `iterations`; and returns the plan
    of lower objective of the two. budget_s bounds both passes together. r.step_s and r.breakdown stay
    the plan's nominal figures, r.notes["objective"] holds both plans' objective at the draws and
    their p10 / p50 / p90 at robust.CHECK_DRAWS other draws, and r.notes["progress"] the
    objective's pass, in objective values (uncertainty/robust.py).
    system, model: objects, or preset names or file paths (pm.search("mtia300-64", "dlrm-dcnv2-mlperf")).
    Raises ConfigError for an unknown method, a budget <= 0, or a model that fits on no plan.
    """
    _check(method, budget_s, iterations, restarts, precisions, seed, steps)
    q = _checked_objective(objective, draws, uncertainty_seed, method, co_design)
    if gradients not in (True, False, "rank", "relaxed"):
        raise ConfigError("", "gradients", f"is {gradients!r}; allowed: True, False, 'rank', 'relaxed'")
    given = as_constraints(constraints, "constraints")
    if isinstance(model, str):
        given = model_constraints(model).merged(given)
    system, model, start = resolve(system, model, start)
    limits = resolve_limits(given, system, model)
    if q is not None:           # the objective's pass: its own default rounds (robust_iterations)
        objective_rounds = (robust_iterations(system, model, draws or DEFAULT_OBJECTIVE_DRAWS)
                            if iterations == "auto" else iterations)
    if iterations == "auto":
        iterations = default_iterations(system, model)
    if start is not None and not isinstance(start, Plan):
        start = from_arrays(start, system, model)
    if start is not None:
        validate_plan(start, system, model, src="start", constraints=given)   # before any time is spent on it
    if guard is not None:
        guard = _checked_guard(guard, method, co_design, system, model)
    options = Options(restarts=restarts, steps=steps, start=start,
                      relaxed=gradients in (True, "relaxed"), rank=gradients in (True, "rank"))
    kw = dict(seed=seed, budget_s=budget_s, iterations=iterations, precisions=precisions,
              sharding_types=sharding_types, freeze_settings=freeze_settings, options=options,
              constraints=(given, limits))
    replicas, sync_every = _plan_wide(given, replicas, sync_every)
    counts = replica_counts(system, replicas, group_layout, sync_every, start, given.replicas)
    if counts != [1]:
        if co_design is not None or guard is not None:
            raise ConfigError("", "replicas", f"is {replicas!r}: 2D plans are searched without "
                              f"{'co_design' if co_design is not None else 'a guard'} (give replicas=1)")
        if q is not None:
            raise ConfigError("", "objective", f"is {objective!r}: 2D plans (replicas {counts}) are searched for "
                              "the nominal step only (give replicas=1, or objective 'nominal')")
        return _replicated(system, model, method, counts, group_layout, sync_every, given, progress, kw)
    if co_design is not None:
        knob_spec(co_design, system)
        return _co_designed(system, model, method, co_design, start, progress, kw)
    if q is not None:
        return _robust(system, model, method, q, draws, uncertainty_seed, objective_rounds, guard, progress, kw)
    with Progress(progress, budget_s, iterations, f"search {method}") as bar:
        return _search(system, model, method, guard=guard, on_round=bar.update, **kw)


# the methods whose plan is the candidate of least score (an objective changes which that is);
# greedy, exact and hugectr build theirs by their own rules
OBJECTIVE_METHODS = ("gradient", "random", "evolutionary")


def _checked_objective(objective, draws, uncertainty_seed, method, co_design) -> float | None:
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
    if method not in OBJECTIVE_METHODS:
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


# A round of the objective's pass prices each candidate at K draws (at K = 64 some 30 times a nominal
# round's cost): this keeps the pass near the nominal search's time on a 2-core CPU (MLPerf on h100-64:
# 60 rounds, about 35 s, beside the nominal search's 50 s)
ROBUST_WORK = 6.4e6
ROBUST_ITERATIONS = (20, 1000)


def _robust(system, model, method, q, draws, uncertainty_seed, iterations, guard, progress, kw) -> SearchResult:
    """The nominal search, then the objective's pass from its plan, the plan of lower objective of
    the two, and both plans at the check's draws (search's objective)."""
    from ..uncertainty import robust as rb
    K = rb.DEFAULT_OBJECTIVE_DRAWS if draws is None else int(draws)
    useed = 0 if uncertainty_seed is None else int(uncertainty_seed)
    objective_draws = rb.make_draws(system, model, q, K, useed)      # refuses a problem with no uncertain inputs
    budget = Budget(seconds=kw["budget_s"])
    name = rb.objective_name(q)
    with Progress(progress, kw["budget_s"], kw["iterations"], f"search {method} (nominal)") as bar:
        nominal = _search(system, model, method, guard=guard, on_round=bar.update, **kw)
    left = None if kw["budget_s"] is None else max(kw["budget_s"] - budget.elapsed(), 1e-3)
    # the objective's pass refines the nominal-best plan: the gradient method's local search and
    # kicks under the objective (its relaxed restarts and population, which explore for the
    # nominal pass, would price every one of their candidates at every draw)
    options = dataclasses.replace(kw["options"], start=nominal.plan, relaxed=False, population=False)
    with Progress(progress, left, iterations, f"search {method} ({name} over {K} draws)") as bar:
        r = _search(system, model, method, guard=guard, on_round=bar.update, draws=objective_draws,
                    reference=nominal.plan, **dict(kw, budget_s=left, iterations=iterations, options=options))
    check = rb.compare(system, model, r.plan, nominal.plan, q, seed=rb.check_seed_of(useed),
                       progress=f"{name} check" if progress else None)
    info = dict(r.notes.pop("objective"), objective=name, q=q, draws=K, seed=useed,
                inputs=len(objective_draws.spec), iterations=iterations, check=check)
    # the notes of both passes: the phases in order (the objective's named after it), the counts summed
    notes = dict(nominal.notes, **r.notes, objective=info)
    notes["phases"] = nominal.notes["phases"] + [dict(ph, name=f"{name} {ph['name']}") for ph in r.notes["phases"]]
    for k in ("kicks", "relaxed_batches", "gradient_steps", "generations"):
        if k in nominal.notes and k in r.notes:
            notes[k] = nominal.notes[k] + r.notes[k]
    if "progress" in r.notes:     # the objective's values, in seconds since the call (the nominal pass first)
        notes["progress"] = [[round(t + nominal.wall_s, 4), v] for t, v in r.notes["progress"]]
    return dataclasses.replace(r, notes=notes, wall_s=budget.elapsed(), iterations=nominal.iterations + r.iterations,
                               evaluations=nominal.evaluations + r.evaluations,
                               converged=nominal.converged and r.converged, nominal=nominal)


SCREEN_AT = 3          # more replica counts than this are screened by their greedy plans first


def _screen(system, model, R: int, layout: str, sync_every: int, given) -> dict:
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


def _plan_wide(given, replicas, sync_every) -> tuple:
    """(replicas, sync_every) of a search: the arguments, else the constraints', else 1; arguments
    the constraints rule out are a ConfigError naming the constraint."""
    if replicas is None:
        replicas = list(given.replicas) if given.replicas is not None else 1
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


def _replicated(system, model, method, counts, layout, sync_every, given, progress, kw) -> SearchResult:
    """The fastest plan over replica counts `counts` (search's replicas): each count's group searched
    as its own problem (plan.sharding_problem), the best kept; with more than SCREEN_AT counts, only
    1 and the count whose greedy plan is fastest are searched in full."""
    budget = Budget(seconds=kw["budget_s"])
    given = dataclasses.replace(given, replicas=None, sync_every=None)     # a group's plan: its tables' constraints

    def one(R, how, bar, k=1):
        group, gmodel = sharding_problem(system, model, R, layout, k)
        limits = resolve_limits(given, group, gmodel)
        left = None if kw["budget_s"] is None else max(kw["budget_s"] - budget.elapsed(), 1e-3)
        on_round = lambda phase, b: bar.update(f"{R} replicas, {how}: {phase}", b)
        r = _search(group, gmodel, how, on_round=on_round, **dict(kw, budget_s=left, constraints=(given, limits)))
        return dataclasses.replace(r, plan=dataclasses.replace(r.plan, replicas=R, group_layout=layout, sync_every=k))

    screened = {}
    full = counts
    with Progress(progress, kw["budget_s"], None, f"search {method} over {len(counts)} replica counts") as bar:
        if len(counts) > SCREEN_AT:
            for R in counts:
                bar.update(f"screening {R} replicas", budget)
                screened[R] = _screen(system, model, R, layout, sync_every, given)
            ranked = sorted((R for R in counts if R != 1), key=lambda R: (not screened[R]["feasible"],
                                                                          screened[R]["step_s"]))
            full = sorted({1, ranked[0]} & set(counts)) if ranked else [1]
        results = {}
        for R in full:
            # searched at the sync period its screen chose (else the longest allowed), then priced at the
            # other one too: the weights every k steps against the touched rows' gradients every step
            k = screened[R]["sync_every"] if R in screened else sync_every if R > 1 else 1
            results[R] = one(R, method, bar, k)
            if sync_every > 1 and R > 1:
                plan_k = dataclasses.replace(results[R].plan, sync_every=sync_every if k == 1 else 1)
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


def _checked_guard(guard, method, co_design, system, model) -> ShardCosts:
    if method != "gradient" or co_design is not None:
        raise ConfigError("", "guard", f"is for the gradient search without co-design (method is {method!r}"
                          f"{', co_design ' + repr(co_design) if co_design else ''})")
    guard = _loaded(guard, ShardCosts, lambda path: load_shard_costs(path, system, model), "guard",
                    "a ShardCosts or the path to its JSON")
    if np.shape(guard.tw) != (model.tables.count,) or np.shape(guard.dp)[1] != system.num_chips:
        raise ConfigError("", "guard", f"prices {np.shape(guard.tw)[0]} tables on {np.shape(guard.dp)[1]} devices; "
                          f"the problem has {model.tables.count} tables on {system.num_chips}")
    return guard


def _co_designed(system, model, method, knob, start, progress, kw) -> SearchResult:
    refines = method in ("gradient", "evolutionary")     # methods that start from a plan
    budget = Budget(seconds=kw["budget_s"])

    def plan_search(sv, seconds, plan, iterations):
        opts = dataclasses.replace(kw["options"], start=plan if refines and plan is not None else start)
        return _search(sv, model, method, **dict(kw, budget_s=seconds, iterations=iterations, options=opts))

    with Progress(progress, kw["budget_s"], kw["iterations"], f"search {method}, co-design {knob}"):
        info = run_co_design(knob, system, model, plan_search=plan_search, budget=budget, iterations=kw["iterations"])
    plan, sys_v = info.pop("plan"), info.pop("system")
    bd = evaluate(sys_v, model, plan)
    return SearchResult(method=method, plan=plan, breakdown=bd, step_s=float(bd.step_s),
                        samples_per_s=float(bd.samples_per_s), feasible=bool(bd.feasible), wall_s=budget.elapsed(),
                        seed=kw["seed"], converged=info["stopped"] != "budget_s", notes={"co_design": info},
                        system=sys_v, iterations=info["iterations"], stopped=info["stopped"])


def _kept(p: Problem, found: Plan, reference: Plan | None, broken: bool) -> dict:
    """The objective's values (p's hard score: the quantile over its draws, INFEASIBLE or more for a
    plan over memory) of the plan the pass found and of `reference`, and which is kept: the
    reference where it scores lower (or the found plan breaks the constraints), so the pass never
    returns a plan of higher objective than the nominal-best plan's (a sampler's pass does not start
    from it)."""
    value = lambda plan: float(p.details(plan)[5])
    out = {"found_s": value(found), "kept": "search"}
    if reference is not None:
        out["nominal_best_s"] = value(reference)
        if broken or out["nominal_best_s"] < out["found_s"]:
            out["kept"] = "nominal-best plan"
    return out


def make_problem(system, model, *, precisions, sharding_types, freeze_settings, guard=None, limits=None,
                 draws=None) -> Problem:
    """The search problem: the allowed choices as masks (a guard's unpriced types disallowed, the
    per-table constraints' limits applied)."""
    bad = [t for t in sharding_types if t not in SHARDING_TYPES]
    if bad or not sharding_types:
        raise ConfigError("", "sharding_types", f"{bad or sharding_types!r}: allowed {', '.join(SHARDING_TYPES)}")
    masks = make_masks(system, model, precisions=tuple(precisions), sharding_types=tuple(sharding_types),
                       limits=limits)
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
    return Problem(system, model, masks, guard=guard, freeze_settings=freeze_settings, limits=limits, draws=draws)


def _search(system, model, method, *, seed, budget_s, iterations, precisions, sharding_types, freeze_settings,
            options, guard=None, on_round=None, constraints=(None, None), draws=None, reference=None) -> SearchResult:
    """One search of a 1D plan. draws (uncertainty.robust.Draws): candidates score the objective's
    quantile over them; `reference` (a plan, the nominal search's) is then returned instead where
    its objective is lower than the found plan's, and notes["objective"] holds both values."""
    budget = Budget(iterations=iterations, seconds=budget_s)
    given, limits = constraints
    if method == "exact" and limits is not None:
        exact_admits(system, model, limits, given)
    p = make_problem(system, model, precisions=precisions, sharding_types=sharding_types,
                     freeze_settings=freeze_settings, guard=guard, limits=limits, draws=draws)
    out = run(make_method(method, options.start, options, p), p, seed, budget, on_round)
    plan = out.plan
    if isinstance(plan, PlanArrays):            # a sampler's best: its one-hot arrays
        plan = from_arrays(plan, system, model)
        if freeze_settings:
            plan = p.with_settings_of(options.start or greedy_plan(system, model, p.masks))(plan)
    broken = plan_violations(plan, given, system, model) if limits is not None else []
    if broken and reference is None:       # a sampler that drew no plan keeping them (a search from a start always keeps them)
        raise ConfigError("constraints", broken[0][0], f"{method} found no plan that keeps the constraints in "
                          f"{iterations} rounds ({broken[0][1]}); give it more iterations or use gradient")
    notes = dict(out.notes)
    if draws is not None:
        notes["objective"] = _kept(p, plan, reference, bool(broken))
        if notes["objective"]["kept"] == "nominal-best plan":
            plan = reference
    evaluations = notes.pop("evaluations", 0)
    if method not in ("greedy", "exact") and not method.startswith("hugectr"):
        notes["progress"] = out.progress
    notes["phases"] = [dataclasses.asdict(ph) for ph in out.phases]
    if method == "gradient":
        validate_plan(plan, system, model)
        bd = p.breakdown(plan)               # compiled already, unlike a fresh evaluate of one plan
    else:
        bd = evaluate(system, model, plan)
    feasible = bool(bd.feasible)
    if guard is not None:
        value = float(np.max(p.details(plan)[4][-1]))       # the loads' last row: the guard's
        met = guard.within(value)
        notes["guard"] = {"name": guard.name, "value_s": value, "cap_s": float(guard.cap), "met": met}
        feasible &= met
    return SearchResult(method=method, plan=plan, breakdown=bd, step_s=float(bd.step_s),
                        samples_per_s=float(bd.samples_per_s), feasible=feasible, wall_s=budget.elapsed(),
                        seed=seed, converged=out.stopped != "budget_s", evaluations=evaluations, notes=notes,
                        system=system, iterations=out.iterations, stopped=out.stopped)


def compare(system: System, model: RankingModel, methods=("gradient", "greedy", "random", "evolutionary"), *,
            seed: int = 0, budget_s: float | None = None, **kw) -> list[SearchResult]:
    """Run several methods with the same budget each; results in the order given."""
    return [search(system, model, m, seed=seed, budget_s=budget_s, **kw) for m in methods]
