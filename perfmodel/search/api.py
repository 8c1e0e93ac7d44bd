"""pm.search: find the fastest memory-feasible plan, by the gradient method or by a baseline.

    result = pm.search(system, model, method="gradient", seed=0, iterations=1000, budget_s=60)
    result.plan, result.step_s, result.breakdown, result.iterations, result.converged

Methods (methods.py, each with its traits): gradient (the planners' plans as starts, vectorized
local search with first-order-ranked moves on large instances, iterated local search, relaxed
restarts optimized by Adam and rounded when a kick stops paying), greedy (TorchRec-style), random,
evolutionary, exact (MILP over table placements, small instances) and hugectr (HugeCTR's planner).
Every method's plan is evaluated by the same hard model. The work is bounded by `iterations`
(rounds: driver.py), so the same problem, seed and iterations give the same plan in any process;
`budget_s` is an outer wall-clock stop, and a result it cut says so (converged False).

A search is one problem's search (one.search_one) inside at most one wrapper, chosen in this order:
2D replica counts (replicas.py), co-design of a hardware knob (codesign.py), an objective over
draws (objective.py); each wrapper calls search_one for every problem it makes.
"""

from __future__ import annotations


import numpy as np

from ..config import ConfigError
from ..constraints import as_constraints, model_constraints
from ..evaluate import as_loaded, resolve
from ..hardware import System
from ..interop.hugectr import parse_recipe
from ..interop.torchrec_plan import without_torchrec_form
from ..plan import PRECISIONS, SHARDING_TYPES, Plan, from_arrays, parse_hold, resolve as resolve_limits, validate_plan
from ..uncertainty.robust import DEFAULT_OBJECTIVE_DRAWS
from ..workload import RankingModel
from .codesign import co_designed
from .guard import ShardCosts, load_shard_costs
from .methods import METHODS, OBJECTIVE_METHODS, is_method, spec  # noqa: F401 (the search's names)
from .objective import checked_objective, robust, robust_iterations
from .one import Settings, make_problem, search_one  # noqa: F401 (make_problem: the search's problem)
from .pipeline import Options
from .problem import SHAPES
from .progress import Progress
from .replicas import SCREEN_AT, plan_wide, replica_counts, replica_options, replicated  # noqa: F401
from .result import SearchResult, first_at  # noqa: F401

# Rounds a search takes by default ("auto"): ROUND_WORK / (tables x devices), within [100, 3000]. A
# round's cost grows with the plans' arrays, so this keeps a default search to about a minute on a
# 2-core CPU: every phase of the MLPerf instances' gradient method runs to its end within them, and
# instances of hundreds of tables on hundreds of chips get the 100 rounds of a start and a relaxed batch
ROUND_WORK = 4e6
ITERATIONS = (100, 3000)


