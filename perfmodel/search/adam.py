"""Adam over relaxed plans (optax), many restarts in one vmapped batch.

Objective per restart: the relaxed step time (smooth max at a fixed relative temperature) plus a
memory penalty  lambda x step x sum_d relu(mem_d / cap - 1),  with the softmax temperature of every
choice annealed geometrically from tau_0 to tau_end, so the relaxed plan hardens as it converges.
One restart starts from the greedy plan (its choices as logits), the others at random.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..cache import jit
from ..evaluate import evaluate_arrays
from ..hardware import System
from ..plan import ALGORITHMS, COLLECTIVES, DENSE_MODES, PRECISIONS, SHARDING_TYPES, Plan
from ..workload import RankingModel
from ..plan import Masks
from .relax import SoftParams, init_params, soft_arrays

SMOOTH = 0.02            # relative temperature of the smooth max in the relaxed schedule
PENALTY = 10.0


def warm_start(plan: Plan, system: System, model: RankingModel, strength: float = 3.0) -> SoftParams:
    """Logits that make `plan` the argmax of every choice."""
    T, D, L = model.tables.count, system.num_chips, system.domain_size
    H = system.num_domains
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
    algo = np.zeros((len(COLLECTIVES), len(ALGORITHMS)), np.float32)
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
    bd = evaluate_arrays(system, model, pa, SMOOTH)
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


# A small instance's step compiles with LLVM's optimizations off (cache.QUICK_COMPILE_OPTIONS): it
# compiles several times faster and runs 1.4-2.5x slower, which its few hundred steps pay back; a
# large one's run costs about what the compile saves, so it compiles optimized
# (benchmarks/bench_compile.py measures both). Both keep XLA's YNNPACK fusions, which run the step
# faster, and with which Adam's first step does not move logits whose gradient is at rounding level
QUICK_STEP_CELLS = 8 * 65536     # restarts x tables x devices up to which the step compiles quick
_step = jit(_step_fn, export=True, library_fusions=True)
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


def step_of(restarts: int, system: System, model: RankingModel):
    """A function (params, state, tau) -> (params, state, losses, non-finite gradient entries): one
    Adam step of every restart, compiled for this problem's size."""
    step = step_for(restarts, system, model)
    return lambda params, state, masks, tau: step(params, state, system, model, masks, jnp.float32(tau))


def temperature(i: int, steps: int, tau0: float = 1.0, tau_end: float = 0.005) -> float:
    """The softmax temperature of step i of `steps`: annealed geometrically from tau0 to tau_end."""
    return tau0 * (tau_end / tau0) ** (i / max(steps - 1, 1))
