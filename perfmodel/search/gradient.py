"""Gradient search over relaxed plans (optax), many restarts in one vmapped batch.

Objective per restart: the relaxed step time (smooth max at a fixed relative temperature) plus a
memory penalty  lambda x step x sum_d relu(mem_d / cap - 1),  with the softmax temperature of every
choice annealed geometrically from tau_0 to tau_end, so the relaxed plan hardens as it converges.
One restart starts from the greedy plan (its choices as logits), the others at random.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..cache import jit
from ..evaluate import _evaluate
from ..hardware import System
from ..plan import ALGORITHMS, COLLECTIVES, DENSE_MODES, PRECISIONS, SHARDING_TYPES, Plan
from ..workload import RankingModel
from .relax import Masks, SoftParams, init_params, soft_arrays

SMOOTH = 0.02            # relative temperature of the smooth max in the relaxed schedule
PENALTY = 10.0


def warm_start(plan: Plan, system: System, model: RankingModel, strength: float = 3.0) -> SoftParams:
    """Logits that make `plan` the argmax of every choice."""
    T, D, L = model.tables.count, system.num_chips, system.domain_size
    H = D // L
    types = np.zeros((T, 5), np.float32)
    place = np.zeros((T, D), np.float32)
    dom = np.zeros((T, H), np.float32)
    for t, name in enumerate(model.tables.names):
        tp = plan.tables[name]
        types[t, SHARDING_TYPES.index(tp.sharding_type)] = strength
        if tp.sharding_type in ("table_wise", "column_wise"):
            place[t, tp.ranks] = strength
        if tp.sharding_type == "table_row_wise":
            dom[t, tp.ranks[0] // L] = strength
    algo = np.zeros((4, 4), np.float32)
    for c, kind in enumerate(COLLECTIVES):
        algo[c, ALGORITHMS.index(plan.algorithms[kind])] = strength
    onehot = lambda v, opts: jnp.asarray(np.eye(len(opts), dtype=np.float32)[opts.index(v)] * strength)
    return SoftParams(
        type_logits=jnp.asarray(types), place_logits=jnp.asarray(place), domain_logits=jnp.asarray(dom),
        cw_logit=jnp.zeros(T), dense_logits=onehot(plan.dense, DENSE_MODES), algo_logits=jnp.asarray(algo),
        a2a_logits=onehot(plan.a2a_precision, PRECISIONS), grad_logits=onehot(plan.grad_precision, PRECISIONS),
        offload_logit=jnp.asarray(strength if plan.offload else -strength),
        pipeline_logit=jnp.asarray(strength if plan.pipeline else -strength),
        log_buckets=jnp.log(jnp.asarray(float(plan.grad_buckets))),
        log_chunks=jnp.log(jnp.asarray(float(plan.overlap_chunks))),
    )


def relaxed_loss(params: SoftParams, system: System, model: RankingModel, masks: Masks, tau):
    pa = soft_arrays(params, masks, tau)
    bd = _evaluate(system, model, pa, SMOOTH)
    over = jnp.sum(jax.nn.relu(bd.memory_bytes / bd.capacity_bytes - 1.0))
    return bd.step_s * (1.0 + PENALTY * over)


_OPT = optax.adam(0.05)


def _step_fn(params, state, system, model, masks, tau):
    """One Adam step of every restart at once; also the number of gradient entries that were not
    finite (taken as 0 for the step, and counted so that the search can say so)."""
    val, grads = jax.vmap(jax.value_and_grad(relaxed_loss), in_axes=(0, None, None, None, None))(
        params, system, model, masks, tau)
    nonfinite = sum(jnp.sum(~jnp.isfinite(g)) for g in jax.tree_util.tree_leaves(grads))
    grads = jax.tree_util.tree_map(jnp.nan_to_num, grads)
    updates, state = jax.vmap(_OPT.update)(grads, state, params)
    return optax.apply_updates(params, updates), state, val, nonfinite


# Compiled once per problem shape (module level). The step's compile is most of a cold search's:
# on a small instance, with LLVM's optimizations off (cache.QUICK_COMPILE_OPTIONS), it compiles in
# 2.3-3.7 s instead of 6.0-9.3 s (two runs of bench_compile) and runs 1.4-2.5x slower, which 150
# steps pay back many times (MLPerf on h100-16: 1.8 vs 0.8 ms a step; rec-150b on mtia300-64: 6.8
# vs 2.8 ms). On a large one the run costs about what the compile saves (prod-856 on mtia300-256: 31
# vs 19 ms a step, 2.8 vs 7.0 s to compile): optimized. benchmarks/bench_compile.py measures both.
QUICK_STEP_CELLS = 8 * 65536     # restarts x tables x devices up to which the step compiles quick
# Both steps keep XLA's YNNPACK fusions (cache.compile_options): the optimized one runs 9.1 ms a step
# with them on prod-856 / mtia300-256, 13.3 without, and compiles in 6.3 s instead of 6.9; the quick
# one runs 5 % faster with them. Their kernels, built at the first call (30-70 ms), do not count beside
# 150 steps (bench_compile). And the relaxed search's numbers stay as they were: without them, Adam's
# first step moved logits whose gradient is at rounding level the other way (3 % of the largest logit
# on MLPerf / h100-64)
_step = jit(_step_fn, export=True, library_fusions=True)   # with the persistent cache on, a new process loads its traced program
_step_quick = jit(_step_fn, quick=True, export=True, library_fusions=True)


def step_kind(restarts: int, system: System, model: RankingModel) -> str:
    """How the relaxed step of this problem size compiles: "quick" or "optimized"."""
    return "quick" if restarts * model.tables.count * system.num_chips <= QUICK_STEP_CELLS else "optimized"


def step_for(restarts: int, system: System, model: RankingModel):
    """The compiled relaxed step for this problem size (quick to compile, or fast to run)."""
    return _step_quick if step_kind(restarts, system, model) == "quick" else _step


def prepare(system: System, model: RankingModel, *, seed: int, restarts: int, warm: Plan | None):
    """Initial parameters (restart 0 warm-started from `warm`) and optimizer state."""
    params = init_params(np.random.default_rng(seed), system, model, restarts)
    if warm is not None:
        params = jax.tree_util.tree_map(lambda a, b: np.concatenate([np.asarray(b, np.float32)[None], a[1:]]),
                                        params, warm_start(warm, system, model))
    # strongly typed float32 arrays (not weak-typed scalars): the step's outputs are strong, so weak
    # inputs would make the second call compile the step again
    params = jax.tree_util.tree_map(jnp.asarray, params)
    return params, _init_state(params)


@jax.jit
def _init_state(params):
    return jax.vmap(_OPT.init)(params)


def is_compiled(restarts: int, system: System, model: RankingModel) -> bool:
    """Whether the step for this problem shape (and number of restarts) is compiled in this process."""
    return _cache_key(restarts, system, model) in _STEP_SECONDS


def step_seconds(restarts: int, system: System, model: RankingModel) -> float | None:
    """Wall seconds of one step of this problem shape, as last measured in this process (None: never
    run past its first step)."""
    return _STEP_SECONDS.get(_cache_key(restarts, system, model))


_STEP_SECONDS: dict = {}    # problem shapes run in this process -> seconds per step (None until measured)


def _cache_key(restarts, system, model):
    return (restarts, jax.tree_util.tree_structure((system, model)),
            tuple(x.shape for x in jax.tree_util.tree_leaves((system, model))))


def run(step, params, state, system: System, model: RankingModel, masks: Masks, *, steps: int, deadline: float,
        tau0: float = 1.0, tau_end: float = 0.005):
    """Anneal tau geometrically from tau0 to tau_end over `steps` steps (or until the deadline).
    Returns the params, the last losses, the steps taken and the gradient entries, summed over the
    steps, that were not finite (zeroed by the step: a bug in the model's derivative, if ever > 0)."""
    v, taken, nonfinite = None, 0, []
    key = _cache_key(jax.tree_util.tree_leaves(params)[0].shape[0], system, model)
    _STEP_SECONDS.setdefault(key, None)
    for i in range(steps):
        tau = tau0 * (tau_end / tau0) ** (i / max(steps - 1, 1))
        params, state, v, bad = step(params, state, system, model, masks, jnp.float32(tau))
        nonfinite.append(bad)
        taken = i + 1
        if i == 0:                           # compiled (when it was not) and run: the clock starts
            jax.block_until_ready(v)
            t1 = time.time()
        if time.time() > deadline:
            break
    v = np.asarray(v)
    if taken > 1:
        _STEP_SECONDS[key] = (time.time() - t1) / (taken - 1)
    return params, v, taken, int(sum(np.asarray(b) for b in nonfinite))


def gradient_search(system: System, model: RankingModel, masks: Masks, *, seed: int, restarts: int,
                    steps: int, warm: Plan | None, deadline: float) -> tuple[SoftParams, np.ndarray, int, int]:
    """Optimize `restarts` relaxed plans at once. Returns the final params (leading restart axis),
    the final relaxed losses, the number of steps taken and of non-finite gradient entries (run)."""
    params, state = prepare(system, model, seed=seed, restarts=restarts, warm=warm)
    return run(step_for(restarts, system, model), params, state, system, model, masks, steps=steps, deadline=deadline)
