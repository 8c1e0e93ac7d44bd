"""Vectorized local search over discrete plans: repair to memory feasibility, then refinement.

Each round builds a batch of single moves of the current plan as PlanArrays (move a table to
another device as table_wise, change its sharding type, split it column-wise, swap two tables,
keep part of it in host DRAM; change the dense parallelism, an algorithm, the bucket or chunk
count, pipelining, offload, precision), evaluates them all in one vmapped call, and takes the best;
improving moves on disjoint tables and devices are then tried together. Scores are lexicographic:
any feasible plan beats any infeasible one; among infeasible ones, less memory over capacity wins.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ..cache import jit, make
from ..cost.arrays import as_numpy, xp_of
from ..cost.smooth import logsumexp
from ..evaluate import _step_model
from ..hardware import System
from ..plan import (ALLOWED_ALGORITHMS, COLLECTIVES, CW, DENSE_MODES, DP, PRECISIONS, RW,
                    SHARDING_TYPES, TW, TWRW, Plan, PlanArrays, TablePlan, plan_arrays, settings_arrays, stack,
                    stand_in)
from ..workload import RankingModel
from .relax import Masks, cw_options

INFEASIBLE = 1e6      # seconds: a score floor for plans over memory capacity
SETTINGS_EVERY = 4     # rounds between setting changes while table moves still improve (large instances)
HOT, COLD = 3, 4      # per resource: heaviest devices to relieve, lightest to load (large instances)
GROUP_MAX = 32        # compound moves on large instances: up to this many tables at once
CW_MOVE_SHARDS = 8    # column shards a move or kick may split a table into (2 ... 8, as cw_options allows)
SPLIT_WIDTHS = (2, 4, 8)   # column-wise splits (LocalSearch._cw_splits): shards per table, on aligned blocks
SPLIT_TWRW = 4       # ... with up to this many of the heaviest other tables table-row-wise
EXHAUSTIVE = 4096     # tables x devices up to which every move is tried (a "small" instance)
TIE = 1e-3            # weight of the resource spread in the local search's score (see _scores)
TIE_TAU = 0.02        # temperature of its smooth max, in units of a resource's mean
# A descent stops after this many rounds without a lower score (step time; or memory over capacity
# while infeasible): the tie-broken score can fall for 200 rounds on a plateau with no step-time
# gain. In 30-s MLPerf searches (h100-16, h100-64, mtia300-64) and 60-s prod-856 ones (mtia300-256,
# h100-256) no descent went more than 9 rounds between gains, while 9 of 69 walked 150-200 rounds
# after their last one (2-2.7 s each on h100-16: most of its kicks' time)
PLATEAU_ROUNDS = 25


def is_exhaustive(system: System, model: RankingModel) -> bool:
    """Whether the instance is small: every table on every device is a move the local search tries
    (tables x devices <= EXHAUSTIVE)."""
    return model.tables.count * system.num_chips <= EXHAUSTIVE


def note_progress(progress: list, score: float) -> None:
    """Append (wall clock, score) to a search's anytime profile when `score` is a feasible plan's
    better than the profile's last entry."""
    if score < INFEASIBLE and (not progress or score < progress[-1][1]):
        progress.append((time.time(), float(score)))


def score_of(bd, over_guard=None) -> jax.Array:
    """Feasible plans score their step time; infeasible ones INFEASIBLE x (1 + memory over capacity
    + over_guard: how far over a guard's cap, guard.ShardCosts.over)."""
    xp = xp_of(bd.memory_bytes)
    over = xp.sum(xp.maximum(bd.memory_bytes - bd.capacity_bytes, 0.0), axis=-1) / bd.capacity_bytes
    if over_guard is None:
        return xp.where(bd.feasible, bd.step_s, INFEASIBLE * (1.0 + over))
    return jnp.where(bd.feasible & (over_guard <= 0), bd.step_s, INFEASIBLE * (1.0 + over + over_guard))


def _loads(bd, emb) -> jax.Array:
    """[R, D] per device, every resource whose max over devices can bind the step: compute busy,
    the bytes sent and received by the index and output all-to-alls at each network level, and the
    table-row-wise reduce-scatter's buffer (from the evaluation's own embedding costs)."""
    xp = xp_of(bd.compute_s)
    return xp.concatenate([bd.compute_s[..., None, :], *(xp.swapaxes(x, -1, -2) for x in
                                                          (emb.out_send, emb.out_recv, emb.in_send, emb.in_recv)),
                           emb.tr_bytes[..., None, :]], axis=-2)


def _scores(system, model, pa, guard=None):
    """(score, tie-broken score) of one plan. The step is a max over devices; when several devices
    share the max of a resource (three devices each sending the most output bytes, say), no single
    move lowers it, and a local search stops on the plateau. The tie-broken score multiplies the
    score by 1 + TIE x sum over resources of the smooth max over devices of load / mean load, which
    still falls when one of the tied devices is relieved, so the search walks along plateaus.
    With a guard (guard.ShardCosts), a plan over its cap scores as one over memory, and the guard's
    per-device sums are one more resource."""
    bd, emb = _step_model(system, model, pa, 0.0)
    loads = _loads(bd, emb)
    over_guard = None
    if guard is not None:
        per_device = guard.loads(pa, system.domain_size)
        loads, over_guard = jnp.concatenate([loads, per_device[None]]), guard.over(per_device)
    xp = xp_of(loads)
    mean = xp.mean(loads, axis=-1, keepdims=True)
    norm = loads / xp.maximum(mean, 1e-30)
    spread = xp.sum(xp.where(mean[..., 0] > 0, TIE_TAU * logsumexp(norm / TIE_TAU, axis=-1), 0.0), axis=-1)
    score = score_of(bd, over_guard)
    return score, score * (1.0 + TIE * spread), bd, loads


@jit(export=True)    # a new process with the persistent cache loads its traced program (cache.Exported)
def _score_batch(system, model, batch, guard=None):
    return jax.vmap(lambda p: _scores(system, model, p, guard)[:2])(batch)


def load_batch_scorer(system: System, model: RankingModel) -> bool:
    """Load the programs greedy's start calls first, when their executables are kept on disk
    (cache.Exported.ready), without running them: its setting candidates' batch (_apply_settings,
    when in_program) and the batch scorer (no guard, a batch of batch_size plans); True when the scorer loaded. The
    search does this in a thread while greedy builds its start: in a new process on MLPerf / h100-16
    the scorer's load (0.12 s) began only after greedy's inputs and packing (0.07 s)."""
    plan = stand_in(system, model)
    pa, size = plan_arrays(plan, system, model), batch_size(system, model)
    spec = lambda lead: lambda x: jax.ShapeDtypeStruct(lead + np.shape(x), np.asarray(x).dtype)
    if in_program(system, model):
        _apply_settings.ready(*jax.tree_util.tree_map(spec(()), (pa, _settings_batch([plan], size))), kept_only=True)
    return _score_batch.ready(system, model, jax.tree_util.tree_map(spec((size,)), pa), None, kept_only=True)


def make_batch_scorer(system: System, model: RankingModel) -> None:
    """Make the batch scorer's program for this problem (no guard, a batch of batch_size plans):
    loaded or traced and compiled (cache.make; with the persistent cache off, by a call on a batch of
    stand-in plans). A search whose start is scored in numpy (eager) does this in a thread."""
    pa, size = plan_arrays(stand_in(system, model), system, model), batch_size(system, model)
    make(_score_batch, system, model, jax.tree_util.tree_map(lambda x: np.repeat(np.asarray(x)[None], size, 0), pa),
         None)