def default_iterations(system: System, model: RankingModel) -> int:
    """The rounds a search takes when iterations="auto" (ROUND_WORK, ITERATIONS)."""
    return int(np.clip(ROUND_WORK / (model.tables.count * system.num_chips), *ITERATIONS))


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
    if budget_s is None and iterations is None and spec(method).samples:
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
           freeze_settings: bool = False, hold=None, start: Plan | None = None, co_design: str | None = None,
           guard: ShardCosts | str | None = None, progress: bool = False, iterations: int | str | None = "auto",
           gradients: bool | str = True, constraints=None, replicas=None, group_layout: str = "strided",
           sync_every: int | None = None, objective: str = "nominal", draws: int | None = None,
           uncertainty_seed: int | None = None, shapes: str = "all") -> SearchResult:
    """The fastest memory-feasible plan `method` finds in `iterations` rounds, or `budget_s` seconds
    of wall time if those run out first (no wall-clock limit unless given: a plan is then a function
    of the problem, the seed and the iterations alone, on any machine and under any load).

    iterations: rounds (a descent's round, a relaxed batch's Adam steps, a generation, a batch of
    random plans); "auto": default_iterations (100 to 3,000, fewer the larger the instance); None:
    no limit. budget_s=None: no wall-clock limit (read between rounds; a round that compiles runs
    to its end). With both None the gradient method runs every phase to its end; random and
    evolutionary need one or the other.

    start: a plan of your own. The methods that score candidates (gradient, random, evolutionary)
    start from it and from the plans of the planners a user would otherwise run (greedy, HugeCTR's
    auto and hier_auto at the MLPerf recipes, round_robin: starts.py), and return none worse than
    the best of them (r.notes["starts"]: each one's score and which plan was kept).
    hold: settings the user's framework fixes, held from the first round ("dense=replicated,
    overlap_chunks=1,pipeline=off", a dict or a plan.Hold; plan/hold.py lists the keys); a
    constraint set's `hold` joins them. freeze_settings: hold every setting of `start`.
    precisions: the all-to-all and gradient precisions the plan may use (fp32 only unless you allow
    more). sharding_types: the ones tables may use. constraints: per-table constraints in TorchRec's
    vocabulary (constraints.py), a TOML/JSON path, or TorchRec ParameterConstraints; a model given
    by name or path brings its file's [constraints.<table>] too.
    co_design: a hardware knob ('nic_split', 'scale_out_bw') searched with the plan; the result's
    `system` carries the chosen value and notes['co_design'] what it bought.
    shapes: "all", or "torchrec": only plans TorchRec can run (pm.torchrec_plan exports them), no
    table row-wise over a subset of the ranks (HugeCTR's shapes; a start that has one is refused).
    guard: a second cost model's per-shard costs and a cap (guard.ShardCosts, or a path to its JSON):
    the gradient method returns the fastest plan within the cap (r.notes["guard"]).
    gradients: True, False, "rank" or "relaxed" (the gradient method's use of gradients, for ablations).
    replicas: 2D sparse parallelism: 1, an integer R (R groups of D / R chips), a list, or "auto"
    (every count the system's domains allow; screened by greedy placements past SCREEN_AT, then 1
    and the best other count searched). None: the constraints', else "auto" from
    replicas.TWO_D_AT chips and 1 below. r.notes["replicas"] lists each count's best step.
    group_layout: "strided" or "contiguous". sync_every: the most steps between the replicas'
    synchronizations (None: the constraints', else 1).
    objective: "nominal", or "pNN": the plan whose NN-th percentile of the step over `draws` draws
    of the uncertain inputs (default 64, seed uncertainty_seed) is least (objective.py; r.nominal,
    r.notes["objective"]).
    system, model: objects, or preset names or file paths. Raises ConfigError for a bad argument
    or a model that fits on no plan.
    """
    _check(method, budget_s, iterations, restarts, precisions, seed, steps)
    q = checked_objective(objective, draws, uncertainty_seed, method, co_design)
    if gradients not in (True, False, "rank", "relaxed"):
        raise ConfigError("", "gradients", f"is {gradients!r}; allowed: True, False, 'rank', 'relaxed'")
    given = as_constraints(constraints, "constraints")
    if isinstance(model, str):
        given = model_constraints(model).merged(given)
    held = parse_hold({**(given.hold or {}), **parse_hold(hold).as_dict()})    # the argument's over the constraints'

    system, model, start = resolve(system, model, start)
    limits = resolve_limits(given, system, model)
    if q is not None:           # the objective's pass: its own default rounds (robust_iterations)
        objective_rounds = (robust_iterations(system, model, draws or DEFAULT_OBJECTIVE_DRAWS)
                            if iterations == "auto" else iterations)
    if iterations == "auto":
        iterations = default_iterations(system, model)
    if start is not None and not isinstance(start, Plan):
        start = from_arrays(start, system, model)
    if shapes not in SHAPES:
        raise ConfigError("", "shapes", f"is {shapes!r}; allowed: {', '.join(SHAPES)}")
    if start is not None:
        validate_plan(start, system, model, src="start", constraints=given)   # before any time is spent on it
        if shapes == "torchrec" and (e := without_torchrec_form(start, system)) is not None:
            raise ConfigError("start", e.field, f"{e.message}; shapes='torchrec' searches only plans TorchRec can run")
    if guard is not None:
        guard = _checked_guard(guard, method, co_design, system, model)
    options = Options(restarts=restarts, steps=steps, start=start,
                      relaxed=gradients in (True, "relaxed"), rank=gradients in (True, "rank"))
    k = Settings(seed=seed, budget_s=budget_s, iterations=iterations, precisions=tuple(precisions),
                 sharding_types=tuple(sharding_types), freeze_settings=freeze_settings, options=options,
                 constraints=(given, limits), hold=held, shapes=shapes)
    one_d_only = co_design is not None or guard is not None or q is not None
    asked_sync = sync_every
    replicas, sync_every = plan_wide(given, replicas, sync_every, 0 if one_d_only else system.num_chips)
    counts = replica_counts(system, replicas, group_layout, sync_every, start, given.replicas)
    if counts == [1] and asked_sync is not None and asked_sync > 1:    # a constraint's sync_every is a bound, not a request
        raise ConfigError("", "sync_every", f"is {asked_sync}, but the plans searched have one replica (1D: nothing "
                          "to synchronize between replicas); it applies to 2D plans: give replicas (a count > 1, a "
                          "list or 'auto') or a 2D start")
    if counts != [1]:
        if one_d_only:
            what = "co_design" if co_design is not None else "a guard" if guard is not None else "an objective"
            raise ConfigError("", "replicas", f"is {replicas!r}: 2D plans (replicas {counts}) are searched without "
                              f"{what} (give replicas=1)")
        return replicated(system, model, method, counts, group_layout, sync_every, progress, k)
    if co_design is not None:
        return co_designed(system, model, method, co_design, progress, k)
    if q is not None:
        return robust(system, model, method, q, draws, uncertainty_seed, objective_rounds, guard, progress, k)
    with Progress(progress, budget_s, iterations, f"search {method}") as bar:
        return search_one(system, model, method, k, guard=guard, on_round=bar.update)


def _checked_guard(guard, method, co_design, system, model) -> ShardCosts:
    if not spec(method).guarded or co_design is not None:
        raise ConfigError("", "guard", f"is for the gradient search without co-design (method is {method!r}"
                          f"{', co_design ' + repr(co_design) if co_design else ''})")
    guard = as_loaded(guard, ShardCosts, lambda path: load_shard_costs(path, system, model), "guard",
                          "a ShardCosts or the path to its JSON")
    if np.shape(guard.tw) != (model.tables.count,) or np.shape(guard.dp)[1] != system.num_chips:
        raise ConfigError("", "guard", f"prices {np.shape(guard.tw)[0]} tables on {np.shape(guard.dp)[1]} devices; "
                          f"the problem has {model.tables.count} tables on {system.num_chips}")
    return guard


def compare(system: System, model: RankingModel, methods=("gradient", "greedy", "random", "evolutionary"), *,
            seed: int = 0, budget_s: float | None = None, **kw) -> list[SearchResult]:
    """Run several methods with the same budget each; results in the order given."""
    return [search(system, model, m, seed=seed, budget_s=budget_s, **kw) for m in methods]
