"""How the discrete search rates a plan: its score, its tie-broken score, and the batched scorers.

Scores are lexicographic: a feasible plan scores its step time; an infeasible one INFEASIBLE x (1 +
memory over capacity), so any feasible plan beats any infeasible one and, among infeasible ones,
less memory over capacity wins. The step is a max over devices: when several devices share the max
of a resource, no single move lowers it and a local search would stop on the plateau. The
tie-broken score multiplies the score by 1 + TIE x sum over resources of the smooth max over
devices of load / mean load, which still falls when one of the tied devices is relieved.
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np

from ..cache import jit
from ..cost.arrays import as_numpy, xp_of
from ..cost.smooth import logsumexp
from ..evaluate import step_model
from ..hardware import System
from ..plan import TABLE_FIELDS, PlanArrays, build, settings_arrays
from ..workload import RankingModel

INFEASIBLE = 1e6      # seconds: a score floor for plans over memory capacity
VIOLATED = 1e15       # seconds: a score floor for plans that break a per-table constraint (constraints.py),
                      # above any plan over capacity (INFEASIBLE x (1 + memory over) stays below it)
TIE = 1e-3            # weight of the resource spread in the tie-broken score
TIE_TAU = 0.02        # temperature of its smooth max, in units of a resource's mean
EXHAUSTIVE = 4096     # tables x devices up to which every move is tried (a "small" instance)
# A batch of compound moves or setting changes whose table arrays take more than this is built in a
# compiled program from the moves' types or the settings alone, a smaller one in numpy: numpy arrays
# over 32 MB (glibc's largest mmap threshold) are fresh pages each time they are made
PROGRAM_BATCH_BYTES = 32 << 20


def score_of(bd, over_guard=None, step=None):
    """Feasible plans score their step time (`step` where given: a search objective's, as
    uncertainty.robust.Draws.step); infeasible ones INFEASIBLE x (1 + memory over capacity
    + over_guard: how far over a guard's cap, guard.ShardCosts.over)."""
    xp = xp_of(bd.memory_bytes)
    step = bd.step_s if step is None else step
    over = xp.sum(xp.maximum(bd.memory_bytes - bd.capacity_bytes, 0.0), axis=-1) / bd.capacity_bytes
    if over_guard is None:
        return xp.where(bd.feasible, step, INFEASIBLE * (1.0 + over))
    return xp.where(bd.feasible & (over_guard <= 0), step, INFEASIBLE * (1.0 + over + over_guard))


def loads(bd, emb):
    """[R, D] per device, every resource whose max over devices can bind the step: compute busy,
    the bytes sent and received by the index and output all-to-alls at each network level, and the
    table-row-wise reduce-scatter's buffer (from the evaluation's own embedding costs)."""
    xp = xp_of(bd.compute_s)
    return xp.concatenate([bd.compute_s[..., None, :], *(xp.swapaxes(x, -1, -2) for x in
                                                          (emb.out_send, emb.out_recv, emb.in_send, emb.in_recv)),
                           emb.tr_bytes[..., None, :]], axis=-2)


def spread(per_device):
    """Sum over resources of the smooth max over devices of load / mean load (the tie-breaker);
    resources no device uses add nothing."""
    xp = xp_of(per_device)
    mean = xp.mean(per_device, axis=-1, keepdims=True)
    norm = per_device / xp.where(mean > 0, mean, 1.0)
    return xp.sum(xp.where(mean[..., 0] > 0, TIE_TAU * logsumexp(norm / TIE_TAU, axis=-1), 0.0), axis=-1)


def constrained(score, pa, limits):
    """A score with a plan that breaks the constraints (plan.Limits; None: none) floored at
    VIOLATED x (1 + how far it breaks them), so that every plan that keeps them beats it."""
    if limits is None:
        return score
    from ..plan import violations
    bad = violations(pa, limits)
    return xp_of(score).where(bad > 1e-4, VIOLATED * (1.0 + bad), score)


def scores(system, model, pa, guard=None, tau: float = 0.0, limits=None, draws=None):
    """(score, tie-broken score, Breakdown, resource loads [R, D]) of one plan (a batch in numpy).
    With a guard (guard.ShardCosts), a plan over its cap scores as one over memory, and the guard's
    per-device sums are one more resource; with limits (plan.Limits), a plan that breaks them
    scores VIOLATED or more. tau > 0: the smooth evaluation (first-order estimates). draws
    (uncertainty.robust.Draws; compiled only): a feasible plan scores the objective's quantile of
    its step over the draws instead of its step; feasibility, the Breakdown and the loads the
    tie-breaker and the moves read stay the nominal ones."""
    bd, emb = step_model(system, model, pa, tau)
    per_device = loads(bd, emb)
    over_guard = None
    if guard is not None:
        by_guard = guard.loads(pa, system.domain_sizes)
        xp = xp_of(by_guard)
        per_device, over_guard = xp.concatenate([per_device, by_guard[..., None, :]], axis=-2), guard.over(by_guard)
    step = None if draws is None else draws.step(system, model, pa, tau)
    score = constrained(score_of(bd, over_guard, step), pa, limits)
    return score, score * (1.0 + TIE * spread(per_device)), bd, per_device


@jit(export=True)
def _score_batch(system, model, batch, guard=None, limits=None, draws=None):
    return jax.vmap(lambda p: scores(system, model, p, guard, limits=limits, draws=draws)[:2])(batch)


@jit(quick=True, export=True)     # one call per round: quick to compile, under 2 ms a call
def details(system, model, pa, guard=None, limits=None, draws=None):
    """Tie-broken score; per device compute busy and memory; the capacity; resource loads [R, D];
    the score; the Breakdown."""
    score, tie, bd, per_device = scores(system, model, pa, guard, limits=limits, draws=draws)
    return tie, bd.compute_s, bd.memory_bytes, bd.capacity_bytes, per_device, score, bd


def batch_size(system: System, model: RankingModel) -> int:
    """Plans per scoring call: about 256 MB of placement arrays, a power of two in [16, 1024]."""
    n = 64e6 / max(model.tables.count * system.num_chips, 1)
    return int(np.clip(2 ** int(np.floor(np.log2(max(n, 1)))), 16, 1024))


def is_exhaustive(system: System, model: RankingModel) -> bool:
    """Whether the instance is small: every table on every device is a move the search tries."""
    return model.tables.count * system.num_chips <= EXHAUSTIVE


def in_program(system: System, model: RankingModel) -> bool:
    """Whether batches of compound moves and setting changes are built in compiled programs: when a
    batch's table arrays (batch_size plans) take more than PROGRAM_BATCH_BYTES."""
    T, D = model.tables.count, system.num_chips
    return batch_size(system, model) * T * (5 + D + system.num_domains + 2) * 4 > PROGRAM_BATCH_BYTES


def eager(system: System, model: RankingModel) -> bool:
    """Whether a search's start (greedy's settings, its score and its compound moves; under a guard
    also its start packed on the guard's costs) is scored in numpy: on a small instance whose
    batches are built in numpy. Those batches cost numpy some milliseconds and no program has to be
    compiled or loaded for them, so a process's first search holds its first plans at once."""
    return is_exhaustive(system, model) and not in_program(system, model)


def score_pairs(system: System, model: RankingModel, batch: PlanArrays, guard=None, eager: bool = False,
                limits=None, draws=None, size: int | None = None) -> np.ndarray:
    """[2, n]: the hard and the tie-broken scores of a batch of plans, in chunks padded to one fixed
    size (`size`, default batch_size: one compile per problem). eager=True: in numpy, by the same
    cost functions (cost.arrays), with no program to compile; the scores agree with the compiled
    ones to float32 rounding. draws: a search objective's (scores), compiled only."""
    if eager:
        if draws is not None:
            raise ValueError("a search objective's draws are scored compiled, not eager")
        sc, tie, _, _ = scores(as_numpy(system), as_numpy(model), as_numpy(batch), guard, limits=limits)
        return np.stack([sc, tie]).astype(np.float32)
    size = size or batch_size(system, model)
    n = jax.tree_util.tree_leaves(batch)[0].shape[0]
    out = []
    for s in range(0, n, size):
        m = min(size, n - s)
        chunk = batch if (s, m) == (0, n) else jax.tree_util.tree_map(lambda x: x[s:s + size], batch)
        if m < size:       # numpy batches padded in numpy: no op-by-op dispatch
            xp = lambda x: np if isinstance(x, np.ndarray) else jnp
            chunk = jax.tree_util.tree_map(lambda x: xp(x).concatenate([x, xp(x).repeat(x[:1], size - m, axis=0)]), chunk)
        out.append(np.stack([np.asarray(x) for x in _score_batch(system, model, chunk, guard, limits, draws)])[:, :m])
    return np.concatenate(out, axis=1)


def score_plans(system: System, model: RankingModel, batch: PlanArrays, tie: bool = False, guard=None,
                eager: bool = False, limits=None, draws=None, size: int | None = None) -> np.ndarray:
    """Hard scores of a batch of plans (tie=True: the tie-broken ones): a row of score_pairs."""
    return score_pairs(system, model, batch, guard, eager, limits, draws, size)[int(tie)]


def in_batches(n: int, size: int, scores_from) -> np.ndarray:
    """The n scores of candidates scored `size` at a time: scores_from(s) scores a padded batch of
    candidates s, s + 1, ... (along its last axis); its padding is cut."""
    out = [scores_from(s)[..., :min(size, n - s)] for s in range(0, n, size)]
    return np.concatenate(out, axis=-1) if out else np.zeros(0)


def pad(x: np.ndarray, size: int) -> np.ndarray:
    """Pad a candidate column (or a stacked batch, along its first axis) to `size` by repeating its
    first entry (fixed shapes: one compile)."""
    return x if len(x) >= size else np.concatenate([x, np.repeat(x[:1], size - len(x), axis=0)])


def host(x, dtype=None) -> np.ndarray:
    """x as a numpy array of the dtype jax makes of it (64-bit as 32-bit unless x64 is on), for a
    compiled program's argument: a numpy array is passed as it is, where jnp.asarray of one would
    compile a conversion program per shape and dtype."""
    x = np.asarray(x, dtype)
    return x.astype(jax.dtypes.canonicalize_dtype(x.dtype), copy=False)


# ---------------------------------------------------------------------- setting variants of one plan
def with_settings(pa: PlanArrays, settings: dict, xp=jnp):
    """Batch of plans: `pa`'s tables with each row of `settings` (the settings leaves of PlanArrays,
    plan.settings_arrays, stacked). xp: jax.numpy (in a compiled program, where the tables are
    broadcast rather than sent once per plan) or numpy."""
    n = len(settings["offload"])
    wide = lambda x: None if x is None else xp.broadcast_to(x[None], (n,) + np.shape(x))
    return build({f: wide(getattr(pa, f)) for f in TABLE_FIELDS}, settings, row_shards=wide(pa.row_shards))


def _settings_in_program(pa: PlanArrays, settings: dict):
    return with_settings(pa, settings)


_with_settings = jit(_settings_in_program, export=True)


def settings_batch(plans: list, size: int) -> dict:
    """The settings leaves of `plans` (plan.settings_arrays), stacked and padded to `size`."""
    rows = [settings_arrays(p) for p in plans]
    return {k: pad(np.stack([r[k] for r in rows]), size) for k in rows[0]}


def score_settings(system: System, model: RankingModel, plans: list, tables: PlanArrays, tie: bool = False,
                   guard=None, eager: bool = False, draws=None, size: int | None = None) -> np.ndarray:
    """score_plans of `plans` that differ in their settings only, sharing `tables` (plan_arrays of
    one of them): only their settings are stacked, and the tables broadcast (in_program: in a
    compiled program, a batch of batch_size at a time; else in numpy). eager: scored in numpy too.
    draws, size: a search objective's draws and the plans per scoring call (score_pairs)."""
    if not in_program(system, model):
        return score_plans(system, model, with_settings(tables, settings_batch(plans, len(plans)), np), tie, guard,
                           eager, draws=draws, size=size)
    size = size or batch_size(system, model)
    return in_batches(len(plans), size, lambda s: score_plans(
        system, model, _with_settings(tables, settings_batch(plans[s:s + size], size)), tie, guard, draws=draws,
        size=size))