def batch_size(system: System, model: RankingModel) -> int:
    """Plans per scoring call: about 256 MB of placement arrays, a power of two in [16, 1024]."""
    n = 64e6 / max(model.tables.count * system.num_chips, 1)
    return int(np.clip(2 ** int(np.floor(np.log2(max(n, 1)))), 16, 1024))


def score_plans(system: System, model: RankingModel, batch: PlanArrays, tie: bool = False, guard=None,
                eager: bool = False) -> np.ndarray:
    """Hard scores of a batch of plans, in chunks padded to one fixed size (one compile per problem);
    tie=True: the tie-broken scores (_scores). Both come from the same compiled function. guard: a
    guard.ShardCosts the plans must keep within its cap (another compiled function). eager: in numpy
    (score_pairs)."""
    return score_pairs(system, model, batch, guard, eager)[int(tie)]


def eager(system: System, model: RankingModel, guard=None) -> bool:
    """Whether a search's start (greedy's settings, its score and its compound moves) is scored in
    numpy (score_pairs' eager=True): on a small instance (every move tried: is_exhaustive; no
    compiled program builds its batches: in_program) with no guard. Those batches cost numpy some
    milliseconds (MLPerf / h100-16: 376 compound moves in 14 ms, against 2.6 ms for 1,024 plans
    compiled), and no program has to be compiled or loaded for them: a process's first search holds
    greedy's best compound move at 0.04 s, where compiling the batch scorer took 1.0-1.3 s."""
    return guard is None and is_exhaustive(system, model) and not in_program(system, model)


def score_pairs(system: System, model: RankingModel, batch: PlanArrays, guard=None, eager: bool = False) -> np.ndarray:
    """[2, n]: the hard and the tie-broken scores of a batch of plans (score_plans). eager=True: in
    numpy, by the same cost functions (cost.arrays; a search asks for it with no guard: local.eager),
    with no program to compile; the scores agree with the compiled ones to about 1e-6 (float32
    rounding)."""
    if eager:
        sc, tie, _, _ = _scores(as_numpy(system), as_numpy(model), as_numpy(batch), guard)
        return np.stack([sc, tie]).astype(np.float32)
    size = batch_size(system, model)
    n = jax.tree_util.tree_leaves(batch)[0].shape[0]
    out = []
    for s in range(0, n, size):
        m = min(size, n - s)
        chunk = batch if (s, m) == (0, n) else jax.tree_util.tree_map(lambda x: x[s:s + size], batch)
        if m < size:       # numpy batches (plan_arrays) padded in numpy: no op-by-op dispatch
            xp = lambda x: np if isinstance(x, np.ndarray) else jnp
            chunk = jax.tree_util.tree_map(lambda x: xp(x).concatenate([x, xp(x).repeat(x[:1], size - m, axis=0)]), chunk)
        out.append(np.stack([np.asarray(x) for x in _score_batch(system, model, chunk, guard)])[:, :m])
    return np.concatenate(out, axis=1)


def score_settings(system: System, model: RankingModel, plans: list[Plan], tables: PlanArrays,
                   tie: bool = False, guard=None, eager: bool = False) -> np.ndarray:
    """score_plans of `plans` that differ in their settings only, sharing `tables` (plan_arrays of
    one of them): only their settings are stacked, and the tables broadcast (in_program: in the
    compiled program _apply_settings, a batch of batch_size at a time; else in numpy). eager: scored
    in numpy too (score_pairs; not in_program)."""
    if not in_program(system, model):
        return score_plans(system, model, _with_settings(tables, _settings_batch(plans, len(plans)), np), tie, guard,
                           eager)
    size = batch_size(system, model)
    return _in_batches(len(plans), size, lambda s: score_plans(
        system, model, _apply_settings(tables, _settings_batch(plans[s:s + size], size)), tie, guard))


def _in_batches(n: int, size: int, scores_from) -> np.ndarray:
    """The n scores of candidates scored `size` at a time: scores_from(s) scores a padded batch of
    candidates s, s + 1, ... (along its last axis: [size] or, score_pairs, [2, size]); its padding is cut."""
    out = [scores_from(s)[..., :min(size, n - s)] for s in range(0, n, size)]
    return np.concatenate(out, axis=-1) if out else np.zeros(0)


