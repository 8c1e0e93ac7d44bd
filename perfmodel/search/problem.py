"""The search problem: what every phase of a search reads and nothing changes once it is built.

A Problem holds the system, the model, the allowed choices (relax.Masks), a guard (guard.ShardCosts)
and whether the settings are frozen, the table orders and weights the moves use, and the scorers
bound to them. It has no mutable state: a search's state lives in the phases' own state values.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import NamedTuple

import jax
import numpy as np

from ..cost.arrays import as_numpy
from ..hardware import System
from ..plan import CW, DP, TWRW, Hold, Masks, Plan, held_arrays, admissible, domain_ranks, plan_arrays, stack
from ..workload import RankingModel
from . import score as sc

GROUP_MAX = 32        # compound moves on large instances: up to this many tables at once
CW_MOVE_SHARDS = 8    # column shards a move or kick may split a table into (2 ... 8, as cw_options allows)
SPLIT_WIDTHS = (2, 4, 8)   # column-wise splits: shards per table, on aligned blocks
SPLIT_TWRW = 4        # ... with up to this many of the heaviest other tables table-row-wise
# the plan shapes a search may make: "all", or "torchrec": every table as TorchRec can shard it (no
# row-wise over a subset of the ranks, which only HugeCTR's planners and perfmodel run)
SHAPES = ("all", "torchrec")
ROW_BLOCKS = (1, 2, 4, 8)  # row-wise over a subset: this many blocks (HugeCTR's hier_auto splits a table
                           # over a power of two of nodes; at most CW_MOVE_SHARDS, the blocks a move lists)


class Details(NamedTuple):
    """A plan's figures as the search's scorer gives them (Problem.details)."""

    tie_s: np.ndarray            # the tie-broken score: the step plus a small load-balance term
    compute_s: np.ndarray        # [D] each device's compute busy time
    memory_bytes: np.ndarray     # [D] each device's memory
    capacity_bytes: np.ndarray   # [D] each device's capacity (no plan changes it)
    loads: np.ndarray            # [R, D] resource loads (a guard's the last row)
    score_s: np.ndarray          # the hard score: the step, the objective's quantile, or INFEASIBLE / VIOLATED and more

    @property
    def rate(self) -> tuple[float, float]:
        """(score, tie-broken score): the order in which plans are compared."""
        return float(self.score_s), float(self.tie_s)


@dataclass(frozen=True, eq=False)
class Problem:
    system: System
    model: RankingModel
    masks: Masks
    guard: object = None                 # guard.ShardCosts: plans over its cap score as infeasible
    freeze_settings: bool = False
    max_batch: int = 0                   # plans per scoring call (0: score.batch_size)
    limits: object = None                # plan.Limits: plans that break them score as VIOLATED
    draws: object = None                 # uncertainty.robust.Draws: a feasible plan scores the objective's
                                         # quantile of its step over them (score.scores)
    hold: Hold = Hold()                  # settings held (plan.hold): every plan scored and returned has them
    shapes: str = "all"                  # "torchrec": only the shapes TorchRec can run (SHAPES)
    # derived in __post_init__
    T: int = field(init=False)
    D: int = field(init=False)
    L: int = field(init=False)
    H: int = field(init=False)
    exhaustive: bool = field(init=False)     # every move tried (score.is_exhaustive)
    in_program: bool = field(init=False)     # compound moves and setting changes built in a program
    eager: bool = field(init=False)          # the start scored in numpy (score.eager)
    cw_moves: list = field(init=False)       # per table, the column-wise shard counts a move may use
    row_subsets: tuple = field(init=False)   # (block size u, blocks m) of the row-wise subsets moves make
    weight: np.ndarray = field(init=False)   # per table, the bytes per sample it moves
    small: np.ndarray = field(init=False)    # tables smallest first (bytes)
    heavy: np.ndarray = field(init=False)    # tables heaviest first (weight)
    replicated: np.ndarray = field(init=False)   # [K, T] the splits' data-parallel tables
    splits: tuple = field(init=False)            # the column-wise splits (_column_splits)
    numpy_problem: tuple = field(init=False)     # (system, model, guard) with numpy leaves

    def __post_init__(self):
        system, model = self.system, self.model
        T, D = model.tables.count, system.num_chips
        put = lambda k, v: object.__setattr__(self, k, v)
        put("T", T), put("D", D), put("L", system.domain_size), put("H", system.num_domains)
        put("max_batch", self.max_batch or sc.batch_size(system, model))
        if self.draws is not None:           # each plan priced at every draw: fewer plans a call
            from ..uncertainty.robust import plans_per_call
            put("max_batch", min(self.max_batch, plans_per_call(self.draws, self.max_batch)))
        put("exhaustive", sc.is_exhaustive(system, model))
        put("in_program", sc.in_program(system, model))
        # the objective's draws are priced in the compiled scorer only
        put("eager", sc.eager(system, model) and self.draws is None)
        put("cw_moves", [[k for k in self.masks.cw(t) if k <= CW_MOVE_SHARDS] for t in range(T)])
        # a guard prices TorchRec's shapes, and TorchRec has no row-wise subset of several blocks
        put("row_subsets", row_subsets(system) if self.guard is None and self.shapes == "all" else ())
        # the tables' fields as numpy arrays (the same dtypes: the same values), so that the moves'
        # arithmetic runs in numpy rather than as one compiled program per jax operation
        tb = jax.tree_util.tree_map(np.asarray, model.tables)
        put("weight", np.asarray(tb.output_per_sample() * tb.dim * 4.0 + tb.pooling * tb.index_bytes, np.float64))
        put("small", np.argsort(np.asarray(tb.rows * tb.bytes_per_row(), np.float64), kind="stable"))
        put("heavy", np.argsort(-self.weight, kind="stable"))
        put("replicated", _replicated(self))
        put("splits", _column_splits(self))
        put("numpy_problem", (as_numpy(system), as_numpy(model), None if self.guard is None else as_numpy(self.guard)))

    @property
    def allowed(self) -> np.ndarray:
        """[T, 5] whether each table may take each sharding type."""
        return np.asarray(self.masks.types) > -1

    # ------------------------------------------------------------------ scoring
    def arrays(self, plan: Plan, tables=None):
        """The search's arrays of a plan with the held settings: numpy, row_shards always carried
        (plan.with_rows)."""
        return plan_arrays(self.held(plan), self.system, self.model, tables, rows=True)

    def held(self, plan: Plan) -> Plan:
        """`plan` with the held settings (plan.hold)."""
        return self.hold.apply(plan)

    def block_loads(self, x, u: int) -> np.ndarray:
        """[D / u]: a [D] per-device quantity summed over each aligned block of u devices."""
        return np.asarray(x).reshape(self.D // u, u).sum(1)

    def domain_ranks(self, h: int) -> list[int]:
        """The ranks of scale-up domain h (a partial last one holds fewer)."""
        return domain_ranks(h, self.D, self.L)

    def domain_loads(self, x) -> np.ndarray:
        """[H]: a [D] per-device quantity summed over each scale-up domain, a partial one's as a full
        one's would be at its devices' mean (L / L' times its sum): what orders domains by load."""
        x = np.asarray(x)
        if not self.system.uneven_domains:
            return x.reshape(self.H, self.L).sum(1)
        sizes = np.asarray(self.system.domain_sizes)
        return np.add.reduceat(x, np.arange(0, self.D, self.L)) * (self.L / sizes)

    def details_of(self, pa, eager: bool = False) -> Details:
        """A plan's arrays' Details; eager: in numpy (a batch of one, whose every figure but the
        capacity, which no plan changes, carries the batch axis; the scores float32, as compiled)."""
        pa = held_arrays(self.hold, pa, batched=False)
        if not eager or self.draws is not None:      # the objective's draws: compiled only
            return Details(*(np.asarray(x) for x in
                             sc.details(self.system, self.model, pa, self.guard, self.limits, self.draws)[:6]))
        system, model, guard = self.numpy_problem
        score, tie, bd, per_device = sc.scores(system, model, as_numpy(stack([pa])), guard, limits=self.limits)
        first = lambda x: np.asarray(x)[0]
        return Details(first(tie).astype(np.float32), first(bd.compute_s), first(bd.memory_bytes),
                       np.asarray(bd.capacity_bytes), first(per_device), first(score).astype(np.float32))

    def details(self, plan: Plan, eager: bool = False) -> Details:
        return self.details_of(self.arrays(plan), eager)

    def score(self, pa) -> float:
        """Tie-broken score of a plan's arrays."""
        pa = held_arrays(self.hold, pa, batched=False)
        return float(sc.details(self.system, self.model, pa, self.guard, self.limits, self.draws)[0])

    def breakdown(self, plan: Plan):
        """The plan's Breakdown, as evaluate() gives it (from the compiled program the search uses)."""
        return sc.details(self.system, self.model, self.arrays(plan), self.guard, self.limits, self.draws)[6]

    def pairs(self, batch, eager: bool = False) -> np.ndarray:
        """[2, n] hard and tie-broken scores of a batch under this problem's guard (and objective's
        draws: compiled, max_batch plans a call); eager: in numpy."""
        batch = held_arrays(self.hold, batch, batched=True)
        if self.draws is not None:
            return sc.score_pairs(self.system, self.model, batch, self.guard, False, self.limits, self.draws,
                                  self.max_batch)
        system, model, guard = self.numpy_problem if eager else (self.system, self.model, self.guard)
        return sc.score_pairs(system, model, batch, guard, eager, self.limits)

    def scores(self, batch) -> np.ndarray:
        """Tie-broken scores of a batch of plan arrays."""
        return self.pairs(batch)[1]

    def scores_of(self, plans: list[Plan]) -> np.ndarray:
        """Tie-broken scores of a list of Plans, in one batch."""
        return self.scores(stack([self.arrays(p) for p in plans]))

    def admissible(self, c: dict) -> tuple[dict, np.ndarray]:
        """The table moves c (moves.COLUMNS) that keep the constraints (plan.limits.admissible)."""
        return admissible(self.limits, c)

    def with_settings_of(self, base: Plan):
        """plan -> plan with `base`'s settings when the settings are frozen, with the held ones in
        any case."""
        if not self.freeze_settings:
            return self.held
        return lambda p: self.held(dataclasses.replace(base, tables=p.tables))


def row_subsets(system: System) -> tuple[tuple[int, int], ...]:
    """The row-wise subsets a move may make, as (block size u, blocks m): a table's rows over m
    aligned blocks of u devices, every device of each, fewer than all devices. The blocks are whole
    scale-up domains (m >= 2: each domain reduces its partial sums first, as HugeCTR's hier_auto
    plans run; one domain is table_row_wise), whole hosts where a host is not a domain (hier_auto
    splits over hosts: GB200 NVL72's hosts of 4 inside a domain of 72, PCIe hosts of two domains),
    or single devices, fewer than a domain holds (HugeCTR's auto splits a hot table over 2 or 4 of a
    node's GPUs: the 8-GPU MLPerf runs' table 21). None on a system whose last domain is partial
    (its blocks would not be alike)."""
    D, L, host = system.num_chips, system.domain_size, system.chips_per_host
    if system.uneven_domains or D < 4:
        return ()
    out = [(1, m) for m in ROW_BLOCKS if 2 <= m < L and L % m == 0]
    for u in sorted({L, host}):
        if u < 2 or D % u:
            continue
        out += [(u, m) for m in ROW_BLOCKS if (m >= 2 or u != L) and m * u < D]
    return tuple(out)


def _replicated(p: Problem) -> np.ndarray:
    """The splits' data-parallel tables [K, T]: the k smallest that may be, for k = 0, 1, ...,
    limit (T on a small instance, GROUP_MAX on a large one), then growing by half (more replicas
    than GROUP_MAX pay on instances of hundreds of tables)."""
    limit = p.T if p.exhaustive else GROUP_MAX
    dp = p.small[p.allowed[p.small, DP]]
    ks, k = list(range(0, min(len(dp), limit) + 1)), limit
    while k < len(dp):
        k = min(len(dp), int(k * 1.5))
        ks.append(k)
    rank = np.full(p.T, p.T + 1)
    rank[dp] = np.arange(len(dp))
    return rank[None, :] < np.asarray(ks)[:, None]


def fill(order, on, weight, load) -> np.ndarray:
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


def _column_splits(p: Problem) -> tuple[np.ndarray, ...]:
    """Column-wise splits, which do not depend on the plan (small instances only): for each width c
    of SPLIT_WIDTHS that divides a scale-up domain, each n = 0 ... SPLIT_TWRW and each replica count
    k of the splits (Problem.replicated), the k smallest tables data-parallel, the n heaviest of the
    others table-row-wise (domains least-loaded first), and every other table column-wise in c
    shards on an aligned block of c devices inside a domain (blocks least-loaded first, heaviest
    table first; a domain's table-row-wise load shared by its blocks; a table that cannot be split
    in c stays as in the plan). Each device then holds a shard of every table-row-wise table of its
    domain and of the column-wise tables of its block only, where single moves place column-wise
    shards one table at a time. As (types, first device or domain, changed) [moves, T] and the
    width [moves]."""
    T, D, L, H = p.T, p.D, p.L, p.H
    empty = np.zeros((0, T), int), np.zeros((0, T), int), np.zeros((0, T), bool), np.zeros(0, int)
    if not p.exhaustive:
        return empty
    heavy, replicated, ok = p.heavy, p.replicated, p.allowed
    K, out = len(replicated), []
    sizes = np.asarray(p.system.domain_sizes)
    for c in (c for c in SPLIT_WIDTHS if c <= min(L, D) and not (sizes % c).any()):
        fits = ok[:, CW] & np.asarray([c in k for k in p.cw_moves])
        if not fits.any():
            continue
        for n in range(SPLIT_TWRW + 1 if H > 1 else 1):
            left = ~replicated
            rank = np.cumsum((left & ok[:, TWRW])[:, heavy], axis=1)            # [K, T] in heavy order
            twrw = np.zeros_like(left)
            twrw[:, heavy] = (left & ok[:, TWRW])[:, heavy] & (rank <= n)
            dom_load = np.zeros((K, H))
            doms = fill(heavy, twrw, p.weight, dom_load)
            per = sizes // c                                                     # blocks per domain
            blocks = np.repeat(dom_load / per, per, axis=1)                      # [K, D / c]
            cw = left & ~twrw & fits[None, :]
            first = fill(heavy, cw, p.weight, blocks) * c
            types = np.where(replicated, DP, np.where(twrw, TWRW, CW))
            out.append((types, np.where(twrw, doms, first), replicated | twrw | cw, np.full(K, c)))
    if not out:
        return empty
    types, doms, changed, width = (np.concatenate(x) for x in zip(*out))
    # the same split from several (c, n) (n past the tables left): once; one with no column-wise
    # table (every table replicated) is another split's
    key = np.concatenate([np.where(changed, types, -1), np.where(changed, doms, -1), width[:, None]], axis=1)
    once = np.sort(np.unique(key, axis=0, return_index=True)[1])
    once = once[(changed & (types == CW))[once].any(axis=1)]
    return types[once], doms[once], changed[once], width[once]
