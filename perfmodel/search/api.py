"""pm.search: find the fastest memory-feasible plan, by gradient search or by a baseline.

    result = pm.search(system, model, method="gradient", seed=0, budget_s=30)
    result.plan, result.step_s, result.breakdown, result.wall_s

Methods: gradient (relaxed plans + optax, rounding, repair, vectorized local refinement),
greedy (TorchRec-style), random, evolutionary, exact (MILP over table placements, small instances).
Every method's plan is evaluated by the same hard model. The same seed gives the same plan when
the search finishes within its budget (`converged`); a budget cut depends on the machine's speed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import sys
import threading
import time
from dataclasses import dataclass, field

import jax
import numpy as np

from ..cache import CompileClock as _CompileClock, exporting, is_kept, make, mark_kept
from ..config import ConfigError
from ..evaluate import Breakdown, _loaded, evaluate, resolve
from ..hardware import System
from ..plan import PRECISIONS, SHARDING_TYPES, Plan, from_arrays, plan_arrays, stack, stand_in, to_arrays, validate_plan
from ..workload import RankingModel
from .greedy import greedy_plan
from .guard import ShardCosts, load_shard_costs, packed_start
from .local import LocalSearch, eager, is_exhaustive, load_batch_scorer, make_batch_scorer, pick_compound
from .pack import load_packer, rebalance
from .relax import NEG, make_masks, round_params

METHODS = ("gradient", "greedy", "random", "evolutionary", "exact")
SAMPLERS = ("random", "evolutionary")     # methods that sample until their budget is spent: they need one
# why a gradient search skipped its relaxed phase (notes["gradient_skipped"])
SKIPPED_NO_TIME = ("the relaxed step's estimated compile (or, compiled, a batch's steps and roundings) exceeds its share "
                   "of the time left (RELAXED_SHARE; BATCH_FIT)")
SKIPPED_COMPILING = "the relaxed step was still compiling"
# the relaxed step's first call over the single-plan scorer's, both as _CompileClock counts them
# (trace + lowering + compile, or + load from the persistent cache), by how the step compiles
# (gradient.step_for; both scorers compile quick). On 2 cores, MLPerf on h100-16 (quick): 4.35 / 0.70 s
# = 6.2 compiled, 2.07 / 0.32 s = 6.5 loaded; prod-856 on mtia300-256 (optimized): 8.9 / 0.86 s = 10.4
# compiled, 2.1 / 0.28 s = 7.6 loaded. Tracing the step's gradient alone takes 1.1 s either way.
# Since the scorer compiles in the warm-up thread beside the batch scorer (_warm_up), its figure is
# 1.1-2.7 s on MLPerf (1.5x the figure alone, and as noisy as this machine), and the quick step,
# compiling in a thread during the start's descent, takes 3.5-5.7x that (eight cold searches of
# h100-16, h100-64, mtia300-64): quick 5.0. The optimized step compiles in the foreground, after the
# start's half: 10.5-11.0 s against the scorer's contended 1.31-1.40 s on prod-856 (mtia300-256,
# h100-256; two cold processes each), 7.8-8.2x: optimized 8.2 (10.5, the ratio to the scorer compiled
# alone, priced the step at 14 s and skipped it at 60 s; run, it ties: 7.7036 and 18.8454 ms)
RELAXED_COMPILE = {"quick": 5.0, "optimized": 8.2}
# The scorer's figure when no search in this process measured it, because its program was made
# before any search (LocalSearch.details called directly: the test suite's order decided whether a
# 120-s search of a small instance ran its relaxed phase): assumed 2.0 s, inside the 1.1-2.7 s
# measured above (before, none known meant no relaxed phase at all)
UNKNOWN_SCORER_COMPILE_S = 2.0
# When the scorer was loaded from the persistent cache but the relaxed step was never compiled with
# it (an earlier process skipped the relaxed phase), the step compiles while the scorer's figure is a
# load: the scorer's compile over its load, as _CompileClock counts them, was 0.70 / 0.32 s = 2.2 on
# MLPerf / h100-16 and 0.86 / 0.28 s = 3.1 on prod-856 / mtia300-256. Counting the load alone, a 10-s
# search that loaded its scorer compiled the step until its deadline and took one step (2.97 ms
# instead of 2.77 with the step on disk too)
SCORER_COMPILE_OVER_LOAD = 2.5
# When both were loaded from the persistent cache as kept executables (cache.Exported: not traced,
# lowered or compiled), the step's first call over the scorer's figure: 0.62 / 0.15 s = 4.1 on MLPerf /
# h100-16 (quick), 0.69-0.71 / 0.15-0.16 = 4.5 on prod-856 / mtia300-256 (optimized), two new processes
# each. (Made from exported programs instead, through XLA's cache: 0.70 / 0.31-0.35 = 2.0-2.3 and
# 0.81 / 0.29 = 2.8; the scorer loads twice as fast as an executable, the step's 5.8-6.6 MB little faster)
RELAXED_LOAD_EXPORTED = 4.5
# the share of the time left that compiling the relaxed step may take: the rest refines its roundings
# and kicks. With the compile allowed all of it (less a 2-s margin), a cold 30-s search of MLPerf on
# h100-16 compiled until ~1 s before its deadline and, in one of five runs, returned its refined
# start (2.764 ms) instead of 2.573 ms
RELAXED_SHARE = 0.5
# the share of the time left, after the start, that the relaxed step's compile in a thread during the
# start's descent may take (by the estimate above). Waiting for it after the descent is bounded by
# RELAXED_SHARE of the time left then, so a compile that runs long costs the descent some CPU, not the
# budget. Cold 20-s MLPerf searches: at 0.5, one of three started it (h100-16, its scorer's figure
# 1.39 s; not mtia300-64 at 2.65 s, h100-64 at 1.48), and it ran; at 0.6 three of three (1.01-1.31 s)
BACKGROUND_SHARE = 0.6
# the share of the time left that a relaxed step kept on disk waits, before it loads beside the start's
# descent, for that descent's first better plan (_compile_step's `after`)
LOAD_WAIT = 0.1
# the share of the time left that a compiled relaxed step's batch (its steps and roundings) may take; the
# rest refines its best roundings (a batch with none left returns its best rounding as it is). MLPerf /
# h100-16, warm, 0.7 s: a batch of 0.23 s with 0.39 s left found 2.79 ms, its roundings refined for
# 0.07-0.1 s, where kicks of the start's 3.00 ms found nothing (half of the time left would skip it)
BATCH_FIT = 0.8
FINALISTS = 4          # rounded restarts refined
RELAXED_BATCHES = 8    # batches of relaxed restarts a search may run
COMPOUND_LEAD = 0.03   # a compound move becomes the start of a large instance's descent when 3 % better
KICK_WORK = 65536      # iterated-local-search kicks: 65,536 / (tables x devices), between 2 and 30


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
    converged: bool = True             # finished before the budget (so the result is reproducible)
    evaluations: int = 0               # hard plan evaluations spent (where counted)
    notes: dict = field(default_factory=dict)   # "progress" (gradient, random, evolutionary): [[s, step_s], ...]
    system: System | None = None

    @property
    def memory_headroom(self) -> float:
        """Free fraction of usable HBM on the fullest device."""
        mem = float(np.max(np.asarray(self.breakdown.memory_bytes)))
        return 1.0 - mem / float(self.breakdown.capacity_bytes)

    def first_at(self, step_s: float) -> float | None:
        """Seconds (since the call, compilation included) at which the search first held a plan of step
        <= step_s, from its anytime profile; None: never (or no profile: greedy, exact)."""
        return first_at(self.notes.get("progress", []), step_s)


def first_at(progress, step_s: float) -> float | None:
    """When an anytime profile ([[seconds, step_s], ...], notes["progress"]) first held a plan of step
    <= step_s (to a relative 1e-9); None: never."""
    return next((t for t, s in progress if s <= step_s * (1 + 1e-9)), None)


class _Progress:
    """A tqdm bar over the wall-clock budget, ticking from a light background thread (the search's
    work is long XLA calls that cannot report progress themselves). Where stderr is not a terminal
    (a log file, a pipe, CI), a bar's carriage-return redraws would pile up on one line: there the
    thread writes a line the first time it sees each kind of phase instead ("start", "relaxed batch
    1/8", "kick 3/30": the later batches and kicks are not written; a phase shorter than its 0.5-s
    tick may not be seen)."""

    def __init__(self, enabled: bool, budget_s: float | None, desc: str):
        self.enabled = enabled
        self.budget, self.desc, self.t0 = budget_s, desc, time.time()
        self.tty = sys.stderr.isatty()
        self.kinds: set = set()                 # phase kinds written (not a terminal)

    def __enter__(self):
        PHASE.pop("now", None)
        if self.enabled:
            if not self.tty:
                budget = "until it converges" if self.budget is None else f"budget {self.budget:g} s"
                print(f"{self.desc}: {budget}", file=sys.stderr, flush=True)
            else:
                from tqdm import tqdm
                if self.budget is None:          # no budget: the time so far
                    self.bar = tqdm(total=None, desc=self.desc, unit="s", leave=False,
                                    bar_format="{desc}: {n:.0f} s, until it converges")
                else:
                    self.bar = tqdm(total=round(self.budget, 1), desc=self.desc, unit="s", leave=False,
                                    bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} s")
            self.stop = threading.Event()
            self.thread = threading.Thread(target=self._tick, daemon=True)
            self.thread.start()
        return self

    def _tick(self):
        while not self.stop.wait(0.5):
            phase = PHASE.get("now")
            if not self.tty:
                kind = re.sub(r"\s*\d+(/\d+)?$", "", phase or "")
                if phase and kind not in self.kinds:
                    self.kinds.add(kind)
                    print(f"{self.desc}: {phase} at {time.time() - self.t0:.1f} s", file=sys.stderr, flush=True)
                continue
            self.bar.n = time.time() - self.t0 if self.budget is None else min(time.time() - self.t0, self.budget)
            self.bar.set_description_str(f"{self.desc} ({phase})" if phase else self.desc, refresh=False)
            self.bar.refresh()

    def __exit__(self, *exc):
        PHASE.pop("now", None)
        if self.enabled:
            self.stop.set()
            self.thread.join()
            if self.tty:
                self.bar.close()
        return False


# problem shape -> (seconds making the hard scorer as _CompileClock counts them, whether it was loaded
# from the persistent cache), first measured
_SCORER_COMPILE_S: dict = {}
# the gradient search's phase now, for the progress bar ("start", "relaxed batch 2/8", "kick 12/30")
PHASE: dict = {}


_WARMED: set = set()       # problems whose descent programs _warm_up compiled (or is compiling) in this process


class _WarmUp:
    """The warm-up thread (_warm_up) and an event set once its single-plan scorer is made and its
    compile recorded (or the work ended): the start's scoring waits for that, the descent for the
    whole thread (MLPerf / h100-16, new processes: the first plan 15 ms sooner, held while the move
    batch's program loads)."""

    def __init__(self):
        self.scorer = threading.Event()
        self.thread: threading.Thread | None = None

    def join(self) -> None:
        self.thread.join()


def _warm_up(ls: LocalSearch) -> _WarmUp | None:
    """Compile the local search's single-plan scorer and move batches (LocalSearch.warm_up) in a
    thread, while the caller builds the greedy start (which compiles the batch scorer); wait for its
    scorer (_WarmUp.scorer) before scoring the start, join it before the descent. Records the
    single-plan scorer's compile in _SCORER_COMPILE_S as _gradient would have measured it (the
    relaxed step's estimate is a multiple of it). Cold, on 2 cores, this overlaps about a second of
    compiling: MLPerf / mtia300-64, greedy start and scorer 3.1-3.7 s -> 2.4-2.6 s. None when done
    before in this process."""
    from . import gradient as gs

    key = gs._cache_key(0, ls.system, ls.model)
    warmed = (key, ls.guard is not None)         # a guard's scorers are other programs
    if warmed in _WARMED:
        return None
    _WARMED.add(warmed)

    out = _WarmUp()

    @contextlib.contextmanager
    def scorer_clock():
        with _CompileClock() as clock:
            yield
        if clock.seconds > 0:
            _SCORER_COMPILE_S.setdefault(key, (clock.seconds, clock.loaded > 0))
        out.scorer.set()

    def work():
        try:
            ls.warm_up(scorer_clock=scorer_clock)
        except Exception:          # noqa: BLE001 -- only a warm-up: the search compiles what it needs itself
            _WARMED.discard(warmed)
        finally:
            out.scorer.set()

    out.thread = background(work, "perfmodel-warm-up")
    return out


def background(work, name: str) -> threading.Thread:
    """`work()` started in a thread (to compile beside the caller; join before relying on it). Not a
    daemon: the interpreter waits for it at exit (an XLA compile still running while the interpreter
    shuts down aborts the process)."""
    thread = threading.Thread(target=work, name=name)
    thread.start()
    return thread


def _check(method: str, budget_s, restarts: int, precisions, seed=0, steps=1) -> None:
    count = lambda x: isinstance(x, (int, np.integer)) and not isinstance(x, bool)
    if method not in METHODS:
        raise ConfigError("", "method", f"is {method!r}; allowed: {', '.join(METHODS)}")
    if budget_s is not None and not (isinstance(budget_s, (int, float)) and not isinstance(budget_s, bool)
                                     and budget_s > 0 and np.isfinite(budget_s)):
        raise ConfigError("", "budget_s", f"must be a number of seconds > 0, got {budget_s!r}")
    if not (count(seed) and seed >= 0):
        raise ConfigError("", "seed", f"must be an integer >= 0, got {seed!r}")
    if not (count(steps) and steps >= 1):
        raise ConfigError("", "steps", f"must be an integer >= 1 (relaxed gradient steps per batch), got {steps!r}")
    if budget_s is None and method in SAMPLERS:
        raise ConfigError("", "budget_s", f"is None, but {method} samples until its budget is spent: give a number of "
                          "seconds > 0 (None, no limit, is for gradient, greedy and exact, which stop by themselves)")
    if not count(restarts) or restarts < 1:
        raise ConfigError("", "restarts", f"must be an integer >= 1, got {restarts!r}")
    bad = [p for p in precisions if p not in PRECISIONS]
    if bad or not precisions:
        raise ConfigError("", "precisions", f"{bad or precisions!r}: allowed {', '.join(PRECISIONS)}")


def search(system: System | str, model: RankingModel | str, method: str = "gradient", *, seed: int = 0,
           budget_s: float | None = 60.0, restarts: int = 8, steps: int = 150,
           precisions: tuple[str, ...] = ("fp32",), sharding_types: tuple[str, ...] = SHARDING_TYPES,
           freeze_settings: bool = False, start: Plan | None = None, co_design: str | None = None,
           guard: ShardCosts | str | None = None, progress: bool = False) -> SearchResult:
    """The fastest memory-feasible plan `method` finds within `budget_s` seconds of wall time.

    budget_s=None: no time limit. The gradient search then runs every phase to its end (each
    descent until no move helps, every relaxed batch, every planned kick), so the same seed gives the
    same plan and figures however fast the machine (r.converged is True). random and evolutionary
    need a budget.

    precisions: the all-to-all and gradient precisions the plan may use (lower precision changes
    the numerics: fp32 only unless you allow more). sharding_types: the ones tables may use.
    freeze_settings: keep the start plan's dense parallelism, algorithms, precisions, buckets, chunks,
    pipelining and offload; search the tables only. start: a plan to refine (default: greedy).
    co_design: a hardware knob ('nic_split', 'scale_out_bw') searched with the plan (alternating the
    plan search and a vectorized scan of the knob, all within budget_s); the result's `system` carries
    the chosen value and notes['co_design'] says what it bought.
    guard: a second cost model's per-shard costs and a cap (guard.ShardCosts, or a path to its JSON):
    the gradient search returns the fastest plan whose busiest device's sum of shard costs is within
    the cap (e.g. TorchRec's estimate at most its own plan's: benchmarks/vs_torchrec.py). r.feasible
    then also says the cap is met; r.notes["guard"] gives the plan's value and the cap.
    system, model: objects, or preset names or file paths (pm.search("mtia300-64", "dlrm-dcnv2-mlperf")).
    Raises ConfigError for an unknown method, a budget <= 0, or a model that fits on no plan.
    """
    _check(method, budget_s, restarts, precisions, seed, steps)
    system, model, start = resolve(system, model, start)
    if start is not None and not isinstance(start, Plan):
        start = from_arrays(start, system, model)
    if start is not None:
        validate_plan(start, system, model, src="start")     # before any time is spent on it
    if guard is not None:
        if method != "gradient" or co_design is not None:
            raise ConfigError("", "guard", f"is for the gradient search without co-design (method is {method!r}"
                              f"{', co_design ' + repr(co_design) if co_design else ''})")
        guard = _loaded(guard, ShardCosts, lambda path: load_shard_costs(path, system, model), "guard",
                        "a ShardCosts or the path to its JSON")
        if np.shape(guard.tw) != (model.tables.count,) or np.shape(guard.dp)[1] != system.num_chips:
            raise ConfigError("", "guard", f"prices {np.shape(guard.tw)[0]} tables on {np.shape(guard.dp)[1]} devices; "
                              f"the problem has {model.tables.count} tables on {system.num_chips}")
    if co_design is not None:
        from .codesign import co_design as run_co_design, knob_spec
        knob_spec(co_design, system)
        t0 = time.time()
        kw = dict(method=method, seed=seed, restarts=restarts, steps=steps, precisions=precisions,
                  sharding_types=sharding_types, freeze_settings=freeze_settings)
        with _Progress(progress, budget_s, f"search {method}, co-design {co_design}"):
            refines = method in ("gradient", "evolutionary")     # methods that start from a plan
            ahead = (lambda: _compile_step_ahead(system, model, restarts, precisions, sharding_types)) \
                if method == "gradient" else None
            info = run_co_design(co_design, system, model, budget_s=budget_s, plan_search=lambda sv, b, plan: search(
                sv, model, budget_s=b, start=plan if refines and plan is not None else start, **kw).plan, ahead=ahead)
            plan, sys_v = info.pop("plan"), info.pop("system")
            bd = evaluate(sys_v, model, plan)
        return SearchResult(method=method, plan=plan, breakdown=bd, step_s=float(bd.step_s),
                            samples_per_s=float(bd.samples_per_s), feasible=bool(bd.feasible), wall_s=time.time() - t0,
                            seed=seed, converged=False, notes={"co_design": info}, system=sys_v)
    with _Progress(progress, budget_s, f"search {method}"):
        return _search(system, model, method, seed=seed, budget_s=budget_s, restarts=restarts, steps=steps,
                       precisions=precisions, sharding_types=sharding_types, freeze_settings=freeze_settings,
                       start=start, guard=guard)


def _search(system, model, method, *, seed, budget_s, restarts, steps, precisions, sharding_types,
            freeze_settings, start, guard=None) -> SearchResult:
    t0 = time.time()
    # leave room for the final evaluation and a last round of moves inside the budget
    deadline = t0 + (0.9 * budget_s - min(0.5, 0.1 * budget_s) if budget_s is not None else 1e9)
    bad = [t for t in sharding_types if t not in SHARDING_TYPES]
    if bad or not sharding_types:
        raise ConfigError("", "sharding_types", f"{bad or sharding_types!r}: allowed {', '.join(SHARDING_TYPES)}")
    # kept on disk, the batch scorer loads in a thread of its own while greedy builds its start (and the
    # warm-up thread loads the rest): MLPerf / h100-16, new processes (bench_coldstart), first plan at
    # 0.24-0.26 s instead of 0.28-0.30, TorchRec's quality at 0.46-0.47 s instead of 0.49-0.50. (First in
    # the warm-up thread instead, before the single-plan scorer and the moves: 0.33 and 0.53 s)
    # A small instance's start is scored in numpy (local.eager: greedy's settings, its score and its
    # best compound move) before any program is made; the threads that make them start after it, so that
    # their tracing does not take the interpreter from it. MLPerf / h100-16, the first search of a process
    # with no programs: greedy's best compound move (2.665 ms) held at 0.04 s instead of 1.6 s, when the
    # batch scorer had compiled
    fast = method == "gradient" and eager(system, model, guard)
    loading = background(lambda: (load_batch_scorer(system, model), load_packer(system, model)),
                         "perfmodel-batch-scorer") if method == "gradient" and not fast else None
    warming = early = None
    try:
        masks = make_masks(system, model, precisions=tuple(precisions), sharding_types=tuple(sharding_types))
        if guard is not None:          # a type the guard has no cost for is never used
            types = np.where(guard.priced(), masks.types, np.minimum(masks.types, NEG))
            lost = [n for n, row in zip(model.tables.names, types) if not (row > -1).any()]
            if lost:
                raise ConfigError("", "guard", f"table {lost[0]!r} has no cost for any sharding type the search may use")
            masks = dataclasses.replace(masks, types=types)
        ls = LocalSearch(system, model, masks, freeze_settings=freeze_settings, guard=guard)
        warming = _warm_up(ls) if method == "gradient" and not fast else None
        greedy = start if start is not None else greedy_plan(system, model)    # raises if nothing fits
        if fast:
            early = _early_start(ls, greedy, eager=True)
            warming = _warm_up(ls)
            # the packer first: the start's repacking (rebalance) needs it before the batch scorer. Not
            # when an earlier search of the problem made them (warming None): a call of the batch scorer
            # on stand-in plans in a thread cost a warm 0.2-s search 0.1 s (mtia300-64, MLPerf)
            loading = background(lambda: (load_packer(system, model), make_batch_scorer(system, model)),
                                 "perfmodel-batch-scorer") if warming is not None else None
    except BaseException:
        if warming is not None:
            warming.join()
        if loading is not None:
            loading.join()
        raise
    finally:
        if loading is not None and not fast:
            loading.join()
    settings_of = lambda p: dataclasses.replace(greedy, tables=p.tables) if freeze_settings else p
    notes: dict = {}
    evaluations = 0
    converged = True

    if method == "greedy":
        plan = greedy
    elif method == "gradient":
        try:
            plan, notes, converged = _gradient(system, model, masks, ls, greedy, seed=seed, restarts=restarts,
                                               steps=steps, t0=t0, deadline=deadline, settings_of=settings_of,
                                               warming=warming, early=early, making=loading if fast else None)
        finally:
            if warming is not None:
                warming.join()
            if loading is not None:
                loading.join()
    elif method in SAMPLERS:
        from .baselines import evolutionary_search, random_search
        if method == "random":
            pa, _, evaluations = random_search(system, model, masks, seed=seed, deadline=deadline, progress=ls.progress)
        else:
            seeds = [to_arrays(greedy, system, model)]
            pa, _, evaluations = evolutionary_search(system, model, masks, seed=seed, deadline=deadline, seeds=seeds,
                                                     progress=ls.progress)
        plan = settings_of(from_arrays(pa, system, model))
        converged = False                       # these run until the budget is spent
    else:  # exact
        from .exact import exact_plan
        plan, notes["milp"] = exact_plan(system, model, greedy)

    if method == "gradient" or method in SAMPLERS:
        # the anytime profile: when each better feasible plan was held (seconds since the call, step_s)
        notes["progress"] = [[round(t - t0, 4), s] for t, s in ls.progress]
    if method == "gradient":
        validate_plan(plan, system, model)
        bd = ls.breakdown(plan)               # compiled already, unlike a fresh evaluate of one plan
    else:
        bd = evaluate(system, model, plan)
    feasible = bool(bd.feasible)
    if guard is not None:
        value = float(np.max(ls.details(plan)[4][-1]))       # the loads' last row: the guard's
        met = guard.within(value)
        notes["guard"] = {"name": guard.name, "value_s": value, "cap_s": float(guard.cap), "met": met}
        feasible &= met
    return SearchResult(method=method, plan=plan, breakdown=bd, step_s=float(bd.step_s),
                        samples_per_s=float(bd.samples_per_s), feasible=feasible,
                        wall_s=time.time() - t0, seed=seed, converged=converged, evaluations=evaluations,
                        notes=notes, system=system)


def _gradient(system, model, masks, ls, greedy, *, seed, restarts, steps, t0, deadline, settings_of, warming=None,
              early=None, making=None):
    """Refine the greedy plan (or its multi-resource repacking, pack.py, when that scores better;
    on a large instance, the best compound move of that when it leads: _compound_start) with half
    the budget (all of it when the relaxed phase cannot fit in the other half: _relaxed_fits); on a
    small one, race (_race) its descent with its best compound move's, when that is
    lower (MLPerf, warm, 0.3-s budget: h100-64 2.084 -> 1.969 ms, h100-16 3.197 -> 2.999; run one
    after the other, the compound move's descent had no time left in budgets under a second).
    Then, if compiling the relaxed step takes at most RELAXED_SHARE of the time left
    (estimated as RELAXED_COMPILE x the single-plan scorer's first call as _CompileClock measured it,
    x SCORER_COMPILE_OVER_LOAD when the scorer was loaded from disk and the step was not kept there;
    RELAXED_LOAD_EXPORTED x the scorer's when both are kept as executables (cache.Exported)),
    or, when it is compiled already, a batch's steps and roundings take at most BATCH_FIT of it (as
    last timed in this process; on a small instance
    a quick-compiled step that fits BACKGROUND_SHARE of the time left after the start compiles in a
    thread during the descent, and is then waited for at most RELAXED_SHARE of the time left), run the gradient
    restarts, round them (argmax and repacked: roundings) and race the best roundings' descents
    (_race) with half the time left; when the start's descent had not stopped by the half (a large
    instance), it joins the first race, which then has all the time left. Again from other seeds (up
    to RELAXED_BATCHES batches) while a batch takes at most half the time left. Then iterated local
    search (seeded kicks of the best plan, each refined) with the time left. Best plan wins."""
    from . import gradient as gs

    unbounded = deadline - t0 > 1e8                     # budget_s=None
    PHASE["now"] = "start"
    if early is None and ls.exhaustive:
        early = _early_start(ls, greedy)
    if warming is not None:            # (_WarmUp) its single-plan scorer made and its compile recorded
        warming.scorer.wait()
    with _CompileClock() as clock:
        tie, _, memory, _, _, greedy_score = ls.details(greedy)
    ls.record(float(greedy_score))
    key = gs._cache_key(0, system, model)
    # compiled earlier in this process: the figure measured then (none known: UNKNOWN_SCORER_COMPILE_S)
    eval_compile, eval_loaded = (_SCORER_COMPILE_S.setdefault(key, (clock.seconds, clock.loaded > 0))
                                 if clock.seconds > 0 else _SCORER_COMPILE_S.get(key, (UNKNOWN_SCORER_COMPILE_S, False)))
    # the relaxed step's compile (when it is not compiled in this process), estimated from the scorer's
    kind, step_key, step_name = _step_names(restarts, system, model)
    compile_cost = RELAXED_COMPILE[kind] * eval_compile
    kept = is_kept(step_name)
    loading = eval_loaded and kept and exporting()    # both loaded, neither traced: the step's executable
    if eval_loaded and not kept:                      # the scorer loaded, the step to compile
        compile_cost *= SCORER_COMPILE_OVER_LOAD
    elif loading:
        compile_cost = RELAXED_LOAD_EXPORTED * eval_compile
    # on a small instance the quick-compiled step compiles in a thread during the start's descent when it
    # fits BACKGROUND_SHARE of the time left. A large instance's descent uses the whole half and is its
    # main work: there the compile waits for the half, as before (synthetic-300 / h100-64 at 60 s, the
    # step compiling beside the descent: the start refined to 14.82 ms instead of 14.21, 11.98 at the end
    # instead of 11.91)
    compiling = _STEP_COMPILING.get(step_key)          # compiling already (co-design's warm-up: _compile_step_ahead)
    after = None
    if (compiling is None or not compiling.is_alive()) and not gs.is_compiled(restarts, system, model) and \
            kind == "quick" and ls.exhaustive and \
            (unbounded or compile_cost <= BACKGROUND_SHARE * (deadline - time.time())):
        # (the thread registers itself in _STEP_COMPILING and removes itself when done; registered here
        # as well, a thread done before the assignment stayed there, stopped)
        # a step to load, not compile (about 0.7 s on a core the scorer would use), waits for the start's
        # descent to better its start first: MLPerf / h100-64, new processes, 4.5-s budget, TorchRec's
        # quality (2.719 ms) held at a median of 0.46 s with the load beside the first round, 0.37 s alone
        # (the event: set once the start's descent is over, when the load waits no longer)
        after = (len(ls.progress), time.time() + LOAD_WAIT * (deadline - time.time()), threading.Event()) \
            if loading else None
        compiling = background(lambda: _compile_step(restarts, system, model, masks, greedy, step_name,
                                                     after=after, progress=ls.progress),
                               "perfmodel-relaxed-step")
    if making is not None:             # the packer and the batch scorer made (a numpy start: _search)
        making.join()
    packed = rebalance(system, model, greedy, memory)
    packed_tie, packed_step = (float(x) for x in ls.details(packed)[::5]) if packed is not greedy else (float("inf"),) * 2
    start, start_tie, start_step, name = (packed, packed_tie, packed_step, "repacked") if packed_tie < tie else \
        (greedy, float(tie), float(greedy_score), "greedy")
    if ls.guard is not None:         # a start within the guard's cap, packed on its costs (guard.packed_start)
        within = packed_start(ls, greedy)
        within_tie, within_step = (float(x) for x in ls.details(within)[::5])
        if within_tie < start_tie:
            start, start_tie, start_step, name = within, within_tie, within_step, "packed on the guard's costs"
    half = t0 + 0.5 * (deadline - t0)
    # when the relaxed phase cannot fit in what the half leaves (_relaxed_fits; a step compiling in a
    # thread is assumed to), the start's descent has the whole budget: cut at the half, its plan went to
    # the kicks still descending, or to a batch that left its roundings no time (MLPerf / mtia300-64,
    # warm: a 0.5-s search returned 0.984 ms, its race of two basins cut after 0.17 s; a 1-s search,
    # racing for 0.37 s, 0.923)
    fits = compiling is not None or _relaxed_fits(restarts, system, model, steps, compile_cost, deadline - half)
    start_until = half if unbounded or fits else deadline
    if not ls.exhaustive:
        start, name = _compound_start(ls, start, start_tie, name)
        if warming is not None:              # the descent's move batches made
            warming.join()
        best_plan, best = ls.run(start, deadline=start_until)
        start_done = time.time() < start_until      # the descent stopped on its own: no move helps
        cut = not start_done                 # a descent ended by a deadline: the result depends on timing
    else:   # two basins, the start's and its best compound move's (when lower), raced until start_until
        # the start's compound move, or greedy's (early, above) when lower
        compound, compound_step = _race_compound(ls, start, start_step, start_tie) if start is not greedy else early
        if early[0] is not None and early[1] < compound_step:
            compound, compound_step = early
        ls.record(compound_step)             # held now, while the move batches load (_race records it too)
        if warming is not None:
            warming.join()
        best_plan, best, cut, won = _race(ls, [start] + ([compound] if compound is not None else []),
                                          deadline=start_until, steps=[start_step, compound_step])
        name += ", compound move" if won == 1 else ""
        start_done = True
    if greedy_score <= best:
        best_plan, best = greedy, float(greedy_score)
    notes = {"start": name, "refined_start_s": best, "gradient_steps": 0}
    converged = True
    t_start = time.time()                  # where the budget went: notes["phase_s"]
    # the relaxed phase's cost before its first rounding: the compile (when the step is not compiled in
    # this process) or the steps (when it is; a warm search with a small budget has no time for them)
    if compiling is not None:     # it had the descent's time; it may take RELAXED_SHARE of what is left
        # (a descent that stopped on its own gets here early: a compile in flight is waited for, not repeated)
        if after is not None:
            after[2].set()
        PHASE["now"] = "relaxed step compiling"
        compiling.join(timeout=max(RELAXED_SHARE * (deadline - time.time()), 0.0))
    # (still compiling: the time left is the kicks'; the step is there for a later search)
    still = compiling is not None and compiling.is_alive()
    if gs.is_compiled(restarts, system, model):
        step_name = None          # compiled (and kept, when the cache is on) already
    if unbounded or not still and _relaxed_fits(restarts, system, model, steps, compile_cost, deadline - time.time()):
        step = gs.step_for(restarts, system, model)

        def relaxed_batch(entropy, warm, incumbent=None):
            """One batch of restarts (seeded by `entropy`, restart 0 warm from `warm`): the steps taken,
            its rounded plans' scores, and the best of its finalists after a race (_race) with half
            the time left; with an `incumbent` still descending, a race of both with all of it."""
            params, state = gs.prepare(system, model, seed=entropy, restarts=restarts, warm=warm)
            params, _, taken, nonfinite = gs.run(step, params, state, system, model, masks, steps=steps, deadline=deadline)
            if nonfinite:             # never seen since cost.smooth.hard_max: say so rather than hide it
                notes["nonfinite_gradient_entries"] = notes.get("nonfinite_gradient_entries", 0) + nonfinite
            t_round = time.time()
            candidates = roundings(params, masks, ls, settings_of)
            scores = ls.scores_of(candidates)
            _ROUNDING_S[step_key] = time.time() - t_round
            finalists = [candidates[int(i)] for i in np.argsort(scores, kind="stable")[:FINALISTS]]
            if incumbent is None:
                until = time.time() + 0.5 * (deadline - time.time())
            else:
                finalists, until = [incumbent] + finalists, deadline
            out, out_s, race_cut, _ = _race(ls, finalists, deadline=until)
            if out_s == float("inf"):    # no time left to refine them: the best rounding as it is
                out, out_s = finalists[0], float(ls.details(finalists[0])[5])
            return taken, scores, out, out_s, race_cut

        t_batch = time.time()
        PHASE["now"] = f"relaxed batch 1/{RELAXED_BATCHES}"
        with _CompileClock() as compiling:
            taken, scores, p, s, race_cut = relaxed_batch(seed, greedy, None if start_done else best_plan)
        t_batch += compiling.seconds                 # a batch's time, its compile not counted
        if taken > 0 and step_name is not None:
            mark_kept(step_name)                     # compiled or loaded: on disk now, if the cache is on
        notes["gradient_steps"] = taken
        notes["rounded_scores_s"] = [float(x) for x in scores]
        converged = taken == steps and not race_cut
        if s < best:
            best_plan, best = p, s
        # more batches, from other seeds (restart 0 warm from the best plan), while one takes at most
        # half the time left: on small instances a batch costs about a second, and its finalists land
        # in other basins than kicks of the best plan do
        batches = 1
        while batches < RELAXED_BATCHES and time.time() - t_batch <= 0.5 * (deadline - time.time()):
            t_batch = time.time()
            PHASE["now"] = f"relaxed batch {batches + 1}/{RELAXED_BATCHES}"
            taken, _, p, s, race_cut = relaxed_batch([seed, batches], best_plan)
            converged &= taken == steps and not race_cut
            batches += 1
            if s < best:
                best_plan, best = p, s
        notes["relaxed_batches"] = batches
        converged &= batches == RELAXED_BATCHES
    else:
        notes["gradient_skipped"] = SKIPPED_COMPILING if still else SKIPPED_NO_TIME
        converged = False
    t_relaxed = time.time()
    # iterated local search: kick the best plan (a few seeded random table moves), refine, keep if better.
    # `planned` kicks; when the relaxed phase was skipped (the search is not converged then anyway), more
    # until the deadline: the time is there (MLPerf / h100-16, cold, 10 s: its 30 kicks ended at 6.4-7.2 s)
    rng = np.random.default_rng(seed)
    kicks, planned = 0, int(np.clip(KICK_WORK / (model.tables.count * system.num_chips), 2, 30))
    more = "gradient_skipped" in notes
    while kicks < planned or more:
        if time.time() > deadline:
            break
        PHASE["now"] = f"kick {kicks + 1}" + ("" if more else f"/{planned}")
        p, s = ls.run(ls.kick(best_plan, rng), deadline=deadline)
        kicks += 1
        if s < best * (1 - 1e-9):
            best_plan, best = p, s
    notes["kicks"] = kicks
    PHASE.pop("now", None)
    # seconds in each phase: the start (compiles, greedy, its descent or race), the relaxed phase (the
    # wait for or the price of its compile, its batches and their races), the kicks
    notes["phase_s"] = {"start": round(t_start - t0, 3), "relaxed": round(t_relaxed - t_start, 3),
                        "kicks": round(time.time() - t_relaxed, 3)}
    converged &= kicks >= planned and time.time() < deadline and not cut
    return best_plan, notes, converged


def _relaxed_fits(restarts, system, model, steps: int, compile_cost: float, left: float) -> bool:
    """Whether the relaxed phase may run in `left` seconds: its step's compile (`compile_cost`) in
    RELAXED_SHARE of them when the step is not compiled in this process; else a batch's steps, as
    last timed here, and its roundings' construction and scoring (_ROUNDING_S, as last timed: 0.02-0.03 s
    of a warm 0.2-s batch on MLPerf / h100-16) in BATCH_FIT of them."""
    from . import gradient as gs

    if not gs.is_compiled(restarts, system, model):
        return compile_cost <= RELAXED_SHARE * left
    key = gs._cache_key(restarts, system, model)
    per_step = gs.step_seconds(restarts, system, model)
    return (steps * per_step if per_step is not None else 0.0) + _ROUNDING_S.get(key, 0.0) <= BATCH_FIT * left


_ROUNDING_S: dict = {}    # problem shape -> seconds its last relaxed batch took to round and score its restarts


def _step_names(restarts, system, model) -> tuple[str, tuple, str]:
    """The relaxed step's kind ("quick" or "optimized"), its problem-shape key, and its name in the
    persistent cache's marks."""
    from . import gradient as gs

    kind, key = gs.step_kind(restarts, system, model), gs._cache_key(restarts, system, model)
    return kind, key, f"relaxed step {key!r} {kind}"


def _compile_step(restarts, system, model, masks, warm, step_name, after=None, progress=None):
    """Compile the relaxed step (one step of throw-away restarts): what _gradient's first relaxed
    batch would otherwise compile. Registered in _STEP_COMPILING while it runs (a search waits for
    it rather than compiling its own); only when done is it compiled for gradient.is_compiled; marked
    kept, as the batch does. after: (n, t, event) to start only once `progress` (the search's anytime profile)
    has more than n entries, at time t, or once `event` is set (the start's descent over: a descent that
    never betters its start, an unbounded search's, waited for this thread forever)."""
    from . import gradient as gs

    key = gs._cache_key(restarts, system, model)
    _STEP_COMPILING[key] = threading.current_thread()
    try:
        if after is not None:        # (entries in `progress`, a time): wait for a new entry, or the time
            while len(progress) <= after[0] and time.time() < after[1] and not after[2].is_set():
                time.sleep(0.005)
        params, state = gs.prepare(system, model, seed=0, restarts=restarts, warm=warm)
        # made without running a step of throw-away restarts where it can be (cache.make)
        make(gs.step_for(restarts, system, model), params, state, system, model, masks, np.float32(1.0))
    except Exception:     # noqa: BLE001 -- not compiled after all: the relaxed phase prices and compiles it itself
        return
    finally:
        if _STEP_COMPILING.get(key) is threading.current_thread():
            del _STEP_COMPILING[key]
    gs._STEP_SECONDS.setdefault(key, None)
    mark_kept(step_name)


_STEP_COMPILING: dict = {}    # problem shape -> the thread compiling its relaxed step (_compile_step)


def _compile_step_ahead(system, model, restarts, precisions, sharding_types):
    """For a search to come (co-design's later ones): compile its quick relaxed step now, when it is a
    small instance's and not compiled in this process."""
    from . import gradient as gs

    kind, _, name = _step_names(restarts, system, model)
    if gs.is_compiled(restarts, system, model) or kind != "quick" or not is_exhaustive(system, model):
        return
    masks = make_masks(system, model, precisions=tuple(precisions), sharding_types=tuple(sharding_types))
    _compile_step(restarts, system, model, masks, stand_in(system, model), name)


def _race(ls: LocalSearch, plans: list[Plan], deadline: float, steps: list[float] | None = None) -> \
        tuple[Plan, float, bool, int]:
    """Refine `plans` by successive halving: each stage gives every plan still in the race an equal
    share of the stage's time (a descent that stops on its own hands the rest to the next one), then
    the better half goes on; the last one descends until the deadline. ceil(log2 n) stages and the
    final descent split the time equally. Returns the best plan, its score, whether a descent was
    cut short by its share (its result then depends on the machine's speed), and which of `plans`
    it descended from.
    steps: the plans' hard scores, when known: they are held from the start (the anytime profile
    records the lowest now, and a race cut before a plan's descent still returns it), and the
    lowest descends first (MLPerf / h100-16, new processes: the start's best compound move, 2.665 ms,
    held 0.1 s sooner than the start's descent reached it).
    Which start leads to the lowest plan differs by instance and shows only after a long descent:
    on synthetic-300 / h100-64 the relaxed phase's best rounding (14.96 ms) descends below the
    repacked greedy start's descent (still going at 14.82 ms after 27 s); on prod-856 the start's
    descent stops by the half at a plan no rounding's descent beats. Fixed shares (an eighth to a
    half of the batch's time per finalist, in turn) ended 60-s searches of synthetic-300 at 12.78 /
    12.79 / 13.35 ms (seeds 0 / 1 / 2); racing with the start's descent, 12.04 / 12.43 / 12.55."""
    known = list(steps or [])[:len(plans)]
    known += [float("inf")] * (len(plans) - len(known))
    for step in sorted((s for s in known if s < float("inf")), reverse=True):
        ls.record(step)
    # plan, score, stopped on its own, origin, descended; the lowest first (sorted is stable)
    field = sorted(([p, s, False, i, False] for i, (p, s) in enumerate(zip(plans, known))), key=lambda r: r[1])
    cut = False
    while time.time() < deadline:
        running = [r for r in field if not r[2]]
        if not running:
            break
        stages = int(np.ceil(np.log2(len(field))))
        end = time.time() + (deadline - time.time()) / (stages + 1)
        for i, r in enumerate(running):
            until = min(time.time() + (end - time.time()) / (len(running) - i), deadline)
            r[0], r[1] = ls.run(r[0], deadline=until)
            r[2], r[4] = time.time() < until, True
            cut |= not r[2]
        field.sort(key=lambda r: r[1])
        field = field[: (len(field) + 1) // 2]
    plan, score, _, origin, _ = min(field, key=lambda r: r[1])
    return plan, score, cut or not all(r[4] for r in field), origin


def _early_start(ls: LocalSearch, greedy: Plan, eager: bool = False) -> tuple[Plan | None, float]:
    """A small instance's greedy start and its best compound move (_race_compound), scored by the
    batch scorer alone, or in numpy (eager: local.eager), recorded in the search's progress: held
    before the single-plan scorer is made (MLPerf / h100-16, new processes that load the batch
    scorer: the compound move, 2.665 ms, at 0.18 s instead of 0.20; in numpy, at 0.04 s)."""
    pa = stack([plan_arrays(greedy, ls.system, ls.model)])
    g_step, g_tie = (float(x[0]) for x in ls.pairs(pa, eager))
    ls.record(g_step)
    early = _race_compound(ls, greedy, g_step, g_tie, eager)
    ls.record(early[1])
    return early


def _race_compound(ls: LocalSearch, start: Plan, start_step: float, start_tie: float,
                   eager: bool = False) -> tuple[Plan | None, float]:
    """A small instance's second basin (_race): `start`'s compound move of least step time when that
    is below start_step, else its least tie-broken one when below start_tie (as LocalSearch.run takes
    them), and its step time; (None, inf) when neither is lower. eager: scored in numpy."""
    (hard, tie), group = ls.group_moves(start, plan_arrays(start, ls.system, ls.model), hard=True, eager=eager)
    k = pick_compound(hard, tie, start_step * (1 - 1e-9), start_tie)
    return (group(k), float(hard[k])) if k is not None else (None, float("inf"))


def _compound_start(ls: LocalSearch, start: Plan, start_tie: float, name: str) -> tuple[Plan, str]:
    """On a large instance, where the descent has no time to try both basins: start from the best
    compound move of `start` (tie-broken score `start_tie`; a whole change of sharding type, e.g.
    every table table-row-wise but the smallest data-parallel) when it beats `start` by
    COMPOUND_LEAD (a small instance races the two basins instead: _race_compound); no single-table move
    leads there. prod-856 / h100-256: greedy 22.2 -> 18.1 ms by that one move, 17.4 ms after the
    60-s search (18.7 without); synthetic-300 / h100-64: 16.3 -> 11.8, 10.7 after (13.9 without).
    A move that barely helps is left to the descent, which tries compound moves when single moves
    stall: on mtia300-256 the best one gains 0.6 %, and starting from it ended 1 % worse. The 3 %
    is assumed, between those gains."""
    scores, group = ls.group_moves(start, plan_arrays(start, ls.system, ls.model))
    if not len(scores):
        return start, name
    j = int(np.argmin(scores))
    if scores[j] < (1.0 - COMPOUND_LEAD) * start_tie:
        return group(j), name + ", compound move"
    return start, name


def roundings(params, masks, ls: LocalSearch, settings_of=lambda p: p) -> list[Plan]:
    """Discrete plans from relaxed restarts (leading axis of `params`): each restart's argmax
    rounding, then each again with its table-wise / column-wise shards repacked over resources
    (pack.rebalance). Argmax rounding keeps the relaxation's sharding types and settings but not
    its balance: a table spread over many devices lands whole on one. On synthetic-300 / h100-64
    the repacked rounding scores lower in 7 of 8 restarts (e.g. 19.05 -> 15.33 ms)."""
    system, model = ls.system, ls.model
    params = jax.tree_util.tree_map(np.asarray, params)    # sliced in numpy: no op-by-op compile per restart
    n = jax.tree_util.tree_leaves(params)[0].shape[0]
    rounded = [settings_of(round_params(jax.tree_util.tree_map(lambda x: x[r], params), masks, system, model))
               for r in range(n)]
    return rounded + [rebalance(system, model, p, ls.details(p)[2]) for p in rounded]


def compare(system: System, model: RankingModel, methods=("gradient", "greedy", "random", "evolutionary"), *,
            seed: int = 0, budget_s: float | None = 60.0, **kw) -> list[SearchResult]:
    """Run several methods with the same budget each; results in the order given."""
    return [search(system, model, m, seed=seed, budget_s=budget_s, **kw) for m in methods]