def in_program(system: System, model: RankingModel) -> bool:
    """Whether batches of compound moves and setting changes are built in compiled programs: when a
    batch's table arrays (batch_size plans) take more than PROGRAM_BATCH_BYTES."""
    T, D, L = model.tables.count, system.num_chips, system.domain_size
    return batch_size(system, model) * T * (5 + D + D // L + 2) * 4 > PROGRAM_BATCH_BYTES


def _settings_batch(plans: list[Plan], size: int) -> dict:
    """The settings leaves of `plans` (plan.settings_arrays), stacked and padded to `size`."""
    rows = [settings_arrays(p) for p in plans]
    return {k: _pad(np.stack([r[k] for r in rows]), size) for k in rows[0]}


@jit(quick=True, export=True)     # one call per round: compiles in 0.5-0.6 s instead of 1.0-1.3, runs in under 2 ms (cache.py)
def _details(system, model, pa, guard=None):
    """Tie-broken score; per device compute busy and memory; the capacity; resource loads [R, D];
    the score; the Breakdown."""
    score, tie, bd, loads = _scores(system, model, pa, guard)
    return tie, bd.compute_s, bd.memory_bytes, bd.capacity_bytes, loads, score, bd


def _table_moves(pa: PlanArrays, t, st, devs, k, dom, cache):
    """Batch of plans, each with table t[i] set to type st[i] on the devices devs[i] (a row of
    CW_MOVE_SHARDS, padded with -1: table-wise one device, column-wise k[i] of them, an equal share
    each), domain dom[i], cache ratio cache[i]."""
    def one(t, st, devs, k, dom, cache):
        D = pa.placement.shape[1]
        cw = (st == CW).astype(jnp.float32)
        on = jax.nn.one_hot(devs, D).sum(0)            # one_hot(-1) is all zeros
        return dataclasses.replace(
            pa,
            shard_type=pa.shard_type.at[t].set(jax.nn.one_hot(st, 5)),
            placement=pa.placement.at[t].set(on / jnp.maximum(on.sum(), 1.0)),
            domain_placement=pa.domain_placement.at[t].set(jax.nn.one_hot(dom, pa.domain_placement.shape[1])),
            cw_shards=pa.cw_shards.at[t].set(1.0 + cw * (k - 1.0)),
            cache_ratio=pa.cache_ratio.at[t].set(cache),
        )
    return jax.vmap(one)(t, st, devs, k, dom, cache)


def _swaps(pa: PlanArrays, t1, t2):
    """Batch of plans, each with the placements of tables t1[i] and t2[i] exchanged."""
    def one(a, b):
        P = pa.placement
        return dataclasses.replace(pa, placement=P.at[a].set(P[b]).at[b].set(P[a]))
    return jax.vmap(one)(t1, t2)


def _mixed(pa: PlanArrays, t, st, devs, k, dom, cache, t1, t2, kind, row, settings: PlanArrays):
    """One batch of three kinds of candidates: row i is the table move i (kind 0, as _table_moves),
    the swap i (kind 1, as _swaps), or the plan settings[row[i]] (kind 2: a setting change)."""
    moved, swapped = _table_moves(pa, t, st, devs, k, dom, cache), _swaps(pa, t1, t2)
    picked = jax.tree_util.tree_map(lambda x: x[row], settings)
    def pick(a, b, c):
        sel = kind.reshape(kind.shape + (1,) * (a.ndim - 1))
        return jnp.where(sel == 0, a, jnp.where(sel == 1, b, c))
    return jax.tree_util.tree_map(pick, moved, swapped, picked)


def _groups(pa: PlanArrays, types, doms, changed, partner, width, dense, xp=jnp):
    """Batch of plans, each `pa` with the tables where changed[i] is set made type types[i]: table-row-wise
    on domain doms[i]; column-wise in two, half on the table's device and half on partner[i], or (partner
    -1) in width[i] shards on the devices doms[i] ... doms[i] + width[i] - 1; as plan_arrays builds them:
    spread evenly over the devices (and the domains, but table-row-wise), and data-parallel ones whole in
    HBM (cache ratio 1); the dense parallelism DENSE_MODES[dense[i]] (-1: as in pa).
    xp: jax.numpy (in a compiled program: _apply_groups) or numpy."""
    D, H = pa.placement.shape[1], pa.domain_placement.shape[1]
    c, one = changed[..., None], lambda x: x[None]
    onehot = lambda x, n: xp.eye(n, dtype=np.float32)[x]
    rows = xp.where((types == TWRW)[..., None], onehot(xp.where(types == TWRW, doms, 0), H), np.float32(1.0 / H))
    split = (types == CW)[..., None]          # a table-wise table's placement row is one-hot on its device
    halves = np.float32(0.5) * (one(pa.placement) + onehot(xp.maximum(partner, 0), D))
    w = xp.maximum(width, 1)[:, None, None]   # (padded rows of a batch may hold width 0)
    dev = xp.arange(D)
    block = ((dev >= doms[..., None]) & (dev < doms[..., None] + w)).astype(np.float32) / w.astype(np.float32)
    modes = len(DENSE_MODES)
    return PlanArrays(
        shard_type=xp.where(c, onehot(types, 5), one(pa.shard_type)),
        placement=xp.where(c, xp.where(split, xp.where((partner >= 0)[..., None], halves, block), np.float32(1.0 / D)),
                           one(pa.placement)),
        domain_placement=xp.where(c, rows, one(pa.domain_placement)),
        cw_shards=xp.where(changed, xp.where(types == CW, w[:, :, 0].astype(np.float32), np.float32(1.0)),
                           one(pa.cw_shards)),
        cache_ratio=xp.where(changed & (types == DP), np.float32(1.0), one(pa.cache_ratio)),
        dense_mode=xp.where((dense >= 0)[:, None], onehot(xp.maximum(dense, 0), modes), one(pa.dense_mode)),
        **{f: xp.broadcast_to(one(getattr(pa, f)), (len(types),) + np.shape(getattr(pa, f)))
           for f in SETTING_FIELDS if f != "dense_mode"})


def _with_settings(pa: PlanArrays, settings: dict, xp=jnp):
    """Batch of plans: `pa`'s tables with each row of `settings` (the settings leaves of PlanArrays,
    plan.settings_arrays, stacked). xp: jax.numpy (in a compiled program, _apply_settings: the tables
    are broadcast there rather than sent once per plan, 0.9 MB each on prod-856 / h100-256) or numpy."""
    n = len(settings["offload"])
    return PlanArrays(**settings, **{f: xp.broadcast_to(getattr(pa, f)[None], (n,) + np.shape(getattr(pa, f)))
                                     for f in TABLE_FIELDS})


def _groups_in_program(pa: PlanArrays, types, doms, changed, partner, width, dense):
    return _groups(pa, types, doms, changed, partner, width, dense)


def _settings_in_program(pa: PlanArrays, settings: dict):
    return _with_settings(pa, settings)


TABLE_FIELDS = ("shard_type", "placement", "domain_placement", "cw_shards", "cache_ratio")
SETTING_FIELDS = tuple(f.name for f in dataclasses.fields(PlanArrays) if f.name not in TABLE_FIELDS)
_apply_table_moves = jit(_table_moves, export=True)
_apply_swaps = jit(_swaps, export=True)
_apply_mixed = jit(_mixed, export=True)
_apply_groups = jit(_groups_in_program, export=True)
_apply_settings = jit(_settings_in_program, export=True)
# A batch of compound moves or setting changes whose table arrays take more than this is built in
# a compiled program (_apply_groups, _apply_settings) from the moves' types or the settings alone;
# a smaller one in numpy. Numpy arrays over 32 MB (glibc's largest mmap threshold) are fresh pages
# each time, and this VM's first touches are slow: greedy's 432 setting candidates on prod-856 /
# h100-256 (380 MB stacked, 224 MB per padded batch) took 1.6 s, their programs 0.02 s. A small batch
# (MLPerf / h100-16: 2.7 MB) is cheaper in numpy than two more programs to compile or load (a new
# process's first plan at 0.29 s with them instead of 0.25 s; the first process's at 2.77 s, 2.37)
PROGRAM_BATCH_BYTES = 32 << 20
MIXED_SETTINGS = 32    # setting changes a mixed batch carries (padded to this: one compile)


def _pad(x: np.ndarray, size: int) -> np.ndarray:
    """Pad a candidate column (or a stacked batch, along its first axis) to `size` by repeating its
    first entry (fixed shapes: one compile)."""
    return x if len(x) >= size else np.concatenate([x, np.repeat(x[:1], size - len(x), axis=0)])


def _host(x, dtype=None) -> np.ndarray:
    """x as a numpy array of the dtype jax makes of it (jax.dtypes.canonicalize_dtype: 64-bit as 32-bit
    unless x64 is on), for a compiled program's argument: a numpy array is passed to it as it is, while
    jnp.asarray of one compiles a conversion program per shape and dtype in jax 0.10 (cold, 0.6 s of
    MLPerf / h100-16's warm-up, beside its other compiles; in a new process, loads from the persistent cache)."""
    x = np.asarray(x, dtype)
    return x.astype(jax.dtypes.canonicalize_dtype(x.dtype), copy=False)


def pick_compound(hard: np.ndarray, tie: np.ndarray, step_below: float, tie_below: float) -> int | None:
    """Which compound move to take, given their hard and tie-broken scores: the one of least step when
    that is below step_below, whatever its tie-broken score (a whole-plan move trades the step for
    its resource spread: MLPerf / h100-64, a column-wise split at 1.942 ms, tie-broken 1.99, from a
    plan at 1.968 both); else the least tie-broken one when below tie_below; else None. LocalSearch.run
    and the start's race (api._race_compound) take them so."""
    if not len(tie):
        return None
    j, i = int(np.argmin(hard)), int(np.argmin(tie))
    return j if hard[j] < step_below else i if tie[i] < tie_below else None


def _fill(order, on, weight, load) -> np.ndarray:
    """Bins for the tables, in `order`, where on [K, T] is set: each to the least-loaded bin of its
    row of load [K, B] (ties to the first), which it then loads by its weight (load is updated). The
    bin per row and table [K, T] (0 where not on)."""
    K = len(load)
    rows, out = np.arange(K), np.zeros((K, len(weight)), int)
    for t in order:
        here = on[:, t]
        if here.any():
            b = np.argmin(load, axis=1)
            out[here, t] = b[here]
            load[rows[here], b[here]] += weight[t]
    return out


class LocalSearch:
    """Holds the current discrete plan both as a Plan and as one-hot PlanArrays."""

    def __init__(self, system: System, model: RankingModel, masks: Masks, max_batch: int | None = None,
                 freeze_settings: bool = False, guard=None):
        self.system, self.model, self.masks = system, model, masks
        self.guard = guard             # guard.ShardCosts: plans over its cap score as infeasible
        self.freeze_settings = freeze_settings
        T, D = model.tables.count, system.num_chips
        self.T, self.D, self.L = T, D, system.domain_size
        self.H = D // self.L
        self.max_batch = max_batch or batch_size(system, model)
        self.dims = np.asarray(model.tables.dim).astype(int)
        self.cw_moves = [[k for k in cw_options(int(d), D) if k <= CW_MOVE_SHARDS] for d in self.dims]
        self.allowed_types = [j for j in range(5) if (masks.types[:, j] > -1).any()]
        self.exhaustive = is_exhaustive(system, model)
        self.in_program = in_program(system, model)      # compound moves and setting changes built in a program
        # the tables' fields as numpy arrays (the same dtypes: the same values): jax arrays' ops here
        # dispatched one compiled program each, 0.15 s cold and 0.03 s from the persistent cache
        tb = jax.tree_util.tree_map(np.asarray, model.tables)
        self.weight = np.asarray(tb.output_per_sample() * tb.dim * 4.0 + tb.pooling * tb.index_bytes, np.float64)
        self.progress: list[tuple[float, float]] = []    # (wall clock, step): each new best feasible plan held
        # the tables smallest first (bytes) and heaviest first (self.weight), and the splits'
        # data-parallel tables (_replicated)
        self.small = np.argsort(np.asarray(tb.rows * tb.bytes_per_row(), np.float64), kind="stable")
        self.heavy = np.argsort(-self.weight, kind="stable")
        self.replicated = self._replicated()
        self._cw_split_specs = None                      # _cw_splits, built once
        self._numpy = None                               # (system, model) with numpy leaves: numpy_problem

    @property
    def numpy_problem(self) -> tuple:
        """(system, model) with numpy leaves (as_numpy), for scoring in numpy (eager), made once:
        converting the jax arrays took 14 ms of a warm 0.2-s search's 0.2 (1,557 conversions)."""
        if self._numpy is None:
            self._numpy = (as_numpy(self.system), as_numpy(self.model))
        return self._numpy

    def pairs(self, batch, eager: bool = False) -> np.ndarray:
        """score_pairs of a batch under this search's guard; eager: in numpy, on numpy_problem."""
        problem = self.numpy_problem if eager else (self.system, self.model)
        return score_pairs(*problem, batch, self.guard, eager)

    def record(self, score: float) -> None:
        """Note the time when a plan of hard score `score` is held, if it is the best feasible one so far."""
        note_progress(self.progress, score)

    # ------------------------------------------------------------------ scoring
    def score(self, pa) -> float:
        return float(_details(self.system, self.model, pa, self.guard)[0])

    def details(self, plan: Plan) -> tuple[np.ndarray, ...]:
        """(tie-broken score, compute [D], memory [D], capacity, resource loads [R, D], score) of a plan."""
        return self._details_of(plan_arrays(plan, self.system, self.model))

    def _details_of(self, pa) -> tuple[np.ndarray, ...]:
        """details() of a plan's arrays."""
        return tuple(np.asarray(x) for x in _details(self.system, self.model, pa, self.guard)[:6])

    def breakdown(self, plan: Plan):
        """The plan's Breakdown, as evaluate() gives it (from the compiled function the search uses)."""
        return _details(self.system, self.model, plan_arrays(plan, self.system, self.model), self.guard)[6]

    def scores(self, batch) -> np.ndarray:
        return score_plans(self.system, self.model, batch, tie=True, guard=self.guard)

    def scores_of(self, plans: list[Plan]) -> np.ndarray:
        """Tie-broken scores of a list of Plans, in one batch."""
        return self.scores(stack([plan_arrays(p, self.system, self.model) for p in plans]))

    def settings_scores(self, plans: list[Plan], pa) -> np.ndarray:
        """Tie-broken scores of variants of one plan's settings (pa: that plan's arrays; score_settings)."""
        return score_settings(self.system, self.model, plans, pa, tie=True, guard=self.guard)

    def _mixed_scores(self, plan: Plan, pa, c: dict, a: np.ndarray, b: np.ndarray, settings: list[Plan]):
        """Tie-broken scores of the table moves c, the swaps (a, b) and the plans `settings`
        (fewer than max_batch, at most MIXED_SETTINGS), in batches built on `plan` (pa: its arrays) by one
        program (_apply_mixed): one batch when they fit, else the settings and the first moves, then
        the rest max_batch at a time (a small instance's rounds widened to every move: MLPerf /
        mtia300-64, 1,664 moves; the table-move and swap programs, compiled for that alone, cost a
        warm 0.3-s search 0.14 s)."""
        n, m = len(c["t"]), len(a)
        out, i, j, first = [[], [], []], 0, 0, True
        while first or i < n or j < m:
            extra = settings if first else []
            cn = min(n - i, self.max_batch - len(extra))
            cm = min(m - j, self.max_batch - len(extra) - cn)
            sc = self.scores(self._mixed_batch(plan, pa, {k: v[i:i + cn] for k, v in c.items()}, a[j:j + cm],
                                               b[j:j + cm], extra))
            for o, part in zip(out, (sc[:cn], sc[cn:cn + cm], sc[cn + cm:cn + cm + len(extra)])):
                o.append(part)
            i, j, first = i + cn, j + cm, False
        return tuple(np.concatenate(o) for o in out)

    def _mixed_batch(self, plan: Plan, pa, c: dict, a: np.ndarray, b: np.ndarray, settings: list[Plan]):
        """The batch _mixed_scores scores."""
        n, m, q, size = len(c["t"]), len(a), len(settings), self.max_batch
        kind = np.concatenate([np.zeros(n, np.int32), np.ones(m, np.int32), np.full(size - n - m, 2, np.int32)])
        cols = [_host(_pad(c[k], size) if n else np.zeros((size,) + c[k].shape[1:], c[k].dtype))
                for k in ("t", "st", "devs", "k", "dom")]
        cache = _host(_pad(c["cache"], size) if n else np.ones(size), np.float32)
        pad = lambda x: _host(np.pad(x, (n, size - n - len(x)), mode="edge") if len(x) else np.zeros(size, np.int32))
        row = np.clip(np.arange(size) - n - m, 0, max(q - 1, 0)).astype(np.int32)
        batch = stack([plan_arrays(p, self.system, self.model, pa) for p in settings or [plan]])
        batch = jax.tree_util.tree_map(lambda x: _pad(np.asarray(x), MIXED_SETTINGS), batch)
        return _apply_mixed(pa, *cols, cache, pad(a), pad(b), kind, row, batch)

    def _moves_batch(self, pa, c: dict, sl: slice):
        """The table moves c[sl] applied to `pa`, padded to max_batch."""
        cols = [_pad(c[k][sl], self.max_batch) for k in ("t", "st", "devs", "k", "dom")]
        return _apply_table_moves(pa, *(_host(x) for x in cols), _host(_pad(c["cache"][sl], self.max_batch), np.float32))

    def _swaps_batch(self, pa, a: np.ndarray, b: np.ndarray, sl: slice):
        """The swaps (a[sl], b[sl]) applied to `pa`, padded to max_batch."""
        return _apply_swaps(pa, _host(_pad(a[sl], self.max_batch)), _host(_pad(b[sl], self.max_batch)))

    def warm_up(self, scorer_clock=contextlib.nullcontext) -> None:
        """Compile what a descent needs besides the batch scorer (_score_batch): the single-plan
        scorer (_details) and the first round's move batches, on a stand-in plan of the problem's
        shape (plan.stand_in). search runs this in a thread while the greedy start (or, when the
        start is scored in numpy, another thread: make_batch_scorer) compiles the batch scorer: XLA
        compiles with the GIL released, so on 2 cores the two compiles overlap. The batch scorer is
        not called here (two threads asking for one program would both compile it).
        scorer_clock: a context manager around the single-plan scorer's call."""
        plan = stand_in(self.system, self.model)
        pa = plan_arrays(plan, self.system, self.model)
        with scorer_clock():
            _, _, memory, cap, loads, _ = self._details_of(pa)
        # the compound moves a search's start scores (api._compound_start), and the setting changes
        if self.in_program:
            specs = [_pad(x[:1], self.max_batch) for x in self._group_specs(plan)]
            if len(specs[0]):
                make(_apply_groups, pa, *(_host(x) for x in specs))
            make(_apply_settings, pa, _settings_batch([plan], self.max_batch))
        # the first round's candidates: moves off the hot devices (run widens to every move later)
        c = self._table_candidates(plan, loads, memory, float(cap), False)
        a, b = self._swap_candidates(plan, loads, memory, float(cap), False)
        if not len(c["t"]):
            return
        if self.exhaustive:          # run scores them in one mixed batch
            settings = self._setting_candidates(plan)[:MIXED_SETTINGS]
            room = max((self.max_batch - len(settings)) // 2, 1)
            c = {k: v[:room] for k, v in c.items()}
            jax.block_until_ready(self._mixed_batch(plan, pa, c, a[:room], b[:room], settings))
        else:
            jax.block_until_ready(self._moves_batch(pa, c, slice(0, self.max_batch)))
            if len(a):
                jax.block_until_ready(self._swaps_batch(pa, a, b, slice(0, self.max_batch)))

    # ------------------------------------------------------------------ candidates
    def _hot_cold(self, loads, memory, cap) -> tuple[np.ndarray, np.ndarray]:
        """Devices to move tables off (the HOT heaviest in every resource that can bind the step:
        compute, each all-to-all's send and receive bytes per level; when over capacity, memory) and
        to move them onto (the COLD lightest in each, and the ones with the most free memory)."""
        D = self.D
        rows = [r for r in np.asarray(loads) if r.max() > 0]
        if bool((memory > cap).any()):
            rows = [memory - cap] + rows
        hot = np.unique(np.concatenate([np.argsort(-r, kind="stable")[: min(D, HOT)] for r in rows]))
        cold = np.concatenate([np.argsort(r, kind="stable")[: min(D, COLD)] for r in rows]
                              + [np.argsort(memory, kind="stable")[: min(D, COLD)]])
        return hot, np.unique(cold)

    def _table_candidates(self, plan: Plan, loads, memory, cap, exhaustive: bool):
        names = self.model.tables.names
        T, D, H, L = self.T, self.D, self.H, self.L
        infeasible = bool((memory > cap).any())
        cur_type = np.asarray([SHARDING_TYPES.index(plan.tables[n].sharding_type) for n in names])
        ranks = [plan.tables[n].ranks for n in names]
        hot, cold = self._hot_cold(loads, memory, cap)
        light = np.argsort(loads[0], kind="stable")[: min(D, CW_MOVE_SHARDS + 1)]      # least compute
        if exhaustive:
            src_tables = np.arange(T)
            dests = np.arange(D)
        else:
            on_hot = [t for t in range(T) if cur_type[t] in (TW, CW) and set(ranks[t]) & set(hot.tolist())]
            # and the heaviest tables (bytes per sample they move) that are not table- or column-wise
            others = sorted((t for t in range(T) if cur_type[t] not in (TW, CW)), key=lambda t: -self.weight[t])
            src_tables = np.asarray(sorted(set(on_hot) | set(others[:64])), dtype=int)
            if src_tables.size > 256:
                src_tables = src_tables[:256]
            dests = cold
        c = {"t": [], "st": [], "devs": [], "k": [], "dom": [], "cache": []}
        def add(t, st, devs=(0,), dom=0, cache=1.0):
            c["t"].append(t); c["st"].append(st); c["devs"].append(list(devs) + [-1] * (CW_MOVE_SHARDS - len(devs)))
            c["k"].append(len(devs) if st == CW else 1); c["dom"].append(dom); c["cache"].append(cache)
        ok = lambda t, st: self.masks.types[t, st] > -1
        for t in src_tables:
            cache = plan.tables[names[t]].cache_ratio
            if ok(t, TW):
                for d in dests:
                    if not (cur_type[t] == TW and ranks[t][0] == d):
                        add(t, TW, (d,), cache=cache)
            if ok(t, CW):
                # in k column shards: on a destination and the k - 1 devices of least compute
                for k in self.cw_moves[t]:
                    for d in dests[: 4]:
                        devs = [int(d)] + [int(x) for x in light if x != d][: k - 1]
                        if len(devs) == k and not (cur_type[t] == CW and sorted(devs) == sorted(ranks[t])):
                            add(t, CW, devs, cache=cache)
            if ok(t, RW) and cur_type[t] != RW:
                add(t, RW, cache=cache)
            if ok(t, DP) and cur_type[t] != DP:
                add(t, DP)
            if ok(t, TWRW) and H > 1:
                dom_load = memory.reshape(H, L).sum(1)
                for h in np.argsort(dom_load)[: min(H, 4)]:
                    add(t, TWRW, dom=int(h), cache=cache)
            if infeasible and cur_type[t] in (TW, CW, RW, TWRW) and len(ranks[t]) <= CW_MOVE_SHARDS:
                for ratio in (0.5, 0.2, 0.05):
                    if ratio < cache:
                        add(t, int(cur_type[t]), ranks[t] if cur_type[t] in (TW, CW) else (0,),
                            ranks[t][0] // L, ratio)
        if not c["t"]:
            c["devs"] = np.zeros((0, CW_MOVE_SHARDS), np.int64)
        # typed even when empty (one chip: no move): the columns index arrays in the compiled batches
        return {k: np.asarray(v, np.float64 if k == "cache" else np.int64) for k, v in c.items()}

    def _swap_candidates(self, plan: Plan, loads, memory, cap, exhaustive: bool):
        names = self.model.tables.names
        tw = [t for t, n in enumerate(names) if plan.tables[n].sharding_type == "table_wise"]
        if len(tw) < 2:
            return np.zeros(0, int), np.zeros(0, int)
        dev = {t: plan.tables[names[t]].ranks[0] for t in tw}
        if exhaustive:
            pairs = [(a, b) for a in tw for b in tw if dev[a] != dev[b] and a < b]
        else:
            hot, cold = (set(x.tolist()) for x in self._hot_cold(loads, memory, cap))
            pairs = [(a, b) for a in tw if dev[a] in hot for b in tw if dev[b] in cold and dev[a] != dev[b]]
        limit = 4096 if exhaustive else 1024
        if len(pairs) > limit:
            rng = np.random.default_rng(len(pairs))
            pairs = [pairs[i] for i in np.sort(rng.choice(len(pairs), limit, replace=False))]
        if not pairs:
            return np.zeros(0, int), np.zeros(0, int)
        a, b = zip(*pairs)
        return np.asarray(a), np.asarray(b)

    def _setting_candidates(self, plan: Plan) -> list[Plan]:
        out = []
        if self.freeze_settings:
            return out
        masks = self.masks
        for m, mode in enumerate(DENSE_MODES):
            if mode != plan.dense and masks.dense[m] > -1:
                out.append(dataclasses.replace(plan, dense=mode))
        for c, kind in enumerate(COLLECTIVES):
            for a in ALLOWED_ALGORITHMS[kind]:
                if a != plan.algorithms.get(kind):
                    out.append(dataclasses.replace(plan, algorithms=dict(plan.algorithms, **{kind: a})))
        for field, mask in (("a2a_precision", masks.a2a), ("grad_precision", masks.grad)):
            for i, p in enumerate(PRECISIONS):
                if mask[i] > -1 and p != getattr(plan, field):
                    out.append(dataclasses.replace(plan, **{field: p}))
        for b in (1, 2, 4, 8, 16, 32):
            if b != plan.grad_buckets:
                out.append(dataclasses.replace(plan, grad_buckets=b))
        for c in (1, 2, 4, 8):
            if c != plan.overlap_chunks:
                out.append(dataclasses.replace(plan, overlap_chunks=c))
        out.append(dataclasses.replace(plan, pipeline=not plan.pipeline))
        if masks.has_engines:
            out.append(dataclasses.replace(plan, offload=not plan.offload))
        return out

    def _group_specs(self, plan: Plan, other_dense: bool = False) -> tuple[np.ndarray, ...]:
        """Compound moves, for k = 1, 2, ...: the k smallest tables made data-parallel; the k
        heaviest table-row-wise (domains filled least-loaded first) or row-wise; the k heaviest
        table-wise ones column-wise in two (the second half on the device then least loaded);
        splits, the k smallest data-parallel with every other table table-row-wise or row-wise; and
        column-wise splits (_cw_splits); other_dense=True: the column-wise splits only, under each
        other dense parallelism allowed (none when the settings are frozen). A
        change of sharding type often pays only for many tables at once (the first table-row-wise
        or data-parallel table brings a collective's fixed cost; the next ones ride on it), which no
        single move sees. As arrays [moves, T]: each table's sharding type, its domain (read where
        table-row-wise) or its column-wise block's first device, whether the move sets it (else it
        stays as in `plan`), and the device of its second half (read where column-wise; -1: a
        block); and per move [moves]: the column-wise shard count, the dense parallelism (an index
        of DENSE_MODES; -1: as in `plan`). Built in numpy
        (the plans one by one took 0.44 s on prod-856 / h100-256, 72,000 TablePlans, and their arrays
        0.3 s more)."""
        tb = self.model.tables
        T, L, H = self.T, self.L, self.H
        limit = T if self.exhaustive else GROUP_MAX
        small, heavy = self.small, self.heavy
        ok = self.masks.types > -1                                         # [T, 5]
        base = [plan.tables[n] for n in tb.names]
        base_type = np.asarray([SHARDING_TYPES.index(t.sharding_type) for t in base])
        base_dom = np.asarray([t.ranks[0] // L if j == TWRW else t.ranks[0] if j == CW else 0
                               for t, j in zip(base, base_type)])
        base_width = np.asarray([len(t.ranks) if j == CW and t.ranks == list(range(t.ranks[0], t.ranks[0] + len(t.ranks)))
                                 else 0 for t, j in zip(base, base_type)])
        whole = np.asarray([t.cache_ratio == 1.0 for t in base])
        # what table-row-wise tables already put on each domain
        load0 = np.zeros(H)
        np.add.at(load0, base_dom[base_type == TWRW], self.weight[base_type == TWRW])

        def prefixes(st, todo, doms=None, partners=None):
            """Move k sets the k + 1 first tables of `todo` to type st (table-row-wise on doms,
            column-wise with the second half on partners)."""
            m = len(todo)
            changed = np.zeros((m, T), bool)
            changed[:, todo] = np.tri(m, dtype=bool)
            dom, partner = np.tile(base_dom, (m, 1)), np.full((m, T), -1)
            if doms is not None:
                dom[:, todo] = np.where(changed[:, todo], doms, base_dom[todo])
            if partners is not None:
                partner[:, todo] = np.where(changed[:, todo], partners, -1)
            return np.where(changed, st, base_type), dom, changed, partner

        def unchanged(types, dom, changed, width):
            """Rows of a split that would leave every table as it is in `plan`."""
            same = ~changed | ((types == base_type) & ((types != TWRW) | (dom == base_dom)) & ((types != DP) | whole)
                               & ((types != CW) | ((dom == base_dom) & (width[:, None] == base_width))))
            return same.all(axis=1)

        out = []
        for st, order in ((DP, small), (TWRW, heavy), (RW, heavy)) if not other_dense else ():
            if st == TWRW and H < 2:
                continue
            todo = order[(base_type[order] != st) & ok[order, st]][:limit]
            if not len(todo):
                continue
            doms, load = np.zeros(len(todo), int), load0.copy()
            for i, t in enumerate(todo if st == TWRW else ()):
                doms[i] = int(np.argmin(load))
                load[doms[i]] += self.weight[t]
            out.append(prefixes(st, todo, doms if st == TWRW else None))
        # the k heaviest table-wise tables split column-wise in two, each second half on the device
        # then least loaded (a table-wise plan's devices can be full of one table each, where halves
        # of several share the load: mtia300-64 MLPerf)
        todo = heavy[(base_type[heavy] == TW) & ok[heavy, CW] & np.asarray([2 in k for k in self.cw_moves])[heavy]][:limit]
        if len(todo) and self.D > 1 and not other_dense:
            load = np.zeros(self.D)         # what table- and column-wise tables put on each device
            for i, (t, j) in enumerate(zip(base, base_type)):
                if j in (TW, CW):
                    load[t.ranks] += self.weight[i] / len(t.ranks)
            partners = np.zeros(len(todo), int)
            for i, t in enumerate(todo):
                own = base[t].ranks[0]
                load[own] -= self.weight[t] / 2
                free = load.copy()
                free[own] = np.inf
                partners[i] = int(np.argmin(free))
                load[partners[i]] += self.weight[t] / 2
            out.append(prefixes(CW, todo, partners=partners))
        # splits: the k smallest data-parallel, every other table sharded (balanced from empty domains)
        replicated = self.replicated                                     # [K, T]
        K = len(replicated)
        for st in (TWRW, RW) if not other_dense else ():
            if st == TWRW and H < 2:
                continue
            sharded = ~replicated & ok[None, :, st]
            dom = np.tile(base_dom, (K, 1))
            if st == TWRW:          # each split fills the domains least-loaded first, heaviest first
                dom = np.where(sharded, _fill(heavy, sharded, self.weight, np.zeros((K, H))), dom)
            types = np.where(replicated, DP, np.where(sharded, st, base_type))
            changed = replicated | sharded
            new = ~unchanged(types, dom, changed, np.zeros(K, int))    # a split that changes nothing is no move
            out.append((types[new], dom[new], changed[new], np.full((int(new.sum()), T), -1)))
        out = [o + (np.full(len(o[0]), 2), np.full(len(o[0]), -1)) for o in out]
        # column-wise splits: under the plan's dense parallelism (-1), or each other one allowed
        types, doms, changed, width = self._cw_splits()
        modes = [-1] if not other_dense else [] if self.freeze_settings else \
            [i for i, m in enumerate(DENSE_MODES) if m != plan.dense and self.masks.dense[i] > -1]
        types, doms = np.where(changed, types, base_type), np.where(changed, doms, base_dom)
        same = unchanged(types, doms, changed, width)
        for m in modes:
            new = ~same if m == -1 else np.ones(len(types), bool)
            if new.any():
                out.append((types[new], doms[new], changed[new], np.full((int(new.sum()), T), -1), width[new],
                            np.full(int(new.sum()), m)))
        if not out:
            return (np.zeros((0, T), int), np.zeros((0, T), int), np.zeros((0, T), bool), np.zeros((0, T), int),
                    np.zeros(0, int), np.zeros(0, int))
        return tuple(np.concatenate(x) for x in zip(*out))

    def _replicated(self) -> np.ndarray:
        """The splits' data-parallel tables [K, T]: the k smallest that may be, for k = 0, 1, ...,
        limit (T on a small instance, GROUP_MAX on a large one), then growing by half (h100-256
        prod-856: the best split up to 32 replicates 31 tables, 18.15 ms; 48 gives 18.11)."""
        small, limit = self.small, self.T if self.exhaustive else GROUP_MAX
        dp = small[self.masks.types[small, DP] > -1]
        ks, k = list(range(0, min(len(dp), limit) + 1)), limit
        while k < len(dp):
            k = min(len(dp), int(k * 1.5))
            ks.append(k)
        rank = np.full(self.T, self.T + 1)
        rank[dp] = np.arange(len(dp))
        return rank[None, :] < np.asarray(ks)[:, None]

    def _cw_splits(self) -> tuple[np.ndarray, ...]:
        """Column-wise splits, which do not depend on the plan (kept once built): for each width c
        of SPLIT_WIDTHS that divides a scale-up domain, each n = 0 ... SPLIT_TWRW and each replica
        count k of the splits (self.replicated), the k smallest tables data-parallel, the n heaviest of
        the others table-row-wise (domains least-loaded first), and every other table column-wise in
        c shards on an aligned block of c devices inside a domain (blocks least-loaded first,
        heaviest table first; a domain's table-row-wise load shared by its blocks; a table that
        cannot be split in c stays as in the plan). Each device then holds a shard of every
        table-row-wise table of its domain and of the column-wise tables of its block only, where
        the single moves place column-wise shards one table at a time on the least-loaded devices.
        MLPerf, the best split descended, against the 30-s search's plan before these moves: h100-64
        1.968 -> 1.942 ms (c = 4, n = 1, k = 11, hybrid dense), h100-16 2.658 -> 2.606 (c = 2, n = 2,
        k = 16, hybrid), mtia300-64 0.920 -> 0.918 (c = 4, n = 3 or 4, k = 10 or 11, hybrid).
        Small instances only (is_exhaustive): on prod-856 / h100-256 the best split is 7.6 % above
        the 30-s search's plan (20.37 against 18.92 ms tie-broken), and its 618 more moves (1,854
        with the other dense parallelisms) per stall cost a cold 5-s search 0.6 ms (19.51 -> 20.09).
        As (types, first device or domain, changed) [moves, T] and the width [moves]."""
        if self._cw_split_specs is not None:
            return self._cw_split_specs
        T, D, L, H = self.T, self.D, self.L, self.H
        if not self.exhaustive:
            self._cw_split_specs = np.zeros((0, T), int), np.zeros((0, T), int), np.zeros((0, T), bool), np.zeros(0, int)
            return self._cw_split_specs
        heavy, replicated = self.heavy, self.replicated
        ok = self.masks.types > -1
        K = len(replicated)
        out = []
        for c in (c for c in SPLIT_WIDTHS if c <= min(L, D) and L % c == 0):
            fits = ok[:, CW] & np.asarray([c in k for k in self.cw_moves])
            if not fits.any():
                continue
            for n in range(SPLIT_TWRW + 1 if H > 1 else 1):
                left = ~replicated
                rank = np.cumsum((left & ok[:, TWRW])[:, heavy], axis=1)            # [K, T] in heavy order
                twrw = np.zeros_like(left)
                twrw[:, heavy] = (left & ok[:, TWRW])[:, heavy] & (rank <= n)
                dom_load = np.zeros((K, H))
                doms = _fill(heavy, twrw, self.weight, dom_load)
                blocks = np.repeat(dom_load / (L // c), L // c, axis=1)              # [K, D / c]
                cw = left & ~twrw & fits[None, :]
                first = _fill(heavy, cw, self.weight, blocks) * c
                types = np.where(replicated, DP, np.where(twrw, TWRW, CW))
                out.append((types, np.where(twrw, doms, first), replicated | twrw | cw, np.full(K, c)))
        if not out:
            out = [(np.zeros((0, T), int), np.zeros((0, T), int), np.zeros((0, T), bool), np.zeros(0, int))]
        types, doms, changed, width = (np.concatenate(x) for x in zip(*out))
        # the same split from several (c, n) (n past the tables left): once; one with no column-wise
        # table (every table replicated) is another split's
        key = np.concatenate([np.where(changed, types, -1), np.where(changed, doms, -1), width[:, None]], axis=1)
        once = np.sort(np.unique(key, axis=0, return_index=True)[1])
        once = once[(changed & (types == CW))[once].any(axis=1)]
        self._cw_split_specs = types[once], doms[once], changed[once], width[once]
        return self._cw_split_specs

    def _group_plan(self, plan: Plan, types: np.ndarray, doms: np.ndarray, changed: np.ndarray,
                    partner: np.ndarray, width: int, dense: int) -> Plan:
        """The Plan of one compound move (a row of _group_specs)."""
        names, D, L = self.model.tables.names, self.D, self.L
        tables = dict(plan.tables)
        for t in np.flatnonzero(changed):
            st, name = int(types[t]), names[t]
            if st == TWRW:
                ranks = list(range(int(doms[t]) * L, int(doms[t]) * L + L))
            elif st == CW and partner[t] >= 0:
                ranks = sorted([plan.tables[name].ranks[0], int(partner[t])])
            elif st == CW:
                ranks = list(range(int(doms[t]), int(doms[t]) + int(width)))
            else:
                ranks = list(range(D))
            tables[name] = TablePlan(SHARDING_TYPES[st], ranks, 1.0 if st == DP else plan.tables[name].cache_ratio)
        return dataclasses.replace(plan, tables=tables, **({"dense": DENSE_MODES[int(dense)]} if dense >= 0 else {}))

    def _group_candidates(self, plan: Plan, other_dense: bool = False) -> list[Plan]:
        """The compound moves of `plan` (_group_specs) as Plans."""
        return [self._group_plan(plan, *row) for row in zip(*self._group_specs(plan, other_dense))]

    def group_moves(self, plan: Plan, pa, hard: bool = False, other_dense: bool = False,
                    eager: bool = False) -> tuple[np.ndarray, Callable[[int], Plan]]:
        """Tie-broken scores of the compound moves of `plan` (pa: its numpy arrays; other_dense: those
        of _group_specs(other_dense=True)), each batch built
        from the moves' sharding types (_groups; in the compiled program _apply_groups when
        self.in_program); and a function giving move i's Plan. hard=True: [2, moves], the hard
        scores and the tie-broken ones (score_pairs). eager: scored in numpy (score_pairs; not
        self.in_program)."""
        specs = self._group_specs(plan, other_dense)
        group = lambda i: self._group_plan(plan, *(x[i] for x in specs))
        n, size = len(specs[0]), self.max_batch
        scores = lambda batch: self.pairs(batch, eager)[slice(None) if hard else 1]
        if not n:
            return np.zeros((2, 0) if hard else 0), group
        if not self.in_program:
            return scores(_groups(pa, *specs, np)), group
        return _in_batches(n, size, lambda s: scores(
            _apply_groups(pa, *(_host(_pad(x[s:s + size], size)) for x in specs)))), group

    # ------------------------------------------------------------------ applying moves to Plans
    def _moved_plan(self, plan: Plan, c: dict, i: int) -> Plan:
        names = self.model.tables.names
        t, st = int(c["t"][i]), int(c["st"][i])
        D, L = self.D, self.L
        if st == TW:
            ranks = [int(c["devs"][i][0])]
        elif st == CW:
            ranks = sorted(int(d) for d in c["devs"][i] if d >= 0)
        elif st == TWRW:
            h = int(c["dom"][i])
            ranks = list(range(h * L, h * L + L))
        else:
            ranks = list(range(D))
        tables = dict(plan.tables)
        tables[names[t]] = TablePlan(SHARDING_TYPES[st], ranks, float(c["cache"][i]))
        return dataclasses.replace(plan, tables=tables)

    def _swapped_plan(self, plan: Plan, a: int, b: int) -> Plan:
        names = self.model.tables.names
        tables = dict(plan.tables)
        ta, tb = tables[names[a]], tables[names[b]]
        tables[names[a]] = dataclasses.replace(ta, ranks=list(tb.ranks))
        tables[names[b]] = dataclasses.replace(tb, ranks=list(ta.ranks))
        return dataclasses.replace(plan, tables=tables)

    def kick(self, plan: Plan, rng: np.random.Generator) -> Plan:
        """A perturbed copy: max(2, T / 8) random tables each given a random allowed sharding type
        and placement (table-wise on a random device, column-wise in k shards on k random devices,
        k one of cw_moves, table-row-wise in a random domain, row-wise, data-parallel)."""
        names = self.model.tables.names
        D, L = self.D, self.L
        tables = dict(plan.tables)
        n = max(2, self.T // 8)
        for t in rng.choice(self.T, size=min(n, self.T), replace=False):
            allowed = [j for j in range(5) if self.masks.types[t, j] > -1
                       and (j != CW or self.cw_moves[t]) and (j != TWRW or self.H > 1)]
            if not allowed:
                continue
            st = int(rng.choice(allowed))
            cache = tables[names[t]].cache_ratio if st != DP else 1.0
            if st == TW:
                ranks = [int(rng.integers(D))]
            elif st == CW:
                k = int(rng.choice(self.cw_moves[t]))
                ranks = sorted(int(d) for d in rng.choice(D, size=k, replace=False))
            elif st == TWRW:
                h = int(rng.integers(self.H))
                ranks = list(range(h * L, h * L + L))
            else:
                ranks = list(range(D))
            tables[names[t]] = TablePlan(SHARDING_TYPES[st], ranks, cache)
        return dataclasses.replace(plan, tables=tables)

    # ------------------------------------------------------------------ the loop
    def run(self, plan: Plan, deadline: float, max_rounds: int = 200,
            exhaustive: bool | None = None) -> tuple[Plan, float]:
        """Improve `plan` until no move helps, max_rounds, or the wall-clock deadline. Compound
        moves (_group_candidates) are tried when no single move helps. Moves are taken on the
        tie-broken score; returned: the visited plan of least score (the step time when feasible)
        and that score, so the result is never worse than `plan`.
        exhaustive: every table on every device (True), or moves off the hot devices only (False);
        default: the hot devices first, every move once they stall on an instance small enough
        (self.exhaustive). Focused rounds are several times cheaper and take most of the descent:
        on h100-64 MLPerf the warm 0.5-s search went from 2.008 to 1.863 ms."""
        widen = exhaustive is None and self.exhaustive
        exhaustive = bool(exhaustive)
        pa = plan_arrays(plan, self.system, self.model)
        cur, _, memory, cap, loads, hard = self._details_of(pa)
        cur = float(cur)
        kept, kept_score = plan, float(hard)
        self.record(kept_score)
        gained = 0                           # the last round that lowered the score
        for rnd in range(max_rounds):
            if rnd - gained > PLATEAU_ROUNDS:
                break
            if time.time() > deadline:
                break
            best_plan, best = None, cur
            # table moves, swaps and setting changes. On a small instance all three usually fit in
            # one padded batch (h100-16 MLPerf: ~250-500 moves, 0-111 swaps, ~24 settings, batches of
            # 1,024), scored in one call instead of three (pre): the same scores, a round 2-3x faster;
            # a round widened to every move takes several such batches (_mixed_scores)
            c = self._table_candidates(plan, loads, memory, float(cap), exhaustive)
            n = len(c["t"])
            a, b = self._swap_candidates(plan, loads, memory, float(cap), exhaustive)
            settings = self._setting_candidates(plan) if self.exhaustive else None
            pre = None
            if settings is not None and len(settings) <= min(MIXED_SETTINGS, self.max_batch - 1) and 0 < n + len(a) + len(settings):
                pre = self._mixed_scores(plan, pa, c, a, b, settings)
            improving = []
            for s in range(0, n, self.max_batch) if pre is None else range(min(n, 1)):
                sl = slice(s, s + self.max_batch)
                if pre is not None:
                    sc = pre[0]
                else:
                    sc = self.scores(self._moves_batch(pa, c, sl))[: len(c["t"][sl])]
                for j in np.flatnonzero(sc < cur * (1 - 1e-9)):
                    improving.append((float(sc[j]), s + int(j)))
                if time.time() > deadline:
                    break
            improving.sort()
            if improving and improving[0][0] < best:
                best, best_plan = improving[0][0], self._moved_plan(plan, c, improving[0][1])
            # swaps
            if pre is None and time.time() > deadline:
                a = b = a[:0]
            for s in range(0, len(a), self.max_batch) if pre is None else range(min(len(a), 1)):
                m = len(a[s:s + self.max_batch])
                sc = pre[1] if pre is not None else self.scores(self._swaps_batch(pa, a, b, slice(s, s + self.max_batch)))[:m]
                j = int(np.argmin(sc))
                if sc[j] < best * (1 - 1e-9):
                    best, best_plan = float(sc[j]), self._swapped_plan(plan, int(a[s + j]), int(b[s + j]))
                if time.time() > deadline:
                    break
            # settings: on large instances their ~20 plans cost a whole padded batch (~0.1 s), so
            # while table moves or swaps improve, only every SETTINGS_EVERY-th round; always when
            # those stall. Small instances score them every round: a batch is cheap there, and an
            # early setting change is worth it (mtia300-64 MLPerf, 0.5-s budget: 0.936 vs 1.334 ms)
            if pre is None:
                due = self.exhaustive or best_plan is None or rnd % SETTINGS_EVERY == 0
                if not (due and time.time() < deadline):
                    settings = []
                elif settings is None:
                    settings = self._setting_candidates(plan)
            if settings:
                sc = pre[2] if pre is not None else self.settings_scores(settings, pa)
                j = int(np.argmin(sc))
                if sc[j] < best * (1 - 1e-9):
                    best, best_plan = float(sc[j]), settings[j]
            # compound moves, many tables to one sharding type at once: when no single move helps
            # (every round would cost the plans' construction). The one of least step when that is
            # below the best plan this descent held, else the least tie-broken one when lower
            # (pick_compound). The column-wise splits under the other dense parallelisms (3x the
            # splits: 0.06 s more in a warm 0.2-s MLPerf search's first call) only when the others fail
            for other_dense in (False, True):
                if best_plan is not None or time.time() > deadline:
                    break
                (sc_hard, sc), group = self.group_moves(plan, pa, hard=True, other_dense=other_dense)
                k = pick_compound(sc_hard, sc, kept_score * (1 - 1e-9), best * (1 - 1e-9))
                if k is not None:
                    best, best_plan = float(sc[k]), group(k)
            # several improving table moves on disjoint tables and devices at once
            if len(improving) > 1:
                combo, used_t, used_d = plan, set(), set()
                for _, i in improving[:64]:
                    t = int(c["t"][i])
                    devs = {int(d) for d in c["devs"][i] if d >= 0}
                    old = set(plan.tables[self.model.tables.names[t]].ranks) if c["st"][i] in (TW, CW) else set()
                    if t in used_t or (devs | old) & used_d:
                        continue
                    combo = self._moved_plan(combo, c, i)
                    used_t.add(t)
                    used_d |= devs | old
                if len(used_t) > 1:
                    sc = self.score(plan_arrays(combo, self.system, self.model))
                    if sc < best * (1 - 1e-9):
                        best, best_plan = sc, combo
            if best_plan is None and widen:
                widen, exhaustive = False, True
                continue
            if best_plan is None:
                break
            plan = best_plan
            pa = plan_arrays(plan, self.system, self.model)
            cur_arr, _, memory, cap, loads, hard = self._details_of(pa)
            cur = float(cur_arr)
            if float(hard) < kept_score:
                if float(hard) < kept_score * (1 - 1e-9):
                    gained = rnd + 1
                kept, kept_score = plan, float(hard)
                self.record(kept_score)
        return kept, kept_score
